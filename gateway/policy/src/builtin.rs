//! `Builtin`: the documented default decisions, native and always available.

use crate::*;

/// Tunables of [`Builtin`]; each one can be overridden per server by a config parameter of the same name.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltinParams {
    pub max_attempts: u32,
    pub retry_base_ms: u64,
    pub reconnect_initial_ms: u64,
    pub reconnect_factor: f64,
    pub reconnect_max_ms: u64,
    pub reconnect_jitter: f64,
    /// 0 means unlimited.
    pub reconnect_max_attempts: u32,
    pub probe_interval_ms: u64,
    pub probe_timeout_ms: u64,
    pub probe_jitter: f64,
    pub degraded_after: u32,
    /// Consecutive failed calls or probes (timeouts, HTTP 5xx, malformed answers; not
    /// refused connections or credentials) after which the server is `error`: its tools
    /// hidden until a reconnection, on the reconnect schedule, succeeds. 0 means never.
    pub error_after: u32,
    pub max_crashes: u32,
    pub crash_window_ms: u64,
    pub restart_delay_ms: u64,
    /// A crash within this long of the start (a process that never served has an uptime
    /// of 0) is a failed start: the next start waits `failed_start_delay_ms`, doubled for
    /// each earlier crash in the window, so a momentary cause (a port in TIME_WAIT, a
    /// network not up yet) gets a real second chance instead of three starts in 100 ms.
    pub stable_uptime_ms: u64,
    pub failed_start_delay_ms: u64,
}

impl Default for BuiltinParams {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            retry_base_ms: 500,
            reconnect_initial_ms: 1_000,
            reconnect_factor: 2.0,
            reconnect_max_ms: 180_000,
            reconnect_jitter: 0.10,
            reconnect_max_attempts: 0,
            probe_interval_ms: 120_000,
            probe_timeout_ms: 60_000,
            probe_jitter: 0.10,
            degraded_after: 3,
            error_after: 5,
            max_crashes: 3,
            crash_window_ms: 300_000,
            restart_delay_ms: 0,
            stable_uptime_ms: 10_000,
            failed_start_delay_ms: 2_000,
        }
    }
}

impl BuiltinParams {
    /// These defaults with the server's config parameters applied.
    pub fn for_server(&self, server: &ServerContext) -> BuiltinParams {
        let mut params = self.clone();
        macro_rules! take {
            ($($field:ident),*) => {$(
                if let Some(value) = server.param(stringify!($field)) { params.$field = value; }
            )*};
        }
        take!(
            max_attempts,
            retry_base_ms,
            reconnect_initial_ms,
            reconnect_factor,
            reconnect_max_ms,
            reconnect_jitter,
            reconnect_max_attempts,
            probe_interval_ms,
            probe_timeout_ms,
            probe_jitter,
            degraded_after,
            error_after,
            max_crashes,
            crash_window_ms,
            restart_delay_ms,
            stable_uptime_ms,
            failed_start_delay_ms
        );
        params
    }
}

/// The default policy of ../shared/DESIGN.md. Serves when no module is configured and
/// whenever a module faults.
#[derive(Debug, Clone, Default)]
pub struct Builtin {
    pub params: BuiltinParams,
}

fn jittered(base_ms: f64, spread: f64, seed: u64) -> u64 {
    (base_ms * (1.0 + jitter(seed, spread))).round().max(0.0) as u64
}

impl RecoveryPolicy for Builtin {
    fn describe(&self) -> Description {
        Description {
            name: "builtin".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            intent:
                "the documented defaults: 3 attempts, exponential reconnect, 3 crashes in 5 minutes (failed starts 2 s, 4 s apart)"
                    .into(),
        }
    }

    fn classify(&self, server: &ServerContext, failure: &FailedRequest) -> RetryVerdict {
        let params = self.params.for_server(server);
        if failure.kind.is_auth() {
            return RetryVerdict::GiveUp {
                status: FailureStatus::RequiresReauth,
            };
        }
        let give_up_status = if failure.kind.is_connection_class() {
            FailureStatus::Offline
        } else {
            FailureStatus::Error
        };
        let retryable = failure.kind.is_connection_class()
            || failure.kind == FailureKind::HttpStatus(429)
            || matches!(failure.kind, FailureKind::HttpStatus(502..=504));
        // Replaying a request the server may already have acted on is only safe for
        // tools that say so.
        let replay_safe =
            !failure.may_have_reached_server || failure.idempotent || failure.read_only;
        if retryable && replay_safe && failure.attempt < params.max_attempts {
            // Attempts are 1-based; a 0 from a careless caller counts as the first.
            let delay_ms = params
                .retry_base_ms
                .saturating_mul(1 << failure.attempt.saturating_sub(1).min(20));
            RetryVerdict::RetryAfter { delay_ms }
        } else {
            RetryVerdict::GiveUp {
                status: give_up_status,
            }
        }
    }

    fn reconnect_delay(
        &self,
        server: &ServerContext,
        attempt: u32,
        jitter_seed: u64,
    ) -> ReconnectVerdict {
        let params = self.params.for_server(server);
        if params.reconnect_max_attempts != 0 && attempt > params.reconnect_max_attempts {
            return ReconnectVerdict::Stop;
        }
        let exponent = attempt.saturating_sub(1).min(64) as i32;
        let base = (params.reconnect_initial_ms as f64 * params.reconnect_factor.powi(exponent))
            .min(params.reconnect_max_ms as f64);
        ReconnectVerdict::RetryAfter {
            delay_ms: jittered(base, params.reconnect_jitter, jitter_seed),
        }
    }

    fn health(&self, server: &ServerContext, probe: &ProbeOutcome) -> HealthVerdict {
        let params = self.params.for_server(server);
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

    fn probe_schedule(&self, server: &ServerContext, jitter_seed: u64) -> ProbeSchedule {
        let params = self.params.for_server(server);
        ProbeSchedule {
            interval_ms: jittered(
                params.probe_interval_ms as f64,
                params.probe_jitter,
                jitter_seed,
            ),
            timeout_ms: params.probe_timeout_ms,
        }
    }

    fn crash(&self, server: &ServerContext, crash: &CrashReport) -> CrashVerdict {
        let params = self.params.for_server(server);
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
            let backoff = params
                .failed_start_delay_ms
                .saturating_mul(1 << earlier_in_window.min(20));
            CrashVerdict::RestartAfter {
                delay_ms: backoff.max(params.restart_delay_ms),
            }
        } else {
            CrashVerdict::RestartAfter {
                delay_ms: params.restart_delay_ms,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> ServerContext {
        ServerContext::new("s", TransportKind::StreamableHttp)
    }

    fn failure(kind: FailureKind, attempt: u32) -> FailedRequest {
        FailedRequest {
            operation: Operation::Call,
            kind,
            message: String::new(),
            attempt,
            may_have_reached_server: false,
            idempotent: false,
            read_only: false,
        }
    }

    #[test]
    fn connection_failures_retry_three_times_then_offline() {
        let policy = Builtin::default();
        let delays: Vec<_> = (1..=3)
            .map(|attempt| {
                policy.classify(&server(), &failure(FailureKind::ConnectRefused, attempt))
            })
            .collect();
        assert_eq!(
            delays,
            [
                RetryVerdict::RetryAfter { delay_ms: 500 },
                RetryVerdict::RetryAfter { delay_ms: 1000 },
                RetryVerdict::GiveUp {
                    status: FailureStatus::Offline
                }
            ]
        );
    }

    #[test]
    fn auth_failures_are_never_retried() {
        let verdict =
            Builtin::default().classify(&server(), &failure(FailureKind::HttpStatus(401), 1));
        assert_eq!(
            verdict,
            RetryVerdict::GiveUp {
                status: FailureStatus::RequiresReauth
            }
        );
    }

    #[test]
    fn a_request_that_may_have_reached_the_server_is_replayed_only_when_safe() {
        let policy = Builtin::default();
        let mut reached = failure(FailureKind::ConnectionClosed, 1);
        reached.may_have_reached_server = true;
        assert_eq!(
            policy.classify(&server(), &reached),
            RetryVerdict::GiveUp {
                status: FailureStatus::Offline
            }
        );
        reached.read_only = true;
        assert_eq!(
            policy.classify(&server(), &reached),
            RetryVerdict::RetryAfter { delay_ms: 500 }
        );
    }

    #[test]
    fn other_failures_mark_error_without_retry() {
        let verdict = Builtin::default().classify(
            &server(),
            &failure(FailureKind::JsonRpc { code: -32603 }, 1),
        );
        assert_eq!(
            verdict,
            RetryVerdict::GiveUp {
                status: FailureStatus::Error
            }
        );
    }

    #[test]
    fn reconnect_backoff_doubles_to_the_cap_with_bounded_jitter() {
        let policy = Builtin::default();
        for (attempt, base) in [
            (1, 1_000.0),
            (2, 2_000.0),
            (3, 4_000.0),
            (9, 180_000.0),
            (40, 180_000.0),
        ] {
            for seed in 0..200 {
                let ReconnectVerdict::RetryAfter { delay_ms } =
                    policy.reconnect_delay(&server(), attempt, seed)
                else {
                    panic!("builtin never stops reconnecting");
                };
                let ratio = delay_ms as f64 / base;
                assert!(
                    (0.9..=1.1).contains(&ratio),
                    "attempt {attempt} seed {seed}: {delay_ms}"
                );
            }
        }
    }

    #[test]
    fn third_crash_within_five_minutes_is_permanent_and_the_window_slides() {
        let policy = Builtin::default();
        // Each process served a minute: crashes of a running server restart at once.
        let crash = |now_ms, recent: Vec<u64>| CrashReport {
            exit: ExitInfo {
                code: Some(1),
                signal: None,
            },
            uptime_ms: 60_000,
            now_ms,
            recent_crashes_ms: recent,
        };
        assert_eq!(
            policy.crash(&server(), &crash(1_000, vec![])),
            CrashVerdict::RestartAfter { delay_ms: 0 }
        );
        assert_eq!(
            policy.crash(&server(), &crash(2_000, vec![1_000])),
            CrashVerdict::RestartAfter { delay_ms: 0 }
        );
        assert_eq!(
            policy.crash(&server(), &crash(3_000, vec![1_000, 2_000])),
            CrashVerdict::GiveUp
        );
        // Two crashes, then a wait past the window: the third restarts.
        assert_eq!(
            policy.crash(&server(), &crash(400_000, vec![1_000, 2_000])),
            CrashVerdict::RestartAfter { delay_ms: 0 }
        );
    }

    #[test]
    fn failed_starts_back_off_before_the_budget_is_spent() {
        let policy = Builtin::default();
        // Processes that never served (uptime 0) or died within 10 s of their start.
        let crash = |uptime_ms, now_ms, recent: Vec<u64>| CrashReport {
            exit: ExitInfo {
                code: Some(1),
                signal: None,
            },
            uptime_ms,
            now_ms,
            recent_crashes_ms: recent,
        };
        assert_eq!(
            policy.crash(&server(), &crash(0, 100, vec![])),
            CrashVerdict::RestartAfter { delay_ms: 2_000 }
        );
        assert_eq!(
            policy.crash(&server(), &crash(9_999, 2_200, vec![100])),
            CrashVerdict::RestartAfter { delay_ms: 4_000 }
        );
        assert_eq!(
            policy.crash(&server(), &crash(0, 6_300, vec![100, 2_200])),
            CrashVerdict::GiveUp
        );
        // A per-server restart_delay_ms longer than the backoff wins.
        let mut slow = ServerContext::new("s", TransportKind::Stdio);
        slow.params
            .insert("restart_delay_ms".to_owned(), "5000".to_owned());
        assert_eq!(
            policy.crash(&slow, &crash(0, 100, vec![])),
            CrashVerdict::RestartAfter { delay_ms: 5_000 }
        );
    }

    #[test]
    fn degraded_after_three_consecutive_failures_and_error_after_five() {
        let policy = Builtin::default();
        let probe = |failures| ProbeOutcome {
            succeeded: false,
            latency_ms: 1,
            consecutive_failures: failures,
            consecutive_successes: 0,
        };
        assert_eq!(policy.health(&server(), &probe(2)), HealthVerdict::Healthy);
        assert_eq!(policy.health(&server(), &probe(3)), HealthVerdict::Degraded);
        assert_eq!(policy.health(&server(), &probe(4)), HealthVerdict::Degraded);
        // The fifth in a row: the server answers but fails, and goes to `error`.
        assert_eq!(
            policy.health(&server(), &probe(5)),
            HealthVerdict::Unhealthy
        );
        let mut never = server();
        never.params.insert("error_after".into(), "0".into());
        assert_eq!(policy.health(&never, &probe(50)), HealthVerdict::Degraded);
    }

    #[test]
    fn per_server_parameters_override_defaults() {
        let mut server = server();
        server.params.insert("max_crashes".into(), "5".into());
        let report = CrashReport {
            exit: ExitInfo {
                code: None,
                signal: Some(9),
            },
            uptime_ms: 60_000,
            now_ms: 5,
            recent_crashes_ms: vec![1, 2, 3],
        };
        assert_eq!(
            Builtin::default().crash(&server, &report),
            CrashVerdict::RestartAfter { delay_ms: 0 }
        );
    }
}
