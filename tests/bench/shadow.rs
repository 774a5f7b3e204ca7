//! Benchmark: what a bound shadow module costs a call, measured as the lean-client
//! benchmark measures (`tools/call echo` on `@modelcontextprotocol/server-everything` over
//! stdio, through `wardgate --listen`, 16 lean keep-alive clients), in one run: the
//! server's policy the bundled `default` module, without a shadow and with the bundled
//! `strict` as its shadow. A call that succeeds asks its policy nothing, so the shadow
//! should cost nothing here; its cost on the decisions themselves is `cargo bench -p
//! wardgate-app --bench shadow`. Targets are measured in rounds, one after the other in
//! each round; each figure is the median of its rounds.
//!
//! Run: `cargo bench -p wardgate-tests --bench shadow`.

#[path = "../support/gateway_binary.rs"]
mod gateway_binary;
#[path = "../support/lean_bench.rs"]
mod lean_bench;
#[path = "../support/lean_client.rs"]
mod lean_client;
#[path = "../support/measure.rs"]
mod measure;
#[path = "../support/node.rs"]
mod node;

use std::net::SocketAddr;
use std::path::Path;

use lean_bench::{median, run_clients, Group};

const CLIENTS: usize = 16;
const PER_CLIENT: usize = 1000;
const ROUNDS: usize = 9;

struct Target {
    name: &'static str,
    address: SocketAddr,
    _process: Group,
    rounds: Vec<f64>,
    p99s: Vec<f64>,
}

async fn gateway(binary: &Path, name: &'static str, config: &Path) -> Target {
    let (address, process) = lean_bench::gateway(binary, name, config, &[]).await;
    Target {
        name,
        address,
        _process: process,
        rounds: Vec::new(),
        p99s: Vec::new(),
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let everything = node::server_everything();
        let everything = everything.to_str().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, shadow: &str| {
            let path = dir.path().join(name);
            std::fs::write(
                &path,
                format!(
                    "[gateway]\npolicy = \"live\"\n\n[policies.live]\npath = {:?}\n{shadow}\n[servers.everything]\ncommand = \"node\"\nargs = [{everything:?}, \"stdio\"]\n",
                    wardgate_wasm::bundled::DEFAULT
                ),
            )
            .unwrap();
            path
        };
        let plain = write("plain.toml", "");
        let shadowed = write(
            "shadowed.toml",
            &format!("shadow = {:?}\n", wardgate_wasm::bundled::STRICT),
        );
        let wardgate = gateway_binary::gateway_binary();
        let mut targets = vec![
            gateway(&wardgate, "no shadow", &plain).await,
            gateway(&wardgate, "strict as the shadow", &shadowed).await,
        ];
        println!(
            "tools/call echo on server-everything (stdio) through wardgate --listen, policy default; {CLIENTS} lean keep-alive clients x {PER_CLIENT} calls; median of {ROUNDS} rounds, targets interleaved"
        );
        for _ in 0..ROUNDS {
            for target in &mut targets {
                let figures = run_clients(target.address, "/mcp", "everything__echo", CLIENTS, PER_CLIENT)
                    .await
                    .unwrap_or_else(|error| panic!("{}: {error}", target.name));
                target.rounds.push(figures.calls_per_second);
                target.p99s.push(figures.p99_us);
            }
        }
        println!("{:<24} {:>10} {:>10}   rounds (calls/s)", "target", "calls/s", "p99");
        for target in &targets {
            let rounds: Vec<String> = target.rounds.iter().map(|r| format!("{r:.0}")).collect();
            println!(
                "{:<24} {:>10.0} {:>8.0}us   {}",
                target.name,
                median(&target.rounds),
                median(&target.p99s),
                rounds.join(" ")
            );
        }
        let (plain, shadowed) = (&targets[0], &targets[1]);
        println!(
            "with a shadow / without: calls/s {:.3}, p99 {:.3} (target: within 3 %)",
            median(&shadowed.rounds) / median(&plain.rounds),
            median(&shadowed.p99s) / median(&plain.p99s)
        );
    });
}
