//! `policies/default` and `Builtin` give identical decisions over generated scenarios.

use std::collections::BTreeMap;

use wardgate_policy::{
    Builtin, CrashReport, ExitInfo, FailedRequest, FailureKind, Operation, ProbeOutcome,
    RecoveryPolicy, ServerContext, TransportKind,
};
use wardgate_wasm::{bundled, WasmPolicy};

use crate::support::{generous_runtime, server, Random};

/// Per-server parameter sets: none, each knob overridden, and values Builtin ignores.
fn servers() -> Vec<ServerContext> {
    let sets: &[&[(&str, &str)]] = &[
        &[],
        &[("max_attempts", "5"), ("retry_base_ms", "250")],
        &[("max_attempts", "1")],
        &[("max_attempts", "0")],
        &[
            ("reconnect_initial_ms", "500"),
            ("reconnect_factor", "1.5"),
            ("reconnect_max_ms", "60000"),
            ("reconnect_jitter", "0.25"),
        ],
        &[("reconnect_factor", "3"), ("reconnect_jitter", "0")],
        &[
            ("reconnect_max_attempts", "10"),
            ("reconnect_initial_ms", "1"),
        ],
        &[
            ("probe_interval_ms", "30000"),
            ("probe_timeout_ms", "5000"),
            ("probe_jitter", "0.5"),
        ],
        &[("degraded_after", "1")],
        &[
            ("max_crashes", "5"),
            ("crash_window_ms", "60000"),
            ("restart_delay_ms", "250"),
        ],
        &[("max_crashes", "1")],
        // Whitespace around a value is trimmed; malformed values leave the default.
        &[
            ("max_attempts", " 4 "),
            ("reconnect_factor", "fast"),
            ("max_crashes", "-1"),
        ],
        &[
            ("retry_base_ms", "1e3"),
            ("reconnect_jitter", "NaN"),
            ("unrelated", "x"),
        ],
    ];
    let transports = [
        TransportKind::Stdio,
        TransportKind::StreamableHttp,
        TransportKind::Sse,
    ];
    sets.iter()
        .enumerate()
        .map(|(index, params)| server(&format!("server-{index}"), transports[index % 3], params))
        .collect()
}

fn failure_kinds() -> Vec<FailureKind> {
    let mut kinds = vec![
        FailureKind::ConnectRefused,
        FailureKind::TimedOut,
        FailureKind::Dns,
        FailureKind::ConnectionReset,
        FailureKind::ConnectionClosed,
        FailureKind::SessionExpired,
        FailureKind::Protocol,
        FailureKind::Other,
        FailureKind::JsonRpc { code: -32603 },
        FailureKind::JsonRpc { code: -32601 },
        FailureKind::JsonRpc { code: 0 },
        FailureKind::ProcessExited {
            code: Some(1),
            signal: None,
        },
        FailureKind::ProcessExited {
            code: None,
            signal: Some(9),
        },
        FailureKind::ProcessExited {
            code: None,
            signal: None,
        },
    ];
    for status in [
        400,
        401,
        403,
        404,
        408,
        429,
        500,
        501,
        502,
        503,
        504,
        505,
        0,
        u16::MAX,
    ] {
        kinds.push(FailureKind::HttpStatus(status));
    }
    kinds
}

fn default_policy() -> WasmPolicy {
    generous_runtime()
        .load(bundled::DEFAULT, BTreeMap::new())
        .unwrap_or_else(|error| panic!("{error}"))
}

/// Every module decision must have come from the module, not from a fallback to Builtin.
fn assert_no_faults(policy: &WasmPolicy) {
    assert_eq!(policy.faults().total, 0, "{:?}", policy.faults().last);
}

#[test]
fn default_module_classifies_every_failure_like_builtin() {
    let (module, builtin) = (default_policy(), Builtin::default());
    let operations = [
        Operation::Initialize,
        Operation::List,
        Operation::Call,
        Operation::Probe,
    ];
    let mut compared = 0;
    for server in servers() {
        for kind in failure_kinds() {
            for (operation, attempt, flags) in operations.iter().flat_map(|&op| {
                (1..=5).flat_map(move |attempt| (0..8u8).map(move |flags| (op, attempt, flags)))
            }) {
                let failure = FailedRequest {
                    operation,
                    kind: kind.clone(),
                    message: format!("attempt {attempt} failed"),
                    attempt,
                    may_have_reached_server: flags & 1 != 0,
                    idempotent: flags & 2 != 0,
                    read_only: flags & 4 != 0,
                };
                assert_eq!(
                    module.classify(&server, &failure),
                    builtin.classify(&server, &failure),
                    "{server:?} {failure:?}"
                );
                compared += 1;
            }
        }
    }
    assert_no_faults(&module);
    assert!(compared > 10_000, "{compared} scenarios");
}

#[test]
fn default_module_reconnect_delays_equal_builtin_for_every_attempt_and_seed() {
    let (module, builtin) = (default_policy(), Builtin::default());
    let mut random = Random::new(1);
    for server in servers() {
        for attempt in (1..=40).chain([0, 64, 65, 1_000, u32::MAX]) {
            let seeds = (0..16).map(|_| random.next()).chain([0, 1, u64::MAX]);
            for seed in seeds {
                assert_eq!(
                    module.reconnect_delay(&server, attempt, seed),
                    builtin.reconnect_delay(&server, attempt, seed),
                    "{server:?} attempt {attempt} seed {seed}"
                );
            }
        }
    }
    assert_no_faults(&module);
}

#[test]
fn default_module_health_and_probe_schedule_equal_builtin() {
    let (module, builtin) = (default_policy(), Builtin::default());
    let mut random = Random::new(2);
    for server in servers() {
        for succeeded in [false, true] {
            for consecutive_failures in 0..=6 {
                for consecutive_successes in 0..=3 {
                    let probe = ProbeOutcome {
                        succeeded,
                        latency_ms: random.below(120_000),
                        consecutive_failures,
                        consecutive_successes,
                    };
                    assert_eq!(
                        module.health(&server, &probe),
                        builtin.health(&server, &probe)
                    );
                }
            }
        }
        for seed in (0..200).map(|_| random.next()).chain([0, u64::MAX]) {
            assert_eq!(
                module.probe_schedule(&server, seed),
                builtin.probe_schedule(&server, seed),
                "{server:?} seed {seed}"
            );
        }
    }
    assert_no_faults(&module);
}

/// Crash histories with gaps from milliseconds to hours, so windows slide over them.
fn crash_reports(random: &mut Random, count: usize) -> Vec<CrashReport> {
    let exits = [
        ExitInfo {
            code: Some(1),
            signal: None,
        },
        ExitInfo {
            code: Some(0),
            signal: None,
        },
        ExitInfo {
            code: None,
            signal: Some(9),
        },
        ExitInfo {
            code: None,
            signal: None,
        },
    ];
    (0..count)
        .map(|index| {
            let mut at = random.below(10_000_000);
            let mut recent_crashes_ms = Vec::new();
            for _ in 0..random.below(7) {
                recent_crashes_ms.push(at);
                // Gaps around the 1-minute and 5-minute windows, and far beyond.
                let scale = [1_000, 60_000, 300_000, 3_600_000][random.below(4) as usize];
                at += random.below(scale) + 1;
            }
            CrashReport {
                exit: exits[index % exits.len()],
                uptime_ms: random.below(900_000),
                now_ms: at + random.below(400_000),
                recent_crashes_ms,
            }
        })
        .collect()
}

#[test]
fn default_module_crash_budget_equals_builtin_over_sliding_windows() {
    let (module, builtin) = (default_policy(), Builtin::default());
    let mut random = Random::new(3);
    let reports = crash_reports(&mut random, 500);
    let (mut restarts, mut give_ups) = (0, 0);
    for server in servers() {
        for report in &reports {
            let verdict = module.crash(&server, report);
            assert_eq!(
                verdict,
                builtin.crash(&server, report),
                "{server:?} {report:?}"
            );
            match verdict {
                wardgate_policy::CrashVerdict::RestartAfter { .. } => restarts += 1,
                wardgate_policy::CrashVerdict::GiveUp => give_ups += 1,
            }
        }
        // The edge: crashes exactly at the window's start count.
        let edge = CrashReport {
            exit: ExitInfo {
                code: Some(1),
                signal: None,
            },
            uptime_ms: 5,
            now_ms: 300_000,
            recent_crashes_ms: vec![0, 0],
        };
        assert_eq!(module.crash(&server, &edge), builtin.crash(&server, &edge));
    }
    assert!(
        restarts > 100 && give_ups > 100,
        "{restarts} restarts, {give_ups} give-ups"
    );
    assert_no_faults(&module);
}

#[test]
fn policy_wide_parameters_reach_the_module_under_the_servers_own() {
    let params = BTreeMap::from([
        ("max_crashes".to_string(), "5".to_string()),
        ("max_attempts".to_string(), "4".to_string()),
    ]);
    let module = generous_runtime()
        .load(bundled::DEFAULT, params.clone())
        .unwrap_or_else(|error| panic!("{error}"));
    let builtin = Builtin::default();
    let mut random = Random::new(4);
    for server in servers() {
        // Builtin sees what the module sees: the policy-wide values, the server's on top.
        let mut merged = server.clone();
        merged.params = params.clone();
        merged.params.extend(server.params.clone());
        for report in crash_reports(&mut random, 50) {
            assert_eq!(
                module.crash(&server, &report),
                builtin.crash(&merged, &report)
            );
        }
        for attempt in 1..=5 {
            let failure = FailedRequest {
                operation: Operation::Call,
                kind: FailureKind::TimedOut,
                message: String::new(),
                attempt,
                may_have_reached_server: false,
                idempotent: false,
                read_only: false,
            };
            assert_eq!(
                module.classify(&server, &failure),
                builtin.classify(&merged, &failure)
            );
        }
    }
    assert_no_faults(&module);
}

#[test]
fn a_zero_probe_interval_is_rejected_from_the_module_and_builtin_answers_the_same() {
    // `probe_jitter = "NaN"` parses as a float, and Builtin then schedules probes 0 ms
    // apart. The host rejects that answer from a module (a busy loop of probes), so the
    // decision is Builtin's: the same value, but counted as a fault.
    let (module, builtin) = (default_policy(), Builtin::default());
    let server = server("nan", TransportKind::Stdio, &[("probe_jitter", "NaN")]);
    assert_eq!(
        module.probe_schedule(&server, 7),
        builtin.probe_schedule(&server, 7)
    );
    assert_eq!(builtin.probe_schedule(&server, 7).interval_ms, 0);
    assert_eq!(module.faults().invalid_answers, 1);
}
