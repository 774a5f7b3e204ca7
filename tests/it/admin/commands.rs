//! Commands over the admin API: submitting, waiting, shorthands, priorities, retries and expiry.

use std::time::Duration;

use serde_json::{json, Value};

use super::support::{start, AdminGateway};
use super::SETTLE;
use crate::harness::*;

/// Wait until the command is in `state`.
async fn wait_state(admin: &AdminGateway, id: &str, state: &str) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let (_, record) = admin.get(&format!("/commands/{id}")).await;
        if record["state"] == state {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id} never was {state}: {record}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn submit(admin: &AdminGateway, body: Value) -> Value {
    let (status, record) = admin.post("/commands", Some(body)).await;
    assert_eq!(status, 202, "{record}");
    assert_eq!(record["state"], "pending", "{record}");
    record
}

/// `alpha` serves; `slow` takes 1.5 s to start, so a `restart slow` command (which answers
/// once the server is back online) keeps the queue's executor busy that long.
async fn with_a_slow_server(env: &[(&str, &str)]) -> AdminGateway {
    let text = format!(
        "{}{}",
        stdio_server("alpha", &[]),
        stdio_server("slow", &["--start-delay-ms", "1500"])
    );
    let admin = start(config(&text), &[], env).await;
    admin.wait_status("alpha", "online", SETTLE).await;
    admin.wait_status("slow", "online", SETTLE).await;
    admin
}

/// Submit `restart slow` and wait until it is executing.
async fn keep_busy(admin: &AdminGateway) -> String {
    let busy = submit(admin, json!({"type": "restart", "server": "slow"})).await;
    let id = busy["id"].as_str().unwrap().to_owned();
    wait_state(admin, &id, "executing").await;
    id
}

#[tokio::test]
async fn a_posted_command_is_accepted_then_reported_by_id_and_in_the_list() {
    let admin = start(config(&stdio_server("alpha", &[])), &[], &[]).await;
    admin.wait_status("alpha", "online", SETTLE).await;
    let record = submit(
        &admin,
        json!({"type": "health_check", "server": "alpha", "priority": "low", "correlation_id": "probe-1"}),
    )
    .await;
    let id = record["id"].as_str().unwrap();
    assert_eq!(record["priority"], "low");
    assert_eq!(record["correlation_id"], "probe-1");
    let done = admin.finished(id).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["result"]["ok"], true, "{done}");
    for stamp in ["created_at", "acknowledged_at", "started_at", "finished_at"] {
        assert!(done[stamp].as_str().is_some(), "no {stamp}: {done}");
    }
    let (status, list) = admin.get("/commands").await;
    assert_eq!(status, 200);
    assert!(
        list["commands"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["id"] == id),
        "{list}"
    );

    // ?wait=true answers when it is done.
    let (status, done) = admin
        .post(
            "/commands?wait=true",
            Some(json!({"type": "disable", "server": "alpha"})),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["state"], "completed");
    assert_eq!(admin.server("alpha").await["status"], "disabled");

    let (status, body) = admin.get("/commands/cmd-99999").await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn server_shorthands_run_at_high_priority_and_answer_when_done() {
    let admin = start(config(&stdio_server("alpha", &[])), &[], &[]).await;
    let before = admin.wait_status("alpha", "online", SETTLE).await;

    let (status, record) = admin.post("/servers/alpha/restart", None).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["priority"], "high");
    assert_eq!(record["state"], "completed");
    let after = admin.server("alpha").await;
    assert_eq!(
        after["status"], "online",
        "restart answers once the server is back"
    );
    assert_ne!(
        after["pid"], before["pid"],
        "a restart starts a new process"
    );

    let (status, record) = admin.post("/servers/alpha/disable", None).await;
    assert_eq!((status, record["state"].as_str()), (200, Some("completed")));
    // A disabled server refuses a reconnect: the command fails and says what to do.
    let (status, record) = admin.post("/servers/alpha/reconnect", None).await;
    assert_eq!(status, 409, "{record}");
    assert_eq!(record["state"], "failed");
    assert!(
        record["error"].as_str().unwrap().contains("enable"),
        "{record}"
    );
    let (status, record) = admin.post("/servers/alpha/enable", None).await;
    assert_eq!(
        (status, record["state"].as_str()),
        (200, Some("completed")),
        "{record}"
    );
    let (status, record) = admin.post("/servers/alpha/health-check", None).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["command"]["type"], "health_check");
}

#[tokio::test]
async fn queued_commands_run_highest_priority_first() {
    let admin = with_a_slow_server(&[]).await;
    // The others queue up while the executor restarts `slow`.
    keep_busy(&admin).await;
    let mut ids = Vec::new();
    for priority in ["low", "normal", "high"] {
        let record = submit(
            &admin,
            json!({"type": "health_check", "server": "alpha", "priority": priority, "correlation_id": priority}),
        )
        .await;
        ids.push(record["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        assert_eq!(admin.finished(id).await["state"], "completed");
    }
    // The order in which they started executing, from the event log.
    let mut events = admin
        .request(reqwest::Method::GET, "/events?follow=false")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    events.retain(|c| c != '\r');
    let started: Vec<String> = events
        .split("\n\n")
        .filter_map(|block| block.lines().find_map(|line| line.strip_prefix("data: ")))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter(|event| event["event"] == "command" && event["state"] == "executing")
        .filter(|event| ids.iter().any(|id| event["command_id"] == id.as_str()))
        .map(|event| event["correlation_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(started, ["high", "normal", "low"]);
}

#[tokio::test]
async fn a_failing_command_is_retried_with_backoff_then_fails_with_its_reason() {
    let mut web = FakeHttp::start("http", &["--name", "web"]).await;
    let admin = start(
        config(&http_server("web", &web.url("http"), "streamable-http")),
        &[],
        &[("WARDGATE_COMMAND_RETRY_BASE_MS", "100")],
    )
    .await;
    admin.wait_status("web", "online", SETTLE).await;
    web.child.kill().await.unwrap();
    let deadline = tokio::time::Instant::now() + SETTLE;
    // Each attempt reconnects to a port nobody listens on: a failure worth retrying.
    let record = submit(
        &admin,
        json!({"type": "reconnect", "server": "web", "priority": "high"}),
    )
    .await;
    let id = record["id"].as_str().unwrap().to_owned();
    let mut saw_retry_pending = false;
    let done = loop {
        let (_, record) = admin.get(&format!("/commands/{id}")).await;
        if record["next_attempt_at"].is_string() && record["state"] == "pending" {
            assert!(
                record["error"].as_str().unwrap().contains("web"),
                "{record}"
            );
            saw_retry_pending = true;
        }
        if matches!(
            record["state"].as_str(),
            Some("completed" | "failed" | "expired")
        ) {
            break record;
        }
        assert!(tokio::time::Instant::now() < deadline + SETTLE, "{record}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(done["state"], "failed", "{done}");
    assert_eq!(done["attempts"], 4, "one attempt and three retries: {done}");
    assert!(
        done["error"].as_str().unwrap().contains("server \"web\""),
        "{done}"
    );
    assert!(saw_retry_pending, "a retry waited with next_attempt_at set");
}

#[tokio::test]
async fn a_command_not_started_within_its_ttl_expires() {
    let admin = with_a_slow_server(&[("WARDGATE_COMMAND_TTL_MS", "500")]).await;
    let busy_id = keep_busy(&admin).await;
    let waiting = submit(
        &admin,
        json!({"type": "health_check", "server": "alpha", "priority": "low"}),
    )
    .await;
    let expired = admin.finished(waiting["id"].as_str().unwrap()).await;
    let (_, busy_now) = admin.get(&format!("/commands/{busy_id}")).await;
    assert_eq!(
        expired["state"], "expired",
        "{expired}; the busy one: {busy_now}"
    );
    assert_eq!(expired["attempts"], 0, "{expired}");
    assert!(expired["started_at"].is_null(), "{expired}");
    let busy = admin.finished(&busy_id).await;
    assert_ne!(
        busy["state"], "expired",
        "a started command does not expire: {busy}"
    );
}
