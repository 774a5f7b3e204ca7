//! Prints what a decision costs through a module against `Builtin`, and how long a reload takes from file write to serving.
//!
//! `cargo bench -p wardgate-wasm --bench decision`. Figures only, no assertions: the
//! target is a module decision under 5 µs median and a swap within 1 s of the write.

mod support;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use support::{measure, micros};
use wardgate_policy::{
    Builtin, CrashReport, CrashVerdict, ExitInfo, FailedRequest, FailureKind, Operation,
    RecoveryPolicy, ServerContext, TransportKind,
};
use wardgate_wasm::{bundled, ManagedPolicy, Runtime, RuntimeConfig, DEFAULT_DEBOUNCE};

const SAMPLES: usize = 100_000;

fn failure() -> FailedRequest {
    FailedRequest {
        operation: Operation::Call,
        kind: FailureKind::ConnectRefused,
        message: "connection refused".into(),
        attempt: 2,
        may_have_reached_server: false,
        idempotent: true,
        read_only: false,
    }
}

fn crash() -> CrashReport {
    CrashReport {
        exit: ExitInfo {
            code: None,
            signal: Some(9),
        },
        uptime_ms: 5_000,
        now_ms: 1_000_000,
        recent_crashes_ms: vec![800_000, 900_000],
    }
}

fn report(label: &str, (median, p99): (Duration, Duration)) {
    println!(
        "{label:<48} median {:>9.2} µs   p99 {:>9.2} µs",
        micros(median),
        micros(p99)
    );
}

fn runtime(cache_dir: Option<&Path>, pool_size: usize) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: cache_dir.map(Path::to_path_buf),
        pool_size,
        ..RuntimeConfig::default()
    })
    .expect("runtime starts")
}

fn main() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let warm_cache = scratch.path().join("cache");
    let runtime = runtime(Some(&warm_cache), 4);
    let server = ServerContext::new("bench", TransportKind::StreamableHttp);
    let mut tuned = server.clone();
    tuned.params = BTreeMap::from([
        ("max_attempts".to_string(), "5".to_string()),
        ("max_crashes".to_string(), "4".to_string()),
    ]);
    let builtin = Builtin::default();
    let module = runtime
        .load(bundled::DEFAULT, BTreeMap::new())
        .expect("default loads");
    let handle = ManagedPolicy::new(
        "bench",
        Path::new(bundled::DEFAULT),
        BTreeMap::new(),
        runtime.clone(),
    );
    handle.reload().expect("loads");
    let (failure, crash) = (failure(), crash());

    println!("== one decision, {SAMPLES} samples each (same run) ==");
    report(
        "Builtin classify",
        measure(SAMPLES, || {
            black_box(builtin.classify(&server, &failure));
        }),
    );
    report(
        "default module classify",
        measure(SAMPLES, || {
            black_box(module.classify(&server, &failure));
        }),
    );
    report(
        "default module classify, 2 server params",
        measure(SAMPLES, || {
            black_box(module.classify(&tuned, &failure));
        }),
    );
    report(
        "default module classify via ManagedPolicy",
        measure(SAMPLES, || {
            black_box(handle.classify(&server, &failure));
        }),
    );
    let mut seed = 0u64;
    report(
        "Builtin reconnect-delay",
        measure(SAMPLES, || {
            seed += 1;
            {
                black_box(builtin.reconnect_delay(&server, 5, seed));
            }
        }),
    );
    report(
        "default module reconnect-delay",
        measure(SAMPLES, || {
            seed += 1;
            {
                black_box(module.reconnect_delay(&server, 5, seed));
            }
        }),
    );
    report(
        "Builtin crash (2 earlier crashes)",
        measure(SAMPLES, || {
            black_box(builtin.crash(&server, &crash));
        }),
    );
    report(
        "default module crash (2 earlier crashes)",
        measure(SAMPLES, || {
            black_box(module.crash(&server, &crash));
        }),
    );
    let unpooled = runtime_without_pool(&warm_cache);
    report(
        "default module classify, fresh instance each",
        measure_few(|| {
            black_box(unpooled.classify(&server, &failure));
        }),
    );

    println!("\n== a module that never returns: time until Builtin answers ==");
    let faulty = runtime
        .load(bundled::FAULTY, BTreeMap::new())
        .expect("faulty loads");
    let mut looping = server.clone();
    looping.params.insert("fault".into(), "loop".into());
    let mut waits: Vec<Duration> = (0..20)
        .map(|_| {
            let started = Instant::now();
            black_box(faulty.classify(&looping, &failure));
            started.elapsed()
        })
        .collect();
    waits.sort();
    println!(
        "{:<48} median {:>9.2} ms   max {:>9.2} ms   (deadline {:?}, {} timeouts)",
        "faulty module, fault=loop",
        waits[waits.len() / 2].as_secs_f64() * 1e3,
        waits[waits.len() - 1].as_secs_f64() * 1e3,
        runtime.config().deadline,
        faulty.faults().timeouts
    );

    println!("\n== reload: file write -> new module serving ==");
    reload_latency(
        &runtime,
        scratch.path(),
        "warm cache (module compiled before)",
    );
    let cold = runtime_no_cache();
    reload_latency(&cold, scratch.path(), "no cache (compile on every load)");
    watched_reload_latency(&runtime, "through the watcher, warm cache");

    println!("\n== module sizes ==");
    for (name, path) in [
        ("default", bundled::DEFAULT),
        ("patient", bundled::PATIENT),
        ("strict", bundled::STRICT),
    ] {
        let bytes = std::fs::metadata(path)
            .map(|metadata| metadata.len())
            .unwrap_or(0);
        println!("{name:<10} {bytes:>8} bytes  {path}");
    }
    assert_eq!(
        module.faults().total,
        0,
        "the benchmark must measure module answers, not fallbacks"
    );
}

fn runtime_without_pool(cache: &Path) -> wardgate_wasm::WasmPolicy {
    runtime(Some(cache), 0)
        .load(bundled::DEFAULT, BTreeMap::new())
        .expect("default loads")
}

fn runtime_no_cache() -> Runtime {
    runtime(None, 4)
}

/// Fewer samples for the slow path.
fn measure_few(mut decide: impl FnMut()) -> (Duration, Duration) {
    let mut samples: Vec<Duration> = (0..2_000)
        .map(|_| {
            let started = Instant::now();
            decide();
            started.elapsed()
        })
        .collect();
    samples.sort();
    (
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
    )
}

/// Alternates default and strict in one file; each round times write + reload + the first
/// decision showing the new module's behaviour.
fn reload_latency(runtime: &Runtime, dir: &Path, label: &str) {
    let path = dir.join("policy.wasm");
    std::fs::copy(bundled::DEFAULT, &path).expect("copy");
    let handle = ManagedPolicy::new("bench", &path, BTreeMap::new(), runtime.clone());
    handle.reload().expect("loads");
    let server = ServerContext::new("bench", TransportKind::Stdio);
    let first_crash = CrashReport {
        recent_crashes_ms: vec![],
        ..crash()
    };
    let (default_bytes, strict_bytes) = (
        std::fs::read(bundled::DEFAULT).expect("read"),
        std::fs::read(bundled::STRICT).expect("read"),
    );
    let mut samples = Vec::new();
    for round in 0..10 {
        let (bytes, expected) = if round % 2 == 0 {
            (&strict_bytes, CrashVerdict::GiveUp)
        } else {
            (&default_bytes, CrashVerdict::RestartAfter { delay_ms: 0 })
        };
        let started = Instant::now();
        std::fs::write(&path, bytes).expect("write");
        handle.reload().expect("reload");
        assert_eq!(handle.crash(&server, &first_crash), expected);
        samples.push(started.elapsed());
    }
    samples.sort();
    println!(
        "{label:<40} median {:>8.2} ms   max {:>8.2} ms   ({} reloads)",
        samples[samples.len() / 2].as_secs_f64() * 1e3,
        samples[samples.len() - 1].as_secs_f64() * 1e3,
        samples.len()
    );
}

/// Deploys default and strict alternately over one watched file, the way deployers do
/// (write `live.wasm.new`, rename it over `live.wasm`), and times from the rename until
/// the `ManagedPolicy` describes the new module: debounce + settle check + reload.
fn watched_reload_latency(runtime: &Runtime, label: &str) {
    const ROUNDS: usize = 10;
    const GIVE_UP: Duration = Duration::from_secs(10);
    let dir = tempfile::tempdir().expect("temp dir");
    let (live, staged) = (
        dir.path().join("live.wasm"),
        dir.path().join("live.wasm.new"),
    );
    std::fs::copy(bundled::DEFAULT, &live).expect("copy");
    let policy = ManagedPolicy::new("bench", &live, BTreeMap::new(), runtime.clone());
    assert_eq!(policy.reload().expect("loads").name, "default");
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let watcher = {
        let _entered = tokio.enter();
        wardgate_wasm::watch(vec![policy.clone()], DEFAULT_DEBOUNCE).expect("watcher starts")
    };
    let mut samples = Vec::new();
    let mut missed = 0;
    for round in 0..ROUNDS {
        let (source, expected) = if round % 2 == 0 {
            (bundled::STRICT, "strict")
        } else {
            (bundled::DEFAULT, "default")
        };
        std::fs::copy(source, &staged).expect("stage");
        std::fs::rename(&staged, &live).expect("rename over the module");
        let written = Instant::now();
        loop {
            if policy.describe().name == expected {
                samples.push(written.elapsed());
                break;
            }
            if written.elapsed() > GIVE_UP {
                missed += 1;
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if missed > 0 {
            break;
        }
    }
    drop(watcher);
    samples.sort();
    match (samples.first(), samples.last()) {
        (Some(_), Some(max)) if missed == 0 => println!(
            "{label:<40} median {:>8.2} ms   max {:>8.2} ms   ({} swaps, debounce {:?}, 1 ms polling)",
            samples[samples.len() / 2].as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3,
            samples.len(),
            DEFAULT_DEBOUNCE
        ),
        _ => println!(
            "{label:<40} new module not serving within {GIVE_UP:?} after swap {} (debounce {DEFAULT_DEBOUNCE:?})",
            samples.len() + 1
        ),
    }
}
