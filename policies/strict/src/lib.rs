//! A strict recovery policy: fail fast, with no tool-call retries, a permanent first crash and degraded after one failed probe.
//!
//! For servers where a silent retry is worse than a visible failure (tools with side
//! effects, CI runs that must not hide flakiness). Each knob is a per-server parameter.

wit_bindgen::generate!({
    world: "recovery-policy",
    path: "../../wit",
});

fn param<T: core::str::FromStr>(server: &ServerContext, key: &str, default: T) -> T {
    server
        .params
        .iter()
        .rev()
        .find(|(name, _)| name == key)
        .and_then(|(_, value)| value.trim().parse().ok())
        .unwrap_or(default)
}

/// SplitMix64 of the seed mapped to [-spread, +spread]: replayable jitter.
fn jitter(seed: u64, spread: f64) -> f64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let unit = (z >> 11) as f64 / (1u64 << 53) as f64;
    (unit * 2.0 - 1.0) * spread
}

struct StrictPolicy;

impl Guest for StrictPolicy {
    fn describe() -> Description {
        Description {
            name: "strict".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            intent:
                "fail fast: no retries, first crash is permanent, degraded after one failed probe"
                    .into(),
        }
    }

    fn classify(_server: ServerContext, failure: FailedRequest) -> RetryVerdict {
        // Never retry: the caller sees every failure and decides for itself.
        let status = match failure.kind {
            FailureKind::HttpStatus(401 | 403) => FailureStatus::RequiresReauth,
            FailureKind::ConnectRefused
            | FailureKind::TimedOut
            | FailureKind::Dns
            | FailureKind::ConnectionReset
            | FailureKind::ConnectionClosed
            | FailureKind::ProcessExited(_)
            | FailureKind::SessionExpired => FailureStatus::Offline,
            _ => FailureStatus::Error,
        };
        RetryVerdict::GiveUp(status)
    }

    fn reconnect_delay(server: ServerContext, attempt: u32, jitter_seed: u64) -> ReconnectVerdict {
        // A few quick tries (1 s, 2 s, 4 s), then an operator has to look.
        let max_attempts = param(&server, "reconnect_max_attempts", 3u32);
        if attempt > max_attempts {
            return ReconnectVerdict::Stop;
        }
        let initial_ms = param(&server, "reconnect_initial_ms", 1_000u64);
        let base = initial_ms.saturating_mul(1u64 << attempt.saturating_sub(1).min(40));
        let delay = (base as f64 * (1.0 + jitter(jitter_seed, 0.10))).round();
        ReconnectVerdict::RetryAfter(delay.max(0.0) as u64)
    }

    fn health(server: ServerContext, probe: ProbeOutcome) -> HealthVerdict {
        let unhealthy_after = param(&server, "unhealthy_after", 3u32);
        if probe.succeeded {
            HealthVerdict::Healthy
        } else if probe.consecutive_failures >= unhealthy_after {
            HealthVerdict::Unhealthy
        } else {
            // One failed probe is already worth a warning.
            HealthVerdict::Degraded
        }
    }

    fn probe_schedule(server: ServerContext, jitter_seed: u64) -> ProbePlan {
        let interval_ms = param(&server, "probe_interval_ms", 30_000u64) as f64;
        ProbePlan {
            interval_ms: ((interval_ms * (1.0 + jitter(jitter_seed, 0.10))).round() as u64).max(1),
            timeout_ms: param(&server, "probe_timeout_ms", 10_000u64),
        }
    }

    fn crash(_server: ServerContext, _crash: CrashReport) -> CrashVerdict {
        // A process that crashed once is not trusted to run unattended again.
        CrashVerdict::GiveUp
    }
}

export!(StrictPolicy);
