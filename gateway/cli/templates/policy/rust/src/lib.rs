//! {{name}}: a Wardgate recovery policy. Every function below is one decision of the
//! `wardgate:policy/recovery-policy` world (wit/policy.wit documents each); change them.

wit_bindgen::generate!({
    world: "recovery-policy",
    path: "wit",
});

/// The operator's parameter `key` (from `params` in the gateway's config), or `default`
/// when it is absent or does not parse.
fn param<T: core::str::FromStr>(server: &ServerContext, key: &str, default: T) -> T {
    server
        .params
        .iter()
        .find(|(name, _)| name == key)
        .and_then(|(_, value)| value.trim().parse().ok())
        .unwrap_or(default)
}

struct Policy;

impl Guest for Policy {
    fn describe() -> Description {
        Description {
            name: "{{name}}".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            intent: "retries lost connections twice, restarts a crashed process after 1 s twice and gives up at the third crash in 5 minutes".into(),
        }
    }

    fn classify(server: ServerContext, failure: FailedRequest) -> RetryVerdict {
        let connection_lost = matches!(
            failure.kind,
            FailureKind::ConnectRefused
                | FailureKind::TimedOut
                | FailureKind::ConnectionReset
                | FailureKind::ConnectionClosed
                | FailureKind::SessionExpired
                | FailureKind::ProcessExited(_)
        );
        // Replaying a request the server may have acted on is only safe for tools that say so.
        let replay_safe =
            !failure.may_have_reached_server || failure.idempotent || failure.read_only;
        match failure.kind {
            FailureKind::HttpStatus(401 | 403) => {
                RetryVerdict::GiveUp(FailureStatus::RequiresReauth)
            }
            _ if connection_lost
                && replay_safe
                && failure.attempt < param(&server, "max_attempts", 3) =>
            {
                RetryVerdict::RetryAfter(500 * u64::from(failure.attempt))
            }
            _ if connection_lost => RetryVerdict::GiveUp(FailureStatus::Offline),
            _ => RetryVerdict::GiveUp(FailureStatus::Error),
        }
    }

    fn reconnect_delay(_server: ServerContext, attempt: u32, jitter_seed: u64) -> ReconnectVerdict {
        // 1 s, 2 s, 4 s, ... up to a minute, plus up to 10 % jitter derived from the seed.
        let delay_ms = (1000u64 << attempt.saturating_sub(1).min(6)).min(60_000);
        ReconnectVerdict::RetryAfter(delay_ms + jitter_seed % (delay_ms / 10 + 1))
    }

    fn health(_server: ServerContext, probe: ProbeOutcome) -> HealthVerdict {
        if probe.consecutive_failures >= 3 {
            HealthVerdict::Degraded
        } else {
            HealthVerdict::Healthy
        }
    }

    fn probe_schedule(_server: ServerContext, _jitter_seed: u64) -> ProbePlan {
        ProbePlan {
            interval_ms: 30_000,
            timeout_ms: 5_000,
        }
    }

    fn crash(_server: ServerContext, crash: CrashReport) -> CrashVerdict {
        // A third crash within five minutes is final; earlier ones restart after a second.
        let window_start = crash.now_ms.saturating_sub(5 * 60 * 1000);
        let earlier = crash
            .recent_crashes_ms
            .iter()
            .filter(|at| **at >= window_start)
            .count();
        if earlier >= 2 {
            CrashVerdict::GiveUp
        } else {
            CrashVerdict::RestartAfter(1000)
        }
    }
}

export!(Policy);
