// codes: a Wardgate recovery policy written in JavaScript.
//
// Many MCP servers report a passing trouble (overloaded, upstream timeout) with their own
// JSON-RPC error code and everything else with another. This policy retries a call only
// when the server answered with one of the codes the operator lists, and treats every
// other failure as final:
//
// - JSON-RPC error with a code in `retryable_codes` (default "-32000,-32001", the codes
//   the TypeScript SDK uses for a closed connection and a request timeout): tried again
//   after `retry_delay_ms` (default 250), at most `max_attempts` attempts in all (default
//   4), and only when replaying is safe (the tool is idempotent or read-only, or the
//   request never reached the server).
// - Anything else: the call fails at once. HTTP 401/403 leave the server "requires
//   re-authentication"; a lost connection leaves it offline (the gateway still reconnects);
//   any other answer leaves it in error.
// - Reconnects wait `reconnect_delay_ms` (default 2000) +/- 10 %, forever.
// - A crashed process restarts after 1 s, up to 5 crashes in 10 minutes.
//
// Parameters come as text, per policy or per server; a malformed one uses the default.
// u64 values (delays, instants, seeds) are BigInt in JavaScript bindings.

const DAY_MS = 86_400_000n;
const CRASH_WINDOW_MS = 600_000n;
const MAX_CRASHES = 5;

function param(params, key) {
  const entry = params.find(([name]) => name === key);
  return entry === undefined ? undefined : entry[1].trim();
}

function intParam(params, key, fallback, low, high) {
  const text = param(params, key);
  if (text === undefined || !/^-?\d+$/.test(text)) return fallback;
  const value = Number(text);
  return value >= low && value <= high ? value : fallback;
}

function retryableCodes(params) {
  const text = param(params, 'retryable_codes') ?? '-32000,-32001';
  const codes = text.split(',').map((code) => code.trim()).filter((code) => /^-?\d+$/.test(code));
  return new Set(codes.map(Number));
}

function jittered(delayMs, seed) {
  const spread = delayMs / 10n;
  if (spread === 0n) return delayMs;
  return delayMs - spread + (seed % (2n * spread + 1n));
}

export function describe() {
  return {
    name: 'codes',
    version: '1.0.0',
    intent: 'retries a call only on the JSON-RPC error codes listed in retryable_codes; every other failure is final',
  };
}

export function classify(server, failure) {
  const kind = failure.kind;
  if (kind.tag === 'http-status' && (kind.val === 401 || kind.val === 403)) {
    return { tag: 'give-up', val: 'requires-reauth' };
  }
  if (kind.tag === 'json-rpc') {
    const maxAttempts = intParam(server.params, 'max_attempts', 4, 1, 100);
    const replaySafe = !failure.mayHaveReachedServer || failure.idempotent || failure.readOnly;
    if (retryableCodes(server.params).has(kind.val) && replaySafe && failure.attempt < maxAttempts) {
      const delayMs = intParam(server.params, 'retry_delay_ms', 250, 0, Number(DAY_MS));
      return { tag: 'retry-after', val: BigInt(delayMs) };
    }
    return { tag: 'give-up', val: 'error' };
  }
  const connectionLost = [
    'connect-refused', 'timed-out', 'dns', 'connection-reset', 'connection-closed',
    'session-expired', 'process-exited',
  ];
  return { tag: 'give-up', val: connectionLost.includes(kind.tag) ? 'offline' : 'error' };
}

export function reconnectDelay(server, attempt, jitterSeed) {
  const delayMs = BigInt(intParam(server.params, 'reconnect_delay_ms', 2000, 1, Number(DAY_MS)));
  return { tag: 'retry-after', val: jittered(delayMs, jitterSeed) };
}

export function health(server, probe) {
  return probe.consecutiveFailures >= 3 ? 'degraded' : 'healthy';
}

export function probeSchedule(server, jitterSeed) {
  return { intervalMs: jittered(15_000n, jitterSeed), timeoutMs: 5_000n };
}

export function crash(server, report) {
  const windowStart = report.nowMs > CRASH_WINDOW_MS ? report.nowMs - CRASH_WINDOW_MS : 0n;
  const earlier = report.recentCrashesMs.filter((at) => at >= windowStart).length;
  if (earlier + 1 >= MAX_CRASHES) return { tag: 'give-up' };
  return { tag: 'restart-after', val: 1_000n };
}
