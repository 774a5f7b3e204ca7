//! Benchmark: `tools/call` round trips through Wardgate against the same fake server called
//! directly, in the same run. Prints median and p99 latency and throughput at 1 and 16
//! concurrent callers, with the gateway/direct ratio.
//!
//! Run: `cargo bench -p wardgate-tests --bench roundtrip` (builds the release binaries).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use tokio::process::Command;

#[path = "../support/gateway_binary.rs"]
mod gateway_binary;

const WARMUP: usize = 300;
const SEQUENTIAL: usize = 3000;
const CONCURRENT_TOTAL: usize = 8000;

fn release_binary(name: &str) -> PathBuf {
    match name {
        "wardgate-fake" => PathBuf::from(env!("CARGO_BIN_EXE_wardgate-fake")),
        _ => gateway_binary::gateway_binary(),
    }
}

async fn connect(command: &Path, args: &[String]) -> RunningService<RoleClient, ()> {
    let mut child = Command::new(command)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take().unwrap();
    // The child lives as long as the runtime: leak it deliberately (kill_on_drop never runs,
    // but closing stdin at exit ends both servers).
    std::mem::forget(child);
    ().serve((stdout, stdin)).await.expect("initialize")
}

fn echo(name: &str) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = serde_json::json!({"text": "ping"}).as_object().cloned();
    params
}

struct Figures {
    median_us: f64,
    p99_us: f64,
    throughput_1: f64,
    throughput_16: f64,
}

async fn measure(client: &RunningService<RoleClient, ()>, tool: &str) -> Figures {
    let peer = client.peer().clone();
    for _ in 0..WARMUP {
        peer.call_tool(echo(tool)).await.expect("warmup call");
    }
    let mut latencies = Vec::with_capacity(SEQUENTIAL);
    let started = Instant::now();
    for _ in 0..SEQUENTIAL {
        let t = Instant::now();
        peer.call_tool(echo(tool)).await.expect("call");
        latencies.push(t.elapsed());
    }
    let throughput_1 = SEQUENTIAL as f64 / started.elapsed().as_secs_f64();
    latencies.sort();
    let at = |q: f64| {
        latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)].as_secs_f64()
            * 1e6
    };

    let started = Instant::now();
    let per_caller = CONCURRENT_TOTAL / 16;
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let peer = peer.clone();
            let tool = tool.to_owned();
            tokio::spawn(async move {
                for _ in 0..per_caller {
                    peer.call_tool(echo(&tool)).await.expect("call");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let throughput_16 = (per_caller * 16) as f64 / started.elapsed().as_secs_f64();
    Figures {
        median_us: at(0.5),
        p99_us: at(0.99),
        throughput_1,
        throughput_16,
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let fake = release_binary("wardgate-fake");
        let wardgate = release_binary("wardgate");
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("bench.toml");
        std::fs::write(&config, format!("[servers.s]\ncommand = {:?}\nargs = [\"--name\", \"s\"]\n", fake.display())).unwrap();

        let direct = connect(&fake, &["--name".into(), "s".into()]).await;
        let through = connect(&wardgate, &["--config".into(), config.display().to_string(), "--log-level".into(), "warn".into()]).await;
        // Wait for the gateway's upstream to be online.
        for _ in 0..200 {
            let tools = through.peer().list_all_tools().await.unwrap();
            if tools.iter().any(|t| t.name == "s__echo") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // Interleave rounds so machine noise hits both sides alike.
        let mut rows = Vec::new();
        for round in 1..=2 {
            let d = measure(&direct, "echo").await;
            let g = measure(&through, "s__echo").await;
            rows.push((round, d, g));
        }
        println!("tools/call round trip, stdio client -> stdio server (echo), {} sequential + {} concurrent calls per side per round", SEQUENTIAL, CONCURRENT_TOTAL);
        println!("{:<7} {:>12} {:>12} {:>8} | {:>12} {:>12} {:>8} | {:>11} {:>11} {:>7} | {:>11} {:>11} {:>7}",
            "round", "direct p50", "gateway p50", "ratio", "direct p99", "gateway p99", "ratio",
            "direct 1x", "gateway 1x", "ratio", "direct 16x", "gateway 16x", "ratio");
        for (round, d, g) in &rows {
            println!(
                "{:<7} {:>10.1}us {:>10.1}us {:>8.2} | {:>10.1}us {:>10.1}us {:>8.2} | {:>8.0}/s {:>8.0}/s {:>7.2} | {:>8.0}/s {:>8.0}/s {:>7.2}",
                round, d.median_us, g.median_us, g.median_us / d.median_us, d.p99_us, g.p99_us, g.p99_us / d.p99_us,
                d.throughput_1, g.throughput_1, g.throughput_1 / d.throughput_1,
                d.throughput_16, g.throughput_16, g.throughput_16 / d.throughput_16,
            );
        }
        println!("goal: gateway p50 <= 1.25x direct; gateway 16x throughput >= 0.80x direct");
    });
}
