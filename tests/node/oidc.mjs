// A small, real OpenID provider (panva's oidc-provider) for the integration
// tests, so the gateway can be tested against a genuine issuer and JWKS.
//
// Usage: node oidc.mjs --port PORT --resource URL [--ttl SECONDS]
//                      [--claimed-expires-in SECONDS]
//   --port               0 picks a free port.
//   --resource           the only resource (RFC 8707) tokens can be issued
//                        for; it becomes the access token audience.
//   --ttl                access token lifetime in seconds (default 300).
//   --claimed-expires-in when given, every successful token response says
//                        "expires_in": SECONDS, while the JWT's real exp stays
//                        at --ttl. Lets a test make a client trust a token
//                        for longer than it lives.
//
// The only line written to stdout is "issuer http://127.0.0.1:<port>", once
// the server is listening. Everything else (the library's notices included)
// goes to stderr. The process exits on SIGTERM, SIGINT or when stdin closes.
//
// What it serves:
// - Client credentials: static clients agent-a/secret-a and agent-b/secret-b
//   (client_secret_post) get JWT access tokens for --resource, with "sub" =
//   the client id, as this library issues them. Static clients with the
//   secret "secret" get tokens shaped like other issuers' (the claims a
//   resource server has to tell clients apart by): service-a and service-b
//   no "sub"; empty-a and empty-b "sub": ""; portal "sub": "service-a" (a
//   user named like a client, through the client portal); nobody neither
//   "sub" nor "client_id".
// - The MCP authorization flow: open dynamic client registration (no initial
//   access token), public ("none") or confidential clients, "native" clients
//   with loopback http redirect URIs; authorization code with PKCE (S256,
//   required for every client); resource indicators; refresh tokens;
//   revocation. Access tokens are RS256 JWTs with aud = --resource, scopes
//   from "mcp:read mcp:write mcp:admin", lifetime --ttl.
// - No human: the login and consent interactions are approved automatically
//   for the account "alice" (sub "alice"), so following the redirects from
//   the authorization URL with a cookie jar ends at the client's redirect_uri
//   with ?code=...&state=...&iss=....
// - An authorization request without `scope` asks for the client's
//   registered scope, or for all three scopes if it registered none.
// - `resource` may be omitted on any request: it defaults to --resource at
//   the authorization endpoint, and to the granted resource at the token
//   endpoint. Any other value is rejected with invalid_target.
// - Every authorization code grant of a client allowed the refresh_token
//   grant gets a refresh token (no offline_access needed). Refresh tokens
//   ROTATE: each refresh returns a new one and consumes the old; reusing a
//   consumed or revoked one fails with invalid_grant (reuse also revokes the
//   whole grant).
// - Endpoints: /auth, /token, /reg, /token/revocation, /jwks, and the
//   metadata at /.well-known/openid-configuration and (same JSON, RFC 8414)
//   /.well-known/oauth-authorization-server.
// - GET /test/stats answers {"authorization_code":N,"refresh_token":M,
//   "client_credentials":K}: successful token grants by grant type.
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

// The library prints some notices with console.info; keep stdout for our
// single "issuer" line by sending all console output to stderr.
console.log = console.info = console.error;

const usage = 'usage: node oidc.mjs --port PORT --resource URL [--ttl SECONDS] [--claimed-expires-in SECONDS]';
let args;
try {
  ({ values: args } = parseArgs({
    options: {
      port: { type: 'string', default: '0' },
      resource: { type: 'string' },
      ttl: { type: 'string', default: '300' },
      'claimed-expires-in': { type: 'string' },
    },
  }));
} catch (err) {
  console.error(`${err.message}\n${usage}`);
  process.exit(2);
}
const isSeconds = (value) => /^\d+$/.test(value);
const claimed = args['claimed-expires-in'];
if (!args.resource || !isSeconds(args.ttl) || (claimed !== undefined && !isSeconds(claimed))) {
  console.error(usage);
  process.exit(2);
}
const resource = args.resource;
const ttl = Number(args.ttl);
const claimedExpiresIn = claimed === undefined ? undefined : Number(claimed);

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

// Client id -> how its tokens' claims differ from this library's.
const shapes = {
  'service-a': (claims) => { delete claims.sub; },
  'service-b': (claims) => { delete claims.sub; },
  'empty-a': (claims) => { claims.sub = ''; },
  'empty-b': (claims) => { claims.sub = ''; },
  portal: (claims) => { claims.sub = 'service-a'; },
  nobody: (claims) => { delete claims.sub; delete claims.client_id; },
};

// The one account the automatic login signs in.
const accountId = 'alice';

const provider = new Provider(issuer, {
  jwks: { keys: [signingKey] },
  clients: [
    client('agent-a', 'secret-a'),
    client('agent-b', 'secret-b'),
    ...Object.keys(shapes).map((id) => client(id, 'secret')),
  ],
  // What registered clients get for metadata they leave out.
  clientDefaults: {
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
    id_token_signed_response_alg: 'RS256',
  },
  scopes: scope.split(' '),
  responseTypes: ['code'],
  cookies: { keys: [randomUUID()] },
  findAccount: (ctx, id) => (id === accountId
    ? { accountId: id, claims: () => ({ sub: id }) }
    : undefined),
  // Refresh tokens for every code grant of a client allowed the grant, not
  // only when offline_access was asked for, and not tied to the login session.
  issueRefreshToken: (ctx, client) => client.grantTypeAllowed('refresh_token'),
  expiresWithSession: () => false,
  rotateRefreshToken: true,
  pkce: { required: () => true },
  ttl: {
    AccessToken: () => ttl,
    ClientCredentials: () => ttl,
    RefreshToken: () => 24 * 60 * 60,
  },
  formats: {
    customizers: {
      jwt: (ctx, token, jwt) => { shapes[token.clientId]?.(jwt.payload); },
    },
  },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    registration: { enabled: true, initialAccessToken: false },
    revocation: { enabled: true },
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

// Successful token grants by grant type, for GET /test/stats.
const stats = { authorization_code: 0, refresh_token: 0, client_credentials: 0 };
provider.on('grant.success', (ctx) => {
  const type = ctx.oidc.params.grant_type;
  stats[type] = (stats[type] ?? 0) + 1;
});

// An authorization request without scope would be denied (nothing to
// grant); ask for the client's registered scope, or all of ours, instead.
provider.use(async (ctx, next) => {
  if (ctx.method === 'GET' && ctx.path === '/auth' && !ctx.query.scope && typeof ctx.query.client_id === 'string') {
    const found = await provider.Client.find(ctx.query.client_id);
    if (found) ctx.query = { ...ctx.query, scope: found.scope ?? scope };
  }
  await next();
});

// --claimed-expires-in: rewrite expires_in in successful token responses.
if (claimedExpiresIn !== undefined) {
  provider.use(async (ctx, next) => {
    await next();
    if (
      ctx.oidc?.route === 'token'
      && ctx.status === 200
      && ctx.body && typeof ctx.body === 'object'
      && 'expires_in' in ctx.body
    ) {
      ctx.body = { ...ctx.body, expires_in: claimedExpiresIn };
    }
  });
}

// Approves whatever interaction the provider asks for: log in as alice, then
// consent to everything requested.
async function interact(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params } = details;
  if (prompt.name === 'login') {
    await provider.interactionFinished(req, res, { login: { accountId } }, { mergeWithLastSubmission: false });
    return;
  }
  if (prompt.name !== 'consent') throw new Error(`unexpected prompt ${prompt.name}`);

  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: details.session.accountId, clientId: params.client_id });
  const missing = prompt.details;
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

const callback = provider.callback();
server.on('request', async (req, res) => {
  const { pathname } = new URL(req.url, issuer);
  try {
    if (req.method === 'GET' && pathname === '/test/stats') {
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify(stats));
      return;
    }
    if (req.method === 'GET' && /^\/interaction\/[^/]+$/.test(pathname)) {
      await interact(req, res);
      return;
    }
    if (pathname === '/.well-known/oauth-authorization-server') {
      // RFC 8414 path: same document as OpenID discovery.
      req.url = '/.well-known/openid-configuration';
    }
  } catch (err) {
    console.error(`oidc.mjs: ${req.method} ${req.url}: ${err.stack ?? err}`);
    if (!res.headersSent) res.statusCode = 500;
    res.end(String(err.message ?? err));
    return;
  }
  callback(req, res);
});

process.stdout.write(`issuer ${issuer}\n`);

// Stop when asked to, or when whoever started us goes away.
const stop = () => process.exit(0);
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.on('close', stop);
process.stdin.resume();
