//! Operator commands carried out on a running gateway: over MCP (`expose_admin_tools = true`:
//! `wardgate__list_servers` and `wardgate__reconnect_server`, absent unless enabled), and the
//! queue's kill, spawn, health_check and configure through the admin API.

use std::time::Duration;

use serde_json::json;

use crate::admin::support::{start, AdminGateway};
use crate::harness::*;

async fn pid_of(client: &Client, server: &str) -> u32 {
    let result = client
        .peer()
        .call_tool(call(&format!("{server}__pid"), json!({})))
        .await
        .expect("pid");
    text_of(&result).parse().expect("a pid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_tools_list_servers_and_reconnect_one_when_enabled() {
    let config = config(&format!(
        "[gateway]\nexpose_admin_tools = true\n\n{}",
        stdio_server("alpha", &[])
    ));
    let running = gateway_stdio(config).await;
    let client = &running.client;
    let names = list_at_once(client, &["alpha__echo"]).await;
    assert!(
        names.contains(&"wardgate__list_servers".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"wardgate__reconnect_server".to_owned()),
        "{names:?}"
    );
    let pid = pid_of(client, "alpha").await;

    let listed = client
        .peer()
        .call_tool(call("wardgate__list_servers", json!({})))
        .await
        .expect("list_servers");
    assert_ne!(listed.is_error, Some(true));
    let servers = listed
        .structured_content
        .clone()
        .expect("structured content")["servers"]
        .clone();
    let alpha = &servers[0];
    assert_eq!(alpha["name"], "alpha", "{servers}");
    assert_eq!(alpha["status"], "online", "{servers}");
    assert_eq!(alpha["transport"], "stdio", "{servers}");
    assert_eq!(alpha["pid"], json!(pid), "{servers}");
    assert_eq!(alpha["policy"], "builtin", "{servers}");
    assert!(alpha["tools"].as_u64().unwrap() > 0, "{servers}");
    let text = text_of(&listed);
    assert!(
        text.contains("\"alpha\""),
        "the JSON is in the text content too: {text}"
    );

    let reconnected = client
        .peer()
        .call_tool(call(
            "wardgate__reconnect_server",
            json!({ "server": "alpha" }),
        ))
        .await
        .expect("reconnect_server");
    assert_ne!(reconnected.is_error, Some(true), "{reconnected:?}");
    let answer = reconnected.structured_content.expect("structured content");
    assert_eq!(answer["reconnected"], true, "{answer}");
    assert_eq!(answer["status"], "online", "{answer}");
    assert!(
        answer["command"]
            .as_str()
            .is_some_and(|id| id.starts_with("cmd-")),
        "a command on the queue: {answer}"
    );
    assert_ne!(pid_of(client, "alpha").await, pid, "a new process serves");

    let unknown = client
        .peer()
        .call_tool(call(
            "wardgate__reconnect_server",
            json!({ "server": "nope" }),
        ))
        .await
        .expect("an answer");
    assert_eq!(unknown.is_error, Some(true));
    assert!(
        text_of(&unknown).contains("no server named \\\"nope\\\""),
        "{}",
        text_of(&unknown)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_tools_are_absent_unless_enabled() {
    let running = gateway_stdio(config(&stdio_server("beta", &[]))).await;
    let client = &running.client;
    let names = list_at_once(client, &["beta__echo"]).await;
    assert!(
        !names.iter().any(|name| name.starts_with("wardgate__")),
        "{names:?}"
    );
    let refused = client
        .peer()
        .call_tool(call("wardgate__list_servers", json!({})))
        .await;
    assert!(refused.is_err(), "an unknown tool: {refused:?}");
}

/// Submit a command over the admin API and wait until it has finished.
async fn run(admin: &AdminGateway, body: serde_json::Value) -> serde_json::Value {
    let (status, record) = admin.post("/commands", Some(body)).await;
    assert_eq!(status, 202, "{record}");
    let id = record["id"].as_str().expect("an id").to_owned();
    admin.finished(&id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_spawn_health_check_and_configure_commands_act_on_the_running_gateway() {
    let text = format!(
        "{}[servers.cred]\ncommand = {:?}\nargs = [\"--name\", \"cred\"]\nenv = {{ TOKEN = \"secret\" }}\n",
        stdio_server("alpha", &[]),
        fake()
    );
    let admin = start(config(&text), &[], &[]).await;
    let limit = Duration::from_secs(20);
    let alpha = admin.wait_status("alpha", "online", limit).await;
    admin.wait_status("cred", "online", limit).await;
    let pid = alpha["pid"].as_u64().expect("a pid") as u32;

    let killed = run(&admin, json!({ "type": "kill", "server": "alpha" })).await;
    assert_eq!(killed["state"], "completed", "{killed}");
    assert_eq!(killed["result"]["stopped_pid"], json!(pid), "{killed}");
    assert!(
        wait_gone(&[pid], Duration::from_secs(10)).await.is_empty(),
        "the process is gone"
    );
    assert_eq!(admin.server("alpha").await["status"], "disabled");

    let spawned = run(&admin, json!({ "type": "spawn", "server": "alpha" })).await;
    assert_eq!(spawned["state"], "completed", "{spawned}");
    assert_eq!(spawned["result"]["status"], "online", "{spawned}");
    let respawned = admin.server("alpha").await;
    assert_ne!(respawned["pid"], json!(pid), "a new process: {respawned}");

    let checked = run(&admin, json!({ "type": "health_check", "server": "alpha" })).await;
    assert_eq!(checked["state"], "completed", "{checked}");
    assert_eq!(checked["result"]["ok"], true, "{checked}");
    assert!(checked["result"]["latency_ms"].is_u64(), "{checked}");
    assert_eq!(
        checked["result"]["credentials_validated"],
        json!(null),
        "{checked}"
    );
    // A stdio server's environment was read when it started: a ping cannot exercise it, so
    // the check does not claim it validated anything.
    let credentials = run(&admin, json!({ "type": "health_check", "server": "cred" })).await;
    assert_eq!(
        credentials["result"]["has_credentials"], true,
        "{credentials}"
    );
    assert_eq!(
        credentials["result"]["credentials_validated"],
        json!(null),
        "{credentials}"
    );

    let unknown = run(&admin, json!({ "type": "restart", "server": "nope" })).await;
    assert_eq!(unknown["state"], "failed", "{unknown}");
    assert_eq!(unknown["attempts"], 1, "never retried: {unknown}");
    let error = unknown["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("no server named \"nope\"") && error.contains("[servers.nope]"),
        "{error}"
    );

    let configured = run(&admin, json!({ "type": "configure" })).await;
    assert_eq!(configured["state"], "completed", "{configured}");
    assert_eq!(
        configured["result"]["unchanged"],
        json!(["alpha", "cred"]),
        "{configured}"
    );
    assert_eq!(configured["result"]["added"], json!([]), "{configured}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_exercises_http_credentials_and_reconnects_a_server_that_is_down() {
    let server = crate::harness::FakeHttp::start("http", &["--name", "web"]).await;
    let port = server.port();
    let text = format!(
        "{}headers = {{ Authorization = \"Bearer not-checked-by-the-fake\" }}\n",
        http_server("web", &server.url("http"), "streamable-http")
    );
    let admin = start(config(&text), &[], &[]).await;
    admin
        .wait_status("web", "online", Duration::from_secs(20))
        .await;
    let checked = run(&admin, json!({ "type": "health_check", "server": "web" })).await;
    assert_eq!(checked["result"]["ok"], true, "{checked}");
    assert_eq!(checked["result"]["method"], "ping", "{checked}");
    // The headers travelled with the ping, and the server accepted them.
    assert_eq!(
        checked["result"]["credentials_validated"], true,
        "{checked}"
    );

    let mut server = server;
    server.child.kill().await.unwrap();
    server.child.wait().await.unwrap();
    // The check of a server that just went away finds it out; the next one is a
    // connection attempt, which fails while it is down...
    run(&admin, json!({ "type": "health_check", "server": "web" })).await;
    let down = admin
        .wait_status("web", "reconnecting", Duration::from_secs(20))
        .await;
    assert_eq!(down["status"], "reconnecting", "{down}");
    let failed = run(&admin, json!({ "type": "health_check", "server": "web" })).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("(connect)") && error.contains("a connection attempt failed"),
        "{failed}"
    );
    // ...and brings it back at once when it is up again, without waiting for the backoff.
    let _server = crate::harness::FakeHttp::start_on("http", port, &["--name", "web"]).await;
    let back = run(&admin, json!({ "type": "health_check", "server": "web" })).await;
    assert_eq!(back["result"]["method"], "connect", "{back}");
    assert_eq!(back["result"]["ok"], true, "{back}");
    assert_eq!(admin.server("web").await["status"], "online");
}

/// `web`: a Streamable HTTP server that accepts the gateway's bearer token until the test
/// writes a status (`401`) into the returned file, behind a gateway with an admin API and
/// these `extra` lines in the server's table; online when this returns.
async fn revocable_server(extra: &str) -> (Revocable, AdminGateway) {
    let dir = tempfile::tempdir().unwrap();
    let refusal = dir.path().join("status");
    let refusal_flag = refusal.display().to_string();
    let server = crate::harness::FakeHttp::start(
        "http",
        &["--name", "web", "--http-status-file", &refusal_flag],
    )
    .await;
    let text = format!(
        "{}headers = {{ Authorization = \"Bearer soon-revoked\" }}\n{extra}",
        http_server("web", &server.url("http"), "streamable-http")
    );
    let admin = start(config(&text), &[], &[]).await;
    admin
        .wait_status("web", "online", Duration::from_secs(20))
        .await;
    let revocable = Revocable {
        _dir: dir,
        refusal,
        _server: server,
    };
    (revocable, admin)
}

/// What [`revocable_server`] keeps alive: the server, and the file that makes it refuse.
struct Revocable {
    _dir: tempfile::TempDir,
    refusal: std::path::PathBuf,
    _server: FakeHttp,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_refused_with_401_moves_a_connected_server_to_requires_reauth() {
    // The server accepts the gateway's headers at first, then starts refusing them (a
    // revoked token): the operator's check is what finds out.
    let (web, admin) = revocable_server("").await;
    let refusal = &web.refusal;
    std::fs::write(refusal, "401").unwrap();
    let checked = run(&admin, json!({ "type": "health_check", "server": "web" })).await;
    // Refused credentials are not retried: the check fails once and says what to do.
    assert_eq!(checked["state"], "failed", "{checked}");
    assert_eq!(checked["attempts"], 1, "{checked}");
    let error = checked["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("401") && error.contains("refused the configured credentials"),
        "{checked}"
    );
    assert!(
        !error.contains("soon-revoked"),
        "the token leaked: {checked}"
    );
    let refused = admin
        .wait_status("web", "requires_reauth", Duration::from_secs(20))
        .await;
    assert_eq!(refused["status"], "requires_reauth", "{refused}");
    // Only an operator ends requires_reauth: once the server accepts again, a reconnect
    // brings it back.
    std::fs::remove_file(refusal).unwrap();
    let reconnected = run(&admin, json!({ "type": "reconnect", "server": "web" })).await;
    assert_eq!(reconnected["state"], "completed", "{reconnected}");
    let back = admin
        .wait_status("web", "online", Duration::from_secs(20))
        .await;
    assert_eq!(back["status"], "online", "{back}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_server_whose_credentials_are_revoked_is_found_by_its_probes() {
    // No call and no check: the periodic probe (every 200 ms here) meets the 401 and the
    // server is requires_reauth, where it used to count toward degraded only.
    let extra = "params = { probe_interval_ms = \"200\", probe_jitter = \"0\" }\n";
    let (web, admin) = revocable_server(extra).await;
    std::fs::write(&web.refusal, "401").unwrap();
    let refused = admin
        .wait_status("web", "requires_reauth", Duration::from_secs(20))
        .await;
    assert_eq!(refused["status"], "requires_reauth", "{refused}");
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("health probe") && reason.contains("401"),
        "{refused}"
    );
    assert!(
        !reason.contains("soon-revoked"),
        "the token leaked: {refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_checked_on_their_own_interval_and_a_revoked_token_is_found() {
    // Probes every 2 minutes (the default) would not see it in time; the credential check
    // (every second here) does, and says when it last looked.
    let extra = "params = { credential_check_interval_ms = \"1000\" }\n";
    let (web, admin) = revocable_server(extra).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let checked = loop {
        let (_, web) = admin.get("/servers/web").await;
        if web["last_credential_check_at"].is_string() || std::time::Instant::now() > deadline {
            break web;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(checked["credentials_accepted"], true, "{checked}");
    let at = checked["last_credential_check_at"]
        .as_str()
        .unwrap_or_default();
    assert!(humantime::parse_rfc3339(at).is_ok(), "{checked}");

    std::fs::write(&web.refusal, "401").unwrap();
    let refused = admin
        .wait_status("web", "requires_reauth", Duration::from_secs(20))
        .await;
    assert_eq!(refused["status"], "requires_reauth", "{refused}");
    assert_eq!(refused["credentials_accepted"], false, "{refused}");
}
