// {{name}}: a Wardgate recovery policy. Each exported function is one decision of the
// `wardgate:policy/recovery-policy` world (wit/policy.wit documents each); change them.
//
// Decisions must be pure functions of their arguments: keep no state between calls, read
// no clock, draw no random numbers (use the jitter seed the host passes). In these
// bindings records are objects with camelCase fields, variants are {tag, val}, enums are
// strings, and u64 values (delays, instants, seeds) are BigInt.

function param(params, key, fallback) {
  const entry = params.find(([name]) => name === key);
  const value = entry === undefined ? NaN : Number(entry[1].trim());
  return Number.isInteger(value) ? value : fallback;
}

const CONNECTION_LOST = [
  'connect-refused', 'timed-out', 'connection-reset', 'connection-closed', 'session-expired',
  'process-exited',
];

export function describe() {
  return {
    name: '{{name}}',
    version: '0.1.0',
    intent: 'retries lost connections twice, restarts a crashed process after 1 s twice and gives up at the third crash in 5 minutes',
  };
}

export function classify(server, failure) {
  const kind = failure.kind;
  if (kind.tag === 'http-status' && (kind.val === 401 || kind.val === 403)) {
    return { tag: 'give-up', val: 'requires-reauth' };
  }
  if (CONNECTION_LOST.includes(kind.tag)) {
    // Replaying a request the server may have acted on is only safe for tools that say so.
    const replaySafe = !failure.mayHaveReachedServer || failure.idempotent || failure.readOnly;
    if (replaySafe && failure.attempt < param(server.params, 'max_attempts', 3)) {
      return { tag: 'retry-after', val: 500n * BigInt(failure.attempt) };
    }
    return { tag: 'give-up', val: 'offline' };
  }
  return { tag: 'give-up', val: 'error' };
}

export function reconnectDelay(server, attempt, jitterSeed) {
  // 1 s, 2 s, 4 s, ... up to a minute, plus up to 10 % jitter derived from the seed.
  const exponent = BigInt(Math.min(Math.max(attempt, 1) - 1, 6));
  let delayMs = 1000n * 2n ** exponent;
  if (delayMs > 60_000n) delayMs = 60_000n;
  return { tag: 'retry-after', val: delayMs + (jitterSeed % (delayMs / 10n + 1n)) };
}

export function health(server, probe) {
  return probe.consecutiveFailures >= 3 ? 'degraded' : 'healthy';
}

export function probeSchedule(server, jitterSeed) {
  return { intervalMs: 30_000n, timeoutMs: 5_000n };
}

export function crash(server, report) {
  // A third crash within five minutes is final; earlier ones restart after a second.
  const windowStart = report.nowMs > 300_000n ? report.nowMs - 300_000n : 0n;
  const earlier = report.recentCrashesMs.filter((at) => at >= windowStart).length;
  return earlier >= 2 ? { tag: 'give-up' } : { tag: 'restart-after', val: 1000n };
}
