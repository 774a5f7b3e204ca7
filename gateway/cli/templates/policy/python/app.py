"""{{name}}: a Wardgate recovery policy. Each method below is one decision of the
`wardgate:policy/recovery-policy` world (wit/policy.wit documents each); change them.

Decisions must be pure functions of their arguments: keep no state in globals, read no
clock, draw no random numbers (use the jitter seed the host passes).
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
    FailureKind_ProcessExited,
    FailureKind_SessionExpired,
    FailureKind_TimedOut,
    FailureStatus,
    HealthVerdict,
    ProbeOutcome,
    ProbePlan,
    ReconnectVerdict,
    ReconnectVerdict_RetryAfter,
    RetryVerdict,
    RetryVerdict_GiveUp,
    RetryVerdict_RetryAfter,
    ServerContext,
)

CONNECTION_LOST = (
    FailureKind_ConnectRefused,
    FailureKind_TimedOut,
    FailureKind_ConnectionReset,
    FailureKind_ConnectionClosed,
    FailureKind_SessionExpired,
    FailureKind_ProcessExited,
)


def param(params: List[Tuple[str, str]], key: str, default: int) -> int:
    """The operator's parameter `key` (from `params` in the gateway's config), or `default`."""
    for name, value in params:
        if name == key:
            try:
                return int(value.strip())
            except ValueError:
                return default
    return default


class WitWorld(wit_world.WitWorld):
    def describe(self) -> Description:
        return Description(
            name="{{name}}",
            version="0.1.0",
            intent="retries lost connections twice, restarts a crashed process after 1 s twice and gives up at the third crash in 5 minutes",
        )

    def classify(self, server: ServerContext, failure: FailedRequest) -> RetryVerdict:
        kind = failure.kind
        if isinstance(kind, FailureKind_HttpStatus) and kind.value in (401, 403):
            return RetryVerdict_GiveUp(FailureStatus.REQUIRES_REAUTH)
        if isinstance(kind, CONNECTION_LOST):
            # Replaying a request the server may have acted on is only safe for tools that say so.
            replay_safe = (
                not failure.may_have_reached_server or failure.idempotent or failure.read_only
            )
            if replay_safe and failure.attempt < param(server.params, "max_attempts", 3):
                return RetryVerdict_RetryAfter(500 * failure.attempt)
            return RetryVerdict_GiveUp(FailureStatus.OFFLINE)
        return RetryVerdict_GiveUp(FailureStatus.ERROR)

    def reconnect_delay(self, server: ServerContext, attempt: int, jitter_seed: int) -> ReconnectVerdict:
        # 1 s, 2 s, 4 s, ... up to a minute, plus up to 10 % jitter derived from the seed.
        delay_ms = min(1000 * 2 ** min(max(attempt, 1) - 1, 6), 60_000)
        return ReconnectVerdict_RetryAfter(delay_ms + jitter_seed % (delay_ms // 10 + 1))

    def health(self, server: ServerContext, probe: ProbeOutcome) -> HealthVerdict:
        return HealthVerdict.DEGRADED if probe.consecutive_failures >= 3 else HealthVerdict.HEALTHY

    def probe_schedule(self, server: ServerContext, jitter_seed: int) -> ProbePlan:
        return ProbePlan(interval_ms=30_000, timeout_ms=5_000)

    def crash(self, server: ServerContext, crash: CrashReport) -> CrashVerdict:
        # A third crash within five minutes is final; earlier ones restart after a second.
        window_start = max(crash.now_ms - 5 * 60 * 1000, 0)
        earlier = sum(1 for at in crash.recent_crashes_ms if at >= window_start)
        return CrashVerdict_GiveUp() if earlier >= 2 else CrashVerdict_RestartAfter(1000)
