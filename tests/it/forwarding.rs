//! Progress, cancellation, sampling, elicitation, roots, logging and list_changed relayed across.
#![allow(deprecated)] // resources/subscribe is legacy-only in rmcp, and the gateway speaks legacy.

use std::time::Duration;

use rmcp::model::*;
use rmcp::service::PeerRequestOptions;
use serde_json::json;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reaches_the_client_under_its_own_token() {
    let running = gateway_stdio(config(&stdio_server("s", &[]))).await;
    list_at_once(&running.client, &["s__slow"]).await;
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
        "s__slow",
        json!({"ms": 500, "steps": 4}),
    )));
    let handle = running
        .client
        .peer()
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    let token = handle.progress_token.clone();
    let result = handle.await_response().await.unwrap();
    assert!(matches!(result, ServerResult::CallToolResult(_)));
    let heard = running.handler.heard(|h| h.progress.clone());
    assert!(heard.len() >= 3, "progress notifications: {heard:?}");
    assert!(
        heard.iter().all(|(t, _)| *t == token),
        "progress came with a foreign token: {heard:?} vs {token:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_reaches_the_server() {
    let running = gateway_stdio(config(&stdio_server("s", &[]))).await;
    list_at_once(&running.client, &["s__slow"]).await;
    let peer = running.client.peer();
    let request =
        ClientRequest::CallToolRequest(CallToolRequest::new(call("s__slow", json!({"ms": 30000}))));
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    handle.cancel(Some("test cancels".into())).await.unwrap();
    let mut count = String::new();
    for _ in 0..50 {
        let result = peer
            .call_tool(call("s__cancelled_count", json!({})))
            .await
            .unwrap();
        count = text_of(&result);
        if count == "1" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(count, "1", "the server never heard the cancellation");
}

/// A stdio server's request is written by the task that makes it and answered to it,
/// without rmcp's serve loop (`upstream::direct`), and is the request rmcp would write: the
/// gateway's own id and progress token (from 2³⁰ up, never one of rmcp's), and to a
/// 2026-07-28 server the metadata rmcp puts on each request. The timeout rules are rmcp's:
/// the server's progress keeps a call alive past the request timeout, and a call that
/// times out is cancelled at the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_request_written_directly_is_what_rmcp_would_write_with_its_timeout_rules() {
    let text = format!(
        "[gateway]\nrequest_timeout = \"1s\"\n\n{}{}",
        stdio_server("h", &[]),
        stdio_server("m", &["--protocol", "modern"]),
    );
    let running = gateway_stdio(config(&text)).await;
    let peer = running.client.peer();
    list_at_once(
        &running.client,
        &[
            "h__meta", "m__meta", "h__echo", "m__echo", "h__slow", "m__slow",
        ],
    )
    .await;
    for tool in ["h__meta", "m__meta"] {
        let result = peer.call_tool(call(tool, json!({}))).await.expect(tool);
        let seen: serde_json::Value = serde_json::from_str(&text_of(&result)).expect("JSON");
        let id = seen["request_id"].as_i64().unwrap_or_default();
        assert!(id >= 1 << 30, "{tool}: not the gateway's own id: {seen}");
        assert_eq!(seen["progressToken"], json!(id), "{tool}: {seen}");
        let modern = tool == "m__meta";
        assert_eq!(
            (
                seen.get("io.modelcontextprotocol/protocolVersion")
                    .and_then(|version| version.as_str()),
                seen["io.modelcontextprotocol/clientInfo"]["name"].as_str(),
            ),
            if modern {
                (Some("2026-07-28"), Some("wardgate"))
            } else {
                (None, None)
            },
            "{tool}: {seen}"
        );
    }
    // A request and an answer larger than a pipe holds (64 KiB) go whole, both ways.
    let large = "x".repeat(300_000);
    for tool in ["h__echo", "m__echo"] {
        let result = peer
            .call_tool(call(tool, json!({"text": large})))
            .await
            .expect(tool);
        assert!(
            text_of(&result) == large,
            "{tool}: the text came back changed"
        );
    }
    // 2.5 s of work, with progress every quarter second, through a 1 s timeout.
    for tool in ["h__slow", "m__slow"] {
        let result = peer
            .call_tool(call(tool, json!({"ms": 2500, "steps": 10})))
            .await
            .expect(tool);
        assert_eq!(text_of(&result), "done", "{tool}");
    }
    // Without progress, the timeout ends the call, and the server hears it was cancelled.
    let error = peer
        .call_tool(call("h__slow", json!({"ms": 30000, "steps": 0})))
        .await
        .expect_err("timed out");
    assert!(error.to_string().contains("no answer within 1s"), "{error}");
    let mut count = String::new();
    for _ in 0..50 {
        let result = peer
            .call_tool(call("h__cancelled_count", json!({})))
            .await
            .unwrap();
        count = text_of(&result);
        if count != "0" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        count, "1",
        "the server heard the timed-out call cancelled once"
    );
}

/// A script's requests, written all at once before any server is up, read back as raw
/// lines: each request has exactly one answer, its own, and nothing else with an id
/// reaches the client, through to the end of the stream once stdin closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stdio_request_is_answered_once_and_nothing_else_is_written() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let config = config(&stdio_server("s", &[]));
    let mut process = stdio_gateway_command(&config)
        .spawn()
        .expect("spawn wardgate");
    let mut stdin = process.stdin.take().unwrap();
    let mut stdout = BufReader::new(process.stdout.take().unwrap()).lines();
    let mut requests = vec![
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ];
    for id in 1..=20 {
        requests.push(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "s__echo", "arguments": {"text": format!("n{id}")}}}));
    }
    requests.push(json!({"jsonrpc": "2.0", "id": 21, "method": "ping"}));
    // All at once, as a script writes them.
    let text: String = requests
        .iter()
        .map(|request| format!("{request}\n"))
        .collect();
    stdin.write_all(text.as_bytes()).await.unwrap();
    let mut answers: Vec<serde_json::Value> = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        while answers.len() < 22 {
            let line = stdout.next_line().await.unwrap().expect("a line");
            let message: serde_json::Value = serde_json::from_str(&line).expect("JSON");
            if message.get("id").is_some() {
                answers.push(message);
            }
        }
    })
    .await;
    assert!(read.is_ok(), "answers so far: {answers:?}");
    drop(stdin);
    let rest = tokio::time::timeout(Duration::from_secs(30), async {
        let mut rest = Vec::new();
        while let Some(line) = stdout.next_line().await.unwrap() {
            rest.push(line);
        }
        rest
    })
    .await
    .expect("the gateway ends its output when its client goes");
    assert!(
        rest.iter().all(|line| !line.contains("\"id\"")),
        "written after every request was answered: {rest:?}"
    );
    let mut ids: Vec<u64> = answers.iter().map(|a| a["id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..=21).collect::<Vec<u64>>(), "each answered once");
    for answer in &answers {
        let id = answer["id"].as_u64().unwrap();
        if (1..=20).contains(&id) {
            assert_eq!(
                answer["result"]["content"][0]["text"],
                json!(format!("n{id}")),
                "{answer}"
            );
        }
    }
    let _ = process.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_elicitation_and_roots_are_answered_by_the_calling_client() {
    let http = FakeHttp::start("http", &["--name", "web"]).await;
    let text = format!(
        "{}{}",
        stdio_server("s", &[]),
        http_server("web", &http.url("http"), "streamable-http")
    );
    for running in [
        gateway_stdio(config(&text)).await,
        gateway_http(config(&text)).await,
    ] {
        let peer = running.client.peer();
        list_at_once(&running.client, &["s__sample", "web__sample"]).await;
        for server in ["s", "web"] {
            let sampled = peer
                .call_tool(call(
                    &format!("{server}__sample"),
                    json!({"prompt": "hello"}),
                ))
                .await
                .unwrap();
            assert!(
                text_of(&sampled).contains("sampled reply"),
                "{server}: {sampled:?}"
            );
            let elicited = peer
                .call_tool(call(&format!("{server}__elicit"), json!({"message": "q?"})))
                .await
                .unwrap();
            assert!(text_of(&elicited).contains("42"), "{server}: {elicited:?}");
            let roots = peer
                .call_tool(call(&format!("{server}__roots"), json!({})))
                .await
                .unwrap();
            assert!(
                text_of(&roots).contains("wardgate-test-root"),
                "{server}: {roots:?}"
            );
        }
        assert_eq!(running.handler.heard(|h| h.sampling_requests), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_list_changed_refreshes_and_is_announced() {
    let running = gateway_stdio(config(&stdio_server("s", &[]))).await;
    list_at_once(&running.client, &["s__echo"]).await;
    let before = running.handler.heard(|h| h.tools_changed);
    let peer = running.client.peer();
    peer.call_tool(call("s__add_tool", json!({"name": "fresh"})))
        .await
        .unwrap();
    assert!(
        running
            .handler
            .until(Duration::from_secs(10), |h| h.tools_changed > before)
            .await,
        "no tools/list_changed reached the client"
    );
    let names = wait_for_tools(&running.client, &["s__fresh"], Duration::from_secs(10)).await;
    assert!(names.iter().any(|n| n == "s__fresh"), "{names:?}");
    let result = peer
        .call_tool(call("s__fresh", json!({"text": "new"})))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "new");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_changes_its_tools_without_a_word_is_listed_again_and_announced() {
    // The server declares no tools.listChanged and adds a tool without telling anyone: the
    // gateway's own re-list (here every 300 ms) finds it and tells the client.
    let text = format!(
        "{}relist_interval = \"300ms\"\n",
        stdio_server("s", &["--silent-list-changes"])
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["s__echo"]).await;
    let before = running.handler.heard(|h| h.tools_changed);
    let peer = running.client.peer();
    peer.call_tool(call("s__add_tool", json!({"name": "unannounced"})))
        .await
        .unwrap();
    assert!(
        running
            .handler
            .until(Duration::from_secs(20), |h| h.tools_changed > before)
            .await,
        "the re-list's change never reached the client"
    );
    // The count may have moved for the list change of the server coming online, which can
    // reach the client after its first list: the new tool itself is what proves the re-list.
    let names = wait_for_tools(
        &running.client,
        &["s__unannounced"],
        Duration::from_secs(20),
    )
    .await;
    assert!(names.iter().any(|n| n == "s__unannounced"), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_log_messages_and_resource_updates_are_relayed() {
    let running = gateway_stdio(config(&stdio_server("s", &[]))).await;
    list_at_once(&running.client, &["s__log"]).await;
    let peer = running.client.peer();
    peer.call_tool(call("s__log", json!({"message": "from upstream"})))
        .await
        .unwrap();
    assert!(
        running
            .handler
            .until(Duration::from_secs(5), |h| h
                .logs
                .iter()
                .any(|l| l.to_string().contains("from upstream")))
            .await,
        "log message not relayed: {:?}",
        running.handler.heard(|h| h.logs.clone())
    );
    let uri = "wardgate://s/fake://s/readme";
    peer.subscribe(SubscribeRequestParams::new(uri))
        .await
        .unwrap();
    peer.call_tool(call("s__touch", json!({"uri": "fake://s/readme"})))
        .await
        .unwrap();
    assert!(
        running
            .handler
            .until(Duration::from_secs(5), |h| h
                .resource_updates
                .iter()
                .any(|u| u == uri))
            .await,
        "resource update not relayed: {:?}",
        running.handler.heard(|h| h.resource_updates.clone())
    );
}

/// A client whose sampling answer never comes: it notes the request and waits until the
/// request is cancelled.
#[derive(Clone, Default)]
struct PatientSampler {
    asked: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cancelled: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl rmcp::ClientHandler for PatientSampler {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(Default::default());
        ClientConfig::new(capabilities, Implementation::new("patient", "0"))
    }

    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<CreateMessageResult, rmcp::ErrorData> {
        use std::sync::atomic::Ordering;
        self.asked.store(true, Ordering::SeqCst);
        context.ct.cancelled().await;
        self.cancelled.store(true, Ordering::SeqCst);
        Err(rmcp::ErrorData::internal_error("cancelled", None))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampling_request_is_cancelled_for_the_client_when_the_server_that_asked_dies() {
    use rmcp::ServiceExt;
    use std::sync::atomic::Ordering;
    let config = config(&stdio_server("s", &[]));
    let mut process = stdio_gateway_command(&config)
        .spawn()
        .expect("spawn wardgate");
    let (stdout, stdin) = (
        process.stdout.take().unwrap(),
        process.stdin.take().unwrap(),
    );
    let sampler = PatientSampler::default();
    let client = sampler
        .clone()
        .serve((stdout, stdin))
        .await
        .expect("initialize");
    // The first list waits for the server (startup_wait).
    let tools = client.peer().list_all_tools().await.expect("tools/list");
    assert!(
        tools.iter().any(|tool| tool.name == "s__sample"),
        "{tools:?}"
    );
    let pid: i32 = text_of(
        &client
            .peer()
            .call_tool(call("s__pid", json!({})))
            .await
            .unwrap(),
    )
    .parse()
    .unwrap();
    let peer = client.peer().clone();
    let asking = tokio::spawn(async move {
        peer.call_tool(call("s__sample", json!({"prompt": "never answered"})))
            .await
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !sampler.asked.load(Ordering::SeqCst) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        sampler.asked.load(Ordering::SeqCst),
        "the server never asked"
    );
    // SAFETY: killing the fake server process this test started (through the gateway).
    unsafe { libc::kill(pid, libc::SIGKILL) };
    while !sampler.cancelled.load(Ordering::SeqCst) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        sampler.cancelled.load(Ordering::SeqCst),
        "the client was left answering a request of a server that died"
    );
    let answer = asking.await.unwrap();
    assert!(answer.is_err(), "the call whose server died: {answer:?}");
}

/// A 2026-07-28 server's question that a handshake-era client never answers holds the call
/// no longer than the server's request timeout: the client is told the question is
/// withdrawn, and the call fails naming the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_question_of_a_modern_server_ends_within_the_request_timeout() {
    use rmcp::ServiceExt;
    use std::sync::atomic::Ordering;
    let text = format!(
        "{}request_timeout = \"2s\"\n",
        stdio_server("m", &["--protocol", "modern"])
    );
    let config = config(&text);
    let mut process = stdio_gateway_command(&config)
        .spawn()
        .expect("spawn wardgate");
    let (stdout, stdin) = (
        process.stdout.take().unwrap(),
        process.stdin.take().unwrap(),
    );
    let sampler = PatientSampler::default();
    let client = sampler
        .clone()
        .serve((stdout, stdin))
        .await
        .expect("initialize");
    let answer = tokio::time::timeout(
        Duration::from_secs(30),
        client
            .peer()
            .call_tool(call("m__sample", json!({"prompt": "never answered"}))),
    )
    .await
    .expect("the call ended");
    let error = answer
        .expect_err("nobody answered the question")
        .to_string();
    assert!(
        error.contains("\"m\"") && error.contains("sampling"),
        "{error}"
    );
    assert!(sampler.asked.load(Ordering::SeqCst), "the client was asked");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !sampler.cancelled.load(Ordering::SeqCst) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        sampler.cancelled.load(Ordering::SeqCst),
        "the client was left with a withdrawn question"
    );
}
