//! Prints, for a policy written in each language, its module size, compile time and the cost of one decision, beside the Rust module and `Builtin`, in one run.
//!
//! `cargo bench -p wardgate-wasm --bench languages`. Builds the Python and JavaScript
//! examples from source first (examples/policies/*/build.sh, which install componentize-py
//! and componentize-js on first use). Figures only, no assertions.

mod support;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::{measure, micros};
use wardgate_policy::{
    Builtin, CrashReport, ExitInfo, FailedRequest, FailureKind, Operation, RecoveryPolicy,
    ServerContext, TransportKind,
};
use wardgate_wasm::{bundled, Runtime, RuntimeConfig};

const SAMPLES: usize = 20_000;

/// A call that failed with HTTP 503: every policy here has an opinion on it.
fn failure() -> FailedRequest {
    FailedRequest {
        operation: Operation::Call,
        kind: FailureKind::HttpStatus(503),
        message: "HTTP 503".into(),
        attempt: 1,
        may_have_reached_server: true,
        idempotent: true,
        read_only: false,
    }
}

fn crash() -> CrashReport {
    CrashReport {
        exit: ExitInfo {
            code: Some(1),
            signal: None,
        },
        uptime_ms: 5_000,
        now_ms: 1_000_000,
        recent_crashes_ms: vec![800_000, 900_000],
    }
}

/// Builds examples/policies/`lang` into the target directory with its own build script.
fn build_example(lang: &str, file: &str) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("example-policies")
        .join(file);
    std::fs::create_dir_all(out.parent().expect("has a parent")).expect("create dir");
    let status = Command::new(repo.join("examples/policies").join(lang).join("build.sh"))
        .arg(&out)
        .status()
        .expect("run build.sh");
    assert!(status.success(), "examples/policies/{lang}/build.sh failed");
    out
}

struct Row {
    label: &'static str,
    size: Option<u64>,
    cold_load: Option<Duration>,
    warm_load: Option<Duration>,
    classify: (Duration, Duration),
    crash: (Duration, Duration),
}

fn module_row(label: &'static str, path: &Path, scratch: &Path) -> Row {
    let server = ServerContext::new("bench", TransportKind::StreamableHttp);
    let (failure, crash) = (failure(), crash());
    let cache = scratch.join(label);
    let runtime = |cache_dir: Option<PathBuf>| {
        Runtime::new(RuntimeConfig {
            cache_dir,
            ..RuntimeConfig::default()
        })
        .expect("runtime starts")
    };
    // Cold: compile, link, describe and self-check, as a gateway does for a new module.
    let cold = runtime(Some(cache.clone()));
    let started = Instant::now();
    drop(cold.load(path, BTreeMap::new()).expect("loads"));
    let cold_load = started.elapsed();
    // Warm: the same module again, from the compile cache (a gateway restart).
    let warm = runtime(Some(cache));
    let started = Instant::now();
    let module = warm.load(path, BTreeMap::new()).expect("loads");
    let warm_load = started.elapsed();
    let row = Row {
        label,
        size: std::fs::metadata(path).ok().map(|metadata| metadata.len()),
        cold_load: Some(cold_load),
        warm_load: Some(warm_load),
        classify: measure(SAMPLES, || {
            black_box(module.classify(&server, &failure));
        }),
        crash: measure(SAMPLES, || {
            black_box(module.crash(&server, &crash));
        }),
    };
    let faults = module.faults();
    assert_eq!(
        faults.total, 0,
        "{label}: the benchmark must measure module answers, not fallbacks: {faults:?}"
    );
    row
}

fn main() {
    let python = build_example("python", "breaker.wasm");
    let javascript = build_example("javascript", "codes.wasm");
    let scratch = tempfile::tempdir().expect("temp dir");
    let server = ServerContext::new("bench", TransportKind::StreamableHttp);
    let (failure, crash) = (failure(), crash());
    let builtin = Builtin::default();
    let mut rows = vec![Row {
        label: "Builtin (native Rust)",
        size: None,
        cold_load: None,
        warm_load: None,
        classify: measure(SAMPLES, || {
            black_box(builtin.classify(&server, &failure));
        }),
        crash: measure(SAMPLES, || {
            black_box(builtin.crash(&server, &crash));
        }),
    }];
    rows.push(module_row(
        "Rust (default)",
        Path::new(bundled::DEFAULT),
        scratch.path(),
    ));
    rows.push(module_row("Python (breaker)", &python, scratch.path()));
    rows.push(module_row(
        "JavaScript (codes)",
        &javascript,
        scratch.path(),
    ));

    println!("== one policy per language, {SAMPLES} decisions each, same run ==");
    println!(
        "{:<22} {:>10} {:>10} {:>9} {:>20} {:>20}",
        "module", "size", "compile", "cached", "classify med / p99", "crash med / p99"
    );
    let rust_classify = rows[1].classify.0;
    for row in &rows {
        let size = row
            .size
            .map_or("-".into(), |bytes| format!("{:.1} MB", bytes as f64 / 1e6));
        let load = |load: Option<Duration>| {
            load.map_or("-".into(), |load| format!("{:.2} s", load.as_secs_f64()))
        };
        println!(
            "{:<22} {:>10} {:>10} {:>9} {:>9.2} / {:>6.2} µs {:>9.2} / {:>6.2} µs   ({:.1}x the Rust module)",
            row.label,
            size,
            load(row.cold_load),
            load(row.warm_load),
            micros(row.classify.0),
            micros(row.classify.1),
            micros(row.crash.0),
            micros(row.crash.1),
            row.classify.0.as_secs_f64() / rust_classify.as_secs_f64(),
        );
    }
}
