//! What a module writes to stdout/stderr reaches the log tagged with its name; faults are warned once per module version.

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing::level_filters::LevelFilter;
use wardgate_policy::{FailedRequest, FailureKind, Operation, RecoveryPolicy, TransportKind};
use wardgate_wasm::bundled;

use crate::support::{generous_runtime, load, server};

/// Everything logged while `run` runs on this thread, as text.
fn captured(run: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(LevelFilter::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, run);
    let bytes = buffer.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

fn failure() -> FailedRequest {
    FailedRequest {
        operation: Operation::Call,
        kind: FailureKind::TimedOut,
        message: String::new(),
        attempt: 1,
        may_have_reached_server: false,
        idempotent: false,
        read_only: false,
    }
}

#[test]
fn guest_stdout_and_stderr_are_logged_with_the_module_name() {
    let policy = load(generous_runtime(), bundled::FAULTY);
    let log = captured(|| {
        policy.classify(
            &server("printer", TransportKind::Stdio, &[("fault", "print")]),
            &failure(),
        );
    });
    let stdout = log
        .lines()
        .find(|line| line.contains("hello on stdout"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        stdout.contains("INFO") && stdout.contains("wardgate_policy_faulty.wasm"),
        "{stdout}"
    );
    let stderr = log
        .lines()
        .find(|line| line.contains("hello on stderr"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        stderr.contains("WARN") && stderr.contains("stream=\"stderr\""),
        "{stderr}"
    );
}

#[test]
fn a_panicking_module_logs_its_panic_message_and_the_fault_is_warned_once() {
    let policy = load(generous_runtime(), bundled::FAULTY);
    let panicking = server("panicky", TransportKind::Stdio, &[("fault", "panic")]);
    let log = captured(|| {
        policy.classify(&panicking, &failure());
        policy.classify(&panicking, &failure());
    });
    assert!(log.contains("panic requested for server panicky"), "{log}");
    let warnings: Vec<_> = log
        .lines()
        .filter(|line| line.contains("WARN") && line.contains("answered by the built-in policy"))
        .collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains("faulty 0.1.0 sha256:"),
        "{}",
        warnings[0]
    );
    assert_eq!(policy.faults().traps, 2);
}
