//! Benchmark: how fast the gateway heals at the default policy, with real processes and sockets.
//! - stdio: SIGKILL the server → the restarted server answers a call;
//! - HTTP: the server comes back → the gateway serves its tools again, both when calls keep
//!   arriving (a call cancels the reconnect wait) and when the gateway is idle (the backoff
//!   decides).
//!
//! Run: `cargo bench -p wardgate-tests --bench recovery`.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientRequest, ServerResult};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use wardgate_engine::config::Config;
use wardgate_engine::Gateway;
use wardgate_policy::Builtin;

const FAKE: &str = env!("CARGO_BIN_EXE_wardgate-fake");

async fn start_http(port: u16) -> (Child, u16) {
    let mut child = Command::new(FAKE)
        .args([
            "--transport",
            "http",
            "--port",
            &port.to_string(),
            "--name",
            "web",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().unwrap();
    let port = line.rsplit(':').next().unwrap().trim().parse().unwrap();
    (child, port)
}

/// One call through the gateway's router, as a client would make it.
async fn call(gateway: &Gateway, server: &str) -> bool {
    let Some(slot) = gateway.slot(server) else {
        return false;
    };
    let Some(live) = slot.live() else {
        return false;
    };
    if !slot.status().is_online() {
        return false;
    }
    let mut params = CallToolRequestParams::new("echo");
    params.arguments = serde_json::json!({"text": "x"}).as_object().cloned();
    let request = ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
    matches!(
        live.peer.send_request(request).await,
        Ok(ServerResult::CallToolResult(_))
    )
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (mut web, port) = start_http(0).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recovery.toml");
        std::fs::write(
            &path,
            format!(
                "[servers.s]\ncommand = {FAKE:?}\nargs = [\"--name\", \"s\"]\n\n[servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"
            ),
        )
        .unwrap();
        let config = Config::load(&path).unwrap();
        let gateway = Gateway::start(&config, Arc::new(Builtin::default()));
        for server in ["s", "web"] {
            while !call(&gateway, server).await {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }

        // stdio: crash → answering again (crash budget: 3 in 5 minutes, so reconnect between rounds).
        let mut stdio = Vec::new();
        for _ in 0..10 {
            let pid = child_pid("--name\u{0}s").expect("the stdio server runs");
            let killed = Instant::now();
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            tokio::time::sleep(Duration::from_millis(1)).await;
            while !call(&gateway, "s").await {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            stdio.push(killed.elapsed());
            gateway.reconnect("s").await.unwrap(); // reset the crash budget for the next round
            while !call(&gateway, "s").await {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }

        // HTTP: down for a while, back up; measure with calls arriving and with an idle gateway.
        let mut busy = Vec::new();
        let mut idle = Vec::new();
        for (round, down_for) in [1500u64, 3000, 1500, 3000, 2200, 2200].into_iter().enumerate() {
            web.kill().await.unwrap();
            web.wait().await.unwrap();
            let slot = gateway.slot("web").unwrap();
            // The gateway notices through a failed call.
            let _ = call(&gateway, "web").await;
            tokio::time::sleep(Duration::from_millis(down_for)).await;
            let (child, _) = start_http(port).await;
            web = child;
            let back = Instant::now();
            if round % 2 == 0 {
                // Calls keep coming: each one wakes the supervisor.
                loop {
                    slot_wakeup(&gateway, "web").await;
                    if call(&gateway, "web").await {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                busy.push(back.elapsed());
            } else {
                while !slot.status().is_online() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                idle.push(back.elapsed());
            }
        }
        println!("recovery at the default policy (real processes and sockets on 127.0.0.1)");
        println!("stdio crash (SIGKILL) -> restarted server answers:   median {:>8.1} ms  (n={})", median(stdio.clone()).as_secs_f64() * 1e3, stdio.len());
        println!("HTTP server back -> tools served, calls arriving:    median {:>8.1} ms  (n={})", median(busy.clone()).as_secs_f64() * 1e3, busy.len());
        println!("HTTP server back -> tools served, gateway idle:      median {:>8.1} ms  (n={}; bounded by the reconnect backoff, 1 s x2 up to 180 s)", median(idle.clone()).as_secs_f64() * 1e3, idle.len());
        gateway.shutdown().await;
    });
}

/// What a client call does when the server is down: ask the supervisor to try now.
async fn slot_wakeup(gateway: &Gateway, server: &str) {
    if let Some(slot) = gateway.slot(server) {
        if !slot.status().is_online() {
            slot.wake();
        }
    }
}

fn child_pid(needle: &str) -> Option<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_string_lossy().parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid: u32 = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).ok()?;
            (ppid == me && cmdline.contains(needle)).then_some(pid)
        })
}
