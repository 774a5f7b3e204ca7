//! `wardgate policy check` and `wardgate policy simulate`, run as the real binary on the bundled guest policies.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::harness::module;
use crate::harness::*;
use wardgate_recovery::simulate;

/// `wardgate policy ARGS...`, with a compile cache of its own under the target directory.
fn policy(args: &[&OsStr]) -> Output {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("policy-cli-cache");
    std::process::Command::new(wardgate())
        .args(["--log-level", "warn", "policy"])
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .output()
        .expect("run wardgate policy")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn simulate_json(args: &[&OsStr]) -> Value {
    let mut all = vec![OsStr::new("simulate")];
    all.extend_from_slice(args);
    all.push(OsStr::new("--json"));
    let output = policy(&all);
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).expect("--json prints one JSON document")
}

/// The entries of `policy`'s run of the first scenario.
fn entries<'a>(report: &'a Value, policy: &str) -> &'a Vec<Value> {
    report["scenarios"][0]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|run| run["policy"] == policy)
        .unwrap_or_else(|| panic!("no run of {policy} in {report:#}"))["timeline"]["entries"]
        .as_array()
        .unwrap()
}

/// Times (ms) at which a decision starting with `decision` was made.
fn decided_at(entries: &[Value], decision: &str) -> Vec<u64> {
    entries
        .iter()
        .filter(|entry| {
            entry["decision"]
                .as_str()
                .is_some_and(|d| d.starts_with(decision))
        })
        .map(|entry| entry["at_ms"].as_u64().unwrap())
        .collect()
}

#[test]
fn check_describes_the_default_module() {
    let path = module("default");
    let output = policy(&[OsStr::new("check"), path.as_os_str()]);
    let stdout = stdout(&output);
    assert!(output.status.success(), "{}", stderr(&output));
    for expected in [
        "ok (compiled, linked, described, self-checked)",
        "name:     default",
        "intent:   the documented defaults",
        "world:    wardgate:policy/recovery-policy@0.1.0",
        "sha256:",
        "bytes",
        "wasi:cli/",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in:\n{stdout}");
    }
}

#[test]
fn check_rejects_garbage_and_core_modules_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"\x7fELF\x02\x01\x01 not a policy at all").unwrap();
    let output = policy(&[OsStr::new("check"), garbage.as_os_str()]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    let message = stderr(&output);
    assert!(message.contains(&*garbage.to_string_lossy()), "{message}");
    assert!(message.contains("does not compile"), "{message}");

    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let output = policy(&[OsStr::new("check"), core.as_os_str()]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("core.wasm") && message.contains("wasm32-wasip2"),
        "{message}"
    );

    let missing = dir.path().join("missing.wasm");
    let output = policy(&[OsStr::new("check"), missing.as_os_str()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("missing.wasm"));
}

#[test]
fn crash_loop_strict_gives_up_at_the_first_crash_and_default_at_the_third() {
    let (default, strict) = (module("default"), module("strict"));
    let report = simulate_json(&[
        default.as_os_str(),
        OsStr::new("--against"),
        strict.as_os_str(),
        OsStr::new("--scenario"),
        OsStr::new("crash-loop"),
    ]);
    let default_run = entries(&report, "default");
    assert_eq!(decided_at(default_run, "restart now"), [20_000, 40_000]);
    assert_eq!(
        decided_at(default_run, "give up → permanently_failed"),
        [60_000]
    );
    let strict_run = entries(&report, "strict");
    assert_eq!(decided_at(strict_run, "restart"), Vec::<u64>::new());
    assert_eq!(
        decided_at(strict_run, "give up → permanently_failed"),
        [20_000]
    );
    assert_eq!(report["scenarios"][0]["identical"], false);
    let stops = &report["backoff"][1]["delays"];
    assert_eq!(
        stops.as_array().unwrap().last().unwrap()["stop"],
        true,
        "strict stops reconnecting: {stops}"
    );
}

#[test]
fn the_default_module_decides_exactly_as_builtin_in_every_scenario() {
    let default = module("default");
    let output = policy(&[
        OsStr::new("simulate"),
        default.as_os_str(),
        OsStr::new("--against"),
        OsStr::new("builtin"),
    ]);
    let stdout = stdout(&output);
    assert!(output.status.success(), "{}", stderr(&output));
    for scenario in simulate::SCENARIOS {
        assert!(
            stdout.contains(&format!("scenario {scenario}")),
            "{scenario} missing:\n{stdout}"
        );
    }
    let identical = stdout
        .lines()
        .filter(|line| line.starts_with("identical decisions: default and builtin"))
        .count();
    assert_eq!(identical, simulate::SCENARIOS.len(), "{stdout}");
    assert!(!stdout.contains("decisions differ"), "{stdout}");
    // The timeline shows simulated times and decisions; the chart fits 80 columns.
    assert!(
        stdout.contains("t=+10.00s") && stdout.contains("retry in 500 ms"),
        "{stdout}"
    );
    let chart: Vec<&str> = stdout
        .lines()
        .skip_while(|line| !line.starts_with("reconnect backoff"))
        .collect();
    assert!(
        chart.len() > 12 && chart.iter().all(|line| line.chars().count() <= 80),
        "{}",
        chart.join("\n")
    );
}

#[test]
fn a_trace_file_is_replayed_event_by_event() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("incident.json");
    std::fs::write(
        &trace,
        r#"[{"at_ms": 0, "event": "call_failed", "kind": "connect_refused"},
            {"at_ms": 15000, "event": "crash", "signal": 9},
            {"at_ms": 30000, "event": "crash", "code": 1},
            {"at_ms": 45000, "event": "crash", "signal": 9},
            {"at_ms": 50000, "event": "call"},
            {"at_ms": 55000, "event": "end"}]"#,
    )
    .unwrap();
    let default = module("default");
    let output = policy(&[
        OsStr::new("simulate"),
        default.as_os_str(),
        OsStr::new("--trace"),
        trace.as_os_str(),
    ]);
    let stdout = stdout(&output);
    assert!(output.status.success(), "{}", stderr(&output));
    let line = |time: &str, event: &str| {
        stdout
            .lines()
            .find(|line| line.trim_start().starts_with(time) && line.contains(event))
            .unwrap_or_else(|| panic!("no {event:?} at {time}:\n{stdout}"))
            .to_owned()
    };
    assert!(line("t=+0.00s", "connection refused").contains("retry in 500 ms"));
    assert!(line("t=+15.00s", "process killed by signal 9").contains("restart now"));
    assert!(line("t=+30.00s", "process exited with code 1").contains("restart now"));
    assert!(
        line("t=+45.00s", "process killed by signal 9").contains("give up → permanently_failed")
    );
    assert!(line("t=+50.00s", "tool call #2").contains("permanently_failed"));
    assert!(
        stdout.contains("scenario incident.json (stdio)"),
        "{stdout}"
    );
}

#[test]
fn a_bad_trace_names_the_file_the_event_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("typo.json");
    std::fs::write(
        &trace,
        r#"[{"at_ms": 0, "event": "up"}, {"at_ms": 5, "event": "crash", "sigal": 9}]"#,
    )
    .unwrap();
    let default = module("default");
    let output = policy(&[
        OsStr::new("simulate"),
        default.as_os_str(),
        OsStr::new("--trace"),
        trace.as_os_str(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    for expected in ["typo.json", "events[1]", "\"sigal\"", "signal"] {
        assert!(message.contains(expected), "no {expected:?} in: {message}");
    }
}
