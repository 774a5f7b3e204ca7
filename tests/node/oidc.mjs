// A small, real OpenID provider (panva's oidc-provider) for the integration
// tests. It issues JWT access tokens through the client credentials grant,
// so the gateway can be tested against a genuine issuer and JWKS.
//
// Usage: node oidc.mjs --port PORT --resource URL [--ttl SECONDS]
//   PORT 0 picks a free port. The only line written to stdout is
//   "issuer http://127.0.0.1:<port>", once the server is listening.
//   Everything else (the library's notices included) goes to stderr.
//   The process exits on SIGTERM, SIGINT or when stdin is closed.
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

// The library prints some notices with console.info; keep stdout for our
// single "issuer" line by sending all console output to stderr.
console.log = console.info = console.error;

const { values: args } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    resource: { type: 'string' },
    ttl: { type: 'string', default: '300' },
  },
});
if (!args.resource) {
  console.error('usage: node oidc.mjs --port PORT --resource URL [--ttl SECONDS]');
  process.exit(2);
}
const resource = args.resource;
const ttl = Number(args.ttl);

// Loaded after the console is redirected, so nothing it prints reaches stdout.
const { default: Provider, errors } = await import('oidc-provider');

// Listen first: with --port 0 the issuer URL is only known once bound.
const server = createServer();
await new Promise((resolve, reject) => {
  server.once('error', reject);
  server.listen(Number(args.port), '127.0.0.1', resolve);
});
const issuer = `http://127.0.0.1:${server.address().port}`;

// A fresh RSA signing key on every start, so a restart is a key rotation.
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' };

const scope = 'mcp:read mcp:write mcp:admin';
const client = (id, secret) => ({
  client_id: id,
  client_secret: secret,
  grant_types: ['client_credentials'],
  redirect_uris: [],
  response_types: [],
  token_endpoint_auth_method: 'client_secret_post',
  scope,
});

const provider = new Provider(issuer, {
  jwks: { keys: [signingKey] },
  clients: [client('agent-a', 'secret-a'), client('agent-b', 'secret-b')],
  scopes: scope.split(' '),
  cookies: { keys: [randomUUID()] },
  ttl: { ClientCredentials: () => ttl },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      // Only the configured resource (the gateway) can be a token audience.
      getResourceServerInfo: (ctx, indicator) => {
        if (indicator !== resource) throw new errors.InvalidTarget();
        return {
          scope,
          audience: resource,
          accessTokenFormat: 'jwt',
          accessTokenTTL: ttl,
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
});
server.on('request', provider.callback());

process.stdout.write(`issuer ${issuer}\n`);

// Stop when asked to, or when whoever started us goes away.
const stop = () => process.exit(0);
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.on('close', stop);
process.stdin.resume();
