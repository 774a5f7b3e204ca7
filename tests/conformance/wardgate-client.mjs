// The conformance suite's client under test, played by Wardgate: the suite starts this
// script with its test server's URL as the last argument (and the scenario's name in
// MCP_CONFORMANCE_SCENARIO); the script writes a config with that URL as a Streamable HTTP
// upstream, signs the gateway in first when the scenario is an OAuth one
// (`wardgate auth login`, whose authorization URL it follows as a browser would), then
// starts `wardgate` over stdio and, through it, lists the server's tools and calls each;
// a call the server refuses for its sign-in (a step-up to a wider scope) signs in again as
// the gateway's error says, and is called again.
//
//   WARDGATE=target/debug/wardgate node wardgate-client.mjs URL
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const url = process.argv.at(-1);
const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? '';
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT ?? '{}');
const wardgate = process.env.WARDGATE;
if (!wardgate) throw new Error('WARDGATE must name the wardgate binary');

const dir = mkdtempSync(join(tmpdir(), 'wardgate-conformance-'));
// The config, the client's key and the ID token go with the scenario.
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
const config = join(dir, 'wardgate.toml');
// A machine-to-machine scenario: the gateway gets its tokens itself with the client's
// credentials, and no one signs in.
// An enterprise-managed one (cross-app access): the gateway exchanges the user's ID token
// from the enterprise IdP for an identity assertion, and that for a token.
const enterprise = Boolean(context.idp_id_token);
const machine = scenario.startsWith('auth/client-credentials') || enterprise;
const signsIn = scenario.startsWith('auth/') && !machine;
let toml = `[servers.s]\nurl = ${JSON.stringify(url)}\ntransport = "streamable-http"\n`;
if (signsIn || machine) {
  toml += '[servers.s.oauth]\n';
  if (enterprise) {
    writeFileSync(join(dir, 'id-token'), context.idp_id_token, { mode: 0o600 });
    toml += 'grant = "enterprise_managed"\n';
    toml += `idp_issuer = ${JSON.stringify(context.idp_issuer)}\n`;
    toml += `idp_token_endpoint = ${JSON.stringify(context.idp_token_endpoint)}\n`;
    toml += `idp_client_id = ${JSON.stringify(context.idp_client_id)}\n`;
    toml += 'id_token_file = "id-token"\n';
  } else if (machine) toml += 'grant = "client_credentials"\n';
  if (context.client_id) toml += `client_id = ${JSON.stringify(context.client_id)}\n`;
  if (context.client_secret) {
    toml += 'client_secret = "${CONFORMANCE_CLIENT_SECRET}"\n';
  }
  // private_key_jwt: the client's key in a file beside the config.
  if (context.private_key_pem) {
    writeFileSync(join(dir, 'client-key.pem'), context.private_key_pem, { mode: 0o600 });
    toml += 'client_key_file = "client-key.pem"\n';
    if (context.signing_algorithm) {
      toml += `client_key_algorithm = ${JSON.stringify(context.signing_algorithm)}\n`;
    }
  }
}
writeFileSync(config, toml);
const env = {
  ...process.env,
  WARDGATE_STATE_DIR: join(dir, 'state'),
  CONFORMANCE_CLIENT_SECRET: context.client_secret ?? ''
};

/// `wardgate auth login s`, with its authorization URL followed to the loopback callback
/// (the suite's authorization server grants without asking anyone).
async function signIn() {
  const login = spawn(wardgate, ['--config', config, 'auth', 'login', 's', '--no-browser'], {
    env,
    stdio: ['ignore', 'pipe', 'inherit']
  });
  const exited = new Promise((resolve) => login.on('exit', resolve));
  const lines = createInterface({ input: login.stdout });
  const [first] = await Promise.race([
    new Promise((resolve) => lines.once('line', (line) => resolve([line]))),
    exited.then((code) => [null, code])
  ]);
  if (!first) throw new Error('wardgate auth login ended without an authorization URL');
  lines.on('line', (line) => console.error(line));
  let next = first.trim();
  for (let hop = 0; hop < 10; hop++) {
    const answer = await fetch(next, { redirect: 'manual' });
    const location = answer.headers.get('location');
    if (!location) break;
    next = new URL(location, next).toString();
    if (new URL(next).pathname === '/callback') {
      await fetch(next);
      break;
    }
  }
  const code = await exited;
  if (code !== 0) throw new Error(`wardgate auth login exited with ${code}`);
}

/// Arguments a tool's input schema accepts: a number for each number, a string otherwise.
function argumentsFor(tool) {
  const properties = tool.inputSchema?.properties ?? {};
  return Object.fromEntries(
    Object.entries(properties).map(([name, schema]) => [
      name,
      schema.type === 'number' || schema.type === 'integer' ? 1 : 'conformance'
    ])
  );
}

if (signsIn) await signIn();
const client = new Client(
  { name: 'wardgate-conformance-client', version: '1.0.0' },
  { capabilities: { elicitation: { form: { applyDefaults: true } } } }
);
client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: {} }));
await client.connect(
  new StdioClientTransport({ command: wardgate, args: ['--config', config], env, stderr: 'inherit' })
);
/// A call; if the server wants a new sign-in (the gateway's -32010 with status
/// `requires_reauth`, such as a 403 insufficient_scope asking for a wider scope), sign in
/// again as the error says, as an operator would, and call again once the gateway has
/// reconnected with the new tokens.
async function call(tool) {
  const request = { name: tool.name, arguments: argumentsFor(tool) };
  try {
    return await client.callTool(request);
  } catch (error) {
    if (!signsIn || error?.data?.status !== 'requires_reauth') throw error;
    console.error(`${tool.name}: ${error.message}; signing in again`);
    await signIn();
    for (let attempt = 0; ; attempt++) {
      try {
        return await client.callTool(request);
      } catch (again) {
        if (attempt >= 20 || again?.data?.status === undefined) throw again;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    }
  }
}

const { tools } = await client.listTools();
for (const tool of tools) {
  const result = await call(tool);
  console.log(`${tool.name}: ${JSON.stringify(result).slice(0, 200)}`);
}
await client.close();
