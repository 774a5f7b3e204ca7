//! Shadow policies and replay on a running gateway, with the bundled modules: a shadow is
//! asked every question its policy is asked and decides nothing; its disagreements are
//! counted and shown; an exported decision log replays to the same disagreements; a shadow
//! is promoted to live and rolled back.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::admin::support::{start, AdminGateway};
use crate::harness::*;

const SETTLE: Duration = Duration::from_secs(30);

/// A gateway whose servers (`servers`, TOML) decide with the `live` module, with `shadow`
/// bound as its shadow in the config (none for `None`).
async fn gateway(live: &str, shadow: Option<&Path>, servers: &str) -> AdminGateway {
    let file = config("");
    std::fs::copy(module(live), file.dir.path().join("live.wasm")).unwrap();
    let shadow = match shadow {
        Some(path) => format!("shadow = {:?}\n", path.display().to_string()),
        None => String::new(),
    };
    let text = format!(
        "[gateway]\npolicy = \"live\"\n\n[policies.live]\npath = \"live.wasm\"\n{shadow}\n{servers}"
    );
    std::fs::write(&file.path, text).unwrap();
    start(file, &[], &[]).await
}

/// A stdio server whose every process exits at once: a crash loop.
fn crash_loop(name: &str, params: &str) -> String {
    let server = stdio_server(name, &["--exit-on-start", "3"]);
    format!("{}\n{params}\n\n", server.trim_end())
}

/// Policy `name` as `GET /policies` shows it.
async fn policy(admin: &AdminGateway, name: &str) -> Value {
    let (_, policies) = admin.get("/policies").await;
    policies["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no policy {name} in {policies}"))
}

/// The decisions policy `policy` has made, by the admin API's count.
async fn decisions_made(admin: &AdminGateway, policy: &str) -> u64 {
    let (_, body) = admin.get("/policies").await;
    body["policies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["name"] == policy)
        .flat_map(|entry| entry["decisions"].as_object().cloned().unwrap_or_default())
        .filter_map(|(_, count)| count.as_u64())
        .sum()
}

async fn report(admin: &AdminGateway, policy: &str) -> Value {
    let (status, body) = admin.get(&format!("/policies/{policy}/shadow")).await;
    assert_eq!(status, 200, "{body}");
    body
}

fn total(report: &Value) -> u64 {
    ["agreed", "disagreed", "faults", "dropped"]
        .iter()
        .map(|key| report[key].as_u64().unwrap_or(0))
        .sum()
}

/// The shadow report once the shadow has been asked every question the policy was asked
/// and the policy has gone quiet (its count unchanged over a second).
async fn settled_report(admin: &AdminGateway, policy: &str) -> Value {
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut before = u64::MAX;
    loop {
        let made = decisions_made(admin, policy).await;
        let report = report(admin, policy).await;
        if made == before && total(&report) == made {
            return report;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the shadow never caught up: {made} decisions, report {report}"
        );
        before = made;
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
}

fn pair(report: &Value, question: &str, live: &str, shadow: &str) -> u64 {
    report["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|pair| {
            pair["question"] == question && pair["live"] == live && pair["shadow"] == shadow
        })
        .filter_map(|pair| pair["count"].as_u64())
        .sum()
}

async fn cli(admin: &AdminGateway, args: &[&str]) -> std::process::Output {
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(wardgate())
            .args(args)
            .env("WARDGATE_ADMIN", &admin.address)
            .env_remove("WARDGATE_ADMIN_TOKEN")
            .env("NO_COLOR", "1")
            .output(),
    )
    .await
    .expect("the CLI finished in time")
    .expect("run wardgate");
    output
}

fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_identical_to_its_policy_agrees_on_every_question() {
    let servers = format!("{}{}", stdio_server("ok", &[]), crash_loop("crashy", ""));
    let admin = gateway("default", Some(&module("default")), &servers).await;
    admin
        .wait_status("crashy", "permanently_failed", SETTLE)
        .await;
    admin.wait_status("ok", "online", SETTLE).await;
    let report = settled_report(&admin, "live").await;
    let made = decisions_made(&admin, "live").await;
    assert_eq!(report["agreed"].as_u64(), Some(made), "{report}");
    assert_eq!(report["disagreed"], 0, "{report}");
    assert_eq!(report["faults"], 0, "{report}");
    // Three crashes: restart, restart, give up; each asked of both.
    assert_eq!(report["by_question"]["crash"]["agreed"], 3, "{report}");
    assert!(
        report["examples"].as_array().unwrap().is_empty(),
        "{report}"
    );
    let metrics = admin.get_text("/metrics").await;
    assert!(
        metrics.contains(
            "wardgate_policy_shadow_decisions_total{policy=\"live\",question=\"crash\",outcome=\"agreed\"} 3"
        ),
        "{metrics}"
    );
    // `/policies` shows the shadow beside its policy.
    let live = policy(&admin, "live").await;
    assert_eq!(live["shadow"]["agreed"].as_u64(), Some(made), "{live}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_and_strict_disagree_on_a_crash_loop_and_a_flapping_http_server() {
    let web = FakeHttp::start("http", &["--name", "web"]).await;
    let port = web.port();
    let servers = format!(
        "{}{}",
        crash_loop("crashy", ""),
        http_server("web", &web.url("http"), "streamable-http")
    );
    let admin = gateway("default", Some(&module("strict")), &servers).await;
    admin
        .wait_status("crashy", "permanently_failed", SETTLE)
        .await;
    admin.wait_status("web", "online", SETTLE).await;
    let (client, _) = http_client(&admin.mcp).await;
    list_at_once(&client, &["web__echo"]).await;

    // The HTTP server goes away; a call fails (the default retries it, strict gives up),
    // and the gateway reconnects until it is back.
    drop(web);
    let failed = client
        .peer()
        .call_tool(call("web__echo", json!({"text": "hello"})))
        .await;
    assert!(
        failed.is_err() || failed.as_ref().unwrap().is_error == Some(true),
        "{failed:?}"
    );
    let _back = FakeHttp::start_on("http", port, &["--name", "web"]).await;
    admin.wait_status("web", "online", SETTLE).await;

    let report = settled_report(&admin, "live").await;
    assert_eq!(pair(&report, "crash", "restart", "give up"), 2, "{report}");
    assert!(
        pair(&report, "classify", "retry", "give up (offline)") >= 1,
        "{report}"
    );
    assert_eq!(report["faults"], 0, "{report}");
    // The first disagreements come whole: question, inputs, both verdicts.
    let examples = report["examples"].as_array().unwrap();
    let crash = examples
        .iter()
        .find(|example| example["question"] == "crash")
        .expect("a crash among the examples");
    assert_eq!(crash["server"], "crashy");
    assert!(
        crash["live"].as_str().unwrap().starts_with("restart in"),
        "{crash}"
    );
    assert!(
        crash["shadow"].as_str().unwrap().starts_with("give up"),
        "{crash}"
    );
    assert!(crash["inputs"]["uptime_ms"].is_u64(), "{crash}");

    // The same, as people read it.
    let shown = cli(&admin, &["policy", "shadow-report", "live"]).await;
    let out = text(&shown);
    assert!(shown.status.success(), "{out}");
    let words = |line: &str| line.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        out.lines()
            .any(|line| words(line) == "crash restart give up 2"),
        "{out}"
    );
    assert!(out.contains("first disagreements:"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_that_loops_or_traps_changes_nothing_and_is_only_counted() {
    let servers = format!(
        "{}{}{}",
        crash_loop("looping", "params = { fault = \"loop\" }"),
        crash_loop("trapping", "params = { fault = \"trap\" }"),
        stdio_server("ok", &[])
    );
    let admin = gateway("default", Some(&module("faulty")), &servers).await;
    for server in ["looping", "trapping"] {
        admin
            .wait_status(server, "permanently_failed", SETTLE)
            .await;
    }
    // The live decisions are the default module's own, as without a shadow.
    let (_, body) = admin.get("/decisions").await;
    for server in ["looping", "trapping"] {
        let crashes: Vec<(&str, &str)> = body["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["server"] == server && d["decision"] == "crash")
            .map(|d| {
                (
                    d["answered_by"].as_str().unwrap(),
                    d["summary"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(crashes.len(), 3, "{server}: {crashes:?}");
        assert!(crashes.iter().all(|(by, _)| *by == "module"), "{crashes:?}");
        assert!(crashes[0].1.starts_with("restart in 2"), "{crashes:?}");
        assert!(crashes[2].1.starts_with("give up"), "{crashes:?}");
    }
    // The gateway serves on.
    let (client, _) = http_client(&admin.mcp).await;
    list_at_once(&client, &["ok__echo"]).await;
    let answer = client
        .peer()
        .call_tool(call("ok__echo", json!({"text": "still here"})))
        .await
        .unwrap();
    assert!(text_of(&answer).contains("still here"));
    // Every question about the two servers faulted in the shadow, and was only counted.
    let report = settled_report(&admin, "live").await;
    assert!(
        report["by_question"]["crash"]["faults"].as_u64() >= Some(6),
        "{report}"
    );
    assert_eq!(report["by_question"]["crash"]["agreed"], 0, "{report}");
    let metrics = admin.get_text("/metrics").await;
    assert!(
        metrics.contains("wardgate_policy_shadow_decisions_total{policy=\"live\",question=\"crash\",outcome=\"fault\"} 6"),
        "{metrics}"
    );
    // The live module never faulted.
    let live = policy(&admin, "live").await;
    assert_eq!(live["faults"]["total"], 0, "{live}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_log_replays_to_the_disagreements_the_shadow_saw() {
    let servers = format!("{}{}", stdio_server("ok", &[]), crash_loop("crashy", ""));
    let admin = gateway("default", Some(&module("strict")), &servers).await;
    admin
        .wait_status("crashy", "permanently_failed", SETTLE)
        .await;
    admin.wait_status("ok", "online", SETTLE).await;
    let report = settled_report(&admin, "live").await;
    let disagreed = report["disagreed"].as_u64().unwrap();
    assert!((2..=20).contains(&disagreed), "{report}");
    let made_before = decisions_made(&admin, "live").await;

    let log = admin.config.dir.path().join("decisions.jsonl");
    let exported = cli(
        &admin,
        &["decisions", "export", "-o", log.to_str().unwrap()],
    )
    .await;
    assert!(exported.status.success(), "{}", text(&exported));
    let lines = std::fs::read_to_string(&log).unwrap();
    // Every decision made by then (a probe may decide later).
    let exported = lines.lines().count() as u64;
    assert!(
        exported >= made_before,
        "{exported} of {made_before}: {lines}"
    );
    // The API gives the same lines.
    assert!(admin
        .get_text("/decisions?format=jsonl")
        .await
        .starts_with(&lines));

    let replayed = tokio::process::Command::new(wardgate())
        .args(["policy", "simulate"])
        .arg(module("strict"))
        .arg("--replay")
        .arg(&log)
        .arg("--json")
        .output()
        .await
        .unwrap();
    assert!(replayed.status.success(), "{}", text(&replayed));
    let replay: Value = serde_json::from_slice(&replayed.stdout).unwrap();
    assert_eq!(replay["disagreed"].as_u64(), Some(disagreed), "{replay}");
    let ids = |list: &Value, key: &str| -> BTreeSet<u64> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|item| item[key].as_u64().unwrap())
            .collect()
    };
    assert_eq!(
        ids(&replay["differences"], "decision"),
        ids(&report["examples"], "decision"),
        "replay {replay}\nshadow {report}"
    );
    // Downstream: on the crashes the log saw, strict restarts twice fewer and fails for good
    // at once, where the recorded verdicts failed it after the third crash.
    let crashy = replay["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|server| server["world"]["name"] == "replay of crashy")
        .cloned()
        .expect("crashy replayed");
    assert_eq!(crashy["before"]["restarts"], 2, "{crashy}");
    assert_eq!(crashy["after"]["restarts"], 0, "{crashy}");
    let (before, after) = (
        crashy["before"]["failed_at_ms"].as_u64().unwrap(),
        crashy["after"]["failed_at_ms"].as_u64().unwrap(),
    );
    assert!(after < before, "{crashy}");

    // Identical modules replay to no difference at all, as text too.
    let same = tokio::process::Command::new(wardgate())
        .args(["policy", "simulate"])
        .arg(module("default"))
        .arg("--replay")
        .arg(&log)
        .output()
        .await
        .unwrap();
    let out = text(&same);
    assert!(same.status.success(), "{out}");
    assert!(out.contains(" 0 different"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_shadow_decides_at_once_and_rollback_brings_the_module_back() {
    let admin = gateway("default", None, &stdio_server("s", &[])).await;
    admin.wait_status("s", "online", SETTLE).await;
    // Bound on the running gateway, through the command queue.
    let candidate = admin.config.dir.path().join("candidate.wasm");
    std::fs::copy(module("strict"), &candidate).unwrap();
    let bound = cli(
        &admin,
        &["policy", "shadow", "live", candidate.to_str().unwrap()],
    )
    .await;
    assert!(bound.status.success(), "{}", text(&bound));
    assert!(
        text(&bound).contains("shadow_policy live completed"),
        "{}",
        text(&bound)
    );

    // Only the bytes that were shadowed are promoted.
    std::fs::copy(module("patient"), &candidate).unwrap();
    let refused = cli(&admin, &["policy", "promote-shadow", "live"]).await;
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused).contains("changed since it was shadowed"),
        "{}",
        text(&refused)
    );
    std::fs::copy(module("strict"), &candidate).unwrap();

    let promoted = cli(&admin, &["policy", "promote-shadow", "live"]).await;
    let out = text(&promoted);
    assert!(promoted.status.success(), "{out}");
    assert!(out.contains("previous=default"), "{out}");
    assert!(out.contains("policy rollback live"), "{out}");
    let live = policy(&admin, "live").await;
    assert_eq!(live["module"], "strict", "{live}");
    assert!(live["shadow"].is_null(), "the shadow is live now: {live}");
    assert_eq!(live["deciding_from"].as_str(), candidate.to_str());
    // Strict's first crash is permanent.
    let pid = admin.wait_status("s", "online", SETTLE).await["pid"]
        .as_u64()
        .unwrap();
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    admin.wait_status("s", "permanently_failed", SETTLE).await;

    let rolled = cli(&admin, &["policy", "rollback", "live"]).await;
    assert!(rolled.status.success(), "{}", text(&rolled));
    let live = policy(&admin, "live").await;
    assert_eq!(live["module"], "default", "{live}");
    assert!(live["deciding_from"].is_null(), "{live}");
    // The default restarts after a crash again.
    let reconnected = cli(&admin, &["reconnect", "s"]).await;
    assert!(reconnected.status.success(), "{}", text(&reconnected));
    let pid = admin.wait_status("s", "online", SETTLE).await["pid"]
        .as_u64()
        .unwrap();
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    // Restarted: online again, in another process.
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let server = admin.server("s").await;
        if server["status"] == "online" && server["pid"].as_u64() != Some(pid) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never restarted: {server}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, body) = admin.get("/decisions?server=s").await;
    let crashes: Vec<&str> = body["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["decision"] == "crash")
        .map(|d| d["module"].as_str().unwrap())
        .collect();
    assert_eq!(crashes.len(), 2, "{body}");
    assert!(crashes[0].starts_with("strict "), "{crashes:?}");
    assert!(crashes[1].starts_with("default "), "{crashes:?}");

    // Without a shadow there is nothing to promote, and the error says what to do.
    let nothing = cli(&admin, &["policy", "promote-shadow", "live"]).await;
    assert!(!nothing.status.success());
    assert!(
        text(&nothing).contains("wardgate policy shadow live FILE.wasm"),
        "{}",
        text(&nothing)
    );
}
