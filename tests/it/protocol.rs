//! MCP revisions on both sides at once: 2026-07-28 and handshake-era clients (rmcp in
//! `Auto` and legacy modes, over stdio and Streamable HTTP) in front of servers that speak
//! only 2026-07-28 and servers that speak only the handshake era, stdio and HTTP.

use std::time::Duration;

use rmcp::model::{ProtocolVersion, ServerNotification, SubscriptionFilter};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::RoleClient;
use serde_json::json;

use crate::admin::support::start;
use crate::harness::*;

/// Every tool the mixed gateway must list and answer through.
const TOOLS: [&str; 5] = [
    "modern__echo",
    "handshake__echo",
    "strict__echo",
    "webmodern__echo",
    "webstrict__echo",
];

/// Three stdio servers (2026-07-28 only; handshake era answering discover with
/// method-not-found; handshake era answering it with -32022) and two HTTP ones.
async fn mixed() -> (ConfigFile, FakeHttp, FakeHttp) {
    let web_modern =
        FakeHttp::start("http", &["--name", "webmodern", "--protocol", "modern"]).await;
    let web_strict = FakeHttp::start(
        "http",
        &["--name", "webstrict", "--protocol", "handshake-strict"],
    )
    .await;
    let text = format!(
        "{}{}{}{}{}",
        stdio_server("modern", &["--protocol", "modern"]),
        stdio_server("handshake", &[]),
        stdio_server("strict", &["--protocol", "handshake-strict"]),
        http_server("webmodern", &web_modern.url("http"), "streamable-http"),
        http_server("webstrict", &web_strict.url("http"), "streamable-http"),
    );
    (config(&text), web_modern, web_strict)
}

fn auto() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

/// Lists at once (no readiness wait) and calls every server's echo.
async fn exercise(client: &RunningService<RoleClient, ()>, expected: &ProtocolVersion) {
    let negotiated = client.peer_info().map(|info| info.protocol_version.clone());
    assert_eq!(negotiated.as_ref(), Some(expected));
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    for wanted in TOOLS {
        assert!(names.contains(&wanted), "{wanted} missing from {names:?}");
    }
    for tool in TOOLS {
        let result = client
            .call_tool(call(tool, json!({"text": tool})))
            .await
            .unwrap_or_else(|error| panic!("{tool}: {error}"));
        assert_eq!(text_of(&result), tool);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_clients_in_auto_and_legacy_mode_over_stdio_reach_servers_of_both_eras() {
    let (config, _web_modern, _web_strict) = mixed().await;
    for (mode, expected) in [
        (auto(), ProtocolVersion::V_2026_07_28),
        (
            ClientLifecycleMode::Initialize,
            ProtocolVersion::V_2025_11_25,
        ),
    ] {
        let mut process = stdio_gateway_command(&config).spawn().expect("spawn");
        let stdout = process.stdout.take().unwrap();
        let stdin = process.stdin.take().unwrap();
        let client = tokio::time::timeout(
            Duration::from_secs(20),
            ().serve_with_lifecycle((stdout, stdin), mode.clone()),
        )
        .await
        .expect("the gateway answered in time")
        .unwrap_or_else(|error| panic!("{mode:?}: {error}"));
        exercise(&client, &expected).await;
        let _ = client.cancel().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_clients_in_auto_and_legacy_mode_over_http_reach_servers_of_both_eras() {
    let (config, _web_modern, _web_strict) = mixed().await;
    let (_gateway, url) = spawn_gateway_http(&config).await;
    for (mode, expected) in [
        (auto(), ProtocolVersion::V_2026_07_28),
        (
            ClientLifecycleMode::Initialize,
            ProtocolVersion::V_2025_11_25,
        ),
    ] {
        let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.clone());
        let client = tokio::time::timeout(
            Duration::from_secs(20),
            ().serve_with_lifecycle(transport, mode.clone()),
        )
        .await
        .expect("the gateway answered in time")
        .unwrap_or_else(|error| panic!("{mode:?}: {error}"));
        exercise(&client, &expected).await;
        let _ = client.cancel().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_client_hears_list_changes_on_subscriptions_listen() {
    let (config, _web_modern, _web_strict) = mixed().await;
    let mut process = stdio_gateway_command(&config).spawn().expect("spawn");
    let stdout = process.stdout.take().unwrap();
    let stdin = process.stdin.take().unwrap();
    let client = ().serve_with_lifecycle((stdout, stdin), auto()).await.expect("connect");
    client.list_all_tools().await.expect("tools/list");
    let mut subscription = client
        .listen(SubscriptionFilter::builder().tools_list_changed().build())
        .await
        .expect("subscriptions/listen");
    // A handshake-era server's list changes, and a 2026-07-28 server's (which the gateway
    // hears on its own listen stream upstream): both reach the client's stream.
    for server in ["handshake", "modern"] {
        client
            .call_tool(call(
                &format!("{server}__add_tool"),
                json!({"name": "extra"}),
            ))
            .await
            .unwrap_or_else(|error| panic!("{server}__add_tool: {error}"));
        let heard = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match subscription.next().await {
                    Ok(Some(ServerNotification::ToolListChangedNotification(_))) => {
                        let names: Vec<String> = client
                            .list_all_tools()
                            .await
                            .expect("tools/list")
                            .iter()
                            .map(|tool| tool.name.to_string())
                            .collect();
                        if names.contains(&format!("{server}__extra")) {
                            return true;
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => return false,
                }
            }
        })
        .await;
        assert_eq!(heard, Ok(true), "no list change for {server}'s new tool");
    }
    let _ = subscription.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_server_shows_the_revision_it_negotiated() {
    let (config, _web_modern, _web_strict) = mixed().await;
    let admin = start(config, &[], &[]).await;
    for (server, expected) in [
        ("modern", "2026-07-28"),
        ("handshake", "2025-11-25"),
        ("strict", "2025-11-25"),
        ("webmodern", "2026-07-28"),
        ("webstrict", "2025-11-25"),
    ] {
        let shown = admin
            .wait_status(server, "online", Duration::from_secs(30))
            .await;
        assert_eq!(shown["protocol_version"], expected, "{server}: {shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_no_revision_in_common_is_permanently_failed_with_both_sides_versions() {
    let web = FakeHttp::start("http", &["--name", "webfuture", "--protocol", "future"]).await;
    let text = format!(
        "{}{}",
        stdio_server("future", &["--protocol", "future"]),
        http_server("webfuture", &web.url("http"), "streamable-http"),
    );
    let admin = start(config(&text), &[], &[]).await;
    for server in ["future", "webfuture"] {
        let shown = admin
            .wait_status(server, "permanently_failed", Duration::from_secs(30))
            .await;
        assert_eq!(shown["status"], "permanently_failed", "{server}: {shown}");
        // A final status, not a crash loop or an endless reconnect: the reason names the
        // revisions on each side.
        let reason = shown["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("no protocol revision in common")
                && reason.contains("2099-01-01")
                && reason.contains("2026-07-28"),
            "{server}: {shown}"
        );
    }
}
