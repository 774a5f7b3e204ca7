// An HTTP proxy between the conformance suite and a gateway that lists one server, SERVER,
// under its default prefix: it adds the prefix to the names and URIs the suite sends
// (`test_simple_text` → `SERVER__test_simple_text`, `test://x` → `wardgate://SERVER/test://x`)
// and takes it out of everything that comes back. With it, a scenario that fails through
// the gateway fails for something other than names.
//
//   node prefixing-proxy.mjs GATEWAY_URL SERVER    prints "LISTENING http://127.0.0.1:PORT/mcp"
import http from 'node:http';

const [gatewayUrl, server] = process.argv.slice(2);
const gateway = new URL(gatewayUrl);
const namePrefix = `${server}__`;
const uriPrefix = `wardgate://${server}/`;

const NAMED = new Set(['tools/call', 'prompts/get']);
const ADDRESSED = new Set(['resources/read', 'resources/subscribe', 'resources/unsubscribe']);

function prefixed(message) {
  const params = message?.params;
  if (!params) return message;
  if (NAMED.has(message.method) && typeof params.name === 'string') params.name = namePrefix + params.name;
  if (ADDRESSED.has(message.method) && typeof params.uri === 'string') params.uri = uriPrefix + params.uri;
  if (message.method === 'completion/complete' && params.ref) {
    if (typeof params.ref.name === 'string') params.ref.name = namePrefix + params.ref.name;
    if (typeof params.ref.uri === 'string') params.ref.uri = uriPrefix + params.ref.uri;
  }
  return message;
}

const unprefixed = (text) => text.split(uriPrefix).join('').split(namePrefix).join('');

function forward(request, response, body) {
  const headers = { ...request.headers };
  // 2026-07-28 clients repeat the name in a header (SEP-2243).
  const method = headers['mcp-method'];
  if (typeof headers['mcp-name'] === 'string') {
    if (NAMED.has(method)) headers['mcp-name'] = namePrefix + headers['mcp-name'];
    if (ADDRESSED.has(method)) headers['mcp-name'] = uriPrefix + headers['mcp-name'];
  }
  delete headers['content-length'];
  if (body.length > 0) headers['content-length'] = String(body.length);
  const upstream = http.request(
    { host: gateway.hostname, port: gateway.port, path: request.url, method: request.method, headers },
    (answer) => {
      const answerHeaders = { ...answer.headers };
      delete answerHeaders['content-length'];
      response.writeHead(answer.statusCode, answerHeaders);
      // Whole lines only, so a prefix is never split between two writes (SSE is line-based).
      let pending = '';
      answer.setEncoding('utf8');
      answer.on('data', (text) => {
        pending += text;
        const end = pending.lastIndexOf('\n') + 1;
        if (end > 0) {
          response.write(unprefixed(pending.slice(0, end)));
          pending = pending.slice(end);
        }
      });
      answer.on('end', () => response.end(unprefixed(pending)));
    }
  );
  upstream.on('error', (error) => {
    if (!response.headersSent) response.writeHead(502);
    response.end(String(error));
  });
  response.on('close', () => upstream.destroy());
  upstream.end(body);
}

const listener = http.createServer((request, response) => {
  const chunks = [];
  request.on('data', (chunk) => chunks.push(chunk));
  request.on('end', () => {
    let body = Buffer.concat(chunks);
    if (body.length > 0) {
      try {
        const message = JSON.parse(body.toString());
        body = Buffer.from(JSON.stringify(Array.isArray(message) ? message.map(prefixed) : prefixed(message)));
      } catch {
        // Not JSON: the gateway answers it as it is.
      }
    }
    forward(request, response, body);
  });
});
listener.listen(0, '127.0.0.1', () => {
  console.log(`LISTENING http://127.0.0.1:${listener.address().port}/mcp`);
});
