//! The status page at `/` of the admin address, in a real headless Chromium (Debian's, driven
//! by npm playwright-core): every server shown, live changes over Server-Sent Events, an
//! action with its confirmation, the token asked for, and a policy swap in the decision
//! timeline. Screenshots go to `target/screenshots`.
//!
//! Why this file is long: one test per thing the status page shows, in one real Chromium
//! session helper.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::admin::support::{start, AdminGateway};
use crate::browser::Browser;
use crate::harness::*;

const SETTLE: Duration = Duration::from_secs(30);

/// Replace `live` with `source` the way deploy scripts do: write beside it, then rename over it.
fn install(source: &Path, live: &Path) {
    let staging = live.with_extension("wasm.new");
    std::fs::copy(source, &staging).unwrap();
    std::fs::rename(&staging, live).unwrap();
}

fn kill(server: &Value) {
    let pid = server["pid"].as_u64().expect("a stdio server has a pid") as i32;
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// The row of `server`, whichever layout the page is in.
fn row(server: &str) -> String {
    format!("[data-server-row=\"{server}\"]")
}

/// Opens the page and waits until it has drawn the servers and follows both streams.
async fn open(browser: &mut Browser, admin: &AdminGateway) {
    let status = browser.goto(&format!("{}/", admin.url)).await;
    assert_eq!(status, 200);
    browser.wait("body[data-ready=\"true\"]").await;
    browser.wait("body[data-live=\"true\"]").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_every_server_and_a_killed_upstream_changes_live() {
    let web = FakeHttp::start("http", &["--name", "web"]).await;
    let text = format!(
        "{}params = {{ restart_delay_ms = \"8000\" }}\n\n{}{}",
        stdio_server("alpha", &["--tools-count", "2"]),
        stdio_server("beta", &[]),
        http_server("web", &web.url("http"), "streamable-http"),
    );
    let admin = start(config(&text), &[], &[]).await;
    let mut browser = Browser::start("1280x900", "light").await;
    // As a person does: the page is opened at once, while the servers are still starting.
    open(&mut browser, &admin).await;
    for server in ["alpha", "beta", "web"] {
        browser
            .wait_attr(&row(server), "data-status", "online")
            .await;
    }
    // Its counts are the gateway's.
    let alpha = admin.wait_status("alpha", "online", SETTLE).await;
    browser
        .wait_text(&row("alpha"), &format!("{} tools", alpha["tools"]))
        .await;
    browser.screenshot("status-page.png", true).await;

    // A killed upstream: its row goes to restarting and back to online, pushed by the
    // gateway (the marker shows the page was never reloaded, and nothing polls).
    browser.eval("window.notReloaded = true").await;
    kill(&alpha);
    browser
        .wait_attr(&row("alpha"), "data-status", "restarting")
        .await;
    // While it waits, the row counts down to the restart and shows the crash and the error.
    let countdown = format!("{} .countdown", row("alpha"));
    browser.wait_text(&countdown, "in ").await;
    browser
        .wait_text(&format!("{} td.crashes", row("alpha")), "1")
        .await;
    browser
        .wait_text(&format!("{} td.last-error", row("alpha")), "signal 9")
        .await;
    browser
        .screenshot("status-page-restarting.png", false)
        .await;
    browser
        .wait_attr(&row("alpha"), "data-status", "online")
        .await;
    assert_eq!(browser.eval("window.notReloaded === true").await, true);
    let back = admin.server("alpha").await;
    assert_ne!(back["pid"], alpha["pid"], "{back}");

    // A row opens to its tools, by their namespaced and original names.
    browser.click(&format!("{} .expand", row("alpha"))).await;
    browser
        .wait_text("[data-tools=\"alpha\"]", "alpha__tool_1")
        .await;
    let tools = browser
        .text("[data-tools=\"alpha\"]")
        .await
        .unwrap_or_default();
    assert!(
        tools.contains("tool_1") && tools.contains("alpha__echo"),
        "{tools}"
    );

    // The same page on a phone and in the dark.
    browser
        .op(serde_json::json!({ "op": "set_viewport", "width": 390, "height": 844 }))
        .await;
    browser
        .op(serde_json::json!({ "op": "emulate", "color_scheme": "dark" }))
        .await;
    browser
        .screenshot("status-page-phone-dark.png", false)
        .await;
    assert_eq!(browser.page_errors().await, Vec::<String>::new());
    browser.close().await;
}

/// A server with an instance per client: its row counts the instances, and opens to each
/// one's status, owner and process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_client_server_shows_its_instances() {
    let text = format!(
        "{}\ninstances = \"per-client\"\n",
        stdio_server("s", &[]).trim_end()
    );
    let admin = start(config(&text), &[], &[]).await;
    let (client, _) = http_client_as(&admin.mcp, "A").await;
    let pid = text_of(
        &client
            .peer()
            .call_tool(call("s__pid", serde_json::json!({})))
            .await
            .expect("the call starts the client's instance"),
    );
    let mut browser = Browser::start("1280x900", "light").await;
    open(&mut browser, &admin).await;
    browser.wait_attr(&row("s"), "data-status", "online").await;
    browser
        .wait_text(
            &format!("{} .instances", row("s")),
            "1 instance (per client)",
        )
        .await;
    browser.click(&format!("{} .expand", row("s"))).await;
    browser.wait_text("[data-tools=\"s\"]", "s#1").await;
    let shown = browser
        .text("[data-tools=\"s\"] .instance-table")
        .await
        .unwrap_or_default();
    assert!(
        shown.contains("session") && shown.contains(&pid) && shown.contains("online"),
        "{shown}"
    );
    browser.screenshot("status-page-instances.png", false).await;
    assert_eq!(browser.page_errors().await, Vec::<String>::new());
    browser.close().await;
}

/// A server whose calls keep timing out: its row turns `error` with the failure's words
/// and a countdown to the next attempt, and its tools leave the row's count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_failing_its_calls_shows_as_error_with_its_retry() {
    let text = format!(
        "{}request_timeout = \"300ms\"\nparams = {{ reconnect_initial_ms = \"60000\", reconnect_jitter = \"0\" }}\n\n",
        stdio_server("hung", &[]),
    );
    let admin = start(config(&text), &[], &[]).await;
    let mut browser = Browser::start("1280x900", "light").await;
    open(&mut browser, &admin).await;
    browser
        .wait_attr(&row("hung"), "data-status", "online")
        .await;
    let (client, _) = http_client(&admin.mcp).await;
    for _ in 0..5 {
        let timed_out = client
            .peer()
            .call_tool(call("hung__slow", serde_json::json!({"ms": 5_000})))
            .await;
        assert!(timed_out.is_err());
    }
    browser
        .wait_attr(&row("hung"), "data-status", "error")
        .await;
    // The counts at the top follow, and `degraded` (a flag of `online`) is gone.
    browser
        .wait("#status-counts [data-status=\"error\"][data-count=\"1\"]")
        .await;
    assert_eq!(
        browser
            .eval(&format!(
                "document.querySelector('{} .tag.degraded') === null",
                row("hung")
            ))
            .await,
        true
    );
    browser
        .wait_text(&format!("{} .countdown", row("hung")), "retry in")
        .await;
    browser
        .wait_text(
            &format!("{} td.last-error", row("hung")),
            "no answer within 300ms",
        )
        .await;
    let shown = admin.server("hung").await;
    assert_eq!(shown["status"], "error", "{shown}");
    assert!(
        shown["next_retry_in_ms"].as_u64().is_some(),
        "the next attempt is scheduled: {shown}"
    );
    browser.screenshot("status-page-error.png", false).await;
    assert_eq!(browser.page_errors().await, Vec::<String>::new());
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_made_in_a_traced_call_links_to_its_trace() {
    let receiver = crate::telemetry::Receiver::start().await;
    let marks = tempfile::tempdir().unwrap();
    let crashed = marks.path().join("crashed");
    let text = format!(
        "[gateway.telemetry]\nendpoint = {:?}\ntrace_url = \"http://traces.example/trace/{{trace_id}}\"\n\n{}",
        receiver.url,
        stdio_server("local", &["--crash-once", crashed.to_str().unwrap()]),
    );
    let admin = start(config(&text), &[], &[]).await;
    let mut browser = Browser::start("1280x900", "light").await;
    open(&mut browser, &admin).await;
    browser
        .wait_attr(&row("local"), "data-status", "online")
        .await;
    // The call's first attempt meets a crash: `classify` decides on the call's trace.
    let (client, _) = http_client(&admin.mcp).await;
    let trace = "5b8efff798038103d269b633813fc60c";
    client
        .call_tool(crate::telemetry::traced_call(
            "local__meta",
            trace,
            "eee19b7ec3c1b174",
        ))
        .await
        .expect("retried after the crash");
    let link = format!(
        "li.decision[data-server=\"local\"][data-decision=\"classify\"] a.trace[href=\"http://traces.example/trace/{trace}\"]"
    );
    browser.wait(&link).await;
    browser.screenshot("status-page-trace-link.png", true).await;
    assert_eq!(browser.page_errors().await, Vec::<String>::new());
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_verdict_shows_beside_the_live_decision_and_a_disagreement_is_marked() {
    let file = config("");
    std::fs::copy(module("default"), file.dir.path().join("live.wasm")).unwrap();
    let text = format!(
        "[gateway]\npolicy = \"live\"\n\n[policies.live]\npath = \"live.wasm\"\nshadow = {:?}\n\n{}",
        module("strict").display().to_string(),
        stdio_server("s", &[])
    );
    std::fs::write(&file.path, text).unwrap();
    let admin = start(file, &[], &[]).await;
    let mut browser = Browser::start("1280x900", "light").await;
    open(&mut browser, &admin).await;
    browser.wait_attr(&row("s"), "data-status", "online").await;
    // The default restarts after a crash; strict, asked the same, would have given up.
    kill(&admin.wait_status("s", "online", SETTLE).await);
    let crash = "li.decision.disagreement[data-server=\"s\"][data-decision=\"crash\"][data-shadow=\"disagrees\"]";
    browser.wait(crash).await;
    browser
        .wait_text(&format!("{crash} .shadow"), "shadow strict")
        .await;
    let shown = browser
        .text(&format!("{crash} .shadow"))
        .await
        .unwrap_or_default();
    assert!(shown.contains("give up"), "{shown}");
    // The policies panel names the shadow beside its policy.
    browser.wait_text("[data-policy=\"live\"]", "Shadow").await;
    browser.screenshot("status-page-shadow.png", true).await;
    // A page opened later reads the same from `/decisions`.
    let mut late = Browser::start("1280x900", "light").await;
    open(&mut late, &admin).await;
    late.wait(crash).await;
    assert_eq!(browser.page_errors().await, Vec::<String>::new());
    assert_eq!(late.page_errors().await, Vec::<String>::new());
    browser.close().await;
    late.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_asks_for_confirmation_and_then_restarts_the_server() {
    let admin = start(config(&stdio_server("beta", &[])), &[], &[]).await;
    let mut browser = Browser::start("1280x900", "light").await;
    open(&mut browser, &admin).await;
    browser
        .wait_attr(&row("beta"), "data-status", "online")
        .await;
    let before = admin.wait_status("beta", "online", SETTLE).await;
    let restart = "button[data-action=\"restart\"][data-server=\"beta\"]";

    // From the keyboard: Enter on the button asks, and the safe answer has the focus, so a
    // second Enter declines; Escape declines too; and a click on "No".
    let enter = serde_json::json!({ "op": "keyboard", "key": "Enter" });
    let closed =
        serde_json::json!({ "op": "wait", "selector": "#confirm-dialog", "state": "hidden" });
    browser
        .op(serde_json::json!({ "op": "press", "selector": restart, "key": "Enter" }))
        .await;
    browser.wait("#confirm-dialog[open]").await;
    assert_eq!(
        browser.eval("document.activeElement.id").await,
        "confirm-no"
    );
    browser.op(enter).await;
    browser.op(closed.clone()).await;
    browser.click(restart).await;
    browser.wait("#confirm-dialog[open]").await;
    browser
        .op(serde_json::json!({ "op": "keyboard", "key": "Escape" }))
        .await;
    browser.op(closed.clone()).await;
    browser.click(restart).await;
    browser.wait("#confirm-dialog[open]").await;
    browser.click("#confirm-no").await;
    browser.op(closed).await;
    // Declined three times: no command was ever submitted, and the page says nothing.
    let (_, commands) = admin.get("/commands").await;
    assert_eq!(commands["commands"], serde_json::json!([]), "{commands}");
    assert_eq!(
        browser
            .text("#action-result")
            .await
            .unwrap_or_default()
            .trim(),
        ""
    );
    assert_eq!(admin.server("beta").await["pid"], before["pid"]);

    // Confirmed: the gateway restarts it, and the page says so.
    browser.click(restart).await;
    browser.wait("#confirm-dialog[open]").await;
    browser.click("#confirm-yes").await;
    browser.wait_text("#action-result", "completed").await;
    let after = admin.wait_status("beta", "online", SETTLE).await;
    assert_ne!(after["pid"], before["pid"], "{after}");
    browser
        .wait_attr(&row("beta"), "data-status", "online")
        .await;
    assert_eq!(browser.page_errors().await, Vec::<String>::new());
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_swap_shows_in_the_decision_timeline() {
    let file = config("");
    let live = file.dir.path().join("live.wasm");
    std::fs::copy(module("default"), &live).unwrap();
    let text = format!(
        "[gateway]\npolicy = \"live\"\n\n[policies.live]\npath = \"live.wasm\"\n\n{}",
        stdio_server("s", &[])
    );
    std::fs::write(&file.path, text).unwrap();
    let admin = start(file, &[], &[]).await;
    let mut browser = Browser::start("1280x900", "light").await;
    open(&mut browser, &admin).await;
    browser.wait_attr(&row("s"), "data-status", "online").await;

    // A crash asks the first module whether the server may restart.
    kill(&admin.wait_status("s", "online", SETTLE).await);
    let by_default =
        "li.decision[data-server=\"s\"][data-decision=\"crash\"][data-module^=\"default \"]";
    browser.wait(by_default).await;
    browser.wait_attr(&row("s"), "data-status", "online").await;

    // The patient module is swapped in; the next crash is answered by it, on the moment.
    install(
        &module("patient"),
        &admin.config.dir.path().join("live.wasm"),
    );
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let (_, body) = admin.get("/policies").await;
        let live = body["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|policy| policy["name"] == "live")
            .cloned()
            .unwrap();
        if live["module"] == "patient" && live["loads"].as_u64() >= Some(2) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never swapped: {live}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kill(&admin.wait_status("s", "online", SETTLE).await);
    let by_patient =
        "li.decision[data-server=\"s\"][data-decision=\"crash\"][data-module^=\"patient \"]";
    browser.wait(by_patient).await;
    assert!(browser.count("li.module-change").await >= 1);
    let change = browser.text("li.module-change").await.unwrap_or_default();
    assert!(change.contains("patient"), "{change}");
    // The policy panel shows the new module and both loads.
    browser.wait_text("[data-policy=\"live\"]", "patient").await;
    browser.screenshot("status-page-decisions.png", true).await;

    // The same records are the admin API's.
    let (status, body) = admin.get("/decisions?server=s").await;
    assert_eq!(status, 200, "{body}");
    let crashes: Vec<&Value> = body["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|decision| decision["decision"] == "crash")
        .collect();
    assert!(crashes.len() >= 2, "{body}");
    let modules: Vec<&str> = crashes
        .iter()
        .map(|decision| decision["module"].as_str().unwrap())
        .collect();
    assert!(
        modules[0].starts_with("default ") && modules.last().unwrap().starts_with("patient "),
        "{modules:?}"
    );
    assert!(crashes
        .iter()
        .all(|decision| decision["answered_by"] == "module"
            && decision["inputs"]["exit"] == "killed by signal 9"));
    assert_eq!(browser.page_errors().await, Vec::<String>::new());
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_admin_token_the_page_asks_for_it_and_keeps_it_for_the_session_only() {
    let token = "status-page-token-0123456789";
    let admin = start(
        config(&stdio_server("alpha", &[])),
        &[],
        &[("WARDGATE_ADMIN_TOKEN", token)],
    )
    .await;
    let mut browser = Browser::start("1280x900", "dark").await;
    // The page itself loads without the token; its data does not.
    assert_eq!(browser.goto(&format!("{}/", admin.url)).await, 200);
    browser.wait("#token-dialog[open]").await;
    assert_eq!(browser.count(&row("alpha")).await, 0);

    browser
        .op(serde_json::json!({ "op": "fill", "selector": "#token-form input[name=token]", "value": "wrong-token-wrong-token" }))
        .await;
    browser.click("#token-submit").await;
    browser.wait_text("#token-dialog", "wrong").await;
    browser
        .op(serde_json::json!({ "op": "fill", "selector": "#token-form input[name=token]", "value": token }))
        .await;
    browser.click("#token-submit").await;
    browser.wait("body[data-ready=\"true\"]").await;
    browser.wait("body[data-live=\"true\"]").await;
    browser
        .wait_attr(&row("alpha"), "data-status", "online")
        .await;
    let stored = browser
        .eval("[sessionStorage.getItem('wardgate-admin-token'), localStorage.length, document.cookie]")
        .await;
    assert_eq!(stored, serde_json::json!([token, 0, ""]));

    // The action buttons send it too.
    browser
        .click("button[data-action=\"health-check\"][data-server=\"alpha\"]")
        .await;
    browser.click("#confirm-yes").await;
    browser.wait_text("#action-result", "completed").await;
    assert_eq!(browser.page_errors().await, Vec::<String>::new());
    browser.close().await;
}

// ---------------------------------------------------------------------------------------
// The page tells the truth: an unreachable gateway, commands, operator actions, traffic,
// and files sent compressed with validators.

/// Waits until `expression`, run in the page, is truthy (60 s at most); returns its value.
/// Polled from here: the driver's `wait_function` evaluates strings inside the page, which
/// the page's Content-Security-Policy (no `unsafe-eval`) refuses.
async fn until(browser: &mut Browser, expression: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let value = browser.eval(expression).await;
        if !matches!(value, Value::Null | Value::Bool(false)) && value != 0 && value != "" {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never true in the page: {expression} (now {value})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateway_is_shown_unreachable_and_the_page_recovers_when_it_is_back() {
    // A secret reaches alpha's command line through the environment; the page shows the
    // reference as written, never the value.
    let secret = "page-secret-4f1c9d2b7e";
    let env = [("WG_STATUS_SECRET", secret)];
    let text = format!(
        "[servers.alpha]\ncommand = {:?}\nargs = [\"--name\", \"alpha\", \"--http-status-file\", \"/nonexistent/${{WG_STATUS_SECRET}}\"]\nenv = {{ WG_TOKEN = \"${{WG_STATUS_SECRET}}\" }}\n\n{}",
        fake(),
        stdio_server("beta", &[]),
    );
    let mut admin = start(config(&text), &[], &env).await;
    let mut browser = Browser::start("1280x900", "light").await;
    open(&mut browser, &admin).await;
    for server in ["alpha", "beta"] {
        browser
            .wait_attr(&row(server), "data-status", "online")
            .await;
    }
    browser.wait_text("#gateway-state", "Ready").await;
    // Counts by status at the top.
    browser
        .wait("#status-counts [data-status=\"online\"][data-count=\"2\"]")
        .await;

    // The row shows the command line with the reference; the process got the value.
    let alpha = admin.wait_status("alpha", "online", SETTLE).await;
    let command_line = std::fs::read(format!("/proc/{}/cmdline", alpha["pid"])).unwrap();
    assert!(
        String::from_utf8_lossy(&command_line).contains(secret),
        "the secret was expanded for the server itself"
    );
    browser
        .wait_text(
            &format!("{} .target", row("alpha")),
            "/nonexistent/${WG_STATUS_SECRET}",
        )
        .await;
    let (_, servers) = admin.get("/servers").await;
    assert!(
        servers.to_string().contains("${WG_STATUS_SECRET}")
            && !servers.to_string().contains(secret),
        "{servers}"
    );
    let leaked = browser
        .eval(&format!(
            "document.documentElement.outerHTML.includes({secret:?}) || document.body.innerText.includes({secret:?})"
        ))
        .await;
    assert_eq!(leaked, false, "the page shows the secret");

    // Traffic: call and error rates from /metrics. The calls are made once the page has a
    // first reading, so the next one sees them as a rate.
    until(
        &mut browser,
        "Number(document.querySelector('#traffic').dataset.samples) >= 1",
    )
    .await;
    let (client, _) = http_client(&admin.mcp).await;
    for _ in 0..3 {
        client
            .peer()
            .call_tool(call("alpha__echo", serde_json::json!({ "text": "hi" })))
            .await
            .expect("echo answers");
    }
    for _ in 0..2 {
        // No `text`: the server answers with a JSON-RPC error, an error outcome.
        assert!(client
            .peer()
            .call_tool(call("alpha__echo", serde_json::json!({})))
            .await
            .is_err());
    }
    let card = "document.querySelector('[data-traffic=\"alpha\"]')";
    until(
        &mut browser,
        &format!("Number({card}?.dataset.callPeak) > 0 && Number({card}?.dataset.errorPeak) > 0"),
    )
    .await;
    assert_eq!(
        browser
            .count("[data-traffic=\"alpha\"] svg.sparkline :is(polyline, circle)")
            .await,
        2,
        "a line of calls and one of errors"
    );
    let quiet = browser
        .eval("Number(document.querySelector('[data-traffic=\"beta\"]').dataset.callPeak)")
        .await;
    assert_eq!(quiet, 0, "beta had no calls");
    browser.screenshot("status-page-traffic.png", true).await;
    drop(client);

    // The gateway dies with the page open.
    let pid = admin.process.id().expect("the gateway runs") as i32;
    unsafe { libc::kill(pid, libc::SIGKILL) };
    admin.process.wait().await.unwrap();
    browser.wait("#unreachable").await;
    browser.wait_text("#unreachable", "unreachable since").await;
    browser.wait_text("#gateway-state", "Unreachable").await;
    assert_ne!(
        browser.text("#gateway-state").await.as_deref(),
        Some("Ready")
    );
    for server in ["alpha", "beta"] {
        browser.wait_attr(&row(server), "data-stale", "true").await;
        browser
            .wait_attr(&row(server), "data-status", "unknown")
            .await;
    }
    assert_eq!(
        browser
            .op(serde_json::json!({ "op": "attr", "selector": row("alpha"), "name": "data-last-status" }))
            .await,
        "online"
    );
    browser
        .wait("#status-counts [data-status=\"unknown\"][data-count=\"2\"]")
        .await;
    assert_eq!(
        browser
            .count("#status-counts [data-status=\"online\"]")
            .await,
        0
    );
    // The counters stopped: the same uptimes seconds later.
    let clocks = format!(
        "[document.querySelector('{} td.uptime').textContent, document.querySelector('#gateway-summary').textContent]",
        row("alpha").replace('"', "\\\"")
    );
    let before = browser.eval(&clocks).await;
    assert!(
        before[0].as_str().unwrap().contains("last known"),
        "{before}"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(browser.eval(&clocks).await, before);
    browser
        .screenshot("status-page-unreachable.png", false)
        .await;

    // A gateway is back at the same address: the page recovers by itself.
    let _again = start(config(&text), &["--admin", &admin.address], &env).await;
    browser
        .op(serde_json::json!({ "op": "wait", "selector": "#unreachable", "state": "hidden", "timeout_ms": 60000 }))
        .await;
    browser.wait_text("#gateway-state", "Ready").await;
    for server in ["alpha", "beta"] {
        browser
            .wait(&format!(
                "{}[data-status=\"online\"]:not([data-stale])",
                row(server)
            ))
            .await;
    }
    browser
        .wait("#status-counts [data-status=\"online\"][data-count=\"2\"]")
        .await;
    assert_eq!(browser.page_errors().await, Vec::<String>::new());
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_restart_and_a_config_change_show_in_the_decision_timeline() {
    let admin = start(config(&stdio_server("s", &[])), &[], &[]).await;
    let mut browser = Browser::start("1280x900", "light").await;
    open(&mut browser, &admin).await;
    browser.wait_attr(&row("s"), "data-status", "online").await;

    // A crash, decided by the policy; then an operator restarts the server.
    kill(&admin.wait_status("s", "online", SETTLE).await);
    browser
        .wait("li.decision[data-server=\"s\"][data-decision=\"crash\"]")
        .await;
    admin.wait_status("s", "online", SETTLE).await;
    let (status, record) = admin.post("/servers/s/restart", None).await;
    assert_eq!(
        (status, record["state"].as_str()),
        (200, Some("completed")),
        "{record}"
    );
    let note = ".timeline[data-server=\"s\"] li.note.operator[data-command=\"restart\"][data-state=\"completed\"]";
    let text = browser.wait_text(note, "operator: restart").await;
    assert!(text.contains("completed"), "{text}");

    // Inline: after the crash decision, and before the decisions about the new process
    // (newest first, so a smaller index is newer).
    let order = |what: &str| {
        format!(
            "(() => {{ const items = [...document.querySelectorAll('.timeline[data-server=\"s\"] li')]; \
             const note = items.findIndex((li) => li.matches('li.note.operator[data-command=\"restart\"]')); \
             const crash = items.findIndex((li) => li.matches('li.decision[data-decision=\"crash\"]')); \
             const newer = items.findIndex((li) => li.matches('li.decision')); \
             return {what}; }})()"
        )
    };
    until(
        &mut browser,
        &order("note >= 0 && crash > note && newer >= 0 && newer < note"),
    )
    .await;

    // A config change that modifies the server is noted in its timeline too.
    std::fs::write(
        &admin.config.path,
        stdio_server("s", &["--tools-count", "1"]),
    )
    .unwrap();
    // The watcher applies it after its debounce: a generous bound.
    let applied = browser
        .op(serde_json::json!({
            "op": "wait_text",
            "selector": ".timeline[data-server=\"s\"] li.note.config[data-note=\"config_applied\"]",
            "text": "changed s",
            "timeout_ms": 60000,
        }))
        .await;
    assert!(
        applied.as_str().unwrap_or("").contains("config applied"),
        "{applied}"
    );
    browser
        .screenshot("status-page-operator-timeline.png", true)
        .await;

    // "operator actions and config only" keeps the notes and hides the decisions.
    browser
        .eval("(() => { const select = document.querySelector('#decision-kind-filter'); select.value = 'operator'; select.dispatchEvent(new Event('change')); return true; })()")
        .await;
    let timeline = ".timeline[data-server=\"s\"]";
    until(
        &mut browser,
        &format!("document.querySelectorAll('{timeline} li.decision').length === 0 && document.querySelectorAll('{timeline} li.note').length >= 2"),
    )
    .await;
    assert_eq!(browser.page_errors().await, Vec::<String>::new());
    browser.close().await;
}

/// One HTTP/1.1 exchange on a fresh connection: status, headers (names lowercased), body.
async fn exchange(
    address: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .expect("the admin API answered in time")
        .unwrap();
    let end = answer
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .expect("a header block");
    let head = String::from_utf8(answer[..end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    (status, headers, answer[end + 4..].to_vec())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

/// `bytes` through the system's `gzip -dc`.
fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gzip = std::process::Command::new("gzip")
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip runs");
    gzip.stdin.take().unwrap().write_all(bytes).unwrap();
    let output = gzip.wait_with_output().unwrap();
    assert!(output.status.success(), "not gzip data");
    output.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_files_are_sent_gzipped_with_strong_etags_and_revalidated_with_304() {
    use sha2::{Digest, Sha256};
    let admin = start(config(&stdio_server("alpha", &[])), &[], &[]).await;
    let assets = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gateway/app/assets/status");
    let gzip = [("Accept-Encoding", "gzip, deflate, br, zstd")];
    for (path, file) in [
        ("/ui/app.js", "app.js"),
        ("/", "index.html"),
        ("/ui/app.css", "app.css"),
    ] {
        let source = std::fs::read(assets.join(file)).unwrap();

        // Compressed for a browser that accepts gzip, with the page's security headers.
        let (status, headers, body) = exchange(&admin.address, path, &gzip).await;
        assert_eq!(status, 200, "{path}: {headers:?}");
        assert_eq!(header(&headers, "content-encoding"), Some("gzip"), "{path}");
        assert!(header(&headers, "vary")
            .unwrap_or("")
            .to_ascii_lowercase()
            .contains("accept-encoding"));
        assert!(header(&headers, "content-security-policy")
            .unwrap()
            .contains("script-src 'self'"));
        assert_eq!(header(&headers, "x-frame-options"), Some("DENY"));
        assert!(
            body.len() < source.len(),
            "{path}: {} bytes compressed",
            body.len()
        );
        assert_eq!(gunzip(&body), source, "{path}");
        let gzip_etag = header(&headers, "etag").unwrap().to_owned();
        assert!(
            gzip_etag.starts_with('"') && gzip_etag.ends_with('"'),
            "strong: {gzip_etag}"
        );
        let digest: String = Sha256::digest(&body)[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            gzip_etag,
            format!("\"{digest}\""),
            "a hash of the bytes sent"
        );

        // Plain for a client that does not, or refuses it, under another ETag.
        for refusal in [&[][..], &[("Accept-Encoding", "gzip;q=0, identity")][..]] {
            let (status, headers, body) = exchange(&admin.address, path, refusal).await;
            assert_eq!(status, 200);
            assert_eq!(
                header(&headers, "content-encoding"),
                None,
                "{path} {refusal:?}"
            );
            assert_eq!(body, source);
            let digest: String = Sha256::digest(&source)[..16]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(
                header(&headers, "etag"),
                Some(format!("\"{digest}\"").as_str())
            );
        }

        // Revalidated: 304 without a body for its ETag (weakly compared, or a list), 200
        // for another, or for the plain file's request.
        for tag in [
            gzip_etag.clone(),
            format!("W/{gzip_etag}"),
            format!("\"other\", {gzip_etag}"),
        ] {
            let (status, headers, body) = exchange(
                &admin.address,
                path,
                &[gzip[0], ("If-None-Match", tag.as_str())],
            )
            .await;
            assert_eq!(status, 304, "{path} {tag}");
            assert!(body.is_empty());
            assert_eq!(header(&headers, "etag"), Some(gzip_etag.as_str()));
            assert!(header(&headers, "content-security-policy").is_some());
        }
        let (status, _, _) = exchange(
            &admin.address,
            path,
            &[gzip[0], ("If-None-Match", "\"other\"")],
        )
        .await;
        assert_eq!(status, 200);
        let (status, headers, _) = exchange(
            &admin.address,
            path,
            &[("If-None-Match", gzip_etag.as_str())],
        )
        .await;
        assert_eq!((status, header(&headers, "content-encoding")), (200, None));
    }
}
