// A 2025-11-25 client that uses tasks, on the TypeScript SDK v1's experimental tasks API,
// through Wardgate fronting the fake server of tests/fake as `fake`. It prints one JSON
// object with what it saw, for tests/it/tasks.rs to judge:
//
//   node tasks-2025-client.mjs http URL
//   node tasks-2025-client.mjs stdio WARDGATE CONFIG
//
// - a task of `fake__slow` run to its end, and the list of this client's tasks;
// - a task cancelled while it runs, and its call at the server;
// - over HTTP, a second client (its own session) asking for the first one's task;
// - a task whose server process dies under it (`fake__crash`).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, TaskStatusNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const [mode, ...rest] = process.argv.slice(2);

function transport() {
  if (mode === 'http') return new StreamableHTTPClientTransport(new URL(rest[0]));
  if (mode === 'stdio') {
    return new StdioClientTransport({ command: rest[0], args: ['--config', rest[1]], stderr: 'ignore' });
  }
  throw new Error(`usage: tasks-2025-client.mjs http URL | stdio WARDGATE CONFIG (not ${mode})`);
}

async function connect(name) {
  const client = new Client({ name, version: '1' }, { capabilities: {} });
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
console.log(JSON.stringify(out));
await a.client.close();
