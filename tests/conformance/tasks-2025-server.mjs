// A server of the 2025-11-25 revision with tasks of its own, on the TypeScript SDK v1's
// experimental tasks API (an in-memory task store), for tests/it/server_tasks.rs:
//
//   node tasks-2025-server.mjs --stdio          one session over stdin/stdout
//   node tasks-2025-server.mjs --port 0         Streamable HTTP on 127.0.0.1, answering
//                                               with JSON bodies (prints
//                                               "LISTENING http://127.0.0.1:PORT/mcp")
//   node tasks-2025-server.mjs --port 0 --sse   the same, answering with event streams
//
// - `delay` (taskSupport "required", as the SDK registers a task tool): a task that ends
//   after `ms` ms, its result naming the task it ran as;
// - `delay_optional`: the same, with taskSupport "optional";
// - `plain`: an ordinary tool (taskSupport "forbidden");
// - `statuses`: the status of every task this process holds, as JSON text;
// - `crash`: the process exits at once.
import { randomUUID } from 'node:crypto';
import * as z from 'zod/v4';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import {
  InMemoryTaskMessageQueue,
  InMemoryTaskStore,
} from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';

const taskStore = new InMemoryTaskStore();
const text = (value) => ({ type: 'text', text: value });

// A task tool that ends after `ms` ms; `taskSupport` as given.
function delayTask(server, name, taskSupport) {
  server.experimental.tasks.registerToolTask(
    name,
    {
      description: `Ends after ms milliseconds, as a task (taskSupport ${taskSupport})`,
      inputSchema: { ms: z.number().default(100) },
      execution: { taskSupport },
    },
    {
      async createTask({ ms }, { taskStore: store, taskRequestedTtl }) {
        const task = await store.createTask({ ttl: taskRequestedTtl });
        setTimeout(async () => {
          // A task cancelled meanwhile stays cancelled.
          const now = await taskStore.getTask(task.taskId);
          if (now?.status !== 'working') return;
          await taskStore.storeTaskResult(task.taskId, 'completed', {
            content: [text(`completed after ${ms} ms in task ${task.taskId}`)],
          });
        }, ms);
        return { task };
      },
      async getTask(_args, { taskId, taskStore: store }) {
        return await store.getTask(taskId);
      },
      async getTaskResult(_args, { taskId, taskStore: store }) {
        return await store.getTaskResult(taskId);
      },
    },
  );
}

function createServer() {
  const server = new McpServer(
    { name: 'tasks-2025-server', version: '1.0.0' },
    {
      capabilities: { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
      taskStore,
      taskMessageQueue: new InMemoryTaskMessageQueue(),
    },
  );
  delayTask(server, 'delay', 'required');
  delayTask(server, 'delay_optional', 'optional');
  server.registerTool('plain', { description: 'Answers at once', inputSchema: {} }, async () => ({
    content: [text('plain answer')],
  }));
  server.registerTool('crash', { description: 'Exits at once', inputSchema: {} }, async () => {
    process.exit(3);
  });
  server.registerTool('statuses', { description: 'Every task and its status', inputSchema: {} }, async () => {
    const { tasks } = await taskStore.listTasks();
    return { content: [text(JSON.stringify(tasks.map((task) => task.status)))] };
  });
  return server;
}

async function serveHttp(port, json) {
  const app = createMcpExpressApp();
  const sessions = new Map();
  app.post('/mcp', async (req, res) => {
    const id = req.headers['mcp-session-id'];
    let transport = id ? sessions.get(id) : undefined;
    if (!transport) {
      if (id || !isInitializeRequest(req.body)) {
        res.status(id ? 404 : 400).json({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'no such session' } });
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: json,
        onsessioninitialized: (newId) => sessions.set(newId, transport),
      });
      transport.onclose = () => sessions.delete(transport.sessionId);
      await createServer().connect(transport);
    }
    await transport.handleRequest(req, res, req.body);
  });
  const existing = async (req, res) => {
    const transport = sessions.get(req.headers['mcp-session-id']);
    if (!transport) {
      res.status(404).send('Session not found');
      return;
    }
    await transport.handleRequest(req, res);
  };
  app.get('/mcp', existing);
  app.delete('/mcp', existing);
  const listener = app.listen(port, '127.0.0.1', () => {
    console.log(`LISTENING http://127.0.0.1:${listener.address().port}/mcp`);
  });
}

const argv = process.argv.slice(2);
if (argv.includes('--stdio')) {
  // stdout carries MCP only.
  console.log = console.error;
  await createServer().connect(new StdioServerTransport());
} else {
  const index = argv.indexOf('--port');
  await serveHttp(index >= 0 ? Number(argv[index + 1]) : 0, !argv.includes('--sse'));
}
