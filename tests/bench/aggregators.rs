//! Benchmark: Wardgate beside the MCP aggregators, each in front of the same two stdio
//! servers (`@modelcontextprotocol/server-everything` from npm and `mcp-server-time` from
//! PyPI), in interleaved rounds of one run, each gateway started afresh every round.
//!
//! Peers, each installed on first use under `target/bench-peers` from the registries:
//! - mcp-hub (npm; it serves the legacy HTTP+SSE transport only);
//! - FastMCP's mount (PyPI `fastmcp`, `peers/fastmcp_mount.py`);
//! - ContextForge (PyPI `mcp-contextforge-gateway`, Python ≥ 3.12, SQLite, each server behind
//!   its `mcpgateway.translate` bridge: `peers/contextforge.sh`);
//! - supergateway (npm) and mcp-proxy (PyPI), which front one server each (server-everything).
//!
//! 1MCP (`@1mcp/agent`) is not on the npm registry this machine reaches and is reported so.
//! A peer that cannot be installed or started is reported as not measured, with the reason.
//!
//! Each round, for each gateway:
//! - first complete list: from starting it until a client that asks at once (and again
//!   every 25 ms while it is refused) gets a `tools/list` with both servers' tools;
//! - idle RSS: the sum of the resident memory of the gateway's processes (the process
//!   started and its descendants, less the two servers; memory they share counts once per
//!   process, which weighs on a gateway of many processes such as ContextForge);
//! - calls/s, p50 and p99 of `echo` at 1 and 16 clients (own connection and session each),
//!   for a fixed time each;
//! - server-everything's process killed: of the calls one client makes in the next 20 s
//!   (at most 200), how many fail, and when calls succeed again for good (the first success
//!   after the last failure);
//! - last, RSS after 1,000 sessions opened (initialize, initialized) and abandoned, per
//!   session, and sessions opened a second; then whether a new session still opens.
//!
//! Why this file is long: each peer's start, the five measurements and the table are one
//! benchmark's parts, used nowhere else; split, they would only pass the same structs around.
//!
//! Run: `cargo bench -p wardgate-tests --bench aggregators` (`WARDGATE_BENCH_ROUNDS`,
//! default 3; `WARDGATE_BENCH_ONLY=wardgate,mcp-hub` measures those only).

#[path = "../support/gateway_binary.rs"]
mod gateway_binary;
#[path = "../support/lean_bench.rs"]
mod lean_bench;
#[path = "../support/lean_client.rs"]
mod lean_client;
#[path = "../support/lean_sse.rs"]
mod lean_sse;
#[path = "../support/measure.rs"]
mod measure;
#[path = "../support/node.rs"]
mod node;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lean_bench::{peers_dir, run, spawn, venv, Group};
use lean_client::LeanClient;
use lean_sse::SseClient;
use measure::{figures, free_port, Figures};
use serde_json::{json, Value};

const CLIENTS: usize = 16;
const SESSIONS: usize = 1000;
/// How long each calls/s figure is measured, after a warm-up.
const MEASURED: Duration = Duration::from_secs(4);
const WARMUP: Duration = Duration::from_millis(500);
/// After the kill: calls made for at most this long, at most [`KILL_CALLS`] of them.
const AFTER_KILL: Duration = Duration::from_secs(20);
const KILL_CALLS: usize = 200;
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How a client speaks to a gateway.
#[derive(Clone)]
struct Endpoint {
    address: SocketAddr,
    path: String,
    sse: bool,
    bearer: Option<String>,
}

enum Client {
    Streamable(LeanClient),
    Sse(SseClient),
}

impl Endpoint {
    /// A new client with its session, within [`CALL_TIMEOUT`].
    async fn connect(&self) -> Result<Client, String> {
        let connecting = async {
            if self.sse {
                SseClient::connect(self.address, &self.path)
                    .await
                    .map(Client::Sse)
            } else {
                LeanClient::connect_with_token(self.address, &self.path, self.bearer.as_deref())
                    .await
                    .map(Client::Streamable)
            }
        };
        tokio::time::timeout(CALL_TIMEOUT, connecting)
            .await
            .unwrap_or_else(|_| Err(format!("no session within {CALL_TIMEOUT:?}")))
    }
}

/// How a call failed: the gateway answered with an error, or the connection, stream or
/// session broke (or nothing came in time), after which the client needs a new one.
enum Failed {
    Answered(String),
    Broken(String),
}

impl Failed {
    fn text(self) -> String {
        match self {
            Failed::Answered(text) | Failed::Broken(text) => text,
        }
    }
}

impl Client {
    /// A request's answer within [`CALL_TIMEOUT`].
    async fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let asking = async {
            match self {
                Client::Streamable(client) => client.request(method, params).await,
                Client::Sse(client) => client.request(method, params).await,
            }
        };
        tokio::time::timeout(CALL_TIMEOUT, asking)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {CALL_TIMEOUT:?}")))
    }

    /// A call of `tool`; an error, or a result marked as one, is a failure.
    async fn call(&mut self, tool: &str) -> Result<(), Failed> {
        let answer = self
            .request(
                "tools/call",
                json!({"name": tool, "arguments": {"message": "ping"}}),
            )
            .await
            .map_err(Failed::Broken)?;
        if answer.get("error").is_some() || answer["result"]["isError"] == true {
            return Err(Failed::Answered(format!("{tool} failed: {answer}")));
        }
        Ok(())
    }

    async fn tool_names(&mut self) -> Result<Vec<String>, String> {
        let answer = self.request("tools/list", json!({})).await?;
        Ok(answer["result"]["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// The processes started from `root` (it and its descendants, by `/proc`): (pid, program
/// and first argument — enough to tell a server from a gateway whose arguments name it).
/// Descendants, not a process group: gateways put their servers in groups of their own.
fn group_processes(root: u32) -> Vec<(u32, String)> {
    measure::process_tree(root)
        .into_iter()
        .map(|pid| {
            let command = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|bytes| {
                    let text = String::from_utf8_lossy(&bytes).into_owned();
                    text.split('\0').take(2).collect::<Vec<_>>().join(" ")
                })
                .unwrap_or_default();
            (pid, command)
        })
        .collect()
}

fn is_upstream(command: &str) -> bool {
    command.contains("server-everything") || command.contains("mcp-server-time")
}

/// Resident memory of the gateway's own processes (its groups, less the upstream servers).
fn gateway_rss_kib(groups: &[Group]) -> u64 {
    groups
        .iter()
        .flat_map(|group| group.id().map(group_processes).unwrap_or_default())
        .filter(|(_, command)| !is_upstream(command))
        .map(|(pid, _)| {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .unwrap_or_default()
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// What the bench installs and finds, once.
struct Installed {
    everything: PathBuf,
    time: PathBuf,
    wardgate: PathBuf,
    hub: Result<PathBuf, String>,
    fastmcp: Result<PathBuf, String>,
    contextforge: Result<PathBuf, String>,
    proxy: Result<PathBuf, String>,
    supergateway: PathBuf,
}

/// A Python of at least 3.12 (ContextForge's floor): on PATH, or under pyenv.
fn python_312() -> Result<PathBuf, String> {
    for name in ["python3.14", "python3.13", "python3.12"] {
        if let Ok(output) = std::process::Command::new(name).arg("--version").output() {
            if output.status.success() {
                return Ok(PathBuf::from(name));
            }
        }
    }
    let root = std::env::var("PYENV_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".pyenv")
        });
    let mut versions: Vec<PathBuf> = std::fs::read_dir(root.join("versions"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let minor: u32 = name
                .strip_prefix("3.")
                .and_then(|rest| rest.split('.').next())
                .and_then(|m| m.parse().ok())
                .unwrap_or(0);
            minor >= 12 && path.join("bin/python").exists()
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|path| path.join("bin/python"))
        .ok_or_else(|| {
            "no Python 3.12 or later (on PATH or under pyenv); ContextForge 1.1.0 needs one".into()
        })
}

fn install() -> Installed {
    std::fs::create_dir_all(peers_dir()).expect("create target/bench-peers");
    let python = Path::new("python3");
    let time = venv(
        python,
        "time",
        "mcp-server-time==2026.10.19",
        "bin/mcp-server-time",
    )
    .map(|dir| dir.join("bin/mcp-server-time"))
    .unwrap_or_else(|error| panic!("install mcp-server-time (the second upstream): {error}"));
    let hub_dir = peers_dir().join("hub");
    let hub_script = hub_dir.join("node_modules/mcp-hub/dist/cli.js");
    let hub = if hub_script.exists() {
        Ok(hub_script)
    } else {
        std::fs::create_dir_all(&hub_dir).unwrap();
        run(
            Path::new("npm"),
            &[
                "install",
                "--prefix",
                hub_dir.to_str().unwrap(),
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                "mcp-hub@4.2.1",
            ],
        )
        .map(|()| hub_script)
    };
    let fastmcp =
        venv(python, "fastmcp", "fastmcp==4.2.3", "bin/fastmcp").map(|dir| dir.join("bin/python"));
    let contextforge = python_312().and_then(|python| {
        venv(
            &python,
            "contextforge",
            "mcp-contextforge-gateway==1.1.0",
            "bin/mcpgateway",
        )
    });
    let proxy = lean_bench::mcp_proxy();
    Installed {
        everything: node::server_everything(),
        time,
        wardgate: gateway_binary::gateway_binary(),
        hub,
        fastmcp,
        contextforge,
        proxy,
        supergateway: node::supergateway(),
    }
}

/// The gateways measured.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Wardgate,
    Hub,
    FastMcp,
    ContextForge,
    Supergateway,
    McpProxy,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::Wardgate,
        Kind::Hub,
        Kind::FastMcp,
        Kind::ContextForge,
        Kind::Supergateway,
        Kind::McpProxy,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Wardgate => "wardgate",
            Kind::Hub => "mcp-hub 4.2.1",
            Kind::FastMcp => "FastMCP 4.2.3 mount",
            Kind::ContextForge => "ContextForge 1.1.0",
            Kind::Supergateway => "supergateway 4.0.0 (one server)",
            Kind::McpProxy => "mcp-proxy 0.13.0 (one server)",
        }
    }

    fn key(self) -> &'static str {
        self.name().split(' ').next().unwrap()
    }

    /// The name of server-everything's `echo` through it, and whether it fronts
    /// mcp-server-time too (the one-server peers do not).
    fn tools(self) -> (&'static str, bool) {
        match self {
            Kind::Wardgate | Kind::Hub => ("everything__echo", true),
            Kind::FastMcp => ("everything_echo", true),
            Kind::ContextForge => ("everything-echo", true),
            Kind::Supergateway | Kind::McpProxy => ("echo", false),
        }
    }
}

/// A started gateway: where to reach it and its process groups.
struct Running {
    endpoint: Endpoint,
    groups: Vec<Group>,
    /// When it was started (the first complete list counts from here).
    started: Instant,
    _dir: tempfile::TempDir,
}

async fn start(kind: Kind, installed: &Installed) -> Result<Running, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let everything = installed.everything.to_str().unwrap();
    let time = installed.time.to_str().unwrap();
    let port = free_port();
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let endpoint = |path: &str, sse: bool| Endpoint {
        address,
        path: path.to_owned(),
        sse,
        bearer: None,
    };
    let port_text = port.to_string();
    let started = Instant::now();
    let (endpoint, groups) = match kind {
        Kind::Wardgate => {
            let config = dir.path().join("wardgate.toml");
            std::fs::write(
                &config,
                format!(
                    "[servers.everything]\ncommand = \"node\"\nargs = [{everything:?}, \"stdio\"]\n\n\
                     [servers.time]\ncommand = {time:?}\n"
                ),
            )
            .unwrap();
            let listen = format!("127.0.0.1:{port}");
            let group = spawn(
                &installed.wardgate,
                &[
                    "--config",
                    config.to_str().unwrap(),
                    "--listen",
                    &listen,
                    "--log-level",
                    "warn",
                ],
                &[],
            )?;
            (endpoint("/mcp", false), vec![group])
        }
        Kind::Hub => {
            let hub = installed.hub.as_ref().map_err(Clone::clone)?;
            let config = dir.path().join("hub.json");
            std::fs::write(
                &config,
                json!({"mcpServers": {
                    "everything": {"command": "node", "args": [everything, "stdio"]},
                    "time": {"command": time, "args": []}
                }})
                .to_string(),
            )
            .unwrap();
            let group = spawn(
                Path::new("node"),
                &[
                    hub.to_str().unwrap(),
                    "--port",
                    &port_text,
                    "--config",
                    config.to_str().unwrap(),
                ],
                &[],
            )?;
            (endpoint("/mcp", true), vec![group])
        }
        Kind::FastMcp => {
            let python = installed.fastmcp.as_ref().map_err(Clone::clone)?;
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/peers/fastmcp_mount.py");
            let group = spawn(
                python,
                &[script.to_str().unwrap(), &port_text, everything, time],
                &[],
            )?;
            (endpoint("/mcp", false), vec![group])
        }
        Kind::ContextForge => {
            let venv = installed.contextforge.as_ref().map_err(Clone::clone)?;
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/peers/contextforge.sh");
            let (bridge1, bridge2) = (free_port().to_string(), free_port().to_string());
            let group = spawn(
                Path::new("bash"),
                &[
                    script.to_str().unwrap(),
                    venv.to_str().unwrap(),
                    dir.path().to_str().unwrap(),
                    &port_text,
                    &bridge1,
                    &bridge2,
                    &format!("node {everything} stdio"),
                    time,
                ],
                &[],
            )?;
            // It serves once its script has registered both servers and made the virtual one.
            let deadline = Instant::now() + Duration::from_secs(180);
            let (path, token) = loop {
                let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).ok();
                if let (Some(path), Some(token)) = (read("endpoint"), read("token")) {
                    break (path, token);
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "ContextForge did not serve within 180 s (logs in {})",
                        dir.path().display()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            };
            let mut endpoint = endpoint(&path, false);
            endpoint.bearer = Some(token);
            (endpoint, vec![group])
        }
        Kind::Supergateway => {
            let stdio = format!("node {everything} stdio");
            let group = spawn(
                Path::new("node"),
                &[
                    installed.supergateway.to_str().unwrap(),
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
            )?;
            (endpoint("/mcp", false), vec![group])
        }
        Kind::McpProxy => {
            let proxy = installed.proxy.as_ref().map_err(Clone::clone)?;
            let group = spawn(
                proxy,
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
            )?;
            (endpoint("/mcp", false), vec![group])
        }
    };
    Ok(Running {
        endpoint,
        groups,
        started,
        _dir: dir,
    })
}

/// Calls/s, p50 µs, p99 µs (of the calls that succeeded) and calls failed.
type Calls = (f64, f64, f64, usize);

/// One round's figures for one gateway.
#[derive(Clone)]
struct Round {
    first_list_s: f64,
    idle_rss_kib: u64,
    /// KB per session and sessions a second, or why not.
    sessions: Result<(f64, f64), String>,
    one: Option<Calls>,
    many: Option<Calls>,
    killed_failed: usize,
    killed_calls: usize,
    back_after_s: Option<f64>,
}

/// The first complete list: a client asks at once and again every 25 ms until the list
/// holds both servers' tools. A connected client is kept (one session, as a client would).
async fn first_complete_list(running: &Running, kind: Kind) -> Result<f64, String> {
    let (echo, time) = kind.tools();
    let deadline = running.started + Duration::from_secs(180);
    let mut client = None;
    let mut last_error = String::new();
    while Instant::now() < deadline {
        if client.is_none() {
            match running.endpoint.connect().await {
                Ok(connected) => client = Some(connected),
                Err(error) => last_error = error,
            }
        }
        if let Some(connected) = &mut client {
            match connected.tool_names().await {
                Ok(names) => {
                    // mcp-server-time's `get_current_time`, however the gateway prefixes it.
                    let has_time = names
                        .iter()
                        .any(|n| n.contains("current_time") || n.contains("current-time"));
                    if names.iter().any(|n| n == echo) && (has_time || !time) {
                        return Ok(running.started.elapsed().as_secs_f64());
                    }
                    last_error = format!("{} tools, not yet both servers'", names.len());
                }
                Err(error) => {
                    last_error = error;
                    client = None;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(format!("no complete tool list within 180 s: {last_error}"))
}

/// `clients` clients calling `echo` for [`MEASURED`] after [`WARMUP`]: calls/s, p50, p99 of
/// the calls that succeeded, and how many failed (a failed call is not retried).
async fn calls(
    endpoint: &Endpoint,
    tool: &str,
    clients: usize,
) -> Result<(Figures, usize), String> {
    let start = Arc::new(tokio::sync::Barrier::new(clients + 1));
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (endpoint, tool, start) = (endpoint.clone(), tool.to_owned(), start.clone());
            tokio::spawn(async move {
                let prepared = async {
                    let mut client = endpoint.connect().await?;
                    let warm = Instant::now();
                    while warm.elapsed() < WARMUP {
                        let _ = client.call(&tool).await;
                    }
                    Ok::<_, String>(client)
                }
                .await;
                start.wait().await;
                let mut client = prepared?;
                let began = Instant::now();
                let (mut latencies, mut failed) = (Vec::new(), 0);
                while began.elapsed() < MEASURED {
                    let at = Instant::now();
                    let outcome = client.call(&tool).await;
                    // Only what finished in the measured time counts (no slow last call
                    // stretches a gateway's wall time).
                    if began.elapsed() > MEASURED {
                        break;
                    }
                    match outcome {
                        Ok(()) => latencies.push(at.elapsed()),
                        Err(failure) => {
                            failed += 1;
                            if let Failed::Broken(_) = failure {
                                client = endpoint.connect().await?;
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
                Ok::<_, String>((latencies, failed))
            })
        })
        .collect();
    start.wait().await;
    let (mut latencies, mut failed) = (Vec::new(), 0);
    for task in tasks {
        let (some, failures) = task.await.map_err(|e| e.to_string())??;
        latencies.extend(some);
        failed += failures;
    }
    if latencies.is_empty() {
        return Err(format!("all {failed} calls failed"));
    }
    Ok((figures(latencies, MEASURED), failed))
}

/// Open [`SESSIONS`] sessions and abandon them: KiB each, and sessions a second. An SSE
/// session lives as long as its stream, so those streams are held until memory is read.
async fn sessions(running: &Running) -> Result<(f64, f64), String> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = gateway_rss_kib(&running.groups);
    let mut held = Vec::new();
    let began = Instant::now();
    let mut first = running.endpoint.connect().await?;
    if let Client::Streamable(client) = &mut first {
        // One keep-alive connection opens them all, as a client library does (a thousand
        // connections at once from one address is a flood, which Wardgate's admission
        // refuses by design).
        if client.session().is_none() {
            return Err("no sessions: it serves without them (stateless)".into());
        }
        for opened in 1..SESSIONS {
            client
                .new_session()
                .await
                .map_err(|error| format!("session {opened}: {error}"))?;
        }
    } else {
        // A legacy SSE session lives as long as its stream: each is held open.
        held.push(first);
        for opened in 1..SESSIONS {
            let client = running
                .endpoint
                .connect()
                .await
                .map_err(|error| format!("session {opened}: {error}"))?;
            held.push(client);
        }
    }
    let per_second = SESSIONS as f64 / began.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = gateway_rss_kib(&running.groups);
    drop(held);
    Ok(((after as f64 - before as f64) / SESSIONS as f64, per_second))
}

/// Kill server-everything's process and call `echo` from one client for a while: calls
/// made, calls failed, and seconds from the kill to the first success after the last failure.
async fn killed(running: &Running, tool: &str) -> Result<(usize, usize, Option<f64>), String> {
    let mut client = running.endpoint.connect().await?;
    client.call(tool).await.map_err(Failed::text)?;
    let victim = running
        .groups
        .iter()
        .flat_map(|group| group.id().map(group_processes).unwrap_or_default())
        .find(|(_, command)| command.contains("server-everything"))
        .ok_or("no server-everything process among the gateway's")?;
    // SAFETY: kill takes no pointers.
    unsafe { libc::kill(victim.0 as i32, libc::SIGKILL) };
    let killed_at = Instant::now();
    let (mut made, mut failed, mut back) = (0, 0, None);
    let mut client = Some(client);
    while made < KILL_CALLS && killed_at.elapsed() < AFTER_KILL {
        made += 1;
        let outcome = match client.as_mut() {
            Some(connected) => connected.call(tool).await,
            None => match running.endpoint.connect().await {
                Ok(mut connected) => {
                    let outcome = connected.call(tool).await;
                    client = Some(connected);
                    outcome
                }
                Err(error) => Err(Failed::Broken(error)),
            },
        };
        match outcome {
            Ok(()) => {
                if back.is_none() {
                    back = Some(killed_at.elapsed().as_secs_f64());
                }
            }
            Err(failure) => {
                failed += 1;
                // "Back" is for good: from the kill to the first success after the last failure.
                back = None;
                if let Failed::Broken(_) = failure {
                    client = None;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    Ok((made, failed, back))
}

async fn measure(kind: Kind, installed: &Installed) -> Result<Round, String> {
    let running = start(kind, installed).await?;
    let mut round = Round {
        first_list_s: first_complete_list(&running, kind).await?,
        idle_rss_kib: 0,
        sessions: Err(String::new()),
        one: None,
        many: None,
        killed_failed: 0,
        killed_calls: 0,
        back_after_s: None,
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    round.idle_rss_kib = gateway_rss_kib(&running.groups);
    let (echo, _) = kind.tools();
    let triple = |(f, failed): (Figures, usize)| (f.calls_per_second, f.p50_us, f.p99_us, failed);
    round.one = Some(triple(calls(&running.endpoint, echo, 1).await?));
    round.many = Some(triple(calls(&running.endpoint, echo, CLIENTS).await?));
    let (made, failed, back) = killed(&running, echo).await?;
    round.killed_calls = made;
    round.killed_failed = failed;
    round.back_after_s = back;
    // Last: 1,000 abandoned sessions may leave a gateway unable to serve (mcp-hub).
    round.sessions = if kind == Kind::Supergateway {
        Err("not measured: it starts a server process per session".into())
    } else {
        match sessions(&running).await {
            Ok(figures) => match running.endpoint.connect().await {
                Ok(_) => Ok(figures),
                Err(error) => Err(format!(
                    "{:.1} KB, {:.0}/s, and then a new session failed: {error}",
                    figures.0 * 1.024,
                    figures.1
                )),
            },
            Err(error) => Err(error),
        }
    };
    Ok(round)
}

/// The median KB per session and sessions a second, or why there are none.
fn sessions_text(rounds: &[Round]) -> String {
    let measured: Vec<(f64, f64)> = rounds
        .iter()
        .filter_map(|round| round.sessions.as_ref().ok().copied())
        .collect();
    if measured.is_empty() {
        return rounds
            .iter()
            .find_map(|round| round.sessions.as_ref().err().cloned())
            .unwrap_or_default();
    }
    format!(
        "{:.1} KB, {:.0}/s",
        median(measured.iter().map(|m| m.0 * 1.024).collect()),
        median(measured.iter().map(|m| m.1).collect())
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let rounds: usize = std::env::var("WARDGATE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let only = std::env::var("WARDGATE_BENCH_ONLY").ok();
    let kinds: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|kind| {
            only.as_ref().is_none_or(|only| {
                only.split(',')
                    .any(|k| kind.key().eq_ignore_ascii_case(k.trim()))
            })
        })
        .collect();
    // 1,000 legacy SSE sessions hold 2,000 sockets: the soft limit goes up to the hard one.
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        let mut limit = std::mem::zeroed::<libc::rlimit>();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    let installed = install();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        println!(
            "aggregators in front of server-everything and mcp-server-time (stdio); lean keep-alive \
             HTTP clients; {rounds} interleaved rounds, each gateway started afresh; medians"
        );
        let mut results: Vec<(Kind, Vec<Round>, Vec<String>)> =
            kinds.iter().map(|kind| (*kind, Vec::new(), Vec::new())).collect();
        for round in 0..rounds {
            for (kind, figures, errors) in results.iter_mut() {
                match measure(*kind, &installed).await {
                    Ok(figures_now) => {
                        let many = figures_now.many.unwrap_or_default();
                        eprintln!(
                            "round {}: {}: list {:.2} s, {:.0} calls/s at {CLIENTS}",
                            round + 1,
                            kind.name(),
                            figures_now.first_list_s,
                            many.0
                        );
                        figures.push(figures_now);
                    }
                    Err(error) => {
                        eprintln!("round {}: {}: {error}", round + 1, kind.name());
                        errors.push(error);
                    }
                }
            }
        }
        println!(
            "| gateway | first complete list | idle RSS | 1 client calls/s, p50, p99 | {CLIENTS} clients calls/s, p50, p99 | \
             per session (1,000 abandoned), sessions/s | upstream child killed: failed calls, back |"
        );
        println!("|---|---|---|---|---|---|---|");
        for (kind, rounds_done, errors) in &results {
            if rounds_done.is_empty() {
                println!(
                    "| {} | not measured: {} |",
                    kind.name(),
                    errors.first().cloned().unwrap_or_default()
                );
                continue;
            }
            let med = |f: fn(&Round) -> f64| median(rounds_done.iter().map(f).collect());
            let back: Vec<String> = rounds_done
                .iter()
                .map(|r| match r.back_after_s {
                    Some(_) if r.killed_failed == 0 => format!("0 of {}, at once", r.killed_calls),
                    Some(s) => format!("{} of {}, back in {s:.1} s", r.killed_failed, r.killed_calls),
                    None => format!("{} of {}, never", r.killed_failed, r.killed_calls),
                })
                .collect();
            let failed = |pick: fn(&Round) -> Option<Calls>| {
                let failed: usize = rounds_done.iter().filter_map(|r| pick(r).map(|f| f.3)).sum();
                if failed == 0 {
                    String::new()
                } else {
                    format!(" ({failed} failed in all rounds)")
                }
            };
            println!(
                "| {} | {:.2} s | {:.0} MB | {:.0}, {:.2} ms, {:.2} ms{} | {:.0}, {:.1} ms, {:.1} ms{} | {} | {} |{}",
                kind.name(),
                med(|r| r.first_list_s),
                med(|r| r.idle_rss_kib as f64) * 1.024 / 1000.0,
                med(|r| r.one.unwrap_or_default().0),
                med(|r| r.one.unwrap_or_default().1) / 1000.0,
                med(|r| r.one.unwrap_or_default().2) / 1000.0,
                failed(|r| r.one),
                med(|r| r.many.unwrap_or_default().0),
                med(|r| r.many.unwrap_or_default().1) / 1000.0,
                med(|r| r.many.unwrap_or_default().2) / 1000.0,
                failed(|r| r.many),
                sessions_text(rounds_done),
                back.join("; "),
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(" ({} round(s) failed: {})", errors.len(), errors[0])
                }
            );
        }
        println!("| 1MCP (@1mcp/agent) | not measured: not on the npm registry this machine reaches |");
        let calls_of = |kind: Kind, clients_many: bool| {
            results
                .iter()
                .find(|(k, r, _)| *k == kind && !r.is_empty())
                .map(|(_, r, _)| {
                    let pick = |round: &Round| {
                        if clients_many { round.many } else { round.one }.unwrap_or_default()
                    };
                    (
                        median(r.iter().map(|x| pick(x).0).collect()),
                        median(r.iter().map(|x| pick(x).1).collect()),
                        median(r.iter().map(|x| pick(x).2).collect()),
                    )
                })
        };
        if let Some(ours) = calls_of(Kind::Wardgate, true) {
            let best = [Kind::Hub, Kind::FastMcp, Kind::ContextForge]
                .into_iter()
                .filter_map(|kind| calls_of(kind, true).map(|figures| (kind, figures)))
                .max_by(|a, b| a.1 .0.total_cmp(&b.1 .0));
            if let Some((kind, theirs)) = best {
                println!(
                    "{CLIENTS} clients: wardgate / best aggregator ({}) calls/s = {:.2} (target >= 2.00); p99 {:.1} ms vs {:.1} ms",
                    kind.name(),
                    ours.0 / theirs.0,
                    ours.2 / 1000.0,
                    theirs.2 / 1000.0
                );
            }
            if let (Some(ours), Some(best)) = (
                calls_of(Kind::Wardgate, false),
                [Kind::Hub, Kind::FastMcp, Kind::ContextForge]
                    .into_iter()
                    .filter_map(|kind| calls_of(kind, false).map(|f| (kind, f)))
                    .min_by(|a, b| a.1 .1.total_cmp(&b.1 .1)),
            ) {
                println!(
                    "1 client: wardgate p50 {:.2} ms vs best aggregator's ({}) {:.2} ms",
                    ours.1 / 1000.0,
                    best.0.name(),
                    best.1 .1 / 1000.0
                );
            }
        }
    });
}
