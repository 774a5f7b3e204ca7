//! Benchmark: a lean HTTP client calling `tools/call` over Streamable HTTP, through Wardgate,
//! against the upstream served directly, and through peer gateways, all in one run.
//!
//! The client is what scripts and many HTTP libraries are: one keep-alive connection and one
//! MCP session per client, headers and body written in two writes, TCP_NODELAY on its own
//! socket (exactly Python's `http.client`): a server that writes a response in pieces
//! without TCP_NODELAY meets the client's delayed ACKs, ~40 ms per call. The upstream is the reference
//! `@modelcontextprotocol/server-everything` (npm) and its `echo` tool:
//! - direct: its own Streamable HTTP endpoint (`streamableHttp`);
//! - wardgate: `wardgate --listen` fronting it over stdio (and, as a second row, over HTTP);
//! - mcp-proxy (PyPI) and supergateway (npm, `--stateful`): fronting it over stdio.
//!
//! Prints calls/s, p50 and p99 for 1 and 16 concurrent clients (each on its own connection
//! and session), and the ratios the targets name. Peers that cannot be installed are
//! reported as not measured.
//!
//! Run: `cargo bench -p wardgate-tests --bench lean_http`.

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

use lean_bench::{ready, run_clients, spawn, Group, WARMUP};
use measure::free_port;

const SEQUENTIAL: usize = 1000;
const CLIENTS: usize = 16;
const PER_CLIENT: usize = 200;

/// A target: what to connect to, what to call, and the processes behind it.
struct Target {
    name: &'static str,
    address: SocketAddr,
    tool: &'static str,
    _processes: Vec<Group>,
}

async fn targets() -> (Vec<Target>, Vec<String>) {
    let everything = node::server_everything();
    let everything = everything.to_str().unwrap();
    let node = Path::new("node");
    let wardgate = gateway_binary::gateway_binary();
    let mut targets = Vec::new();
    let mut skipped = Vec::new();
    let localhost = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));

    let direct_port = free_port();
    let direct = spawn(
        node,
        &[everything, "streamableHttp"],
        &[("PORT", direct_port.to_string())],
    )
    .expect("start server-everything");
    ready(localhost(direct_port), "/mcp", "server-everything")
        .await
        .unwrap();
    targets.push(Target {
        name: "direct (server-everything streamableHttp)",
        address: localhost(direct_port),
        tool: "echo",
        _processes: vec![direct],
    });

    let config_dir = tempfile::tempdir().unwrap();
    // `WARDGATE_BENCH_BASELINE=/path/to/wardgate`: an earlier build too, in the same run,
    // stdio upstream (a before/after of one change under the same noise).
    if let Ok(baseline) = std::env::var("WARDGATE_BENCH_BASELINE") {
        let config = config_dir.path().join("baseline.toml");
        std::fs::write(
            &config,
            format!(
                "[servers.everything]\ncommand = \"node\"\nargs = [{everything:?}, \"stdio\"]\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let child = spawn(
            Path::new(&baseline),
            &[
                "--config",
                config.to_str().unwrap(),
                "--listen",
                &listen,
                "--log-level",
                "warn",
            ],
            &[],
        )
        .expect("start the baseline wardgate");
        ready(localhost(port), "/mcp", "baseline").await.unwrap();
        targets.push(Target {
            name: "baseline wardgate (WARDGATE_BENCH_BASELINE), stdio upstream",
            address: localhost(port),
            tool: "everything__echo",
            _processes: vec![child],
        });
    }
    for (name, server) in [
        (
            "wardgate, stdio upstream",
            format!(
                "[servers.everything]\ncommand = \"node\"\nargs = [{everything:?}, \"stdio\"]\n"
            ),
        ),
        (
            "wardgate, HTTP upstream (the direct one)",
            format!("[servers.everything]\nurl = \"http://127.0.0.1:{direct_port}/mcp\"\n"),
        ),
    ] {
        let config = config_dir.path().join(format!("{}.toml", targets.len()));
        std::fs::write(&config, server).unwrap();
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let child = spawn(
            &wardgate,
            &[
                "--config",
                config.to_str().unwrap(),
                "--listen",
                &listen,
                "--log-level",
                "warn",
            ],
            &[],
        )
        .expect("start wardgate");
        ready(localhost(port), "/mcp", "wardgate").await.unwrap();
        targets.push(Target {
            name,
            address: localhost(port),
            tool: "everything__echo",
            _processes: vec![child],
        });
    }

    match lean_bench::mcp_proxy() {
        Ok(proxy) => {
            let port = free_port();
            let port_text = port.to_string();
            let started = spawn(
                &proxy,
                &[
                    "--host",
                    "127.0.0.1",
                    "--port",
                    &port_text,
                    "--",
                    "node",
                    everything,
                    "stdio",
                ],
                &[],
            );
            let name = "mcp-proxy 0.13.0 (PyPI), stdio upstream";
            match peer(name, port, started).await {
                Ok(target) => targets.push(target),
                Err(error) => skipped.push(error),
            }
        }
        Err(error) => skipped.push(format!("mcp-proxy not measured: {error}")),
    }

    let port = free_port();
    let port_text = port.to_string();
    let stdio = format!("node {everything} stdio");
    let supergateway = node::supergateway();
    let started = spawn(
        node,
        &[
            supergateway.to_str().unwrap(),
            "--stdio",
            &stdio,
            "--outputTransport",
            "streamableHttp",
            "--stateful",
            "--port",
            &port_text,
            "--logLevel",
            "none",
        ],
        &[],
    );
    let name = "supergateway 4.0.0 (npm, --stateful), stdio upstream";
    match peer(name, port, started).await {
        Ok(target) => targets.push(target),
        Err(error) => skipped.push(error),
    }
    (targets, skipped)
}

/// A peer gateway started on `port`, once it serves; it calls the upstream's own `echo`.
async fn peer(
    name: &'static str,
    port: u16,
    started: Result<Group, String>,
) -> Result<Target, String> {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let process = started?;
    ready(address, "/mcp", name).await?;
    Ok(Target {
        name,
        address,
        tool: "echo",
        _processes: vec![process],
    })
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (targets, skipped) = targets().await;
        println!(
            "lean keep-alive HTTP client, headers and body in two writes; tools/call echo on server-everything"
        );
        println!(
            "1 client: {SEQUENTIAL} sequential calls; {CLIENTS} clients: {PER_CLIENT} calls each, own connection and session; {WARMUP} warm-up calls per client first"
        );
        println!(
            "{:<56} {:>10} {:>10} {:>10} | {:>10} {:>10} {:>10}",
            "target", "1x calls/s", "1x p50", "1x p99", "16x calls/s", "16x p50", "16x p99"
        );
        let mut results = Vec::new();
        for target in &targets {
            let one = run_clients(target.address, "/mcp", target.tool, 1, SEQUENTIAL).await;
            let many = run_clients(target.address, "/mcp", target.tool, CLIENTS, PER_CLIENT).await;
            match (one, many) {
                (Ok(one), Ok(many)) => {
                    println!(
                        "{:<56} {:>10.0} {:>8.0}us {:>8.0}us | {:>10.0} {:>8.0}us {:>8.0}us",
                        target.name,
                        one.calls_per_second,
                        one.p50_us,
                        one.p99_us,
                        many.calls_per_second,
                        many.p50_us,
                        many.p99_us
                    );
                    results.push((target.name, one, many));
                }
                (one, many) => println!(
                    "{:<56} failed: {}",
                    target.name,
                    one.err().or(many.err()).unwrap_or_default()
                ),
            }
        }
        for reason in &skipped {
            println!("not measured: {reason}");
        }
        let find = |prefix: &str| results.iter().find(|(name, ..)| name.starts_with(prefix));
        if let (Some(baseline), Some(gateway)) = (find("baseline"), find("wardgate, stdio")) {
            println!(
                "this build / baseline: 1 client p50 {:.3}, 16 clients p50 {:.3}, 16 clients calls/s {:.3}",
                gateway.1.p50_us / baseline.1.p50_us,
                gateway.2.p50_us / baseline.2.p50_us,
                gateway.2.calls_per_second / baseline.2.calls_per_second
            );
        }
        if let (Some(direct), Some(gateway)) = (find("direct"), find("wardgate, stdio")) {
            println!(
                "1 client: wardgate p50 / direct p50 = {:.2} (target <= 1.00)",
                gateway.1.p50_us / direct.1.p50_us
            );
            let best_peer = results
                .iter()
                .filter(|(name, ..)| name.starts_with("mcp-proxy") || name.starts_with("supergateway"))
                .max_by(|a, b| a.2.calls_per_second.total_cmp(&b.2.calls_per_second));
            match best_peer {
                Some(peer) => println!(
                    "16 clients: wardgate calls/s / best peer's ({}) = {:.2} (target >= 3.00)",
                    peer.0,
                    gateway.2.calls_per_second / peer.2.calls_per_second
                ),
                None => println!("16 clients: no peer measured, no ratio"),
            }
        }
    });
}
