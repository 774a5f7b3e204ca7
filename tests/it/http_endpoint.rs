//! The Streamable HTTP endpoint: sessions, GET stream, DELETE, unknown sessions, shared upstreams.

use serde_json::json;

use crate::harness::*;
use crate::sse::SseReader;

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

fn post(
    client: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: &str,
) -> reqwest::RequestBuilder {
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_owned());
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-06-18");
    }
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_follow_the_spec() {
    let (mut process, url) = spawn_gateway_http(&config(&stdio_server("s", &[]))).await;
    let http = reqwest::Client::new();
    let response = post(&http, &url, None, INIT).send().await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let session = response
        .headers()
        .get("mcp-session-id")
        .expect("a session id")
        .to_str()
        .unwrap()
        .to_owned();
    let body = response.text().await.unwrap();
    assert!(body.contains("\"wardgate\""), "{body}");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(
        post(&http, &url, Some(&session), initialized)
            .send()
            .await
            .unwrap()
            .status(),
        202
    );
    // The GET stream opens as SSE.
    let stream = http
        .get(&url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert!(stream.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    drop(stream);
    // An unknown session is a 404.
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    assert_eq!(
        post(&http, &url, Some("no-such-session"), ping)
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    // DELETE ends the session with 204 (the official Python SDK reports 202 as a failure);
    // it is unknown afterwards, to a second DELETE too.
    let delete = || {
        http.delete(&url)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-06-18")
            .send()
    };
    assert_eq!(delete().await.unwrap().status(), 204);
    assert_eq!(delete().await.unwrap().status(), 404);
    assert_eq!(
        post(&http, &url, Some(&session), ping)
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    // Anything but /mcp is not found.
    let other = http
        .get(url.replace("/mcp", "/other"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    process.kill().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_clients_share_one_upstream_process() {
    let (_process, url) = spawn_gateway_http(&config(&stdio_server("s", &[]))).await;
    let (first, _) = http_client(&url).await;
    let (second, _) = http_client(&url).await;
    list_at_once(&first, &["s__pid"]).await;
    let a = text_of(
        &first
            .peer()
            .call_tool(call("s__pid", json!({})))
            .await
            .unwrap(),
    );
    let b = text_of(
        &second
            .peer()
            .call_tool(call("s__pid", json!({})))
            .await
            .unwrap(),
    );
    assert_eq!(a, b, "each client got its own upstream process");
    let calls = (0..20).map(|i| {
        let peer = if i % 2 == 0 {
            first.peer().clone()
        } else {
            second.peer().clone()
        };
        tokio::spawn(async move {
            peer.call_tool(call("s__echo", json!({"text": i.to_string()})))
                .await
        })
    });
    for (i, task) in calls.enumerate() {
        assert_eq!(text_of(&task.await.unwrap().unwrap()), i.to_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_client_writing_headers_and_body_apart_is_served_on_one_connection() {
    let (_process, url) = spawn_gateway_http(&config(&stdio_server("s", &[]))).await;
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .expect("a socket address in the logged URL");
    // Initialize, then calls at once (the first is routed while the server is starting),
    // all on one connection: a server that closed it would fail the next request.
    let mut client = crate::lean_client::LeanClient::connect(address, "/mcp")
        .await
        .expect("initialize over a lean client");
    for round in 0..20 {
        let answer = client.call("s__echo", "text").await.expect("tools/call");
        assert_eq!(
            answer["result"]["content"][0]["text"], "ping",
            "round {round}: {answer}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_get_stream_keeps_its_session_and_an_abandoned_session_expires() {
    // Sessions idle for 1 s expire (a test knob; 5 minutes by default).
    let (_process, url) = spawn_gateway_http_with_env(
        &config(&stdio_server("s", &[])),
        &[("WARDGATE_SESSION_IDLE_MS", "1000")],
    )
    .await;
    // rmcp's client holds the GET stream open after initialize and then only listens.
    let (listener, _) = http_client(&url).await;
    list_at_once(&listener, &["s__echo"]).await;
    // An abandoned session: initialized, no stream, never used again.
    let http = reqwest::Client::new();
    let response = post(&http, &url, None, INIT).send().await.unwrap();
    let abandoned = response
        .headers()
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let _ = response.text().await;

    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let result = listener
        .peer()
        .call_tool(call("s__echo", json!({"text": "still mine"})))
        .await
        .expect("a listening client keeps its session");
    assert_eq!(text_of(&result), "still mine");
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    let status = post(&http, &url, Some(&abandoned), ping)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 404, "an abandoned session expires");
}

/// The next event's id and data (empty when it has none); `None` at the end of the stream.
async fn next_event(events: &mut SseReader) -> Option<(String, String)> {
    let event = events.next(std::time::Duration::from_secs(20)).await?;
    Some((event.id.unwrap_or_default(), event.data.unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_stream_the_client_lost_is_resumed_from_its_last_event_id() {
    let (mut process, url) = spawn_gateway_http(&config(&stdio_server("s", &[]))).await;
    let http = reqwest::Client::new();
    let response = post(&http, &url, None, INIT).send().await.unwrap();
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = response.text().await;
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    post(&http, &url, Some(&session), initialized)
        .send()
        .await
        .unwrap();
    // A call that reports progress three times, on its own response stream.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "s__slow", "arguments": {"ms": 9000, "steps": 3}, "_meta": {"progressToken": "p"}}});
    let response = post(&http, &url, Some(&session), &call.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut events = SseReader::new(response);
    let (priming, data) = next_event(&mut events).await.expect("a priming event");
    assert!(
        data.is_empty(),
        "the stream opens with a priming event: {data}"
    );
    let (first, data) = next_event(&mut events).await.expect("the first progress");
    assert!(data.contains("notifications/progress"), "{data}");
    let stream = priming.split_once('/').expect("index/stream").1.to_owned();
    assert_eq!(first, format!("1/{stream}"));
    // The client loses the stream, and asks for what followed its last event.
    drop(events);
    let resumed = http
        .get(&url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .header("last-event-id", &first)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let mut events = SseReader::new(resumed);
    let mut seen = Vec::new();
    while let Some((id, data)) = next_event(&mut events).await {
        seen.push((id, data));
    }
    let ids: Vec<&str> = seen.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        [
            format!("2/{stream}"),
            format!("3/{stream}"),
            format!("4/{stream}")
        ],
        "the events after the last one seen, once each: {seen:?}"
    );
    assert!(
        seen[2].1.contains(r#""id":7"#) && seen[2].1.contains("done"),
        "{seen:?}"
    );
    process.kill().await.ok();
}
