"""breaker: a Wardgate recovery policy written in Python.

It treats a server that answers with errors as a server under load, and backs off hard:

- A call that fails with HTTP 429, HTTP 5xx or JSON-RPC "internal error" (-32603) is tried
  again after `base_delay_ms` x 4^(attempt - 1), at most `max_attempts` attempts in all,
  and only when replaying it is safe (the request never reached the server, or the tool is
  idempotent or read-only).
- A lost connection is retried the same way (x 2 per attempt instead of x 4).
- Reconnects back off x 4 per attempt, capped at `max_delay_ms`, +/- 10 % jitter; after
  `max_reconnects` attempts (0 = never) the server is left permanently failed.
- A process that crashes `max_attempts` times within five minutes is not restarted; before
  that each restart waits `base_delay_ms` x 4^(earlier crashes in the window).
- HTTP 401/403 always mean "requires re-authentication"; nothing else is retried.

Parameters (per policy or per server, as text): max_attempts (3), base_delay_ms (1000),
max_delay_ms (300000), max_reconnects (0). A missing or malformed value uses the default.

Decisions are pure functions of their arguments: no globals, no clock, no randomness.
"""

from typing import List, Tuple

import wit_world
from wit_world import (
    CrashReport,
    CrashVerdict,
    CrashVerdict_GiveUp,
    CrashVerdict_RestartAfter,
    Description,
    FailedRequest,
    FailureKind_ConnectionClosed,
    FailureKind_ConnectionReset,
    FailureKind_ConnectRefused,
    FailureKind_HttpStatus,
    FailureKind_JsonRpc,
    FailureKind_ProcessExited,
    FailureKind_SessionExpired,
    FailureKind_TimedOut,
    FailureStatus,
    HealthVerdict,
    ProbeOutcome,
    ProbePlan,
    ReconnectVerdict,
    ReconnectVerdict_RetryAfter,
    ReconnectVerdict_Stop,
    RetryVerdict,
    RetryVerdict_GiveUp,
    RetryVerdict_RetryAfter,
    ServerContext,
)

DAY_MS = 86_400_000
CRASH_WINDOW_MS = 5 * 60 * 1000
JSON_RPC_INTERNAL_ERROR = -32603
CONNECTION_LOST = (
    FailureKind_ConnectRefused,
    FailureKind_TimedOut,
    FailureKind_ConnectionReset,
    FailureKind_ConnectionClosed,
    FailureKind_SessionExpired,
    FailureKind_ProcessExited,
)


def param(params: List[Tuple[str, str]], key: str, default: int, low: int, high: int) -> int:
    """The operator's integer parameter `key`, or `default` when absent, malformed or out of range."""
    for name, value in params:
        if name == key:
            try:
                number = int(value.strip())
            except ValueError:
                return default
            return number if low <= number <= high else default
    return default


def backoff(base_ms: int, factor: int, step: int, cap_ms: int) -> int:
    """base x factor^step, capped (step counts from 0)."""
    return min(base_ms * factor ** min(step, 40), cap_ms, DAY_MS)


def jittered(delay_ms: int, seed: int) -> int:
    """delay +/- 10 %, derived from the host's seed so the decision can be replayed."""
    spread = delay_ms // 10
    if spread == 0:
        return delay_ms
    return delay_ms - spread + seed % (2 * spread + 1)


def is_overload(failure: FailedRequest) -> bool:
    kind = failure.kind
    if isinstance(kind, FailureKind_HttpStatus):
        return kind.value == 429 or 500 <= kind.value <= 599
    if isinstance(kind, FailureKind_JsonRpc):
        return kind.value == JSON_RPC_INTERNAL_ERROR
    return False


class WitWorld(wit_world.WitWorld):
    def describe(self) -> Description:
        return Description(
            name="breaker",
            version="1.0.0",
            intent="backs off hard (x4) on HTTP 429/5xx and JSON-RPC internal errors; "
            "max_attempts per call and per crash window",
        )

    def classify(self, server: ServerContext, failure: FailedRequest) -> RetryVerdict:
        kind = failure.kind
        if isinstance(kind, FailureKind_HttpStatus) and kind.value in (401, 403):
            return RetryVerdict_GiveUp(FailureStatus.REQUIRES_REAUTH)
        max_attempts = param(server.params, "max_attempts", 3, 1, 100)
        base_ms = param(server.params, "base_delay_ms", 1000, 0, DAY_MS)
        cap_ms = param(server.params, "max_delay_ms", 300_000, 1, DAY_MS)
        replay_safe = (
            not failure.may_have_reached_server or failure.idempotent or failure.read_only
        )
        step = max(failure.attempt, 1) - 1
        if is_overload(failure):
            if replay_safe and failure.attempt < max_attempts:
                return RetryVerdict_RetryAfter(backoff(base_ms, 4, step, cap_ms))
            return RetryVerdict_GiveUp(FailureStatus.ERROR)
        if isinstance(kind, CONNECTION_LOST):
            if replay_safe and failure.attempt < max_attempts:
                return RetryVerdict_RetryAfter(backoff(base_ms, 2, step, cap_ms))
            return RetryVerdict_GiveUp(FailureStatus.OFFLINE)
        return RetryVerdict_GiveUp(FailureStatus.ERROR)

    def reconnect_delay(self, server: ServerContext, attempt: int, jitter_seed: int) -> ReconnectVerdict:
        max_reconnects = param(server.params, "max_reconnects", 0, 0, 1_000_000)
        if max_reconnects and attempt > max_reconnects:
            return ReconnectVerdict_Stop()
        base_ms = param(server.params, "base_delay_ms", 1000, 0, DAY_MS)
        cap_ms = param(server.params, "max_delay_ms", 300_000, 1, DAY_MS)
        delay_ms = backoff(base_ms, 4, max(attempt, 1) - 1, cap_ms)
        return ReconnectVerdict_RetryAfter(jittered(delay_ms, jitter_seed))

    def health(self, server: ServerContext, probe: ProbeOutcome) -> HealthVerdict:
        if probe.consecutive_failures >= 5:
            return HealthVerdict.UNHEALTHY
        if probe.consecutive_failures >= 2:
            return HealthVerdict.DEGRADED
        return HealthVerdict.HEALTHY

    def probe_schedule(self, server: ServerContext, jitter_seed: int) -> ProbePlan:
        return ProbePlan(interval_ms=jittered(30_000, jitter_seed), timeout_ms=5_000)

    def crash(self, server: ServerContext, crash: CrashReport) -> CrashVerdict:
        max_attempts = param(server.params, "max_attempts", 3, 1, 100)
        base_ms = param(server.params, "base_delay_ms", 1000, 0, DAY_MS)
        cap_ms = param(server.params, "max_delay_ms", 300_000, 1, DAY_MS)
        window_start = crash.now_ms - min(crash.now_ms, CRASH_WINDOW_MS)
        earlier = sum(1 for at in crash.recent_crashes_ms if at >= window_start)
        if earlier + 1 >= max_attempts:
            return CrashVerdict_GiveUp()
        return CrashVerdict_RestartAfter(backoff(base_ms, 4, earlier, cap_ms))
