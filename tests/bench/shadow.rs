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

use lean_bench::{interleaved, print_targets, Target};

const CLIENTS: usize = 16;
const PER_CLIENT: usize = 1000;
const ROUNDS: usize = 9;

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
            Target::start(&wardgate, "no shadow", &plain, &[]).await,
            Target::start(&wardgate, "strict as the shadow", &shadowed, &[]).await,
        ];
        println!(
            "tools/call echo on server-everything (stdio) through wardgate --listen, policy default; {CLIENTS} lean keep-alive clients x {PER_CLIENT} calls; median of {ROUNDS} rounds, targets interleaved"
        );
        interleaved(&mut targets, "everything__echo", CLIENTS, PER_CLIENT, ROUNDS).await;
        print_targets(&targets, "p99", |f| f.p99_us);
        let (plain, shadowed) = (&targets[0], &targets[1]);
        println!(
            "with a shadow / without: calls/s {:.3}, p99 {:.3} (target: within 3 %)",
            shadowed.median(|f| f.calls_per_second) / plain.median(|f| f.calls_per_second),
            shadowed.median(|f| f.p99_us) / plain.median(|f| f.p99_us)
        );
    });
}
