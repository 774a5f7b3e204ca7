//! Benchmark: what a steady stream of calls sees while a server goes away and comes back,
//! through the real `wardgate` binary with real processes and sockets on 127.0.0.1.
//!
//! - HTTP: the Streamable HTTP server is killed and started again on its port after an
//!   outage shorter than, equal to and longer than the default policy's retry budget (3
//!   attempts, 500 ms then 1 s apart: 1.5 s).
//! - stdio: the server process is SIGKILLed; the gateway restarts it at once.
//!
//! A call every 20 ms throughout. For each outage, the calls that started while the server
//! was down (and in the 100 ms before, so calls in flight at the kill count too) are
//! counted, and the share that failed is printed. Target: 0 failed calls for outages
//! shorter than the budget. `WARDGATE_BENCH_GATEWAY=path` measures another build (say, an
//! earlier commit's) for a before/after comparison.
//!
//! Run: `cargo bench -p wardgate-tests --bench outage`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::service::RunningService;
use rmcp::RoleClient;

#[path = "../support/bench_gateway.rs"]
mod bench_gateway;

use bench_gateway::{call, gateway, gateway_binary, start_http, until_ok, FAKE};

const EVERY: Duration = Duration::from_millis(20);
const BEFORE_KILL: Duration = Duration::from_millis(100);
const REPEATS: usize = 3;

type Client = RunningService<RoleClient, ()>;

/// When each call started, and whether it succeeded.
type Outcomes = Arc<Mutex<Vec<(Instant, bool)>>>;

/// Calls `tool` every [`EVERY`] until `stop`, each in a task of its own.
fn steady_calls(
    client: Arc<Client>,
    tool: &'static str,
    stop: Arc<tokio::sync::Notify>,
) -> Outcomes {
    let outcomes: Outcomes = Arc::default();
    let recorded = outcomes.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.notified() => return,
            }
            let (client, recorded) = (client.clone(), recorded.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                let ok = call(&client, tool).await.is_ok();
                recorded.lock().unwrap().push((started, ok));
            });
        }
    });
    outcomes
}

/// Of the calls that started in `[from, to]`: how many, and how many failed.
fn counted(outcomes: &Outcomes, from: Instant, to: Instant) -> (usize, usize) {
    let outcomes = outcomes.lock().unwrap();
    let window: Vec<bool> = outcomes
        .iter()
        .filter(|(started, _)| *started >= from && *started <= to)
        .map(|(_, ok)| *ok)
        .collect();
    (window.len(), window.iter().filter(|ok| !**ok).count())
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let binary: PathBuf = gateway_binary();
        println!("calls through {} during server outages, a call every {} ms", binary.display(), EVERY.as_millis());

        // HTTP: kill, stay down for the outage, start again on the same port.
        let (mut server, port) = start_http(0).await;
        let config = format!("[servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\n");
        let (client, _dir) = gateway(&config, ()).await;
        let client = Arc::new(client);
        until_ok(&client, "web__echo").await;
        let stop = Arc::new(tokio::sync::Notify::new());
        let outcomes = steady_calls(client.clone(), "web__echo", stop.clone());
        tokio::time::sleep(Duration::from_secs(1)).await;
        println!("HTTP server killed and started again (retry budget 1.5 s: 500 ms + 1 s):");
        for (label, outage) in [
            ("shorter than the budget", Duration::from_millis(500)),
            ("equal to the budget", Duration::from_millis(1_500)),
            ("longer than the budget", Duration::from_secs(3)),
        ] {
            let (mut calls, mut failed, mut down) = (0, 0, Duration::ZERO);
            for _ in 0..REPEATS {
                let killed = Instant::now();
                server.kill().await.unwrap();
                server.wait().await.unwrap();
                tokio::time::sleep(outage).await;
                server = start_http(port).await.0;
                let back = Instant::now();
                down += back - killed;
                // Let the calls of the window finish, and the gateway settle.
                tokio::time::sleep(Duration::from_secs(4)).await;
                until_ok(&client, "web__echo").await;
                let (n, f) = counted(&outcomes, killed - BEFORE_KILL, back);
                calls += n;
                failed += f;
            }
            println!(
                "  down {:>5.0} ms ({label:<23}): {failed:>3} of {calls:>3} calls failed ({:>5.1} %)",
                down.as_secs_f64() * 1e3 / REPEATS as f64,
                100.0 * failed as f64 / calls.max(1) as f64,
            );
        }
        stop.notify_one();

        // stdio: SIGKILL the process; the gateway restarts it at once. Two kills per gateway
        // (the builtin's third crash within 5 minutes is final).
        let config = format!("[servers.local]\ncommand = {FAKE:?}\nargs = [\"--name\", \"local\"]\n");
        let (mut calls, mut failed) = (0, 0);
        for _ in 0..REPEATS {
            let (client, _dir) = gateway(&config, ()).await;
            let client = Arc::new(client);
            until_ok(&client, "local__echo").await;
            let stop = Arc::new(tokio::sync::Notify::new());
            let outcomes = steady_calls(client.clone(), "local__echo", stop.clone());
            tokio::time::sleep(Duration::from_secs(1)).await;
            for _ in 0..2 {
                let pid: i32 = call(&client, "local__pid").await.unwrap().parse().unwrap();
                let killed = Instant::now();
                // SAFETY: killing the fake server this benchmark started (through the gateway).
                unsafe { libc::kill(pid, libc::SIGKILL) };
                tokio::time::sleep(Duration::from_secs(3)).await;
                let (n, f) = counted(&outcomes, killed - BEFORE_KILL, killed + Duration::from_secs(1));
                calls += n;
                failed += f;
            }
            stop.notify_one();
        }
        println!(
            "stdio server SIGKILLed, restarted at once: {failed} of {calls} calls started within 1 s of the kill failed ({:.1} %)",
            100.0 * failed as f64 / calls.max(1) as f64,
        );
    });
}
