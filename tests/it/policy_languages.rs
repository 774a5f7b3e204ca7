//! Policies in Python and JavaScript, built from source with their own toolchains
//! (componentize-py, componentize-js), held to the promises of their READMEs, hot-swapped on
//! a running gateway; and `wardgate policy new` skeletons in every language build and load.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::*;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn target_tmp() -> &'static Path {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
}

/// Runs `command`, panicking with its output if it fails.
fn run(command: &mut Command, what: &str) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{what}: cannot run: {error}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// `wardgate policy ARGS...` with the user's compile cache, so each big module is compiled
/// once per machine, not once per test.
fn policy(args: &[&OsStr]) -> Output {
    Command::new(wardgate())
        .args(["--log-level", "warn", "policy"])
        .args(args)
        .output()
        .expect("run wardgate policy")
}

/// Builds the example in examples/policies/`lang` with its own one-command build (which
/// installs its toolchain on first use), then loads it once with `policy check` so the
/// compiled module is cached. Once per test run.
fn example(lang: &'static str) -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    static JAVASCRIPT: OnceLock<PathBuf> = OnceLock::new();
    let (cell, file) = match lang {
        "python" => (&PYTHON, "breaker.wasm"),
        "javascript" => (&JAVASCRIPT, "codes.wasm"),
        other => panic!("no example policy in {other}"),
    };
    cell.get_or_init(|| {
        let out = target_tmp().join("example-policies").join(file);
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let started = Instant::now();
        run(
            Command::new(repo().join("examples/policies").join(lang).join("build.sh")).arg(&out),
            &format!("examples/policies/{lang}/build.sh"),
        );
        eprintln!("built {lang} example in {:.1?}", started.elapsed());
        let output = policy(&[OsStr::new("check"), out.as_os_str()]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        out
    })
}

/// `wardgate policy simulate MODULE ARGS... --param P...`; panics if it fails.
fn run_simulate(module: &Path, args: &[&OsStr], params: &[&str]) -> Vec<u8> {
    let mut all = vec![OsStr::new("simulate"), module.as_os_str()];
    all.extend_from_slice(args);
    for param in params {
        all.extend([OsStr::new("--param"), OsStr::new(param)]);
    }
    let output = policy(&all);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// The text timeline of `module` on the events of `trace`, with `params`.
fn simulate(module: &Path, trace: Value, params: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let trace_file = dir.path().join("trace.json");
    std::fs::write(&trace_file, trace.to_string()).unwrap();
    let args = [OsStr::new("--trace"), trace_file.as_os_str()];
    String::from_utf8(run_simulate(module, &args, params)).unwrap()
}

/// The decision on the timeline line at `time` whose event mentions `event`.
fn decision<'a>(timeline: &'a str, time: &str, event: &str) -> &'a str {
    timeline
        .lines()
        .find(|line| line.trim_start().starts_with(time) && line.contains(event))
        .unwrap_or_else(|| panic!("no {event:?} at {time}:\n{timeline}"))
}

/// One failing call per event, ten seconds apart, on an HTTP server.
fn failing_calls(failures: &[Value]) -> Value {
    let mut events: Vec<Value> = failures
        .iter()
        .enumerate()
        .map(|(index, failure)| {
            let mut event =
                json!({"at_ms": index as u64 * 10_000, "event": "call_failed", "idempotent": true});
            event
                .as_object_mut()
                .unwrap()
                .extend(failure.as_object().unwrap().clone());
            event
        })
        .collect();
    events.push(json!({"at_ms": failures.len() as u64 * 10_000, "event": "end"}));
    json!({"transport": "streamable-http", "events": events})
}

/// The reconnect delays `module` chose in the built-in flapping-HTTP scenario, and its fault count.
fn backoff_and_faults(module: &Path, params: &[&str]) -> (Vec<u64>, u64) {
    let args = ["--scenario", "all", "--json"].map(OsStr::new);
    let output = run_simulate(module, &args, params);
    let report: Value = serde_json::from_slice(&output).unwrap();
    let delays = report["backoff"][0]["delays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|delay| delay["delay_ms"].as_u64().unwrap())
        .collect();
    (delays, report["policies"][0]["faults"].as_u64().unwrap())
}

fn within(value: u64, center: u64, percent: u64) -> bool {
    let spread = center * percent / 100;
    (center - spread..=center + spread).contains(&value)
}

#[test]
fn python_breaker_keeps_the_promises_of_its_readme() {
    let module = example("python");
    let calls = failing_calls(&[
        json!({"kind": "http_status", "status": 503}),
        json!({"kind": "http_status", "status": 429}),
        json!({"kind": "json_rpc", "code": -32603}),
        json!({"kind": "json_rpc", "code": -32000}),
        json!({"kind": "connect_refused"}),
        json!({"kind": "connection_reset", "idempotent": false}),
        json!({"kind": "http_status", "status": 403}),
    ]);
    let timeline = simulate(module, calls.clone(), &[]);
    assert!(decision(&timeline, "t=+0.00s", "HTTP 503").contains("retry in 1 s"));
    assert!(decision(&timeline, "t=+10.00s", "HTTP 429").contains("retry in 1 s"));
    assert!(decision(&timeline, "t=+20.00s", "-32603").contains("retry in 1 s"));
    assert!(decision(&timeline, "t=+30.00s", "-32000").contains("give up → error"));
    assert!(decision(&timeline, "t=+40.00s", "refused").contains("retry in 1 s"));
    assert!(
        decision(&timeline, "t=+50.00s", "reset").contains("give up → offline"),
        "a call that may have reached the server is not replayed unless idempotent"
    );
    assert!(decision(&timeline, "t=+60.00s", "HTTP 403").contains("requires_reauth"));

    // max_attempts = 1: nothing is retried; base_delay_ms scales every delay.
    let once = simulate(module, calls.clone(), &["max_attempts=1"]);
    assert!(decision(&once, "t=+0.00s", "HTTP 503").contains("give up → error"));
    assert!(decision(&once, "t=+40.00s", "refused").contains("give up → offline"));
    let fast = simulate(module, calls, &["base_delay_ms=40"]);
    assert!(decision(&fast, "t=+0.00s", "HTTP 503").contains("retry in 40 ms"));

    // Reconnects: x4 per attempt, +/- 10 %, capped at max_delay_ms (+ jitter).
    let (delays, faults) = backoff_and_faults(module, &[]);
    assert_eq!(faults, 0, "the module trapped or answered out of range");
    for (attempt, expected) in [(0, 1_000), (1, 4_000), (2, 16_000), (3, 64_000)] {
        assert!(within(delays[attempt], expected, 10), "{delays:?}");
    }
    assert!(delays.iter().all(|delay| *delay <= 330_000), "{delays:?}");

    // Crashes: restart after 1 s, then 4 s; the third within five minutes is final.
    let crash_loop = json!({"events": [
        {"at_ms": 0, "event": "crash_loop", "every_ms": 20_000, "code": 1},
        {"at_ms": 200_000, "event": "end"}]});
    let crashes = simulate(module, crash_loop.clone(), &[]);
    let verdicts: Vec<&str> = crashes
        .lines()
        .filter(|line| line.contains("exited with code 1"))
        .collect();
    assert!(verdicts[0].contains("restart in 1 s"), "{crashes}");
    assert!(verdicts[1].contains("restart in 4 s"), "{crashes}");
    assert!(verdicts[2].contains("permanently_failed"), "{crashes}");
    let patient = simulate(module, crash_loop, &["max_attempts=5"]);
    assert_eq!(
        patient
            .lines()
            .filter(|line| line.contains("exited with code 1") && line.contains("restart in"))
            .count(),
        4,
        "{patient}"
    );
}

#[test]
fn javascript_codes_keeps_the_promises_of_its_readme() {
    let module = example("javascript");
    let calls = failing_calls(&[
        json!({"kind": "json_rpc", "code": -32000}),
        json!({"kind": "json_rpc", "code": -32001}),
        json!({"kind": "json_rpc", "code": -32603}),
        json!({"kind": "http_status", "status": 503}),
        json!({"kind": "connect_refused"}),
        json!({"kind": "json_rpc", "code": -32000, "idempotent": false}),
        json!({"kind": "http_status", "status": 401}),
    ]);
    let timeline = simulate(module, calls.clone(), &[]);
    assert!(decision(&timeline, "t=+0.00s", "-32000").contains("retry in 250 ms"));
    assert!(decision(&timeline, "t=+10.00s", "-32001").contains("retry in 250 ms"));
    assert!(decision(&timeline, "t=+20.00s", "-32603").contains("give up → error"));
    assert!(decision(&timeline, "t=+30.00s", "HTTP 503").contains("give up → error"));
    assert!(decision(&timeline, "t=+40.00s", "refused").contains("give up → offline"));
    assert!(
        decision(&timeline, "t=+50.00s", "-32000").contains("give up → error"),
        "a call that is not idempotent is not replayed"
    );
    assert!(decision(&timeline, "t=+60.00s", "HTTP 401").contains("requires_reauth"));

    // The operator's list replaces the default one; the delay is theirs too.
    let listed = simulate(
        module,
        calls,
        &["retryable_codes=-32603, 7", "retry_delay_ms=40"],
    );
    assert!(decision(&listed, "t=+0.00s", "-32000").contains("give up → error"));
    assert!(decision(&listed, "t=+20.00s", "-32603").contains("retry in 40 ms"));

    // Reconnects: a constant 2 s +/- 10 %.
    let (delays, faults) = backoff_and_faults(module, &[]);
    assert_eq!(faults, 0, "the module trapped or answered out of range");
    assert!(
        delays.iter().all(|delay| within(*delay, 2_000, 10)),
        "{delays:?}"
    );

    // Crashes: restart after 1 s, four times; the fifth within ten minutes is final.
    let crashes = simulate(
        module,
        json!({"events": [
            {"at_ms": 0, "event": "crash_loop", "every_ms": 20_000, "code": 1},
            {"at_ms": 300_000, "event": "end"}]}),
        &[],
    );
    let verdicts: Vec<&str> = crashes
        .lines()
        .filter(|line| line.contains("exited with code 1"))
        .collect();
    assert!(
        verdicts[..4]
            .iter()
            .all(|line| line.contains("restart in 1 s")),
        "{crashes}"
    );
    assert!(verdicts[4].contains("permanently_failed"), "{crashes}");
}

/// Replace `live` with `source` the way deploy scripts do: write beside it, then rename over it.
fn install(source: &Path, live: &Path) {
    let staging = live.with_extension("wasm.new");
    std::fs::copy(source, &staging).unwrap();
    std::fs::rename(&staging, live).unwrap();
}

async fn wait_loaded(running: &Running, policy_name: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let loaded = running.handler.heard(|heard| {
            heard.logs.iter().any(|log| {
                log["data"]["event"] == "policy_loaded" && log["data"]["module"] == policy_name
            })
        });
        if loaded {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{policy_name} was never loaded: {:?}",
            running.handler.heard(|heard| heard.logs.clone())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Calls the fake's `flaky` tool, which fails its first call for `key` with JSON-RPC `code`.
async fn flaky(running: &Running, key: &str, code: i32) -> Result<String, String> {
    let result = running
        .client
        .peer()
        .call_tool(call(
            "s__flaky",
            json!({"key": key, "fails": 1, "code": code}),
        ))
        .await;
    match result {
        Ok(result) if result.is_error != Some(true) => Ok(text_of(&result)),
        Ok(result) => Err(text_of(&result)),
        Err(error) => Err(error.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_gateway_swaps_from_rust_to_python_to_javascript() {
    let python = example("python");
    let javascript = example("javascript");
    let file = config("");
    let live = file.dir.path().join("live.wasm");
    std::fs::copy(module("default"), &live).unwrap();
    let text = format!(
        "[gateway]\npolicy = \"live\"\n\n[policies.live]\npath = \"live.wasm\"\n\n{}\n\
         params = {{ max_attempts = \"2\", base_delay_ms = \"10\", retry_delay_ms = \"10\", \
         retryable_codes = \"-32099\" }}\n",
        stdio_server("s", &[]).trim_end()
    );
    std::fs::write(&file.path, text).unwrap();
    let running = gateway_stdio(file).await;
    list_at_once(&running.client, &["s__flaky"]).await;

    // The Rust default gives up on any JSON-RPC error: the server is alive and said no.
    let error = flaky(&running, "rust-internal", -32603).await.unwrap_err();
    assert!(error.contains("failure 1 of 1"), "{error}");
    assert!(flaky(&running, "rust-custom", -32099).await.is_err());

    // Python's breaker retries an internal error (a server under load), not other codes.
    install(python, &live);
    wait_loaded(&running, "breaker").await;
    assert_eq!(
        flaky(&running, "python-internal", -32603).await.unwrap(),
        "flaky python-internal: ok after 1 failures"
    );
    assert!(flaky(&running, "python-custom", -32099).await.is_err());

    // JavaScript's codes retries exactly the listed codes.
    install(javascript, &live);
    wait_loaded(&running, "codes").await;
    assert_eq!(
        flaky(&running, "js-custom", -32099).await.unwrap(),
        "flaky js-custom: ok after 1 failures"
    );
    let error = flaky(&running, "js-internal", -32603).await.unwrap_err();
    assert!(error.contains("failure 1 of 1"), "{error}");
}

/// `wardgate policy new` in `lang`, built with the command its README gives, then checked.
fn scaffold_builds_and_loads(lang: &str, build: &[&str], module_path: &str) {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("my-policy");
    let output = Command::new(wardgate())
        .args(["policy", "new", "my-policy", "--lang", lang, "--dir"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    assert!(readme.contains(&build.join(" ")), "{readme}");
    assert!(readme.contains(module_path), "{readme}");
    let mut command = Command::new(build[0]);
    command.args(&build[1..]).current_dir(&project);
    if lang == "rust" {
        // Share one target directory between runs: wit-bindgen is compiled once.
        command.env(
            "CARGO_TARGET_DIR",
            target_tmp().join("scaffold-rust-target"),
        );
    }
    run(&mut command, &format!("building the {lang} skeleton"));
    let module = if lang == "rust" {
        target_tmp().join("scaffold-rust-target/wasm32-wasip2/release/my_policy.wasm")
    } else {
        project.join(module_path)
    };
    let output = policy(&[OsStr::new("check"), module.as_os_str()]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("name:     my-policy"), "{stdout}");

    // A second `new` into the same place refuses to overwrite the author's work.
    let again = Command::new(wardgate())
        .args(["policy", "new", "my-policy", "--lang", lang, "--dir"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));
}

#[test]
fn a_new_rust_policy_builds_and_passes_check() {
    scaffold_builds_and_loads(
        "rust",
        &["cargo", "build", "--release", "--target", "wasm32-wasip2"],
        "target/wasm32-wasip2/release/my_policy.wasm",
    );
}

#[test]
fn a_new_python_policy_builds_and_passes_check() {
    scaffold_builds_and_loads("python", &["./build.sh"], "my-policy.wasm");
}

#[test]
fn a_new_javascript_policy_builds_and_passes_check() {
    scaffold_builds_and_loads("javascript", &["./build.sh"], "my-policy.wasm");
}

#[test]
fn policy_new_refuses_a_name_no_toolchain_accepts() {
    let output = Command::new(wardgate())
        .args(["policy", "new", "My_Policy", "--lang", "python"])
        .current_dir(target_tmp())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("`My_Policy` is not a usable policy name"),
        "{stderr}"
    );
    assert!(!target_tmp().join("My_Policy").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_example_runs_as_a_shadow_beside_the_default_module() {
    let codes = example("javascript");
    let file = config("");
    std::fs::copy(module("default"), file.dir.path().join("live.wasm")).unwrap();
    let crashy = stdio_server("crashy", &["--exit-on-start", "3"]);
    let text = format!(
        "[gateway]\npolicy = \"live\"\n\n[policies.live]\npath = \"live.wasm\"\nshadow = {:?}\n\n{}{crashy}",
        codes.display().to_string(),
        stdio_server("ok", &[])
    );
    std::fs::write(&file.path, text).unwrap();
    let admin = crate::admin::support::start(file, &[], &[]).await;
    admin
        .wait_status("crashy", "permanently_failed", Duration::from_secs(30))
        .await;
    // Every decision the default made was asked of the JavaScript shadow, which answered
    // each (no fault), on its own runtime.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, policies) = admin.get("/policies").await;
        let made: u64 = policies["policies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|entry| entry["name"] == "live")
            .flat_map(|entry| entry["decisions"].as_object().cloned().unwrap_or_default())
            .filter_map(|(_, count)| count.as_u64())
            .sum();
        let (status, report) = admin.get("/policies/live/shadow").await;
        assert_eq!(status, 200, "{report}");
        let answered = report["agreed"].as_u64().unwrap() + report["disagreed"].as_u64().unwrap();
        assert_eq!(report["faults"], 0, "{report}");
        if made >= 4 && answered == made {
            assert!(
                report["module"].as_str().unwrap().starts_with("codes "),
                "{report}"
            );
            assert!(report["by_question"]["crash"].is_object(), "{report}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{made} decisions, shadow report {report}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
