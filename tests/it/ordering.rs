//! Notifications keep the order their server sent them in, before their request's answer:
//! 100 progress notifications in one burst from 2026-07-28 servers (stdio and HTTP), read
//! off the wire by clients of both eras. rmcp runs each notification's handler in a task of
//! its own, so only the gateway can keep them in order; the clients here read raw SSE, since
//! an rmcp client would reorder them again on its own side.

use serde_json::{json, Value};

use crate::harness::*;

const BURST: u64 = 100;

/// The JSON-RPC messages of an SSE body, in the order they came.
fn sse_messages(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            (!data.is_empty())
                .then(|| serde_json::from_str(&data.join("\n")).ok())
                .flatten()
        })
        .collect()
}

/// A handshake-era session: initialize, initialized; its id.
async fn handshake_session(http: &reqwest::Client, url: &str) -> String {
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw-sse", "version": "0"}
        }
    });
    let answer = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(initialize.to_string())
        .send()
        .await
        .expect("initialize");
    assert!(answer.status().is_success(), "{}", answer.status());
    let session = answer
        .headers()
        .get("mcp-session-id")
        .expect("a session id")
        .to_str()
        .unwrap()
        .to_owned();
    answer.text().await.unwrap();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let sent = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(initialized.to_string())
        .send()
        .await
        .expect("initialized");
    assert!(sent.status().is_success(), "{}", sent.status());
    session
}

/// Calls `tool` with a burst of progress; the messages of its response stream, in order.
async fn burst(http: &reqwest::Client, url: &str, tool: &str, session: Option<&str>) -> Vec<Value> {
    let mut meta = json!({"progressToken": "burst"});
    if session.is_none() {
        meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
        meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "raw-sse", "version": "0"});
    }
    let call = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": tool, "arguments": {"ms": 0, "steps": BURST}, "_meta": meta}
    });
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(call.to_string());
    request = match session {
        Some(session) => request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25"),
        None => request
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", tool),
    };
    let answer = request.send().await.expect("tools/call");
    assert!(answer.status().is_success(), "{tool}: {}", answer.status());
    sse_messages(&answer.text().await.expect("the response stream"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_progress_reaches_clients_of_both_eras_in_order_before_the_answer() {
    let web = FakeHttp::start("http", &["--protocol", "modern"]).await;
    let text = format!(
        "{}{}",
        stdio_server("pipe", &["--protocol", "modern"]),
        http_server("web", &web.url("http"), "streamable-http"),
    );
    let (_gateway, url) = spawn_gateway_http(&config(&text)).await;
    let http = reqwest::Client::new();
    let session = handshake_session(&http, &url).await;
    // Several rounds each: one out-of-order pair in any of them fails the test.
    for round in 0..3 {
        for tool in ["pipe__slow", "web__slow"] {
            for client in [Some(session.as_str()), None] {
                let era = if client.is_some() {
                    "2025-11-25"
                } else {
                    "2026-07-28"
                };
                let messages = burst(&http, &url, tool, client).await;
                let progress: Vec<u64> = messages
                    .iter()
                    .filter(|message| message["method"] == "notifications/progress")
                    .map(|message| message["params"]["progress"].as_f64().unwrap() as u64)
                    .collect();
                let wanted: Vec<u64> = (1..=BURST).collect();
                assert_eq!(
                    progress, wanted,
                    "round {round}, {tool}, a {era} client: progress out of order or missing"
                );
                let last = messages.last().expect("messages");
                assert_eq!(
                    (&last["id"], last["result"].is_object()),
                    (&json!(7), true),
                    "round {round}, {tool}, a {era} client: the answer comes last: {last}"
                );
                assert!(
                    messages
                        .iter()
                        .filter(|message| message["method"] == "notifications/progress")
                        .all(|message| message["params"]["progressToken"] == "burst"),
                    "under the client's own token"
                );
            }
        }
    }
}
