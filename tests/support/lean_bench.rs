//! What the lean-client benchmarks share (bench/lean_http.rs, bench/telemetry.rs,
//! bench/aggregators.rs): calls by lean keep-alive clients, each on its own connection and
//! session, and the processes they are measured against, each in a process group of its own.

// Included by several benchmarks, each of which uses part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::lean_client::LeanClient;
use super::measure::{cpu_time, figures, Figures};

pub const WARMUP: usize = 100;
pub const ECHO: &str = "message";

pub async fn run_clients(
    address: SocketAddr,
    path: &str,
    tool: &str,
    clients: usize,
    calls: usize,
) -> Result<Figures, String> {
    // Each client connects and warms up in its own task; all start measuring together, so
    // no connection sits idle long enough for a server's keep-alive timeout to close it.
    let start = Arc::new(tokio::sync::Barrier::new(clients + 1));
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let tool = tool.to_owned();
            let path = path.to_owned();
            let start = start.clone();
            tokio::spawn(async move {
                let prepared = async {
                    let mut client = LeanClient::connect(address, &path).await?;
                    for _ in 0..WARMUP {
                        client.call(&tool, ECHO).await?;
                    }
                    Ok::<_, String>(client)
                }
                .await;
                start.wait().await;
                let mut client = prepared?;
                let mut latencies = Vec::with_capacity(calls);
                for _ in 0..calls {
                    let at = Instant::now();
                    client.call(&tool, ECHO).await?;
                    latencies.push(at.elapsed());
                }
                Ok::<_, String>(latencies)
            })
        })
        .collect();
    start.wait().await;
    let started = Instant::now();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.map_err(|e| e.to_string())??);
    }
    Ok(figures(latencies, started.elapsed()))
}

/// Where the benchmarks install the peers they measure: `target/bench-peers`.
pub fn peers_dir() -> PathBuf {
    let fake = PathBuf::from(env!("CARGO_BIN_EXE_wardgate-fake"));
    fake.parent().unwrap().parent().unwrap().join("bench-peers")
}

/// Run `command` to its end; a failure says what ran and the last line it wrote to stderr.
pub fn run(command: &Path, args: &[&str]) -> Result<(), String> {
    let output = std::process::Command::new(command)
        .args(args)
        .output()
        .map_err(|e| format!("{}: {e}", command.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        Err(format!(
            "{} {}: {} {}",
            command.display(),
            args.join(" "),
            output.status,
            last.unwrap_or("")
        ))
    }
}

/// A virtualenv `name` made by `python` with `package` (pinned) installed: its directory.
pub fn venv(python: &Path, name: &str, package: &str, marker: &str) -> Result<PathBuf, String> {
    let dir = peers_dir().join(name);
    if dir.join(marker).exists() {
        return Ok(dir);
    }
    run(python, &["-m", "venv", dir.to_str().unwrap()])?;
    run(
        &dir.join("bin/python"),
        &[
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            package,
        ],
    )?;
    Ok(dir)
}

/// mcp-proxy (PyPI), a peer gateway for one stdio server: its command.
pub fn mcp_proxy() -> Result<PathBuf, String> {
    let python = Path::new("python3");
    venv(python, "mcp-proxy", "mcp-proxy==0.13.0", "bin/mcp-proxy")
        .map(|dir| dir.join("bin/mcp-proxy"))
}

/// A process started in a group of its own; the whole group (a proxy and the server it
/// spawned) is killed when this is dropped.
pub struct Group(Child);

impl Group {
    /// The process's id, while it has not been reaped.
    pub fn id(&self) -> Option<u32> {
        self.0.id().filter(|pid| *pid != 0)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = self.0.id() {
            // SAFETY: killpg takes no pointers; a stale group id fails harmlessly.
            unsafe { libc::killpg(pid as i32, libc::SIGKILL) };
        }
    }
}

pub fn spawn(command: &Path, args: &[&str], env: &[(&str, String)]) -> Result<Group, String> {
    let mut command_line = Command::new(command);
    // A collector in the environment must not turn a measured gateway's telemetry on.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("OTEL_") {
            command_line.env_remove(name);
        }
    }
    command_line
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .process_group(0)
        .spawn()
        .map(Group)
        .map_err(|error| format!("spawn {}: {error}", command.display()))
}

/// `wardgate --config CONFIG --listen` on a free port of 127.0.0.1, with `env`, once it
/// serves: its address and its process group (`name` says which in errors).
pub async fn gateway(
    binary: &Path,
    name: &str,
    config: &Path,
    env: &[(&str, String)],
) -> (SocketAddr, Group) {
    let port = super::measure::free_port();
    let listen = format!("127.0.0.1:{port}");
    let config = config.to_str().expect("a UTF-8 path");
    let process = spawn(
        binary,
        &[
            "--config",
            config,
            "--listen",
            &listen,
            "--log-level",
            "warn",
        ],
        env,
    )
    .unwrap_or_else(|error| panic!("start {name}: {error}"));
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    ready(address, "/mcp", name).await.unwrap();
    (address, process)
}

/// One gateway measured in rounds, one after another with the others in each round.
pub struct Target {
    pub name: String,
    pub address: SocketAddr,
    process: Group,
    /// Each round's figures.
    pub rounds: Vec<Figures>,
    /// Each round's CPU time of the target's own process (its children, the servers, not
    /// counted) per call, in µs: what it costs, whatever else shares the cores. The round's
    /// connections, sessions and warm-up calls are in it; what the process does between its
    /// rounds (an exporter flushing the rest of a batch on its timer) is not.
    pub cpu_per_call_us: Vec<f64>,
}

impl Target {
    /// [`gateway`], ready to measure.
    pub async fn start(binary: &Path, name: &str, config: &Path, env: &[(&str, String)]) -> Target {
        let (address, process) = gateway(binary, name, config, env).await;
        Target {
            name: name.to_owned(),
            address,
            process,
            rounds: Vec::new(),
            cpu_per_call_us: Vec::new(),
        }
    }

    /// The CPU time its own process has used so far.
    fn cpu_time(&self) -> Option<Duration> {
        cpu_time(self.process.id()?)
    }

    /// The median over rounds of one figure.
    pub fn median(&self, figure: fn(&Figures) -> f64) -> f64 {
        median(&self.rounds.iter().map(figure).collect::<Vec<_>>())
    }
}

/// `rounds` rounds of `clients` × `calls` calls of `tool` at each target in turn.
pub async fn interleaved(
    targets: &mut [Target],
    tool: &str,
    clients: usize,
    calls: usize,
    rounds: usize,
) {
    for _ in 0..rounds {
        for target in targets.iter_mut() {
            let before = target.cpu_time();
            let figures = run_clients(target.address, "/mcp", tool, clients, calls)
                .await
                .unwrap_or_else(|error| panic!("{}: {error}", target.name));
            // The warm-up calls are in the CPU time too.
            let made = (clients * (calls + WARMUP)) as f64;
            if let (Some(before), Some(after)) = (before, target.cpu_time()) {
                let used = after.saturating_sub(before);
                target.cpu_per_call_us.push(used.as_secs_f64() * 1e6 / made);
            }
            target.rounds.push(figures);
        }
    }
}

/// A line per target: its name, the median calls/s and the median of `figure` (µs), then
/// each round's calls/s.
pub fn print_targets(targets: &[Target], label: &str, figure: fn(&Figures) -> f64) {
    let width = targets
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    println!(
        "{:<width$} {:>10} {:>10} {:>10}   rounds (calls/s)",
        "target", "calls/s", label, "CPU/call"
    );
    for target in targets {
        let rounds: Vec<String> = target
            .rounds
            .iter()
            .map(|round| format!("{:.0}", round.calls_per_second))
            .collect();
        let cpu = match target.cpu_per_call_us.is_empty() {
            true => "-".to_owned(),
            false => format!("{:.1}us", median(&target.cpu_per_call_us)),
        };
        println!(
            "{:<width$} {:>10.0} {:>8.0}us {:>10}   {}",
            target.name,
            target.median(|f| f.calls_per_second),
            target.median(figure),
            cpu,
            rounds.join(" ")
        );
    }
    println!("CPU/call: the median over rounds of the target's own process's CPU time (user and system, its servers not counted) per call, the round's connections, sessions and warm-up included");
}

/// The median of rounds' figures.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// Wait until `address` answers an MCP initialize (servers bind before they can serve).
pub async fn ready(address: SocketAddr, path: &str, what: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match LeanClient::connect(address, path).await {
            Ok(_) => return Ok(()),
            Err(error) if Instant::now() > deadline => {
                return Err(format!("{what} did not serve at {address}{path}: {error}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
