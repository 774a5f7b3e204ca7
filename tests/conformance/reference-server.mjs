// The server the conformance suite's server scenarios expect (tools, resources, prompts,
// completion, logging, subscriptions, server-to-client requests, SSE resumption), written
// for Wardgate's tests on the TypeScript SDK. The suite's own reference server lives in its
// GitHub repository, not on a registry; this one answers the same scenarios (see README.md).
//
//   node reference-server.mjs --stdio          one session over stdin/stdout
//   node reference-server.mjs --port 0         Streamable HTTP on 127.0.0.1 (prints
//                                              "LISTENING http://127.0.0.1:PORT/mcp")
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  ElicitResultSchema,
  CreateMessageResultSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ErrorCode,
  ReadResourceRequestSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
  isInitializeRequest
} from '@modelcontextprotocol/sdk/types.js';

// A 1×1 PNG and a silent WAV, as the content scenarios ask for.
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';
const LOGGER = 'wardgate-conformance-reference';
const text = (value) => ({ type: 'text', text: value });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const NO_ARGUMENTS = { type: 'object', properties: {} };

// Each tool: its listing and what a call does with (arguments, extra, session).
const tools = {
  test_simple_text: {
    description: 'Answers with one text block',
    run: async () => ({ content: [text('This is a simple text response for testing.')] })
  },
  test_image_content: {
    description: 'Answers with an image block',
    run: async () => ({ content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] })
  },
  test_audio_content: {
    description: 'Answers with an audio block',
    run: async () => ({ content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] })
  },
  test_embedded_resource: {
    description: 'Answers with an embedded resource',
    run: async () => ({
      content: [
        {
          type: 'resource',
          resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' }
        }
      ]
    })
  },
  test_multiple_content_types: {
    description: 'Answers with text, an image and a resource',
    run: async () => ({
      content: [
        text('Multiple content types test:'),
        { type: 'image', data: PNG, mimeType: 'image/png' },
        {
          type: 'resource',
          resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}' }
        }
      ]
    })
  },
  test_tool_with_logging: {
    description: 'Logs three messages while it runs',
    run: async (_args, extra) => {
      for (const message of ['Tool execution started', 'Tool processing data', 'Tool execution completed']) {
        await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', logger: LOGGER, data: message } });
        await sleep(20);
      }
      return { content: [text('Tool with logging executed successfully')] };
    }
  },
  test_tool_with_progress: {
    description: 'Reports progress 0, 50 and 100 of 100',
    run: async (_args, extra) => {
      const progressToken = extra._meta?.progressToken;
      if (progressToken !== undefined) {
        for (const progress of [0, 50, 100]) {
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken, progress, total: 100, message: `step ${progress} of 100` }
          });
          await sleep(20);
        }
      }
      return { content: [text(String(progressToken))] };
    }
  },
  test_error_handling: {
    description: 'Fails with a tool error',
    run: async () => ({ isError: true, content: [text('This tool intentionally returns an error for testing')] })
  },
  test_reconnection: {
    description: 'Closes its response stream mid-call (SEP-1699); the answer follows on resumption',
    run: async (_args, extra, session) => {
      session.transport?.closeSSEStream?.(extra.requestId);
      await sleep(100);
      return { content: [text('Reconnection test completed successfully.')] };
    }
  },
  test_sampling: {
    description: 'Asks the client for a completion of the prompt',
    inputSchema: { type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] },
    run: async (args, extra) => {
      const answer = await extra.sendRequest(
        {
          method: 'sampling/createMessage',
          params: { messages: [{ role: 'user', content: text(String(args.prompt)) }], maxTokens: 100 }
        },
        CreateMessageResultSchema
      );
      return { content: [text(`LLM response: ${answer.content?.text ?? ''}`)] };
    }
  },
  test_elicitation: {
    description: 'Asks the user for a response',
    inputSchema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] },
    run: (args, extra) =>
      elicit(extra, String(args.message), {
        type: 'object',
        properties: { response: { type: 'string', description: "User's response" } },
        required: ['response']
      })
  },
  test_elicitation_sep1034_defaults: {
    description: 'Asks for a form whose fields have defaults (SEP-1034)',
    run: (_args, extra) =>
      elicit(extra, 'Please review the fields', {
        type: 'object',
        properties: {
          name: { type: 'string', description: 'User name', default: 'John Doe' },
          age: { type: 'integer', description: 'User age', default: 30 },
          score: { type: 'number', description: 'User score', default: 95.5 },
          status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
          verified: { type: 'boolean', description: 'Verification status', default: true }
        },
        required: []
      })
  },
  test_elicitation_sep1330_enums: {
    description: 'Asks for a form of each enum shape (SEP-1330)',
    run: (_args, extra) => {
      const titled = (kind) => [1, 2, 3].map((n) => ({ const: `value${n}`, title: `${kind} ${n}` }));
      return elicit(extra, 'Please choose', {
        type: 'object',
        properties: {
          untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
          titledSingle: { type: 'string', oneOf: titled('Option') },
          legacyEnum: { type: 'string', enum: ['opt1', 'opt2', 'opt3'], enumNames: ['Option One', 'Option Two', 'Option Three'] },
          untitledMulti: { type: 'array', minItems: 1, maxItems: 3, items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
          titledMulti: { type: 'array', minItems: 1, maxItems: 3, items: { anyOf: titled('Choice') } }
        },
        required: []
      });
    }
  },
  json_schema_2020_12_tool: {
    description: 'Lists a JSON Schema 2020-12 input schema ($schema, $defs, additionalProperties) (SEP-1613)',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: { address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
      properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
      additionalProperties: false
    },
    run: async (args) => ({ content: [text(`called with ${JSON.stringify(args)}`)] })
  }
};

async function elicit(extra, message, requestedSchema) {
  const answer = await extra.sendRequest({ method: 'elicitation/create', params: { message, requestedSchema } }, ElicitResultSchema);
  return { content: [text(`action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`)] };
}

const resources = {
  'test://static-text': { name: 'static-text', mimeType: 'text/plain', read: { text: 'This is the content of the static text resource.' } },
  'test://static-binary': { name: 'static-binary', mimeType: 'image/png', read: { blob: PNG } },
  'test://watched-resource': { name: 'watched-resource', mimeType: 'text/plain', read: { text: 'Watched resource content' } }
};
const TEMPLATE = /^test:\/\/template\/([^/]+)\/data$/;

const prompts = {
  test_simple_prompt: {
    description: 'A prompt without arguments',
    get: () => [{ role: 'user', content: text('This is a simple prompt for testing.') }]
  },
  test_prompt_with_arguments: {
    description: 'A prompt with two arguments',
    arguments: [
      { name: 'arg1', description: 'First argument', required: true },
      { name: 'arg2', description: 'Second argument', required: true }
    ],
    get: (args) => [{ role: 'user', content: text(`Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'`) }]
  },
  test_prompt_with_embedded_resource: {
    description: 'A prompt that embeds a resource',
    arguments: [{ name: 'resourceUri', description: 'The resource to embed', required: true }],
    get: (args) => [
      { role: 'user', content: { type: 'resource', resource: { uri: args.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } } },
      { role: 'user', content: text('Please process the embedded resource above.') }
    ]
  },
  test_prompt_with_image: {
    description: 'A prompt with an image',
    get: () => [
      { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
      { role: 'user', content: text('Please analyze the image above.') }
    ]
  }
};

/// One MCP server for one session; `session.transport` is set for HTTP sessions.
function createServer(session) {
  const server = new Server(
    { name: 'wardgate-conformance-reference', version: '1.0.0' },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        logging: {},
        completions: {}
      }
    }
  );
  const log = (data) =>
    server.sendLoggingMessage({ level: 'info', logger: LOGGER, data }).catch(() => {});

  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: Object.entries(tools).map(([name, tool]) => ({
      name,
      description: tool.description,
      inputSchema: tool.inputSchema ?? NO_ARGUMENTS
    }))
  }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const tool = tools[request.params.name];
    if (!tool) throw new McpError(ErrorCode.InvalidParams, `unknown tool ${request.params.name}`);
    return tool.run(request.params.arguments ?? {}, extra, session);
  });

  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: Object.entries(resources).map(([uri, resource]) => ({ uri, name: resource.name, mimeType: resource.mimeType }))
  }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [{ uriTemplate: 'test://template/{id}/data', name: 'template', mimeType: 'application/json' }]
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (request) => {
    const uri = request.params.uri;
    const resource = resources[uri];
    if (resource) return { contents: [{ uri, mimeType: resource.mimeType, ...resource.read }] };
    const match = TEMPLATE.exec(uri);
    if (match) {
      const id = match[1];
      return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }] };
    }
    throw new McpError(-32002, `Resource not found: ${uri}`, { uri });
  });
  server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    log(`subscribed to ${request.params.uri}`);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    log(`unsubscribed from ${request.params.uri}`);
    return {};
  });

  server.setRequestHandler(ListPromptsRequestSchema, async () => ({
    prompts: Object.entries(prompts).map(([name, prompt]) => ({
      name,
      description: prompt.description,
      arguments: prompt.arguments
    }))
  }));
  server.setRequestHandler(GetPromptRequestSchema, async (request) => {
    const prompt = prompts[request.params.name];
    if (!prompt) throw new McpError(ErrorCode.InvalidParams, `unknown prompt ${request.params.name}`);
    return { messages: prompt.get(request.params.arguments ?? {}) };
  });

  server.setRequestHandler(SetLevelRequestSchema, async (request) => {
    log(`log level set to ${request.params.level}`);
    return {};
  });
  server.setRequestHandler(CompleteRequestSchema, async (request) => {
    const prefix = String(request.params.argument?.value ?? '');
    const values = ['paris', 'park', 'party'].filter((value) => value.startsWith(prefix));
    return { completion: { values, total: values.length, hasMore: false } };
  });
  return server;
}

/// SEP-1699 resumption: every event a session's streams carry, kept so a client that comes
/// back with Last-Event-ID gets what it missed on that stream.
function createEventStore() {
  const events = [];
  return {
    async storeEvent(streamId, message) {
      const eventId = `${streamId}::${events.length}`;
      events.push({ eventId, streamId, message });
      return eventId;
    },
    async replayEventsAfter(lastEventId, { send }) {
      const streamId = lastEventId.split('::')[0];
      const after = Number(lastEventId.split('::')[1]);
      for (const event of events.slice(after + 1)) {
        if (event.streamId === streamId && Object.keys(event.message).length > 0) {
          await send(event.eventId, event.message);
        }
      }
      return streamId;
    }
  };
}

async function serveHttp(port) {
  // createMcpExpressApp refuses Hosts other than loopback names (DNS rebinding protection).
  const app = createMcpExpressApp();
  const sessions = new Map();
  app.post('/mcp', async (req, res) => {
    const id = req.headers['mcp-session-id'];
    let session = id ? sessions.get(id) : undefined;
    if (!session) {
      if (id || !isInitializeRequest(req.body)) {
        res.status(id ? 404 : 400).json({ jsonrpc: '2.0', id: null, error: { code: -32000, message: id ? 'Session not found' : 'Missing session ID' } });
        return;
      }
      session = {};
      session.transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: createEventStore(),
        retryInterval: 1000,
        onsessioninitialized: (newId) => sessions.set(newId, session)
      });
      session.transport.onclose = () => sessions.delete(session.transport.sessionId);
      await createServer(session).connect(session.transport);
    }
    await session.transport.handleRequest(req, res, req.body);
  });
  const existing = async (req, res) => {
    const session = sessions.get(req.headers['mcp-session-id']);
    if (!session) {
      res.status(404).send('Session not found');
      return;
    }
    await session.transport.handleRequest(req, res);
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
  await createServer({}).connect(new StdioServerTransport());
} else {
  const index = argv.indexOf('--port');
  await serveHttp(index >= 0 ? Number(argv[index + 1]) : 0);
}
