//! Benchmark: `tools/call` round trips through Wardgate against the same fake server called
//! directly, in the same run. Prints median and p99 latency and throughput at 1 and 16
//! concurrent callers, with the gateway/direct ratio, and the CPU time each process spent
//! per call at 16 callers (from `/proc`, in clock ticks: a few per cent of resolution), with
//! how much of the machine's two cores all of them used: what bounds the figures.
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
#[path = "../support/measure.rs"]
mod measure;

const WARMUP: usize = 300;
const SEQUENTIAL: usize = 3000;
const CONCURRENT_TOTAL: usize = 8000;

fn release_binary(name: &str) -> PathBuf {
    match name {
        "wardgate-fake" => PathBuf::from(env!("CARGO_BIN_EXE_wardgate-fake")),
        _ => gateway_binary::gateway_binary(),
    }
}

/// The client and the process it started, whose pid is returned too.
async fn connect(command: &Path, args: &[String]) -> (RunningService<RoleClient, ()>, u32) {
    let mut child = Command::new(command)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let pid = child.id().expect("a pid");
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take().unwrap();
    // The child lives as long as the runtime: leak it deliberately (kill_on_drop never runs,
    // but closing stdin at exit ends both servers).
    std::mem::forget(child);
    (().serve((stdout, stdin)).await.expect("initialize"), pid)
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
    /// At 16 callers: CPU µs per call of the bench's own process (the client), then of each
    /// of `processes`; and the cores all of them kept busy on average.
    client_cpu_us: f64,
    cpu_us: Vec<f64>,
    cores: f64,
}

/// The CPU time each of `pids` has used so far; `None` for one that could not be read.
fn cpu_times(pids: &[u32]) -> Vec<Option<Duration>> {
    pids.iter().map(|pid| measure::cpu_time(*pid)).collect()
}

/// `processes`: the pids whose CPU time is counted beside the client's (the server; or the
/// gateway and its server).
async fn measure(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    processes: &[u32],
) -> Figures {
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

    let mut counted = vec![std::process::id()];
    counted.extend_from_slice(processes);
    let cpu_before = cpu_times(&counted);
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
    let wall = started.elapsed();
    let calls = (per_caller * 16) as f64;
    let throughput_16 = calls / wall.as_secs_f64();
    // A process that could not be read is printed as NaN, never as 0.
    let used: Vec<f64> = cpu_times(&counted)
        .iter()
        .zip(&cpu_before)
        .map(|(after, before)| match (after, before) {
            (Some(after), Some(before)) => after.saturating_sub(*before).as_secs_f64(),
            _ => f64::NAN,
        })
        .collect();
    Figures {
        median_us: at(0.5),
        p99_us: at(0.99),
        throughput_1,
        throughput_16,
        client_cpu_us: used[0] / calls * 1e6,
        cpu_us: used[1..].iter().map(|s| s / calls * 1e6).collect(),
        cores: used.iter().sum::<f64>() / wall.as_secs_f64(),
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

        let (direct, direct_server) = connect(&fake, &["--name".into(), "s".into()]).await;
        let (through, gateway) = connect(&wardgate, &["--config".into(), config.display().to_string(), "--log-level".into(), "warn".into()]).await;
        // Wait for the gateway's upstream to be online.
        for _ in 0..200 {
            let tools = through.peer().list_all_tools().await.unwrap();
            if tools.iter().any(|t| t.name == "s__echo") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // The gateway's server: its one descendant.
        let behind: Vec<u32> = measure::process_tree(gateway).into_iter().filter(|pid| *pid != gateway).collect();
        let mut through_processes = vec![gateway];
        through_processes.extend(behind.iter().copied());

        // Interleave rounds so machine noise hits both sides alike.
        let mut rows = Vec::new();
        for round in 1..=2 {
            let d = measure(&direct, "echo", &[direct_server]).await;
            let g = measure(&through, "s__echo", &through_processes).await;
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
        println!();
        println!("CPU per call at 16 callers (us), and the cores all processes kept busy (of 2)");
        println!("{:<7} {:>13} {:>13} {:>8} | {:>13} {:>13} {:>15} {:>8}", "round", "direct client", "direct server", "cores", "gw client", "gateway", "gw's server", "cores");
        for (round, d, g) in &rows {
            let server = |f: &Figures, i: usize| f.cpu_us.get(i).copied().unwrap_or(f64::NAN);
            println!(
                "{:<7} {:>13.1} {:>13.1} {:>8.2} | {:>13.1} {:>13.1} {:>15.1} {:>8.2}",
                round, d.client_cpu_us, server(d, 0), d.cores, g.client_cpu_us, server(g, 0), server(g, 1), g.cores,
            );
        }
        println!("goal (issue 37): gateway p50 <= 1.15x direct; gateway 16x throughput >= 0.90x direct");
    });
}
