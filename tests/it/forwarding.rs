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
