//! Benchmark: what an instance per client (`instances = "per-client"`) costs, for real
//! servers: a stdio server on the official Python SDK (tests/python/interactive_server.py)
//! and `@modelcontextprotocol/server-everything` started by `npx`, as client configs start it.
//!
//! One gateway fronts each server twice, shared and per client. Clients connect one after
//! another and each calls as soon as it is connected (no readiness wait): a first call
//! and a second one. Printed per server:
//! - the first call's time on the per-client server (it starts the client's instance)
//!   against the same call on the shared one (already running), and the second call;
//! - the same server started directly by an rmcp client over stdio (spawn, handshake, the
//!   same call): what the server itself takes to start, so the rest is the gateway's;
//! - each instance's memory: its process tree's proportional set size (PSS, so pages
//!   shared between instances count once) and resident set size (RSS), median, least, most;
//! - the gateway's own growth per instance (its RSS after the instances started, less
//!   before, over their number; each client's HTTP session is in it too).
//!
//! Run: `cargo bench -p wardgate-tests --bench instances`. `WARDGATE_BENCH_GATEWAY=path`
//! measures another build.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;
use tokio::io::{AsyncBufReadExt, BufReader};

#[path = "../support/gateway_binary.rs"]
mod gateway_binary;
#[path = "../support/measure.rs"]
mod measure;
#[path = "../support/node.rs"]
mod node;
#[path = "../support/python.rs"]
mod python;

/// Clients, so instances, per server.
const CLIENTS: usize = 6;

/// A real server, as a config starts it, and a cheap call to it.
struct Real {
    name: &'static str,
    command: PathBuf,
    args: Vec<String>,
    cwd: Option<PathBuf>,
    tool: &'static str,
    arguments: serde_json::Value,
}

fn reals() -> Vec<Real> {
    // npx finds the package the tests installed (no registry at run time), as a client's
    // `npx -y @modelcontextprotocol/server-everything` finds its cached copy.
    node::server_everything();
    vec![
        Real {
            name: "py",
            command: python::python_sdk().clone(),
            args: vec![python::script("interactive_server.py")
                .display()
                .to_string()],
            cwd: None,
            tool: "pid",
            arguments: serde_json::json!({}),
        },
        Real {
            name: "everything",
            command: PathBuf::from("npx"),
            args: vec![
                "--no-install".into(),
                "@modelcontextprotocol/server-everything".into(),
                "stdio".into(),
            ],
            cwd: Some(node::node_tools().to_path_buf()),
            tool: "echo",
            arguments: serde_json::json!({"message": "hi"}),
        },
    ]
}

fn server_table(real: &Real, name: &str, per_client: bool) -> String {
    let mut table = format!(
        "[servers.{name}]\ncommand = {:?}\nargs = {:?}\n",
        real.command.display().to_string(),
        real.args
    );
    if let Some(cwd) = &real.cwd {
        table.push_str(&format!("cwd = {:?}\n", cwd.display().to_string()));
    }
    if per_client {
        table.push_str("instances = \"per-client\"\n");
    }
    table.push('\n');
    table
}

/// A running gateway: its process, MCP URL and admin URL.
struct Gateway {
    process: tokio::process::Child,
    mcp: String,
    admin: String,
}

async fn start(config: &Path) -> Gateway {
    let mut process = tokio::process::Command::new(gateway_binary::gateway_binary())
        .arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .env_remove("WARDGATE_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn wardgate");
    let mut lines = BufReader::new(process.stderr.take().unwrap()).lines();
    let (mut mcp, mut admin) = (None, None);
    while mcp.is_none() || admin.is_none() {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the gateway listened");
        let url = line
            .find("http://")
            .map(|at| line[at..].split_whitespace().next().unwrap().to_owned());
        if line.contains("admin API at") {
            admin = url;
        } else if line.contains("Streamable HTTP") {
            mcp = url;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Gateway {
        process,
        mcp: mcp.unwrap(),
        admin: admin.unwrap().trim_end_matches('/').to_owned(),
    }
}

async fn admin_get(gateway: &Gateway, path: &str) -> serde_json::Value {
    reqwest::get(format!("{}{path}", gateway.admin))
        .await
        .expect("the admin API answers")
        .json()
        .await
        .expect("JSON")
}

/// The time of one call.
async fn timed_call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &str,
    arguments: &serde_json::Value,
) -> Duration {
    let mut call = CallToolRequestParams::new(tool.to_owned());
    call.arguments = arguments.as_object().cloned();
    let started = Instant::now();
    let result = client.peer().call_tool(call).await;
    let took = started.elapsed();
    let result = result.unwrap_or_else(|error| panic!("{tool}: {error}"));
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    took
}

async fn connect(url: &str) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_owned());
    ().serve(transport).await.expect("connect")
}

/// A process's proportional set size in KiB (`/proc/PID/smaps_rollup`).
fn pss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("Pss:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Spawn the server directly, as a client launching it would, and make the call: the time
/// from the spawn to the answer.
async fn direct_cold_start(real: &Real) -> Duration {
    let started = Instant::now();
    let mut command = tokio::process::Command::new(&real.command);
    command
        .args(&real.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if let Some(cwd) = &real.cwd {
        command.current_dir(cwd);
    }
    let mut child = command.spawn().expect("spawn the server");
    let (stdout, stdin) = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = ().serve((stdout, stdin)).await.expect("initialize");
    let mut call = CallToolRequestParams::new(real.tool);
    call.arguments = real.arguments.as_object().cloned();
    client
        .peer()
        .call_tool(call)
        .await
        .expect("the direct call");
    let took = started.elapsed();
    drop(client);
    let _ = child.kill().await;
    took
}

fn median<T: Copy + Ord>(mut values: Vec<T>) -> (T, T, T) {
    values.sort();
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

async fn measure(real: &Real) {
    let dir = tempfile::tempdir().unwrap();
    let shared = format!("{}_shared", real.name);
    let config = dir.path().join("wardgate.toml");
    std::fs::write(
        &config,
        format!(
            "[gateway]\nmax_instances = {CLIENTS}\n\n{}{}",
            server_table(real, &shared, false),
            server_table(real, real.name, true)
        ),
    )
    .unwrap();
    let mut direct = Vec::new();
    for _ in 0..3 {
        direct.push(direct_cold_start(real).await);
    }
    let (direct, ..) = median(direct);
    let gateway = start(&config).await;
    let gateway_pid = gateway.process.id().unwrap();
    let shared_tool = format!("{shared}__{}", real.tool);
    let tool = format!("{}__{}", real.name, real.tool);
    // The shared server, already running: its first call and its second.
    let first_client = connect(&gateway.mcp).await;
    timed_call(&first_client, &shared_tool, &real.arguments).await;
    let mut shared_calls = Vec::new();
    for _ in 0..CLIENTS {
        let client = connect(&gateway.mcp).await;
        shared_calls.push(timed_call(&client, &shared_tool, &real.arguments).await);
    }
    let gateway_before = measure::rss_kib(gateway_pid);
    let mut clients = Vec::new();
    let (mut first_calls, mut second_calls) = (Vec::new(), Vec::new());
    for _ in 0..CLIENTS {
        let client = connect(&gateway.mcp).await;
        first_calls.push(timed_call(&client, &tool, &real.arguments).await);
        second_calls.push(timed_call(&client, &tool, &real.arguments).await);
        clients.push(client);
    }
    let gateway_after = measure::rss_kib(gateway_pid);
    let detail = admin_get(&gateway, &format!("/servers/{}", real.name)).await;
    let instances = detail["instances"].as_array().expect("instances").clone();
    assert_eq!(instances.len(), CLIENTS, "{detail}");
    let (mut pss, mut rss) = (Vec::new(), Vec::new());
    for instance in &instances {
        let pid = instance["pid"].as_u64().expect("an instance's pid") as u32;
        let processes = measure::process_tree(pid);
        pss.push(processes.iter().map(|pid| pss_kib(*pid)).sum::<u64>());
        rss.push(
            processes
                .iter()
                .map(|pid| measure::rss_kib(*pid))
                .sum::<u64>(),
        );
    }
    let (first, first_min, first_max) = median(first_calls);
    let (second, ..) = median(second_calls);
    let (shared_call, ..) = median(shared_calls);
    println!(
        "{}: first call that starts an instance: median {:.0} ms (least {:.0}, most {:.0}); \
         the server started directly and called: {:.0} ms (ratio {:.2}); \
         the same call on the shared server: {:.1} ms; the instance's second call: {:.1} ms",
        real.name,
        ms(first),
        ms(first_min),
        ms(first_max),
        ms(direct),
        first.as_secs_f64() / direct.as_secs_f64(),
        ms(shared_call),
        ms(second),
    );
    let (pss_median, pss_least, pss_most) = median(pss);
    let (rss_median, ..) = median(rss);
    println!(
        "{}: memory per instance ({CLIENTS} instances): PSS median {:.1} MiB (least {:.1}, most {:.1}), RSS median {:.1} MiB; \
         the gateway's own RSS grew {:.0} KiB per instance",
        real.name,
        pss_median as f64 / 1024.0,
        pss_least as f64 / 1024.0,
        pss_most as f64 / 1024.0,
        rss_median as f64 / 1024.0,
        gateway_after.saturating_sub(gateway_before) as f64 / CLIENTS as f64,
    );
    drop(clients);
    drop(first_client);
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    for real in reals() {
        measure(&real).await;
    }
}
