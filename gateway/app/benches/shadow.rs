//! Benchmark: what a shadow module costs the decision path (issue 36).
//!
//! The decision path as the engine takes it: a server's bound policy from the registry
//! (`Policies::binding().policy_for`), which counts the decision, records it in the
//! decision log and, with a shadow bound, hands the question to the shadow queue. The live
//! module is the bundled `default`; the shadow the bundled `strict`.
//!
//! Many short rounds, each measuring both arms one after the other (bound, then unbound,
//! or the other way round, alternating), so the noise of a 2-core machine falls on both
//! alike; each decision is timed alone. It prints the p50 and p99 over all rounds, and the
//! median over rounds of each round's p99 ratio (with / without), the figure least moved by
//! a noisy moment.
//!
//! Two paces: back to back (a stress case: the shadow thread, at `SCHED_IDLE`, gets only an
//! idle core's time, and its queue overflows), and one decision a millisecond (a server in
//! trouble decides a few times a second; this is still far more).
//!
//! Run: `cargo bench -p wardgate-app --bench shadow`.

use std::time::{Duration, Instant};

use wardgate_app::policies::Policies;
use wardgate_policy::{FailedRequest, FailureKind, Operation};

const ROUNDS: usize = 40;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("wardgate-shadow-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = format!(
        "[gateway]\npolicy = \"live\"\n\n[policies.live]\npath = {:?}\n\n[servers.s]\ncommand = \"true\"\n",
        wardgate_wasm::bundled::DEFAULT
    );
    let env = |_: &str| None;
    let config =
        wardgate_config::Config::parse(&dir.join("wardgate.toml"), &text, &env).expect("config");
    let policies = runtime.block_on(Policies::load(&config)).expect("policies");
    let policy = policies
        .binding()
        .policy_for(&config.servers["s"], &config.gateway);
    runtime
        .block_on(policies.shadow(
            "live",
            Some(std::path::PathBuf::from(wardgate_wasm::bundled::STRICT)),
        ))
        .expect("shadow");
    let shadow = policies.shadows().current("live").expect("bound");
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
        "decision path (classify, through the policy registry and the decision log), live module default, shadow strict; {ROUNDS} rounds, both arms in each"
    );
    for (pace, per_round, gap) in [
        ("back to back", 500, None),
        ("one a millisecond", 100, Some(Duration::from_millis(1))),
    ] {
        let mut all = [Vec::new(), Vec::new()];
        let mut ratios = Vec::new();
        for round in 0..ROUNDS {
            let mut p99s = [Duration::ZERO; 2];
            let order = if round % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for shadowed in order {
                if shadowed {
                    policies.shadows().rebind(shadow.clone());
                } else {
                    policies.shadows().clear("live");
                }
                let mut times = Vec::with_capacity(per_round);
                for _ in 0..per_round {
                    let at = Instant::now();
                    std::hint::black_box(policy.classify(&server, &failure));
                    times.push(at.elapsed());
                    if let Some(gap) = gap {
                        std::thread::sleep(gap);
                    }
                }
                times.sort();
                p99s[usize::from(shadowed)] = percentile(&times, 0.99);
                all[usize::from(shadowed)].extend(times);
            }
            ratios.push(p99s[1].as_secs_f64() / p99s[0].as_secs_f64());
        }
        let [mut without, mut with] = all;
        without.sort();
        with.sort();
        ratios.sort_by(f64::total_cmp);
        let report = shadow.report();
        println!("{pace}: {} decisions each", without.len());
        println!(
            "  no shadow:    p50 {:>7.1} us  p99 {:>7.1} us",
            micros(percentile(&without, 0.5)),
            micros(percentile(&without, 0.99))
        );
        println!(
            "  with shadow:  p50 {:>7.1} us  p99 {:>7.1} us",
            micros(percentile(&with, 0.5)),
            micros(percentile(&with, 0.99))
        );
        println!(
            "  with / without: p50 {:.3}, p99 {:.3}; median of the rounds' p99 ratios {:.3} (target: p99 within 3 %)",
            percentile(&with, 0.5).as_secs_f64() / percentile(&without, 0.5).as_secs_f64(),
            percentile(&with, 0.99).as_secs_f64() / percentile(&without, 0.99).as_secs_f64(),
            ratios[ratios.len() / 2]
        );
        println!(
            "  the shadow so far: {} asked and compared, {} dropped (queue full)",
            report.counts.agreed + report.counts.disagreed + report.counts.faults,
            report.dropped
        );
    }
}
