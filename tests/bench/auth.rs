//! Benchmark: what authentication costs per request. One gateway per mode, each fronting the
//! same fake stdio server, called by lean keep-alive HTTP clients (tests/support/lean_client.rs)
//! in interleaved rounds of one run:
//! - none: no `[gateway.auth]`;
//! - bearer: a named client's token (`[gateway.auth.clients]`, constant-time comparison);
//! - jwt: an OAuth access token from a real OpenID provider (npm `oidc-provider`), checked
//!   against its JWKS on every request (signature, issuer, audience, expiry).
//!
//! Rate limits are off in all three (`rate_limit = 0`): this measures identification alone.
//! Prints p50, p99 and calls/s for 1 and 16 clients, and each mode's p50 against none's.
//!
//! Run: `cargo bench -p wardgate-tests --bench auth`.

#[path = "../support/gateway_binary.rs"]
mod gateway_binary;
#[path = "../support/lean_client.rs"]
mod lean_client;
#[path = "../support/measure.rs"]
mod measure;
#[path = "../support/node.rs"]
mod node;

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use lean_client::LeanClient;
use measure::{figures, free_port, Figures};

const WARMUP: usize = 100;
const SEQUENTIAL: usize = 1000;
const CLIENTS: usize = 16;
const PER_CLIENT: usize = 200;
const ROUNDS: usize = 3;
const TOKEN: &str = "bench-token-0123456789abcdef0123456789abcdef";

async fn run_clients(
    address: SocketAddr,
    token: Option<String>,
    clients: usize,
    calls: usize,
) -> Figures {
    let start = Arc::new(tokio::sync::Barrier::new(clients + 1));
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let start = start.clone();
            let token = token.clone();
            tokio::spawn(async move {
                let mut client = LeanClient::connect_with_token(address, "/mcp", token.as_deref())
                    .await
                    .expect("connect");
                for _ in 0..WARMUP {
                    client
                        .call("fake__echo", "text")
                        .await
                        .expect("warm-up call");
                }
                start.wait().await;
                let mut latencies = Vec::with_capacity(calls);
                for _ in 0..calls {
                    let began = Instant::now();
                    client.call("fake__echo", "text").await.expect("call");
                    latencies.push(began.elapsed());
                }
                latencies
            })
        })
        .collect();
    start.wait().await;
    let began = Instant::now();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("client task"));
    }
    figures(all, began.elapsed())
}

/// A gateway on `port` with `auth` (TOML) in front of the fake; ready once it answers.
async fn gateway(dir: &std::path::Path, mode: &str, port: u16, auth: &str) -> Child {
    let fake = env!("CARGO_BIN_EXE_wardgate-fake");
    let path = dir.join(format!("{mode}.toml"));
    std::fs::write(
        &path,
        format!(
            "[gateway.http]\nrate_limit = 0\n\n{auth}\n[servers.fake]\ncommand = {fake:?}\nargs = [\"--name\", \"fake\"]\n"
        ),
    )
    .unwrap();
    let child = Command::new(gateway_binary::gateway_binary())
        .arg("--config")
        .arg(&path)
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--log-level",
            "warn",
        ])
        .env("BENCH_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn wardgate");
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return child;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the {mode} gateway did not listen");
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_port(), free_port(), free_port()];
    let resource = format!("http://127.0.0.1:{}/mcp", ports[2]);

    // The OpenID provider, and one access token for the JWT gateway's clients.
    let (mut provider, issuer) = node::start_oidc_provider(0, &resource, 3600).await;
    let jwt = node::oidc_token(&issuer, "agent-a", "secret-a", "mcp:read").await;

    let modes: [(&str, String, Option<String>); 3] = [
        ("none", String::new(), None),
        (
            "bearer",
            "[gateway.auth.clients.bench]\ntoken = \"${BENCH_TOKEN}\"\n".to_owned(),
            Some(TOKEN.to_owned()),
        ),
        (
            "jwt",
            format!("[gateway.auth.oauth]\nissuer = {issuer:?}\nresource = {resource:?}\n"),
            Some(jwt),
        ),
    ];
    let mut gateways = Vec::new();
    for ((mode, auth, _), port) in modes.iter().zip(ports) {
        gateways.push(gateway(dir.path(), mode, port, auth).await);
    }
    println!("auth cost per request: lean keep-alive clients, fake `echo` over stdio, {ROUNDS} interleaved rounds");
    println!("| round | mode | 1 client p50 | p99 | calls/s | {CLIENTS} clients p50 | p99 | calls/s | p50 vs none (1 / {CLIENTS}) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for round in 1..=ROUNDS {
        let mut baseline: Option<(f64, f64)> = None;
        for ((mode, _, token), port) in modes.iter().zip(ports) {
            let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let one = run_clients(address, token.clone(), 1, SEQUENTIAL).await;
            let many = run_clients(address, token.clone(), CLIENTS, PER_CLIENT).await;
            let (base_one, base_many) = *baseline.get_or_insert((one.p50_us, many.p50_us));
            println!(
                "| {round} | {mode} | {:.0} µs | {:.0} µs | {:.0} | {:.0} µs | {:.0} µs | {:.0} | {:.3} / {:.3} |",
                one.p50_us,
                one.p99_us,
                one.calls_per_second,
                many.p50_us,
                many.p99_us,
                many.calls_per_second,
                one.p50_us / base_one,
                many.p50_us / base_many,
            );
        }
    }
    drop(provider.stdin.take());
    drop(gateways);
}
