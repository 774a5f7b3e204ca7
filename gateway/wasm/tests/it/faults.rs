//! A module that loops, allocates without bound, traps, panics or answers nonsense: that decision comes from `Builtin`, and the next one from the module again.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wardgate_policy::{
    Builtin, CrashReport, ExitInfo, FailedRequest, FailureKind, Operation, ProbeOutcome, Question,
    ReconnectVerdict, RecoveryPolicy, RetryVerdict, ServerContext, TransportKind,
};
use wardgate_wasm::{bundled, Decision, FaultKind, PolicyFault, WasmPolicy};

use crate::support::{generous_runtime, load, runtime, server};

/// What `policies/faulty` answers to `classify` when it behaves.
const FAULTY_RETRY_MS: u64 = 4_242;

fn failure() -> FailedRequest {
    FailedRequest {
        operation: Operation::Call,
        kind: FailureKind::ConnectRefused,
        message: "connection refused".into(),
        attempt: 1,
        may_have_reached_server: false,
        idempotent: false,
        read_only: false,
    }
}

fn faulting(fault: &str) -> ServerContext {
    server(
        &format!("{fault}-server"),
        TransportKind::StreamableHttp,
        &[("fault", fault)],
    )
}

fn well_behaved() -> ServerContext {
    server("calm", TransportKind::StreamableHttp, &[])
}

/// The decision for a faulting server is Builtin's; the next one, for a calm server, is
/// the module's again (a fresh instance replaced the poisoned one).
fn assert_falls_back_then_recovers(policy: &WasmPolicy, fault: &str) -> Duration {
    let started = Instant::now();
    let verdict = policy.classify(&faulting(fault), &failure());
    let elapsed = started.elapsed();
    assert_eq!(
        verdict,
        Builtin::default().classify(&faulting(fault), &failure())
    );
    assert_eq!(
        policy.classify(&well_behaved(), &failure()),
        RetryVerdict::RetryAfter {
            delay_ms: FAULTY_RETRY_MS
        },
        "the decision after a `{fault}` fault must come from the module"
    );
    elapsed
}

#[test]
fn a_module_that_runs_forever_is_interrupted_at_the_deadline() {
    let policy = load(runtime(), bundled::FAULTY);
    let elapsed = assert_falls_back_then_recovers(&policy, "loop");
    // The deadline is 10 ms; the bound only guards against "never", on a busy machine.
    assert!(elapsed < Duration::from_secs(1), "took {elapsed:?}");
    let faults = policy.faults();
    assert_eq!((faults.total, faults.timeouts), (1, 1));
    let last = faults.last.expect("a fault was recorded");
    assert_eq!(
        last.kind,
        FaultKind::Timeout {
            deadline: Duration::from_millis(10)
        }
    );
    assert_eq!(
        (last.decision, last.server.as_str()),
        (Decision::Question(Question::Classify), "loop-server")
    );
}

#[test]
fn the_deadline_holds_after_the_epoch_ticker_has_gone_idle() {
    // A runtime of its own, idle long enough for its ticker to park: the first decision
    // must wake it, or a runaway module would never be interrupted.
    let runtime = wardgate_wasm::Runtime::new(wardgate_wasm::RuntimeConfig {
        cache_dir: Some(crate::support::cache_dir()),
        ..Default::default()
    })
    .unwrap();
    let policy = load(&runtime, bundled::FAULTY);
    std::thread::sleep(Duration::from_millis(400));
    let started = Instant::now();
    policy.classify(&faulting("loop"), &failure());
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(policy.faults().timeouts, 1);
}

#[test]
fn a_module_that_allocates_without_bound_hits_the_memory_cap() {
    // A generous deadline, so that on a busy machine the memory cap, not the clock, stops it.
    let policy = load(generous_runtime(), bundled::FAULTY);
    assert_falls_back_then_recovers(&policy, "alloc");
    // trap_on_grow_failure turns the refused growth into a trap the host can name,
    // rather than an allocation failure the guest would abort on anonymously.
    let faults = policy.faults();
    assert_eq!(
        (faults.total, faults.memory_exceeded),
        (1, 1),
        "{:?}",
        faults.last
    );
    assert_eq!(
        faults.last.unwrap().kind,
        FaultKind::MemoryExceeded {
            limit_bytes: 64 << 20
        }
    );
}

/// The engine asks for decisions on tokio worker threads, where wasmtime-wasi's blocking
/// calls (a guest writing to stdout or stderr) would panic with "Cannot start a runtime
/// from within a runtime" if the host did not move them off the async threads.
#[test]
fn a_guest_that_prints_is_answered_on_tokio_threads_of_either_runtime_flavor() {
    let policy = std::sync::Arc::new(load(generous_runtime(), bundled::FAULTY));
    let expected = RetryVerdict::RetryAfter {
        delay_ms: FAULTY_RETRY_MS,
    };
    let multi_thread = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let on_worker = policy.clone();
    let answer = multi_thread
        .block_on(
            multi_thread.spawn(async move { on_worker.classify(&faulting("print"), &failure()) }),
        )
        .unwrap();
    assert_eq!(answer, expected);
    let current_thread = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let answer = current_thread.block_on(async { policy.classify(&faulting("print"), &failure()) });
    assert_eq!(answer, expected);
    assert_eq!(policy.faults().total, 0, "{:?}", policy.faults().last);
}

#[test]
fn an_instance_that_keeps_growing_is_retired_before_it_reaches_the_cap() {
    // 1 MiB more per call: past the 64 MiB cap by the 64th call on one instance, unless the
    // host retires it once it is past half the cap.
    let policy = load(generous_runtime(), bundled::FAULTY);
    for call in 0..200 {
        assert_eq!(
            policy.classify(&faulting("leak"), &failure()),
            RetryVerdict::RetryAfter {
                delay_ms: FAULTY_RETRY_MS
            },
            "call {call} was not answered by the module: {:?}",
            policy.faults().last
        );
    }
    assert_eq!(policy.faults().total, 0);
}

#[test]
fn a_module_that_traps_or_panics_falls_back_for_that_decision_only() {
    let policy = load(generous_runtime(), bundled::FAULTY);
    for fault in ["trap", "panic"] {
        assert_falls_back_then_recovers(&policy, fault);
    }
    let faults = policy.faults();
    assert_eq!((faults.total, faults.traps), (2, 2), "{:?}", faults.last);
    let FaultKind::Trap { message } = faults.last.unwrap().kind else {
        panic!("a panic is a trap");
    };
    assert!(message.contains("unreachable"), "{message}");
}

#[test]
fn invalid_answers_are_rejected_in_every_decision() {
    let policy = load(generous_runtime(), bundled::FAULTY);
    let builtin = Builtin::default();
    let server = faulting("invalid");
    let crash = CrashReport {
        exit: ExitInfo {
            code: Some(1),
            signal: None,
        },
        uptime_ms: 1,
        now_ms: 1_000,
        recent_crashes_ms: vec![],
    };
    assert_eq!(
        policy.classify(&server, &failure()),
        builtin.classify(&server, &failure())
    );
    assert_eq!(
        policy.reconnect_delay(&server, 2, 9),
        builtin.reconnect_delay(&server, 2, 9)
    );
    assert_eq!(
        policy.probe_schedule(&server, 9),
        builtin.probe_schedule(&server, 9)
    );
    assert_eq!(
        policy.crash(&server, &crash),
        builtin.crash(&server, &crash)
    );
    let faults = policy.faults();
    assert_eq!((faults.total, faults.invalid_answers), (4, 4));
    let last = faults.last.unwrap();
    assert_eq!(last.decision, Decision::Question(Question::Crash));
    assert!(last.to_string().contains("one day"), "{last}");
    // An invalid answer does not poison the instance: the module keeps answering.
    assert_eq!(
        policy.reconnect_delay(&well_behaved(), 2, 9),
        ReconnectVerdict::RetryAfter { delay_ms: 4_343 }
    );
}

#[test]
fn every_fault_reaches_the_listener_and_printing_is_no_fault() {
    let policy = load(generous_runtime(), bundled::FAULTY);
    let seen: Arc<Mutex<Vec<PolicyFault>>> = Arc::default();
    let sink = seen.clone();
    policy.set_fault_listener(move |fault| sink.lock().unwrap().push(fault.clone()));
    // Output goes to the log, and the answer is the module's.
    assert_eq!(
        policy.classify(&faulting("print"), &failure()),
        RetryVerdict::RetryAfter {
            delay_ms: FAULTY_RETRY_MS
        }
    );
    let probe = ProbeOutcome {
        succeeded: true,
        latency_ms: 1,
        consecutive_failures: 0,
        consecutive_successes: 1,
    };
    policy.health(&faulting("trap"), &probe);
    policy.probe_schedule(&faulting("invalid"), 1);
    let seen = seen.lock().unwrap();
    let decisions: Vec<_> = seen.iter().map(|fault| fault.decision).collect();
    assert_eq!(
        decisions,
        [
            Decision::Question(Question::Health),
            Decision::Question(Question::ProbeSchedule)
        ]
    );
    assert!(seen
        .iter()
        .all(|fault| fault.module_version.starts_with("faulty 0.1.0 sha256:")));
    assert_eq!(policy.faults().total, 2);
}

#[test]
fn concurrent_decisions_with_faults_never_block_each_other() {
    let policy = Arc::new(load(generous_runtime(), bundled::FAULTY));
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let policy = policy.clone();
            std::thread::spawn(move || {
                for round in 0..25 {
                    let server = if (thread + round) % 5 == 0 {
                        faulting("trap")
                    } else {
                        well_behaved()
                    };
                    let verdict = policy.classify(&server, &failure());
                    if server.params.is_empty() {
                        assert_eq!(
                            verdict,
                            RetryVerdict::RetryAfter {
                                delay_ms: FAULTY_RETRY_MS
                            }
                        );
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("no decision thread panicked");
    }
    assert_eq!(policy.faults().traps, 20);
}
