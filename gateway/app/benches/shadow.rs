//! Benchmark: what a shadow module costs the decision path (issue 36).
//!
//! The decision path as the engine takes it: a server's bound policy from the registry
//! (`Policies::binding().policy_for`), which counts the decision, records it in the
//! decision log and, with a shadow bound, hands the question to the shadow thread. The
//! live module is the bundled `default`; the shadow the bundled `strict`. Rounds alternate
//! shadow bound and unbound on the same registry, so the noise of a 2-core machine falls
//! on both; each decision is timed alone, and the figures are over all rounds.
//!
//! Two paces: back to back (the shadow thread competes for a core with the deciding one,
//! and its queue overflows: a worst case), and one decision a millisecond (a server in
//! trouble decides a few times a second; this is still far more).
//!
//! Run: `cargo bench -p wardgate-app --bench shadow`.

use std::path::Path;
use std::time::{Duration, Instant};

use wardgate_app::policies::Policies;
use wardgate_policy::{FailedRequest, FailureKind, Operation};

const ROUNDS: usize = 10;
const PER_ROUND: usize = 2_000;
const PACED: Duration = Duration::from_millis(1);
const PACED_PER_ROUND: usize = 300;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile_dir();
    let config_path = dir.join("wardgate.toml");
    let text = format!(
        "[gateway]\npolicy = \"live\"\n\n[policies.live]\npath = {:?}\n\n[servers.s]\ncommand = \"true\"\n",
        wardgate_wasm::bundled::DEFAULT
    );
    let env = |_: &str| None;
    let config = wardgate_config::Config::parse(&config_path, &text, &env).expect("config");
    let policies = runtime.block_on(Policies::load(&config)).expect("policies");
    let policy = policies
        .binding()
        .policy_for(&config.servers["s"], &config.gateway);
    let server = wardgate_policy::ServerContext::new("s", wardgate_policy::TransportKind::Stdio);
    let failure = FailedRequest {
        operation: Operation::Call,
        kind: FailureKind::ConnectionReset,
        message: "connection reset by peer".to_owned(),
        attempt: 1,
        may_have_reached_server: true,
        idempotent: true,
        read_only: false,
    };
    println!(
        "decision path (classify, through the policy registry and the decision log), live module default, shadow strict; {ROUNDS} rounds, alternating"
    );
    for (pace, per_round, gap) in [
        ("back to back", PER_ROUND, None),
        ("one a millisecond", PACED_PER_ROUND, Some(PACED)),
    ] {
        let mut without = Vec::new();
        let mut with = Vec::new();
        for _ in 0..ROUNDS {
            for shadowed in [false, true] {
                let bound = if shadowed {
                    Some(Path::new(wardgate_wasm::bundled::STRICT).to_path_buf())
                } else {
                    None
                };
                runtime
                    .block_on(policies.shadow("live", bound))
                    .expect("shadow");
                let times = if shadowed { &mut with } else { &mut without };
                for _ in 0..per_round {
                    let at = Instant::now();
                    std::hint::black_box(policy.classify(&server, &failure));
                    times.push(at.elapsed());
                    if let Some(gap) = gap {
                        std::thread::sleep(gap);
                    }
                }
            }
        }
        let report = policies.shadow_report("live").ok();
        let _ = runtime.block_on(policies.shadow("live", None));
        without.sort();
        with.sort();
        let (p50_without, p99_without) = (percentile(&without, 0.5), percentile(&without, 0.99));
        let (p50_with, p99_with) = (percentile(&with, 0.5), percentile(&with, 0.99));
        println!("{pace}: {} decisions each", without.len());
        println!(
            "  no shadow:    p50 {:>7.1} us  p99 {:>7.1} us",
            p50_without.as_secs_f64() * 1e6,
            p99_without.as_secs_f64() * 1e6
        );
        println!(
            "  with shadow:  p50 {:>7.1} us  p99 {:>7.1} us",
            p50_with.as_secs_f64() * 1e6,
            p99_with.as_secs_f64() * 1e6
        );
        println!(
            "  with / without: p50 {:.3}, p99 {:.3} (target: p99 within 3 %)",
            p50_with.as_secs_f64() / p50_without.as_secs_f64(),
            p99_with.as_secs_f64() / p99_without.as_secs_f64()
        );
        if let Some(report) = report {
            println!(
                "  the last round's shadow: {} asked and compared, {} dropped (queue full)",
                report.counts.agreed + report.counts.disagreed + report.counts.faults,
                report.dropped
            );
        }
    }
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("wardgate-shadow-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
