//! Clients never see each other: server-to-client requests and server logs reach only the
//! client they belong to, over stdio and Streamable HTTP upstreams.
//!
//! Each test has two client sessions with distinct sampling and roots handlers. The fake
//! waits 2 s in every call before acting, so client B's call (sent 200 ms after A's) is the
//! most recent one in flight when the server asks on behalf of A's call.

use std::time::Duration;

use serde_json::json;

use crate::harness::*;

/// A gateway over HTTP in front of `upstream` (a server named `s`), and clients A and B.
async fn two_clients(
    upstream: &str,
) -> (
    tokio::process::Child,
    Client,
    TestClient,
    Client,
    TestClient,
    ConfigFile,
) {
    let config = config(upstream);
    let (process, url) = spawn_gateway_http(&config).await;
    let (a, heard_a) = http_client_as(&url, "A").await;
    let (b, heard_b) = http_client_as(&url, "B").await;
    list_at_once(&a, &["s__sample"]).await;
    (process, a, heard_a, b, heard_b, config)
}

/// A calls `tool`; 200 ms later B starts a long call, so both are in flight when the server
/// (after its 2 s delay) asks for A's call. Returns A's result text.
async fn a_calls_while_b_is_calling(
    a: &Client,
    b: &Client,
    tool: &str,
    arguments: serde_json::Value,
) -> String {
    let first = a.peer().call_tool(call(tool, arguments));
    let second = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        b.peer()
            .call_tool(call("s__slow", json!({"ms": 3000})))
            .await
    };
    let (first, second) = tokio::join!(first, second);
    second.expect("B's own call is not disturbed");
    text_of(&first.expect("A's call answers"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_from_a_streamable_http_upstream_reaches_only_the_client_whose_call_asked() {
    let upstream = FakeHttp::start("http", &["--name", "s", "--delay-ms", "2000"]).await;
    let (_gateway, a, heard_a, b, heard_b, _config) =
        two_clients(&http_server("s", &upstream.url("http"), "streamable-http")).await;
    let answer =
        a_calls_while_b_is_calling(&a, &b, "s__sample", json!({"prompt": "A's private prompt"}))
            .await;
    assert!(
        answer.contains("by client A"),
        "A's sampling went elsewhere: {answer}"
    );
    assert_eq!(
        heard_b.heard(|h| h.sampling_requests),
        0,
        "B was asked to sample for A"
    );
    assert_eq!(heard_a.heard(|h| h.sampling_requests), 1);
    let roots = a_calls_while_b_is_calling(&a, &b, "s__roots", json!({})).await;
    assert!(roots.contains("wardgate-test-rootA"), "{roots}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_upstream_shared_by_two_calling_clients_gets_a_refusal_not_another_clients_answer()
{
    let (_gateway, a, heard_a, b, heard_b, _config) =
        two_clients(&stdio_server("s", &["--delay-ms", "2000"])).await;
    let answer =
        a_calls_while_b_is_calling(&a, &b, "s__sample", json!({"prompt": "A's private prompt"}))
            .await;
    assert!(
        answer.contains("sampling failed") && answer.contains("refuses"),
        "with two clients calling, the gateway must not guess: {answer}"
    );
    assert_eq!(
        heard_b.heard(|h| h.sampling_requests),
        0,
        "B was asked to sample for A"
    );
    let roots = a_calls_while_b_is_calling(&a, &b, "s__roots", json!({})).await;
    assert!(
        !roots.contains("wardgate-test-rootB"),
        "B's roots were shown to A's server: {roots}"
    );
    // With only A calling, A is the one client it can be for.
    let alone = text_of(
        &a.peer()
            .call_tool(call("s__sample", json!({"prompt": "again"})))
            .await
            .unwrap(),
    );
    assert!(alone.contains("by client A"), "{alone}");
    assert_eq!(heard_a.heard(|h| h.sampling_requests), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_log_during_a_call_goes_to_that_calls_client_only() {
    let (_gateway, a, heard_a, _b, heard_b, _config) = two_clients(&stdio_server("s", &[])).await;
    a.peer()
        .call_tool(call("s__log", json!({"message": "A's secret data"})))
        .await
        .unwrap();
    let logged = |heard: &Heard| {
        heard
            .logs
            .iter()
            .any(|log| log["data"] == "A's secret data")
    };
    assert!(
        heard_a.until(Duration::from_secs(10), logged).await,
        "A did not get its call's log"
    );
    // B saw the gateway's own news in the meantime, but never A's data.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !heard_b.heard(logged),
        "B received a log raised during A's call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    deprecated,
    reason = "logging/setLevel is what clients send on 2025-11-25"
)]
async fn logging_set_level_is_honoured_per_session() {
    let (_gateway, a, heard_a, b, heard_b, _config) = two_clients(&stdio_server("s", &[])).await;
    // B asks for warnings and above; A never asks.
    b.peer()
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Warning,
        ))
        .await
        .unwrap();
    a.peer()
        .call_tool(call("s__log", json!({"message": "info from A's call"})))
        .await
        .unwrap();
    let info = |heard: &Heard| {
        heard
            .logs
            .iter()
            .any(|log| log["data"] == "info from A's call")
    };
    assert!(heard_a.until(Duration::from_secs(10), info).await);
    // A warning during B's call goes to B, which asked for warnings, and not to A.
    b.peer()
        .call_tool(call(
            "s__log",
            json!({"message": "warning from B's call", "level": "warning"}),
        ))
        .await
        .unwrap();
    let warning = |heard: &Heard| {
        heard
            .logs
            .iter()
            .any(|log| log["data"] == "warning from B's call")
    };
    assert!(
        heard_b.until(Duration::from_secs(10), warning).await,
        "B asked for warnings"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!heard_a.heard(warning), "A got B's call's log");
    assert!(
        !heard_b.heard(info),
        "B got an info log below the level it asked for, from A's call"
    );
}
