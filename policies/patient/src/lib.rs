//! A patient recovery policy: never stops reconnecting, retries generously, and restarts crashing processes with growing delays.
//!
//! For servers that are slow to come back but always do (a laptop's local model server, a
//! flaky SaaS API). Each knob is a per-server parameter of the same name.

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

fn jittered(base_ms: f64, spread: f64, seed: u64) -> u64 {
    (base_ms * (1.0 + jitter(seed, spread))).round().max(0.0) as u64
}

/// `base * 2^(n - 1)`, at most `max`.
fn doubling(base_ms: u64, n: u32, max_ms: u64) -> u64 {
    base_ms
        .saturating_mul(1u64 << n.saturating_sub(1).min(40))
        .min(max_ms)
}

struct PatientPolicy;

impl Guest for PatientPolicy {
    fn describe() -> Description {
        Description {
            name: "patient".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            intent:
                "never stop reconnecting, retry generously, restart crashes with growing delays"
                    .into(),
        }
    }

    fn classify(server: ServerContext, failure: FailedRequest) -> RetryVerdict {
        // Patience does not fix rejected credentials.
        if matches!(failure.kind, FailureKind::HttpStatus(401 | 403)) {
            return RetryVerdict::GiveUp(FailureStatus::RequiresReauth);
        }
        let (retryable, give_up_status) = match failure.kind {
            FailureKind::ConnectRefused
            | FailureKind::TimedOut
            | FailureKind::Dns
            | FailureKind::ConnectionReset
            | FailureKind::ConnectionClosed
            | FailureKind::ProcessExited(_)
            | FailureKind::SessionExpired => (true, FailureStatus::Offline),
            // Rate limits and any server-side 5xx are worth waiting out.
            FailureKind::HttpStatus(429 | 500..=599) => (true, FailureStatus::Error),
            // The server is alive and said no: asking again gets the same answer.
            _ => (false, FailureStatus::Error),
        };
        // Generous, not reckless: a call that may have been acted on is replayed only
        // when the tool says replaying is harmless.
        let replay_safe =
            !failure.may_have_reached_server || failure.idempotent || failure.read_only;
        let max_attempts = param(&server, "max_attempts", 6u32);
        if retryable && replay_safe && failure.attempt < max_attempts {
            let base_ms = param(&server, "retry_base_ms", 250u64);
            let max_ms = param(&server, "retry_max_ms", 8_000u64);
            RetryVerdict::RetryAfter(doubling(base_ms, failure.attempt, max_ms))
        } else {
            RetryVerdict::GiveUp(give_up_status)
        }
    }

    fn reconnect_delay(server: ServerContext, attempt: u32, jitter_seed: u64) -> ReconnectVerdict {
        // Never `Stop`: the server comes back when it comes back, and a short cap means
        // we notice soon after it does.
        let initial_ms = param(&server, "reconnect_initial_ms", 1_000u64);
        let max_ms = param(&server, "reconnect_max_ms", 60_000u64);
        let spread = param(&server, "reconnect_jitter", 0.20f64);
        let base = doubling(initial_ms, attempt, max_ms);
        ReconnectVerdict::RetryAfter(jittered(base as f64, spread, jitter_seed))
    }

    fn health(server: ServerContext, probe: ProbeOutcome) -> HealthVerdict {
        let degraded_after = param(&server, "degraded_after", 5u32);
        if !probe.succeeded && probe.consecutive_failures >= degraded_after {
            HealthVerdict::Degraded
        } else {
            HealthVerdict::Healthy
        }
    }

    fn probe_schedule(server: ServerContext, jitter_seed: u64) -> ProbePlan {
        let interval_ms = param(&server, "probe_interval_ms", 120_000u64);
        ProbePlan {
            interval_ms: jittered(interval_ms as f64, 0.10, jitter_seed).max(1),
            // A slow answer is still an answer.
            timeout_ms: param(&server, "probe_timeout_ms", 120_000u64),
        }
    }

    fn crash(server: ServerContext, crash: CrashReport) -> CrashVerdict {
        let stable_uptime_ms = param(&server, "stable_uptime_ms", 600_000u64);
        let initial_ms = param(&server, "restart_initial_ms", 1_000u64);
        let max_ms = param(&server, "restart_max_ms", 300_000u64);
        // The streak: earlier crashes since the process last ran for `stable_uptime_ms`.
        // This run's uptime is known exactly. For earlier runs only the gaps between crashes
        // are, and a gap is a restart delay (at most `max_ms`) plus an uptime, so a gap
        // longer than `stable_uptime_ms + max_ms` proves a sustained run and ends the streak.
        let mut streak = 0u32;
        if crash.uptime_ms < stable_uptime_ms {
            let mut newer: Option<u64> = None;
            for &at in crash.recent_crashes_ms.iter().rev() {
                if let Some(newer) = newer {
                    if newer.saturating_sub(at) > stable_uptime_ms.saturating_add(max_ms) {
                        break;
                    }
                }
                streak += 1;
                newer = Some(at);
            }
        }
        // First crash of a streak: restart at once; then 1 s, 2 s, 4 s ... up to the cap.
        let delay_ms = if streak == 0 {
            0
        } else {
            doubling(initial_ms, streak, max_ms)
        };
        CrashVerdict::RestartAfter(delay_ms)
    }
}

export!(PatientPolicy);
