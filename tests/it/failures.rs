//! Servers that fail to start, crash mid-call, hang, or refuse credentials.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_does_not_stop_the_others() {
    // startup_wait is longer than the test's own limit: had a broken server held the first
    // list up, the list would not answer at all.
    let text = format!(
        "[gateway]\nstartup_wait = \"10m\"\n\n{}[servers.missing]\ncommand = \"/nonexistent/wardgate-no-such-server\"\n\n{}",
        stdio_server("good", &[]),
        stdio_server("dies", &["--exit-on-start", "7"]),
    );
    let running = gateway_stdio(config(&text)).await;
    let names = tokio::time::timeout(Duration::from_secs(120), tool_names(&running.client))
        .await
        .expect("tools/list was held up by servers that cannot start");
    assert!(names.contains(&"good__echo".to_owned()), "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("good__")), "{names:?}");
    let result = running
        .client
        .peer()
        .call_tool(call("good__echo", json!({"text": "ok"})))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_fails_the_call_at_once_naming_the_exit() {
    let running = gateway_stdio(config(&stdio_server("s", &[]))).await;
    list_at_once(&running.client, &["s__crash"]).await;
    let started = Instant::now();
    let error = running
        .client
        .peer()
        .call_tool(call("s__crash", json!({"code": 9})))
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the call hung for {:?}",
        started.elapsed()
    );
    assert!(
        message.contains("\"s\""),
        "error does not name the server: {message}"
    );
    assert!(
        message.contains("code 9"),
        "error does not name the exit: {message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_server_times_out_and_the_others_keep_serving() {
    let text = format!(
        "[gateway]\nrequest_timeout = \"1s\"\n\n{}{}",
        stdio_server("stuck", &["--hang-after", "0"]),
        stdio_server("fine", &[])
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["stuck__echo", "fine__echo"]).await;
    let peer = running.client.peer().clone();
    let stuck = tokio::spawn(async move {
        peer.call_tool(call("stuck__echo", json!({"text": "x"})))
            .await
    });
    let fine = running
        .client
        .peer()
        .call_tool(call("fine__echo", json!({"text": "y"})))
        .await
        .unwrap();
    assert_eq!(text_of(&fine), "y");
    let started = Instant::now();
    let error = tokio::time::timeout(Duration::from_secs(15), stuck)
        .await
        .expect("the hanging call never ended")
        .unwrap()
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(error.to_string().contains("no answer within"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_401_marks_requires_reauth_and_calls_fail_with_the_fix() {
    let denied = FakeHttp::start("http", &["--http-status", "401"]).await;
    let text = format!(
        "{}{}",
        stdio_server("fine", &[]),
        http_server("private", &denied.url("http"), "streamable-http")
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["fine__echo"]).await;
    // Wait for the failed connection attempt to land.
    let mut message = String::new();
    for _ in 0..100 {
        let error = running
            .client
            .peer()
            .call_tool(call("private__echo", json!({"text": "x"})))
            .await
            .unwrap_err();
        message = error.to_string();
        if message.contains("requires_reauth") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(message.contains("requires_reauth"), "{message}");
    assert!(
        message.contains("private") && message.contains("credentials"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_server_output_is_survived() {
    // The fake writes JSON-shaped junk before it serves and dies of the error reply rmcp
    // sends it during the discover probe: one failed start, then (2 s later) a start that
    // goes straight to `initialize`, which it survives.
    let running = gateway_stdio(config(&stdio_server("noisy", &["--malformed-output"]))).await;
    let names = wait_for_tools(&running.client, &["noisy__echo"], Duration::from_secs(30)).await;
    assert!(names.iter().any(|n| n == "noisy__echo"), "{names:?}");
    let result = running
        .client
        .peer()
        .call_tool(call("noisy__echo", json!({"text": "still here"})))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_nested_too_deep_to_read_fails_the_call_at_once_naming_the_server() {
    // The request timeout is far beyond the test's own limit: only an error that comes
    // at once can pass.
    let text = format!(
        "[gateway]\nrequest_timeout = \"10m\"\n\n{}",
        stdio_server("deep", &["--deep-answer"])
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["deep__deep"]).await;
    a_deep_answer_fails_at_once(&running, "deep", 100_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_nested_too_deep_to_read_over_http_fails_the_call_at_once_naming_the_server() {
    // The same over each HTTP way an answer comes: a Streamable HTTP event, a Streamable
    // HTTP JSON body (a 2026-07-28 server that prefers JSON), and a legacy SSE event.
    let streamed = FakeHttp::start("http", &["--deep-answer"]).await;
    let json = FakeHttp::start(
        "http",
        &["--deep-answer", "--protocol", "modern", "--json-response"],
    )
    .await;
    let legacy = FakeHttp::start("sse", &["--deep-answer"]).await;
    let text = format!(
        "[gateway]\nrequest_timeout = \"10m\"\n\n{}{}{}",
        http_server("streamed", &streamed.url("http"), "streamable-http"),
        http_server("json", &json.url("http"), "streamable-http"),
        http_server("legacy", &legacy.url("sse"), "sse"),
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(
        &running.client,
        &["streamed__deep", "json__deep", "legacy__deep"],
    )
    .await;
    for server in ["streamed", "json", "legacy"] {
        a_deep_answer_fails_at_once(&running, server, 1_000).await;
    }
}

/// `SERVER__deep` fails at once with an error naming the server, and the server is still
/// there for the next call.
async fn a_deep_answer_fails_at_once(running: &Running, server: &str, depth: u64) {
    let error = tokio::time::timeout(
        Duration::from_secs(60),
        running
            .client
            .peer()
            .call_tool(call(&format!("{server}__deep"), json!({"depth": depth}))),
    )
    .await
    .unwrap_or_else(|_| panic!("the call to {server} waited for its timeout"))
    .unwrap_err();
    let rmcp::ServiceError::McpError(error) = error else {
        panic!("{server}: {error:?}");
    };
    assert!(
        error.message.contains(&format!("server \"{server}\""))
            && error.message.contains("levels deep"),
        "{server}: {}",
        error.message
    );
    let result = running
        .client
        .peer()
        .call_tool(call(
            &format!("{server}__echo"),
            json!({"text": "still here"}),
        ))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "still here", "{server}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_an_error_not_a_hang() {
    let text = format!(
        "[gateway]\nrequest_timeout = \"60s\"\n\n{}",
        stdio_server("s", &[])
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["s__big"]).await;
    let started = Instant::now();
    let error = running
        .client
        .peer()
        .call_tool(call("s__big", json!({"bytes": 17 * 1024 * 1024})))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert!(error.to_string().contains("larger than 16 MiB"), "{error}");
    // The server comes back and serves again.
    let names = wait_for_tools(&running.client, &["s__echo"], Duration::from_secs(20)).await;
    assert!(names.iter().any(|n| n == "s__echo"));
    let mut last = String::new();
    for _ in 0..100 {
        match running
            .client
            .peer()
            .call_tool(call("s__echo", json!({"text": "back"})))
            .await
        {
            Ok(result) => {
                last = text_of(&result);
                break;
            }
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(last, "back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_http_session_is_reinitialized_transparently() {
    let http = FakeHttp::start("http", &["--name", "web", "--expire-session-after", "2"]).await;
    let running = gateway_stdio(config(&http_server(
        "web",
        &http.url("http"),
        "streamable-http",
    )))
    .await;
    list_at_once(&running.client, &["web__echo"]).await;
    for i in 0..6 {
        let result = running
            .client
            .peer()
            .call_tool(call("web__echo", json!({"text": i.to_string()})))
            .await;
        assert_eq!(
            text_of(&result.unwrap_or_else(|e| panic!("call {i} failed: {e}"))),
            i.to_string()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_expanded_into_a_url_never_shows_in_errors_or_events() {
    // Nothing listens there: every attempt fails with an error that would name the URL.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let text = format!(
        "{}[servers.web]\nurl = \"http://127.0.0.1:{port}/${{PATH_TOKEN}}/mcp?key=${{QUERY_TOKEN}}\"\n",
        stdio_server("local", &[])
    );
    let running = gateway_stdio_with_env(
        config(&text),
        &[
            ("PATH_TOKEN", "sekrit-path"),
            ("QUERY_TOKEN", "sekrit-query"),
        ],
    )
    .await;
    list_at_once(&running.client, &["local__echo"]).await;
    let error = running
        .client
        .peer()
        .call_tool(call("web__echo", json!({"text": "x"})))
        .await
        .unwrap_err()
        .to_string();
    assert!(!error.contains("sekrit"), "{error}");
    let heard = running.handler.heard(|heard| format!("{:?}", heard.logs));
    assert!(
        heard.contains("\"web\""),
        "the client heard about the server: {heard}"
    );
    assert!(
        !heard.contains("sekrit"),
        "an event carried the token: {heard}"
    );
}
