//! Hot swap: concurrent decisions while a managed policy's module is swapped get an answer
//! from the old or the new module, never an error; a failed reload changes nothing.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use wardgate_policy::{CrashReport, CrashVerdict, ExitInfo, RecoveryPolicy, TransportKind};
use wardgate_wasm::{bundled, ManagedPolicy, PolicyEvent, PolicyLoadError, WasmPolicy};

use crate::support::{generous_runtime, server};

/// A managed policy on a file of its own in `dir`, with `module`'s bytes, loaded.
fn managed(dir: &Path, module: &str) -> Arc<ManagedPolicy> {
    let path = dir.join("policy.wasm");
    std::fs::copy(module, &path).unwrap();
    let policy = ManagedPolicy::new(
        "swapped",
        &path,
        BTreeMap::new(),
        generous_runtime().clone(),
    );
    policy.reload().expect("the first module loads");
    policy
}

/// Put `module`'s bytes in `policy`'s file and reload it.
fn swap_to(policy: &ManagedPolicy, module: &str) -> Arc<WasmPolicy> {
    std::fs::copy(module, policy.path()).unwrap();
    policy.reload().expect("reloads");
    policy.current().expect("a module decides")
}

/// A first crash after a minute of serving: `default` restarts it at once, `strict` gives up.
fn first_crash() -> CrashReport {
    CrashReport {
        exit: ExitInfo {
            code: Some(1),
            signal: None,
        },
        uptime_ms: 60_000,
        now_ms: 100_000,
        recent_crashes_ms: vec![],
    }
}

#[test]
fn decisions_during_repeated_swaps_come_from_the_old_or_the_new_module() {
    let dir = tempfile::tempdir().unwrap();
    let policy = managed(dir.path(), bundled::DEFAULT);
    let stop = Arc::new(AtomicBool::new(false));
    let (restarts, give_ups) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let deciders: Vec<_> = (0..4)
        .map(|index| {
            let (policy, stop) = (policy.clone(), stop.clone());
            let (restarts, give_ups) = (restarts.clone(), give_ups.clone());
            std::thread::spawn(move || {
                let server = server(&format!("s{index}"), TransportKind::Stdio, &[]);
                while !stop.load(Ordering::Relaxed) {
                    match policy.crash(&server, &first_crash()) {
                        CrashVerdict::RestartAfter { delay_ms: 0 } => {
                            restarts.fetch_add(1, Ordering::Relaxed)
                        }
                        CrashVerdict::GiveUp => give_ups.fetch_add(1, Ordering::Relaxed),
                        other => panic!("neither module answers {other:?}"),
                    };
                    let name = policy.describe().name;
                    assert!(name == "default" || name == "strict", "{name}");
                }
            })
        })
        .collect();
    // Keep every module that served, to check none of them faulted.
    let served: Mutex<Vec<Arc<WasmPolicy>>> = Mutex::new(vec![policy.current().unwrap()]);
    for swap in 0..20 {
        let path = if swap % 2 == 0 {
            bundled::STRICT
        } else {
            bundled::DEFAULT
        };
        served.lock().unwrap().push(swap_to(&policy, path));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    for decider in deciders {
        decider.join().expect("no decision failed");
    }
    assert_eq!(policy.generation(), 21);
    assert_eq!(policy.current().unwrap().description().name, "default");
    let (restarts, give_ups) = (
        restarts.load(Ordering::Relaxed),
        give_ups.load(Ordering::Relaxed),
    );
    assert!(
        restarts > 0 && give_ups > 0,
        "{restarts} restarts, {give_ups} give-ups"
    );
    for policy in served.lock().unwrap().iter() {
        assert_eq!(policy.faults().total, 0, "{:?}", policy.faults().last);
    }
}

#[test]
fn rewriting_the_module_file_and_reloading_changes_the_next_decision() {
    let dir = tempfile::tempdir().unwrap();
    let policy = managed(dir.path(), bundled::DEFAULT);
    let path = policy.path().to_owned();
    let server = server("s", TransportKind::Stdio, &[]);
    assert_eq!(
        policy.crash(&server, &first_crash()),
        CrashVerdict::RestartAfter { delay_ms: 0 }
    );

    swap_to(&policy, bundled::STRICT);
    assert_eq!(policy.crash(&server, &first_crash()), CrashVerdict::GiveUp);

    // A broken file: the reload fails, says why, and the strict module keeps serving.
    std::fs::write(&path, b"\0asm garbage").unwrap();
    let error = policy.reload().expect_err("a broken module must not load");
    assert!(matches!(error, PolicyLoadError::Compile { .. }), "{error}");
    assert!(error.to_string().contains("policy.wasm"), "{error}");
    assert_eq!(policy.crash(&server, &first_crash()), CrashVerdict::GiveUp);
    assert_eq!(policy.generation(), 2);
}

#[test]
fn faults_of_every_module_swapped_in_are_reported_as_the_policy_s() {
    let dir = tempfile::tempdir().unwrap();
    let policy = managed(dir.path(), bundled::DEFAULT);
    let faults = Arc::new(AtomicU64::new(0));
    let counter = faults.clone();
    policy.set_event_sink(move |event| {
        if let PolicyEvent::Faulted { policy, .. } = event {
            assert_eq!(policy, "swapped");
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
    swap_to(&policy, bundled::FAULTY);
    let trapping = server("t", TransportKind::Stdio, &[("fault", "trap")]);
    policy.crash(&trapping, &first_crash());
    assert_eq!(faults.load(Ordering::Relaxed), 1);
    assert_eq!(policy.generation(), 2);
}
