//! The documented default recovery decisions as a `wardgate:policy` component, decision for decision equal to the gateway's `Builtin`.
//!
//! Start here when writing a policy: copy this crate, change the decisions, keep the
//! parameter handling. Every knob is a per-server parameter of the same name
//! (`max_attempts = "5"` in a server's config), so one module serves many servers.

wit_bindgen::generate!({
    world: "recovery-policy",
    path: "../../wit",
});

/// The defaults, each overridable per server by a parameter of the same name.
struct Params {
    max_attempts: u32,
    retry_base_ms: u64,
    reconnect_initial_ms: u64,
    reconnect_factor: f64,
    reconnect_max_ms: u64,
    reconnect_jitter: f64,
    /// 0 means unlimited.
    reconnect_max_attempts: u32,
    probe_interval_ms: u64,
    probe_timeout_ms: u64,
    probe_jitter: f64,
    degraded_after: u32,
    /// 0 means never.
    error_after: u32,
    max_crashes: u32,
    crash_window_ms: u64,
    restart_delay_ms: u64,
    stable_uptime_ms: u64,
    failed_start_delay_ms: u64,
}

impl Params {
    fn for_server(server: &ServerContext) -> Params {
        // A value that is absent or does not parse leaves the default in place.
        fn param<T: core::str::FromStr>(server: &ServerContext, key: &str, default: T) -> T {
            server
                .params
                .iter()
                .rev()
                .find(|(name, _)| name == key)
                .and_then(|(_, value)| value.trim().parse().ok())
                .unwrap_or(default)
        }
        Params {
            max_attempts: param(server, "max_attempts", 3),
            retry_base_ms: param(server, "retry_base_ms", 500),
            reconnect_initial_ms: param(server, "reconnect_initial_ms", 1_000),
            reconnect_factor: param(server, "reconnect_factor", 2.0),
            reconnect_max_ms: param(server, "reconnect_max_ms", 180_000),
            reconnect_jitter: param(server, "reconnect_jitter", 0.10),
            reconnect_max_attempts: param(server, "reconnect_max_attempts", 0),
            probe_interval_ms: param(server, "probe_interval_ms", 120_000),
            probe_timeout_ms: param(server, "probe_timeout_ms", 60_000),
            probe_jitter: param(server, "probe_jitter", 0.10),
            degraded_after: param(server, "degraded_after", 3),
            error_after: param(server, "error_after", 5),
            max_crashes: param(server, "max_crashes", 3),
            crash_window_ms: param(server, "crash_window_ms", 300_000),
            restart_delay_ms: param(server, "restart_delay_ms", 0),
            stable_uptime_ms: param(server, "stable_uptime_ms", 10_000),
            failed_start_delay_ms: param(server, "failed_start_delay_ms", 2_000),
        }
    }
}

/// A jitter factor in [-spread, +spread] derived from a seed (SplitMix64), so a decision
/// can be replayed from its arguments. Identical to the host's `wardgate_policy::jitter`.
fn jitter(seed: u64, spread: f64) -> f64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let unit = (z >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
    (unit * 2.0 - 1.0) * spread
}

fn jittered(base_ms: f64, spread: f64, seed: u64) -> u64 {
    (base_ms * (1.0 + jitter(seed, spread))).round().max(0.0) as u64
}

/// "The server is not reachable right now."
fn is_connection_class(kind: &FailureKind) -> bool {
    matches!(
        kind,
        FailureKind::ConnectRefused
            | FailureKind::TimedOut
            | FailureKind::Dns
            | FailureKind::ConnectionReset
            | FailureKind::ConnectionClosed
            | FailureKind::ProcessExited(_)
            | FailureKind::SessionExpired
    )
}

struct DefaultPolicy;

impl Guest for DefaultPolicy {
    fn describe() -> Description {
        Description {
            name: "default".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            intent:
                "the documented defaults: 3 attempts, exponential reconnect, 3 crashes in 5 minutes (failed starts 2 s, 4 s apart)"
                    .into(),
        }
    }

    fn classify(server: ServerContext, failure: FailedRequest) -> RetryVerdict {
        let params = Params::for_server(&server);
        // Retrying rejected credentials cannot succeed; an operator must fix them.
        if matches!(failure.kind, FailureKind::HttpStatus(401 | 403)) {
            return RetryVerdict::GiveUp(FailureStatus::RequiresReauth);
        }
        let connection_class = is_connection_class(&failure.kind);
        let give_up_status = if connection_class {
            FailureStatus::Offline
        } else {
            FailureStatus::Error
        };
        let retryable =
            connection_class || matches!(failure.kind, FailureKind::HttpStatus(429 | 502..=504));
        // Replaying a request the server may already have acted on is only safe for
        // tools that say so.
        let replay_safe =
            !failure.may_have_reached_server || failure.idempotent || failure.read_only;
        if retryable && replay_safe && failure.attempt < params.max_attempts {
            let doublings = failure.attempt.saturating_sub(1).min(20);
            RetryVerdict::RetryAfter(params.retry_base_ms.saturating_mul(1 << doublings))
        } else {
            RetryVerdict::GiveUp(give_up_status)
        }
    }

    fn reconnect_delay(server: ServerContext, attempt: u32, jitter_seed: u64) -> ReconnectVerdict {
        let params = Params::for_server(&server);
        if params.reconnect_max_attempts != 0 && attempt > params.reconnect_max_attempts {
            return ReconnectVerdict::Stop;
        }
        let exponent = attempt.saturating_sub(1).min(64) as i32;
        let base = (params.reconnect_initial_ms as f64 * params.reconnect_factor.powi(exponent))
            .min(params.reconnect_max_ms as f64);
        ReconnectVerdict::RetryAfter(jittered(base, params.reconnect_jitter, jitter_seed))
    }

    fn health(server: ServerContext, probe: ProbeOutcome) -> HealthVerdict {
        let params = Params::for_server(&server);
        // Failures here are timeouts, HTTP errors and malformed answers of calls and probes
        // (refused connections and credentials reach the host another way). Degraded is a
        // warning only; unhealthy puts the server in `error`, its tools hidden, until a
        // reconnection succeeds.
        if probe.succeeded {
            HealthVerdict::Healthy
        } else if params.error_after != 0 && probe.consecutive_failures >= params.error_after {
            HealthVerdict::Unhealthy
        } else if probe.consecutive_failures >= params.degraded_after {
            HealthVerdict::Degraded
        } else {
            HealthVerdict::Healthy
        }
    }

    fn probe_schedule(server: ServerContext, jitter_seed: u64) -> ProbePlan {
        let params = Params::for_server(&server);
        ProbePlan {
            interval_ms: jittered(
                params.probe_interval_ms as f64,
                params.probe_jitter,
                jitter_seed,
            ),
            timeout_ms: params.probe_timeout_ms,
        }
    }

    fn crash(server: ServerContext, crash: CrashReport) -> CrashVerdict {
        let params = Params::for_server(&server);
        let window_start = crash.now_ms.saturating_sub(params.crash_window_ms);
        let earlier_in_window = crash
            .recent_crashes_ms
            .iter()
            .filter(|&&at| at >= window_start)
            .count() as u32;
        // This crash counts too: the `max_crashes`-th crash within the window is final.
        if earlier_in_window + 1 >= params.max_crashes {
            CrashVerdict::GiveUp
        } else if crash.uptime_ms < params.stable_uptime_ms {
            // A failed start: back off, doubling for each earlier crash in the window.
            let backoff = params
                .failed_start_delay_ms
                .saturating_mul(1 << earlier_in_window.min(20));
            CrashVerdict::RestartAfter(backoff.max(params.restart_delay_ms))
        } else {
            CrashVerdict::RestartAfter(params.restart_delay_ms)
        }
    }
}

export!(DefaultPolicy);
