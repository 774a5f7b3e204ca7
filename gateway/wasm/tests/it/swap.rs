//! Hot swap: concurrent decisions while modules are swapped get an answer from the old or the new module, never an error; a failed reload changes nothing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use wardgate_policy::{CrashReport, CrashVerdict, ExitInfo, RecoveryPolicy, TransportKind};
use wardgate_wasm::{bundled, PolicyHandle, PolicyLoadError, WasmPolicy};

use crate::support::{generous_runtime, server};

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
    let handle = Arc::new(
        PolicyHandle::load_on(generous_runtime(), bundled::DEFAULT, BTreeMap::new()).unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (restarts, give_ups) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let deciders: Vec<_> = (0..4)
        .map(|index| {
            let (handle, stop) = (handle.clone(), stop.clone());
            let (restarts, give_ups) = (restarts.clone(), give_ups.clone());
            std::thread::spawn(move || {
                let server = server(&format!("s{index}"), TransportKind::Stdio, &[]);
                while !stop.load(Ordering::Relaxed) {
                    match handle.crash(&server, &first_crash()) {
                        CrashVerdict::RestartAfter { delay_ms: 0 } => {
                            restarts.fetch_add(1, Ordering::Relaxed)
                        }
                        CrashVerdict::GiveUp => give_ups.fetch_add(1, Ordering::Relaxed),
                        other => panic!("neither module answers {other:?}"),
                    };
                    let name = handle.describe().name;
                    assert!(name == "default" || name == "strict", "{name}");
                }
            })
        })
        .collect();
    // Keep every module that served, to check none of them faulted.
    let served: Mutex<Vec<Arc<WasmPolicy>>> = Mutex::new(vec![handle.current()]);
    for swap in 0..20 {
        let path = if swap % 2 == 0 {
            bundled::STRICT
        } else {
            bundled::DEFAULT
        };
        served.lock().unwrap().push(handle.reload(path).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    for decider in deciders {
        decider.join().expect("no decision failed");
    }
    assert_eq!(handle.generation(), 21);
    assert_eq!(handle.current().description().name, "default");
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
    let path = dir.path().join("policy.wasm");
    std::fs::copy(bundled::DEFAULT, &path).unwrap();
    let handle = PolicyHandle::load_on(generous_runtime(), &path, BTreeMap::new()).unwrap();
    let server = server("s", TransportKind::Stdio, &[]);
    assert_eq!(
        handle.crash(&server, &first_crash()),
        CrashVerdict::RestartAfter { delay_ms: 0 }
    );

    std::fs::copy(bundled::STRICT, &path).unwrap();
    handle.reload(&path).unwrap();
    assert_eq!(handle.crash(&server, &first_crash()), CrashVerdict::GiveUp);

    // A broken file: the reload fails, says why, and the strict module keeps serving.
    std::fs::write(&path, b"\0asm garbage").unwrap();
    let error = handle
        .reload(&path)
        .err()
        .expect("a broken module must not load");
    assert!(matches!(error, PolicyLoadError::Compile { .. }), "{error}");
    assert!(error.to_string().contains("policy.wasm"), "{error}");
    assert_eq!(handle.crash(&server, &first_crash()), CrashVerdict::GiveUp);
    assert_eq!(handle.generation(), 2);
}

#[test]
fn the_fault_listener_follows_the_handle_across_swaps() {
    let handle =
        PolicyHandle::load_on(generous_runtime(), bundled::DEFAULT, BTreeMap::new()).unwrap();
    let faults = Arc::new(AtomicU64::new(0));
    let counter = faults.clone();
    handle.set_fault_listener(move |_| {
        counter.fetch_add(1, Ordering::Relaxed);
    });
    handle.reload(bundled::FAULTY).unwrap();
    let trapping = server("t", TransportKind::Stdio, &[("fault", "trap")]);
    handle.crash(&trapping, &first_crash());
    assert_eq!(faults.load(Ordering::Relaxed), 1);
}
