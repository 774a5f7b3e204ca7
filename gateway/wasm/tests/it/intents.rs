//! `policies/strict` fails fast and `policies/patient` never gives up, as their READMEs say.

use wardgate_policy::{
    CrashReport, CrashVerdict, ExitInfo, FailedRequest, FailureKind, FailureStatus, HealthVerdict,
    Operation, ProbeOutcome, ReconnectVerdict, RecoveryPolicy, RetryVerdict, TransportKind,
};
use wardgate_wasm::bundled;

use crate::support::{generous_runtime, load, server};

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

fn crash(now_ms: u64, uptime_ms: u64, recent_crashes_ms: Vec<u64>) -> CrashReport {
    CrashReport {
        exit: ExitInfo {
            code: None,
            signal: Some(9),
        },
        uptime_ms,
        now_ms,
        recent_crashes_ms,
    }
}

fn failed_probe(consecutive_failures: u32) -> ProbeOutcome {
    ProbeOutcome {
        succeeded: false,
        latency_ms: 10_000,
        consecutive_failures,
        consecutive_successes: 0,
    }
}

#[test]
fn strict_never_retries_a_call_and_the_first_crash_is_permanent() {
    let strict = load(generous_runtime(), bundled::STRICT);
    assert_eq!(strict.description().name, "strict");
    let server = server("s", TransportKind::Stdio, &[]);
    assert_eq!(
        strict.classify(&server, &failure(FailureKind::ConnectRefused, 1)),
        RetryVerdict::GiveUp {
            status: FailureStatus::Offline
        }
    );
    assert_eq!(
        strict.classify(&server, &failure(FailureKind::HttpStatus(503), 1)),
        RetryVerdict::GiveUp {
            status: FailureStatus::Error
        }
    );
    assert_eq!(
        strict.classify(&server, &failure(FailureKind::HttpStatus(401), 1)),
        RetryVerdict::GiveUp {
            status: FailureStatus::RequiresReauth
        }
    );
    assert_eq!(
        strict.crash(&server, &crash(10_000, 9_000, vec![])),
        CrashVerdict::GiveUp
    );
    assert_eq!(
        strict.health(&server, &failed_probe(1)),
        HealthVerdict::Degraded
    );
    assert_eq!(
        strict.health(&server, &failed_probe(3)),
        HealthVerdict::Unhealthy
    );
    assert!(matches!(
        strict.reconnect_delay(&server, 3, 1),
        ReconnectVerdict::RetryAfter { .. }
    ));
    assert_eq!(
        strict.reconnect_delay(&server, 4, 1),
        ReconnectVerdict::Stop
    );
    assert_eq!(strict.faults().total, 0);
}

#[test]
fn patient_never_stops_reconnecting_and_retries_generously() {
    let patient = load(generous_runtime(), bundled::PATIENT);
    assert_eq!(patient.description().name, "patient");
    let server = server("p", TransportKind::StreamableHttp, &[]);
    for attempt in [1, 10, 100, 10_000, u32::MAX] {
        match patient.reconnect_delay(&server, attempt, u64::from(attempt)) {
            ReconnectVerdict::RetryAfter { delay_ms } => assert!(delay_ms <= 72_000, "{delay_ms}"),
            ReconnectVerdict::Stop => panic!("patient stopped reconnecting at attempt {attempt}"),
        }
    }
    for attempt in 1..=5 {
        assert!(matches!(
            patient.classify(&server, &failure(FailureKind::TimedOut, attempt)),
            RetryVerdict::RetryAfter { .. }
        ));
    }
    assert_eq!(
        patient.classify(&server, &failure(FailureKind::HttpStatus(500), 1)),
        RetryVerdict::RetryAfter { delay_ms: 250 }
    );
    // Still no replay of a call the server may have acted on.
    let mut reached = failure(FailureKind::ConnectionReset, 1);
    reached.may_have_reached_server = true;
    assert_eq!(
        patient.classify(&server, &reached),
        RetryVerdict::GiveUp {
            status: FailureStatus::Offline
        }
    );
    assert_eq!(
        patient.health(&server, &failed_probe(4)),
        HealthVerdict::Healthy
    );
    assert_eq!(
        patient.health(&server, &failed_probe(5)),
        HealthVerdict::Degraded
    );
    assert_eq!(patient.faults().total, 0);
}

#[test]
fn patient_restarts_a_crash_loop_with_growing_delays_that_reset_after_sustained_uptime() {
    let patient = load(generous_runtime(), bundled::PATIENT);
    let server = server("p", TransportKind::Stdio, &[]);
    // A process that dies 5 s after every restart, 20 times in a row.
    let (mut now, mut history, mut delays) = (1_000_000u64, Vec::new(), Vec::new());
    for _ in 0..20 {
        let CrashVerdict::RestartAfter { delay_ms } =
            patient.crash(&server, &crash(now, 5_000, history.clone()))
        else {
            panic!("patient gave up on a crash loop");
        };
        delays.push(delay_ms);
        history.push(now);
        now += delay_ms + 5_000;
    }
    assert_eq!(&delays[..5], &[0, 1_000, 2_000, 4_000, 8_000]);
    assert!(
        delays.windows(2).all(|pair| pair[0] <= pair[1]),
        "{delays:?}"
    );
    assert_eq!(*delays.last().unwrap(), 300_000);
    // Then it runs for 20 minutes before crashing: the streak is over.
    now += 1_200_000;
    assert_eq!(
        patient.crash(&server, &crash(now, 1_200_000, history.clone())),
        CrashVerdict::RestartAfter { delay_ms: 0 }
    );
    // And the next crash soon after counts from one again.
    history.push(now);
    assert_eq!(
        patient.crash(&server, &crash(now + 6_000, 5_000, history)),
        CrashVerdict::RestartAfter { delay_ms: 1_000 }
    );
}
