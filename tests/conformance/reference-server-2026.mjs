// The server the conformance suite's 2026-07-28 requirements expect (0.2.0 alphas,
// `server --requirements 2026-07-28`), written for Wardgate's tests on the TypeScript SDK's
// v2 (`@modelcontextprotocol/server`, which speaks 2026-07-28): the 2025 scenarios'
// tools, resources and prompts, results that ask for input first (SEP-2322, with an
// HMAC-sealed requestState), and the stateless diagnostics (SEP-2575). Over HTTP the SDK
// serves 2025-era requests statelessly; over stdio a connection keeps the era it opened with.
//
//   node reference-server-2026.mjs --stdio     over stdin/stdout
//   node reference-server-2026.mjs --port 0    prints "LISTENING http://127.0.0.1:PORT/mcp"
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import {
  MissingRequiredClientCapabilityError,
  ProtocolError,
  Server,
  createMcpHandler,
  hostHeaderValidationResponse,
  localhostAllowedHostnames
} from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';
const INVALID_PARAMS = -32602;
const text = (value) => ({ type: 'text', text: value });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const NO_ARGUMENTS = { type: 'object', properties: {} };

// requestState is JSON, base64url, and an HMAC of it: a state this server did not seal is
// refused with invalid params.
const STATE_KEY = randomBytes(32);
const mac = (body) => createHmac('sha256', STATE_KEY).update(body).digest('base64url');
function seal(state) {
  const body = Buffer.from(JSON.stringify(state)).toString('base64url');
  return `${body}.${mac(body)}`;
}
function unseal(sealed) {
  if (typeof sealed !== 'string') return undefined;
  const [body, signature = ''] = sealed.split('.');
  const expected = Buffer.from(mac(body));
  const given = Buffer.from(signature);
  if (expected.length !== given.length || !timingSafeEqual(expected, given)) {
    throw new ProtocolError(INVALID_PARAMS, 'requestState failed its integrity check');
  }
  return JSON.parse(Buffer.from(body, 'base64url').toString());
}

const inputRequired = (inputRequests, state) => ({
  resultType: 'input_required',
  inputRequests,
  ...(state === undefined ? {} : { requestState: seal(state) })
});
const ask = (message, property, type = 'string') => ({
  method: 'elicitation/create',
  params: { message, requestedSchema: { type: 'object', properties: { [property]: { type } }, required: [property] } }
});
const sample = (prompt, maxTokens) => ({
  method: 'sampling/createMessage',
  params: { messages: [{ role: 'user', content: text(prompt) }], maxTokens }
});
const ROOTS = { method: 'roots/list', params: {} };
const answers = (ctx) => ctx.mcpReq.inputResponses ?? {};
const state = (ctx) => unseal(ctx.mcpReq.requestState?.());
const declared = (ctx) => ctx.mcpReq.envelope?.['io.modelcontextprotocol/clientCapabilities'] ?? {};

// Each tool: its listing and what a call does with (arguments, context).
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
      content: [{ type: 'resource', resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' } }]
    })
  },
  test_multiple_content_types: {
    description: 'Answers with text, an image and a resource',
    run: async () => ({
      content: [
        text('Multiple content types test:'),
        { type: 'image', data: PNG, mimeType: 'image/png' },
        { type: 'resource', resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}' } }
      ]
    })
  },
  test_tool_with_logging: {
    description: 'Logs three messages while it runs',
    run: async (_args, ctx) => {
      for (const message of ['Tool execution started', 'Tool processing data', 'Tool execution completed']) {
        await ctx.mcpReq.log('info', message);
        await sleep(20);
      }
      return { content: [text('Tool with logging executed successfully')] };
    }
  },
  test_tool_with_progress: {
    description: 'Reports progress 0, 50 and 100 of 100',
    run: async (_args, ctx) => {
      const progressToken = ctx.mcpReq._meta?.progressToken;
      if (progressToken !== undefined) {
        for (const progress of [0, 50, 100]) {
          await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken, progress, total: 100 } });
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
  json_schema_2020_12_tool: {
    description: 'Lists a JSON Schema 2020-12 input schema with $anchor, allOf/anyOf and if/then/else (SEP-1613, SEP-2106)',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: { address: { $anchor: 'addressDef', type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
      properties: {
        name: { type: 'string' },
        address: { $ref: '#/$defs/address' },
        contactMethod: { type: 'string', enum: ['phone', 'email'] },
        phone: { type: 'string' },
        email: { type: 'string' }
      },
      allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
      if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
      then: { required: ['phone'] },
      else: { required: ['email'] },
      additionalProperties: false
    },
    run: async (args) => ({ content: [text(`called with ${JSON.stringify(args)}`)] })
  },

  // SEP-2322: results that ask the client for input, answered by a second call.
  test_input_required_result_elicitation: {
    description: 'Asks for a name, then greets',
    run: async (_args, ctx) => {
      const answer = answers(ctx).user_name;
      if (!answer) return inputRequired({ user_name: ask('What is your name?', 'name') });
      return { content: [text(`Hello, ${answer.content?.name}!`)] };
    }
  },
  test_input_required_result_sampling: {
    description: 'Asks the client for a completion',
    run: async (_args, ctx) => {
      const answer = answers(ctx).capital_question;
      if (!answer) return inputRequired({ capital_question: sample('What is the capital of France?', 100) });
      return { content: [text(`The model said: ${answer.content?.text ?? JSON.stringify(answer.content)}`)] };
    }
  },
  test_input_required_result_list_roots: {
    description: 'Asks for the client roots',
    run: async (_args, ctx) => {
      const answer = answers(ctx).client_roots;
      if (!answer) return inputRequired({ client_roots: ROOTS });
      return { content: [text(`Roots: ${(answer.roots ?? []).map((root) => root.uri).join(', ')}`)] };
    }
  },
  test_input_required_result_request_state: {
    description: 'Round-trips requestState',
    run: async (_args, ctx) => {
      const answer = answers(ctx).confirm;
      if (!answer || state(ctx)?.step !== 'confirm') {
        return inputRequired({ confirm: ask('Please confirm', 'ok', 'boolean') }, { step: 'confirm' });
      }
      return { content: [text(`state-ok: confirmed=${answer.content?.ok}`)] };
    }
  },
  test_input_required_result_multiple_inputs: {
    description: 'Asks for three inputs at once',
    run: async (_args, ctx) => {
      const keys = ['user_name', 'greeting', 'client_roots'];
      if (state(ctx)?.step !== 'all' || !keys.every((key) => answers(ctx)[key])) {
        return inputRequired(
          { user_name: ask('What is your name?', 'name'), greeting: sample('Generate a greeting', 50), client_roots: ROOTS },
          { step: 'all' }
        );
      }
      return { content: [text(`Got ${keys.join(', ')}`)] };
    }
  },
  test_input_required_result_multi_round: {
    description: 'Asks twice, with evolving requestState',
    run: async (_args, ctx) => {
      const sealed = state(ctx);
      const given = answers(ctx);
      if (sealed?.round === 1 && given.step1) {
        return inputRequired({ step2: ask('Step 2: What is your favorite color?', 'color') }, { round: 2, name: given.step1.content?.name });
      }
      if (sealed?.round === 2 && given.step2) {
        return { content: [text(`${sealed.name} likes ${given.step2.content?.color}`)] };
      }
      return inputRequired({ step1: ask('Step 1: What is your name?', 'name') }, { round: 1 });
    }
  },
  test_input_required_result_tampered_state: {
    description: 'Refuses a requestState it did not seal',
    run: async (_args, ctx) => {
      if (!state(ctx)) return inputRequired({ confirm: ask('Please confirm', 'ok', 'boolean') }, { step: 'sealed' });
      return { content: [text('state verified')] };
    }
  },
  test_input_required_result_capabilities: {
    description: 'Asks only with what the client declared',
    run: async (_args, ctx) => {
      if (Object.keys(answers(ctx)).length > 0) return { content: [text('thanks')] };
      const capabilities = declared(ctx);
      const requests = {};
      if (capabilities.elicitation) requests.elicit_input = ask('What is your name?', 'name');
      if (capabilities.sampling) requests.sample_input = sample('Say hello', 20);
      if (capabilities.roots) requests.roots_input = ROOTS;
      if (Object.keys(requests).length === 0) return { content: [text('the client declared nothing to ask with')] };
      return inputRequired(requests);
    }
  },

  // SEP-2575 diagnostics.
  test_missing_capability: {
    description: 'Needs sampling, which the client must declare',
    run: async (_args, ctx) => {
      if (!declared(ctx).sampling) throw new MissingRequiredClientCapabilityError({ requiredCapabilities: { sampling: {} } });
      return { content: [text('sampling declared')] };
    }
  },
  test_streaming_elicitation: {
    description: 'Asks for input in its own result, never by a request of its own',
    run: async (_args, ctx) => {
      if (answers(ctx).stream_input) return { content: [text('done')] };
      return inputRequired({ stream_input: ask('Anything?', 'answer') });
    }
  },
  test_logging_tool: {
    description: 'Logs, which only a client that asked for a log level sees',
    run: async (_args, ctx) => {
      await ctx.mcpReq.log('info', 'a log message');
      return { content: [text('logged')] };
    }
  }
};

const resources = {
  'test://static-text': { name: 'static-text', mimeType: 'text/plain', read: { text: 'This is the content of the static text resource.' } },
  'test://static-binary': { name: 'static-binary', mimeType: 'image/png', read: { blob: PNG } },
  'test://watched-resource': { name: 'watched-resource', mimeType: 'text/plain', read: { text: 'Watched resource content' } }
};
const TEMPLATE = /^test:\/\/template\/([^/]+)\/data$/;

const prompts = {
  test_simple_prompt: {
    description: 'A prompt without arguments',
    get: () => ({ messages: [{ role: 'user', content: text('This is a simple prompt for testing.') }] })
  },
  test_prompt_with_arguments: {
    description: 'A prompt with two arguments',
    arguments: [
      { name: 'arg1', description: 'First argument', required: true },
      { name: 'arg2', description: 'Second argument', required: true }
    ],
    get: (args) => ({ messages: [{ role: 'user', content: text(`Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'`) }] })
  },
  test_prompt_with_embedded_resource: {
    description: 'A prompt that embeds a resource',
    arguments: [{ name: 'resourceUri', description: 'The resource to embed', required: true }],
    get: (args) => ({
      messages: [
        { role: 'user', content: { type: 'resource', resource: { uri: args.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } } },
        { role: 'user', content: text('Please process the embedded resource above.') }
      ]
    })
  },
  test_prompt_with_image: {
    description: 'A prompt with an image',
    get: () => ({
      messages: [
        { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
        { role: 'user', content: text('Please analyze the image above.') }
      ]
    })
  },
  test_input_required_result_prompt: {
    description: 'Asks for context first (SEP-2322 on prompts/get)',
    get: (_args, ctx) => {
      const answer = answers(ctx).user_context;
      if (!answer) return inputRequired({ user_context: ask('What context should the prompt use?', 'context') });
      return { messages: [{ role: 'user', content: text(`Context: ${answer.content?.context}`) }] };
    }
  }
};

/// One server instance; the SDK makes one per request (2026-07-28 is stateless).
function createServer() {
  const server = new Server(
    { name: 'wardgate-conformance-reference-2026', version: '1.0.0' },
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
  server.setRequestHandler('tools/list', async () => ({
    tools: Object.entries(tools).map(([name, tool]) => ({ name, description: tool.description, inputSchema: tool.inputSchema ?? NO_ARGUMENTS }))
  }));
  server.setRequestHandler('tools/call', async (request, ctx) => {
    const tool = tools[request.params.name];
    if (!tool) throw new ProtocolError(INVALID_PARAMS, `unknown tool ${request.params.name}`);
    return tool.run(request.params.arguments ?? {}, ctx);
  });
  server.setRequestHandler('resources/list', async () => ({
    resources: Object.entries(resources).map(([uri, resource]) => ({ uri, name: resource.name, mimeType: resource.mimeType }))
  }));
  server.setRequestHandler('resources/templates/list', async () => ({
    resourceTemplates: [{ uriTemplate: 'test://template/{id}/data', name: 'template', mimeType: 'application/json' }]
  }));
  server.setRequestHandler('resources/read', async (request) => {
    const uri = request.params.uri;
    const resource = resources[uri];
    if (resource) return { contents: [{ uri, mimeType: resource.mimeType, ...resource.read }] };
    const match = TEMPLATE.exec(uri);
    if (match) {
      const id = match[1];
      return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }] };
    }
    throw new ProtocolError(-32002, `Resource not found: ${uri}`, { uri });
  });
  server.setRequestHandler('prompts/list', async () => ({
    prompts: Object.entries(prompts).map(([name, prompt]) => ({ name, description: prompt.description, arguments: prompt.arguments }))
  }));
  server.setRequestHandler('prompts/get', async (request, ctx) => {
    const prompt = prompts[request.params.name];
    if (!prompt) throw new ProtocolError(INVALID_PARAMS, `unknown prompt ${request.params.name}`);
    return prompt.get(request.params.arguments ?? {}, ctx);
  });
  server.setRequestHandler('completion/complete', async (request) => {
    const prefix = String(request.params.argument?.value ?? '');
    const values = ['paris', 'park', 'party'].filter((value) => value.startsWith(prefix));
    return { completion: { values, total: values.length, hasMore: false } };
  });
  return server;
}

const handler = createMcpHandler(() => createServer());
const allowedHosts = localhostAllowedHostnames();

/// Node's request as a web-standard one for the SDK's handler, and its answer streamed back.
async function serve(req, res) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const body = Buffer.concat(chunks);
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    headers.set(name, Array.isArray(value) ? value.join(', ') : value);
  }
  const request = new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url}`, {
    method: req.method,
    headers,
    body: body.length > 0 ? body : undefined
  });
  // DNS rebinding protection: loopback Host names only.
  const response = hostHeaderValidationResponse(request, allowedHosts) ?? (await handler.fetch(request));
  res.writeHead(response.status, Object.fromEntries(response.headers));
  if (response.body) {
    const reader = response.body.getReader();
    res.on('close', () => reader.cancel().catch(() => {}));
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      res.write(value);
    }
  }
  res.end();
}

if (process.argv.includes('--stdio')) {
  // stdout carries MCP only.
  console.log = console.error;
  serveStdio(() => createServer());
} else {
  const listener = http.createServer((req, res) => {
    serve(req, res).catch((error) => {
      if (!res.headersSent) res.writeHead(500);
      res.end(String(error));
    });
  });
  const index = process.argv.indexOf('--port');
  listener.listen(index >= 0 ? Number(process.argv[index + 1]) : 0, '127.0.0.1', () => {
    console.log(`LISTENING http://127.0.0.1:${listener.address().port}/mcp`);
  });
}
