//! The status page at `/` of the admin address, in a real headless Chromium (Debian's, driven
//! by npm playwright-core): every server shown, live changes over Server-Sent Events, an
//! action with its confirmation, the token asked for, and a policy swap in the decision
//! timeline. Screenshots go to `target/screenshots`.

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
