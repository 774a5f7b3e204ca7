// A 2025-11-25 client that uses tasks, on the TypeScript SDK v1's experimental tasks API,
// through Wardgate fronting the fake server of tests/fake as `fake` (and, speaking
// 2026-07-28, as `modern`). It prints one JSON
// object with what it saw, for tests/it/tasks.rs to judge:
//
//   node tasks-2025-client.mjs http URL
//   node tasks-2025-client.mjs stdio WARDGATE CONFIG
//
// - a task of `fake__slow` run to its end, and the list of this client's tasks;
// - a task cancelled while it runs, and its call at the server;
// - over HTTP, a second client (its own session) asking for the first one's task;
// - a task whose server process dies under it (`fake__crash`);
// - a task whose call asks the client a question (`fake__elicit`): the question names the
//   task, and the task reads `input_required` while the question waits for its answer; the
//   same for a 2026-07-28 server's question (`modern__sample`), which the gateway asks.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema,
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  TaskStatusNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const [mode, ...rest] = process.argv.slice(2);

function transport() {
  if (mode === 'http') return new StreamableHTTPClientTransport(new URL(rest[0]));
  if (mode === 'stdio') {
    return new StdioClientTransport({ command: rest[0], args: ['--config', rest[1]], stderr: 'ignore' });
  }
  throw new Error(`usage: tasks-2025-client.mjs http URL | stdio WARDGATE CONFIG (not ${mode})`);
}

async function connect(name, capabilities = {}) {
  const client = new Client({ name, version: '1' }, { capabilities });
  const statuses = [];
  client.setNotificationHandler(TaskStatusNotificationSchema, (notification) => {
    statuses.push({ taskId: notification.params.taskId, status: notification.params.status });
  });
  await client.connect(transport());
  return { client, statuses };
}

function seen(message) {
  switch (message.type) {
    case 'taskCreated':
      return { type: message.type, taskId: message.task.taskId, status: message.task.status, ttl: message.task.ttl };
    case 'taskStatus':
      return { type: message.type, status: message.task.status, statusMessage: message.task.statusMessage ?? null };
    case 'result':
      return {
        type: message.type,
        text: message.result.content?.[0]?.text ?? null,
        related: message.result._meta?.['io.modelcontextprotocol/related-task']?.taskId ?? null,
      };
    default:
      return { type: message.type, message: message.error?.message ?? String(message.error) };
  }
}

// The tool called as a task; `onCreated` is told the task's id as soon as it exists.
async function asTask(client, name, args, onCreated) {
  const messages = [];
  const stream = client.experimental.tasks.callToolStream({ name, arguments: args }, CallToolResultSchema, {
    task: { ttl: 60000 },
  });
  for await (const message of stream) {
    messages.push(seen(message));
    if (message.type === 'taskCreated' && onCreated) messages.push({ type: 'cancel', ...(await onCreated(message.task.taskId)) });
  }
  return messages;
}

async function outcome(promise) {
  try {
    return { ok: await promise };
  } catch (error) {
    return { error: error.message };
  }
}

const out = {};
const a = await connect('tasks-a');
out.serverTasks = a.client.getServerCapabilities()?.tasks ?? null;
const tools = await a.client.listTools();
out.taskSupport = tools.tools.find((tool) => tool.name === 'fake__slow')?.execution?.taskSupport ?? null;

out.completed = await asTask(a.client, 'fake__slow', { ms: 300 });
const id = out.completed[0]?.taskId;
out.listed = (await a.client.experimental.tasks.listTasks()).tasks.map((task) => ({
  taskId: task.taskId,
  status: task.status,
}));

out.cancelled = await asTask(a.client, 'fake__slow', { ms: 30000 }, async (taskId) => {
  const cancelled = await outcome(a.client.experimental.tasks.cancelTask(taskId));
  return { status: cancelled.ok?.status ?? null, error: cancelled.error ?? null };
});

// The cancelled task's call was cancelled at the server too (it counts the calls cancelled
// under it); the cancellation reaches it a moment later.
for (let asked = 0; asked < 100; asked++) {
  const counted = await a.client.callTool({ name: 'fake__cancelled_count', arguments: {} });
  out.serverCancelled = Number(counted.content[0].text);
  if (out.serverCancelled > 0) break;
  await new Promise((resolve) => setTimeout(resolve, 100));
}

if (mode === 'http') {
  const b = await connect('tasks-b');
  out.otherGet = await outcome(b.client.experimental.tasks.getTask(id));
  out.otherResult = await outcome(b.client.experimental.tasks.getTaskResult(id, CallToolResultSchema));
  out.otherList = (await b.client.experimental.tasks.listTasks()).tasks.length;
  await b.client.close();
}

out.crashed = await asTask(a.client, 'fake__crash', {});
out.statusNotifications = a.statuses;

// The question is answered only once the client has asked for its task's status, from
// inside the question's handler: the status seen is the one while the question waits.
const c = await connect('tasks-c', { elicitation: {}, sampling: {} });
out.questions = [];
async function question(kind, request) {
  const related = request.params._meta?.['io.modelcontextprotocol/related-task']?.taskId ?? null;
  const status = related ? (await outcome(c.client.experimental.tasks.getTask(related))) : null;
  out.questions.push({ kind, related, status: status?.ok?.status ?? status?.error ?? null });
}
c.client.setRequestHandler(ElicitRequestSchema, async (request) => {
  await question('elicitation', request);
  return { action: 'accept', content: { answer: 'yes' } };
});
c.client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  await question('sampling', request);
  return { role: 'assistant', content: { type: 'text', text: 'sampled' }, model: 'test' };
});
out.asked = await asTask(c.client, 'fake__elicit', { message: 'Go on?' });
out.sampled = await asTask(c.client, 'modern__sample', { prompt: 'Hi?' });
out.askedAfter = (await c.client.experimental.tasks.listTasks()).tasks.map((task) => task.status);
// The last status notification may come a moment after tasks/result's answer (over HTTP,
// on another stream).
const ended = (told) => told.status === 'completed';
for (let waited = 0; waited < 100 && c.statuses.filter(ended).length < 2; waited++) {
  await new Promise((resolve) => setTimeout(resolve, 50));
}
out.askedNotifications = c.statuses;
await c.client.close();

console.log(JSON.stringify(out));
await a.client.close();
