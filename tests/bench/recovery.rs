//! Benchmark: how fast the gateway heals at the default policy, through the real `wardgate`
//! binary with real processes and sockets on 127.0.0.1:
//! - stdio: SIGKILL the server → the restarted server answers a call through the gateway;
//! - HTTP: after an outage the gateway noticed, the server comes back → the gateway serves its
//!   tools again, both when calls keep arriving (each call cancels the reconnect wait) and when
//!   the gateway is idle (the reconnect backoff decides).
//!
//! Run: `cargo bench -p wardgate-tests --bench recovery`.

// MCP logging is deprecated only for 2026-07-28; the gateway speaks 2025-11-25.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::LoggingMessageNotificationParam;
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};

#[path = "../support/bench_gateway.rs"]
mod bench_gateway;

use bench_gateway::{call, gateway, start_http, until_ok, FAKE};

/// Records when each server was announced online.
#[derive(Clone, Default)]
struct Watcher {
    online: Arc<Mutex<Vec<(String, Instant)>>>,
}

#[allow(deprecated)]
impl ClientHandler for Watcher {
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if params.data["event"] == "status_changed" && params.data["to"] == "online" {
            let server = params.data["server"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            self.online.lock().unwrap().push((server, Instant::now()));
        }
    }
}

fn median(mut values: Vec<Duration>) -> f64 {
    values.sort();
    values[values.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // stdio: two crashes per gateway (the third within 5 minutes would be final).
        let mut stdio = Vec::new();
        for _ in 0..5 {
            let (client, _dir) = gateway(&format!("[servers.s]\ncommand = {FAKE:?}\nargs = [\"--name\", \"s\"]\n"), Watcher::default()).await;
            until_ok(&client, "s__echo").await;
            for _ in 0..2 {
                let pid: i32 = call(&client, "s__pid").await.unwrap().parse().unwrap();
                let killed = Instant::now();
                unsafe { libc::kill(pid, libc::SIGKILL) };
                until_ok(&client, "s__echo").await;
                stdio.push(killed.elapsed());
            }
        }

        // HTTP: the gateway notices an outage through a failed call, then the server returns.
        let (mut web, port) = start_http(0).await;
        let watcher = Watcher::default();
        let (client, _dir) = gateway(&format!("[servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"), watcher.clone()).await;
        until_ok(&client, "web__echo").await;
        let (mut busy, mut idle) = (Vec::new(), Vec::new());
        for round in 0..6 {
            web.kill().await.unwrap();
            web.wait().await.unwrap();
            assert!(call(&client, "web__echo").await.is_err(), "the outage went unnoticed");
            tokio::time::sleep(Duration::from_millis(500 + 400 * round as u64)).await;
            web = start_http(port).await.0;
            let back = Instant::now();
            if round % 2 == 0 {
                until_ok(&client, "web__echo").await;
                busy.push(back.elapsed());
            } else {
                loop {
                    if watcher.online.lock().unwrap().iter().any(|(server, at)| server == "web" && *at >= back) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                idle.push(back.elapsed());
                until_ok(&client, "web__echo").await;
            }
        }
        println!("recovery at the default policy, through the wardgate binary (real processes and sockets)");
        println!("stdio SIGKILL -> restarted server answers a call:          median {:>8.1} ms (n={})", median(stdio.clone()), stdio.len());
        println!("HTTP server back -> tools served, calls arriving:          median {:>8.1} ms (n={})", median(busy.clone()), busy.len());
        println!("HTTP server back -> announced online, gateway idle:        median {:>8.1} ms (n={}; waits for the next reconnect attempt: 1 s x2 up to 180 s, +-10%)", median(idle.clone()), idle.len());
    });
}
