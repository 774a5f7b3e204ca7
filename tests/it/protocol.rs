//! MCP revisions on both sides at once: 2026-07-28 and handshake-era clients (rmcp in
//! `Auto` and legacy modes, over stdio and Streamable HTTP) in front of servers that speak
//! only 2026-07-28 and servers that speak only the handshake era, stdio and HTTP.
//!
//! Why this file is long: one test per protocol-era behaviour, clients and servers of both
//! eras, sharing the mixed setup.

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

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";

/// A 2026-07-28 client over sessionless HTTP, as Copilot CLI's rmcp client is: lists carry
/// a ttl, trace context reaches servers of both eras, progress arrives under the client's
/// own token, a cancellation reaches the server, and a server's log messages arrive within
/// a request only at the level that request asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)] // per-request log levels: deprecated in rmcp, still in 2026-07-28
async fn a_modern_http_client_gets_ttls_trace_context_progress_cancellation_and_request_logs() {
    use rmcp::model::{
        CallToolRequest, ClientRequest, LoggingLevel, RequestMetaObject, ServerResult,
    };
    use rmcp::service::PeerRequestOptions;

    let (config, _web_modern, _web_strict) = mixed().await;
    let (_gateway, url) = spawn_gateway_http(&config).await;
    let handler = TestClient::default();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url);
    let client = tokio::time::timeout(
        Duration::from_secs(20),
        handler.clone().serve_with_lifecycle(transport, auto()),
    )
    .await
    .expect("the gateway answered in time")
    .expect("connect");
    assert_eq!(
        client.peer_info().map(|info| info.protocol_version.clone()),
        Some(ProtocolVersion::V_2026_07_28)
    );
    list_at_once(
        &client,
        &["modern__meta", "handshake__meta", "webmodern__meta"],
    )
    .await;
    let listed = client.list_tools(None).await.expect("tools/list");
    // 10 s, as rmcp's client cache shows it: counting down from the moment it arrived.
    let ttl = listed.ttl_ms.unwrap_or(0);
    assert!(
        (5_000..=10_000).contains(&ttl),
        "a modern client may keep a list 10 s: {ttl}"
    );

    // Trace context travels to servers of both eras, over stdio and HTTP; with telemetry
    // off, as the client sent it.
    for tool in ["modern__meta", "handshake__meta", "webmodern__meta"] {
        let mut params = call(tool, json!({}));
        let mut meta = RequestMetaObject::new();
        meta.set_traceparent(TRACEPARENT);
        meta.set_tracestate("wardgate=1");
        meta.set_baggage("team=ops");
        params.meta = Some(meta);
        let result = client.call_tool(params).await.expect(tool);
        let seen: serde_json::Value = serde_json::from_str(&text_of(&result)).expect("JSON");
        // Baggage is the client's, and goes on only where `[gateway.telemetry] baggage`
        // says (tests/it/telemetry.rs).
        assert_eq!(
            (
                &seen["traceparent"],
                &seen["tracestate"],
                seen.get("baggage")
            ),
            (&json!(TRACEPARENT), &json!("wardgate=1"), None),
            "{tool} saw {seen}"
        );
    }

    // Progress comes back under the client's own token, on the request's own stream.
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
        "handshake__slow",
        json!({"ms": 400, "steps": 4}),
    )));
    let handle = client
        .peer()
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .expect("send");
    let token = handle.progress_token.clone();
    let answer = handle.await_response().await.expect("slow answered");
    assert!(
        matches!(answer, ServerResult::CallToolResult(_)),
        "{answer:?}"
    );
    assert!(
        handler
            .until(Duration::from_secs(10), |heard| heard.progress.len() >= 3)
            .await,
        "progress: {:?}",
        handler.heard(|heard| heard.progress.clone())
    );
    assert!(handler.heard(|heard| heard.progress.iter().all(|(t, _)| *t == token)));

    // A cancellation reaches the server that was working on the request.
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
        "handshake__slow",
        json!({"ms": 30000}),
    )));
    let handle = client
        .peer()
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .expect("send");
    tokio::time::sleep(Duration::from_millis(300)).await;
    handle
        .cancel(Some("the test cancels".into()))
        .await
        .expect("cancel");
    let mut count = String::new();
    for _ in 0..100 {
        let result = client
            .call_tool(call("handshake__cancelled_count", json!({})))
            .await
            .expect("cancelled_count");
        count = text_of(&result);
        if count == "1" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(count, "1", "the server never heard the cancellation");

    // Log messages within a request: none unasked, then at the level asked for.
    for server in ["handshake", "modern"] {
        let unasked = format!("{server} unasked");
        let asked = format!("{server} asked");
        client
            .call_tool(call(&format!("{server}__log"), json!({"message": unasked})))
            .await
            .expect("log");
        let mut params = call(&format!("{server}__log"), json!({"message": asked}));
        let mut meta = RequestMetaObject::new();
        meta.set_log_level(LoggingLevel::Info);
        params.meta = Some(meta);
        client.call_tool(params).await.expect("log");
        assert!(
            handler
                .until(Duration::from_secs(10), |heard| heard
                    .logs
                    .iter()
                    .any(|log| log["data"] == asked))
                .await,
            "{server}'s message at the level asked never came: {:?}",
            handler.heard(|heard| heard.logs.clone())
        );
        assert!(
            !handler.heard(|heard| heard.logs.iter().any(|log| log["data"] == unasked)),
            "a message nobody asked for came through"
        );
    }
    let _ = client.cancel().await;
}

/// A handshake-era stdio server that answers `server/discover` with -32022 costs a second
/// process on its first connection (the probe's process is stopped); the gateway remembers
/// that, so a reconnection starts it once, with the handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_needed_the_handshake_gets_it_first_on_reconnect() {
    let file = config("");
    let starts = file.dir.path().join("starts");
    let script = format!(
        "echo started >> '{}'; exec '{}' --name strict --protocol handshake-strict",
        starts.display(),
        fake()
    );
    std::fs::write(
        &file.path,
        format!("[servers.strict]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\n"),
    )
    .unwrap();
    let count = || {
        std::fs::read_to_string(&starts)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let admin = start(file, &[], &[]).await;
    let first = admin
        .wait_status("strict", "online", Duration::from_secs(30))
        .await;
    assert_eq!(first["protocol_version"], "2025-11-25", "{first}");
    assert_eq!(
        count(),
        1,
        "one process: the discover probe, refused, then the handshake on the same pipes"
    );
    let pid = first["pid"].as_u64().unwrap() as i32;
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let back = loop {
        let server = admin.server("strict").await;
        if server["status"] == "online" && server["pid"] != first["pid"] {
            break server;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never back: {server}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(back["protocol_version"], "2025-11-25", "{back}");
    assert_eq!(count(), 2, "the reconnection started it once");
}

/// A 2026-07-28 server asks for sampling the only way it may: it answers the call with its
/// question (`InputRequiredResult`). A 2026-07-28 client answers it itself and calls again
/// (rmcp's client does so for its caller); for a handshake-era client, which knows only
/// server-to-client requests, the gateway asks it and calls the server again itself. Over
/// stdio and HTTP, to servers over stdio and HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_servers_questions_reach_clients_of_both_eras() {
    let (config, _web_modern, _web_strict) = mixed().await;
    let (_gateway, url) = spawn_gateway_http(&config).await;
    let mut stdio = stdio_gateway_command(&config).spawn().expect("spawn");
    let (stdout, stdin) = (stdio.stdout.take().unwrap(), stdio.stdin.take().unwrap());
    let over_stdio = TestClient {
        label: "stdio",
        ..TestClient::default()
    };
    let clients = [
        (
            "handshake-era over HTTP",
            TestClient {
                label: "legacy",
                ..TestClient::default()
            }
            .serve_with_lifecycle(
                rmcp::transport::StreamableHttpClientTransport::from_uri(url.clone()),
                ClientLifecycleMode::Initialize,
            )
            .await
            .expect("connect"),
        ),
        (
            "2026-07-28 over HTTP",
            TestClient {
                label: "modern",
                ..TestClient::default()
            }
            .serve_with_lifecycle(
                rmcp::transport::StreamableHttpClientTransport::from_uri(url.clone()),
                auto(),
            )
            .await
            .expect("connect"),
        ),
        (
            "handshake-era over stdio",
            over_stdio
                .clone()
                .serve_with_lifecycle((stdout, stdin), ClientLifecycleMode::Initialize)
                .await
                .expect("connect"),
        ),
    ];
    for (who, client) in &clients {
        list_at_once(client, &["modern__sample", "webmodern__sample"]).await;
        for tool in ["modern__sample", "webmodern__sample"] {
            let result = client
                .call_tool(call(tool, json!({"prompt": "what is up"})))
                .await
                .unwrap_or_else(|error| panic!("{who}: {tool}: {error}"));
            let text = text_of(&result);
            let label = client.service().label;
            assert!(
                result.is_error != Some(true)
                    && text.starts_with("sampled reply")
                    && text.ends_with(&format!("by client {label}")),
                "{who}: {tool}: {text}"
            );
        }
    }
    assert!(over_stdio.heard(|heard| heard.sampling_requests) >= 2);
}

/// A 2026-07-28 server hears each request's client capabilities as that client's own: a
/// client of either era that declared no sampling is refused a tool that needs it, with the
/// server's -32021 as the server sent it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_server_hears_the_client_s_own_capabilities() {
    let (config, _web_modern, _web_strict) = mixed().await;
    let (_gateway, url) = spawn_gateway_http(&config).await;
    for (who, lifecycle) in [
        ("handshake-era", ClientLifecycleMode::Initialize),
        ("2026-07-28", auto()),
    ] {
        // `()` declares no capabilities at all.
        let client = ()
            .serve_with_lifecycle(
                rmcp::transport::StreamableHttpClientTransport::from_uri(url.clone()),
                lifecycle,
            )
            .await
            .expect("connect");
        // Asked at once: the first list waits for servers still starting.
        let listed = client.list_all_tools().await.expect("tools/list");
        for tool in ["modern__sample", "webmodern__sample"] {
            assert!(
                listed.iter().any(|listed| listed.name == tool),
                "{who}: {tool}"
            );
            let error = client
                .call_tool(call(tool, json!({"prompt": "what is up"})))
                .await
                .expect_err("refused");
            let rmcp::ServiceError::McpError(error) = error else {
                panic!("{who}: {tool}: {error:?}");
            };
            assert_eq!(
                error.code,
                rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                "{who}: {tool}: {error:?}"
            );
            let data = error.data.clone().unwrap_or_default();
            assert!(
                data.to_string().contains("sampling"),
                "{who}: {tool}: the server's own data: {data}"
            );
        }
    }
}

/// 2026-07-28 has no `resources/subscribe`: a server of that revision is asked for its
/// resource updates on the gateway's `subscriptions/listen` stream, which follows what
/// clients subscribe to and is opened again on every connection. Clients of both eras
/// hear the updates of servers of both eras, and still do after the server reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)] // resources/subscribe: how a handshake-era client subscribes
async fn resource_updates_of_servers_of_both_eras_reach_clients_of_both_eras() {
    use rmcp::model::{ServerNotification, SubscribeRequestParams};

    let (config, _web_modern, _web_strict) = mixed().await;
    let (_gateway, url) = spawn_gateway_http(&config).await;
    let readme = |server: &str| format!("wardgate://{server}/fake://{server}/readme");
    let touch = |server: &str| {
        (
            format!("{server}__touch"),
            json!({"uri": format!("fake://{server}/readme")}),
        )
    };
    let servers = ["modern", "webmodern", "handshake"];

    // A handshake-era client subscribes with resources/subscribe.
    let handler = TestClient::default();
    let legacy = handler
        .clone()
        .serve_with_lifecycle(
            rmcp::transport::StreamableHttpClientTransport::from_uri(url.clone()),
            ClientLifecycleMode::Initialize,
        )
        .await
        .expect("connect");
    list_at_once(
        &legacy,
        &["modern__touch", "webmodern__touch", "handshake__touch"],
    )
    .await;
    // A 2026-07-28 client names the resources on its own listen stream.
    let modern = TestClient::default()
        .serve_with_lifecycle(
            rmcp::transport::StreamableHttpClientTransport::from_uri(url.clone()),
            auto(),
        )
        .await
        .expect("connect");
    let mut filter = SubscriptionFilter::default();
    filter.resource_subscriptions = Some(servers.iter().map(|server| readme(server)).collect());
    let mut stream = modern.listen(filter).await.expect("subscriptions/listen");
    assert_eq!(
        stream
            .acknowledged()
            .resource_subscriptions
            .as_ref()
            .map(Vec::len),
        Some(3),
        "{:?}",
        stream.acknowledged()
    );
    for server in servers {
        legacy
            .subscribe(SubscribeRequestParams::new(readme(server)))
            .await
            .unwrap_or_else(|error| panic!("subscribe to {server}: {error}"));
    }

    let mut heard_by_modern = Vec::new();
    for round in ["before", "after a reconnection"] {
        for server in servers {
            let (tool, arguments) = touch(server);
            legacy
                .call_tool(call(&tool, arguments))
                .await
                .expect("touch");
            let uri = readme(server);
            assert!(
                handler
                    .until(Duration::from_secs(10), |heard| heard
                        .resource_updates
                        .iter()
                        .filter(|heard| **heard == uri)
                        .count()
                        >= if round == "before" { 1 } else { 2 })
                    .await,
                "{round}: the handshake-era client never heard {uri}: {:?}",
                handler.heard(|heard| heard.resource_updates.clone())
            );
            let heard = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    match stream.next().await {
                        Ok(Some(ServerNotification::ResourceUpdatedNotification(update))) => {
                            heard_by_modern.push(update.params.uri.clone());
                            if update.params.uri == uri {
                                return true;
                            }
                        }
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => return false,
                    }
                }
            })
            .await;
            assert_eq!(
                heard,
                Ok(true),
                "{round}: the 2026-07-28 client never heard {uri}: {heard_by_modern:?}"
            );
        }
        if round == "before" {
            // The stdio servers are killed and come back: their new connections must be
            // asked again, by their listen stream or by resources/subscribe.
            for server in ["modern", "handshake"] {
                let pid = || async {
                    let result = legacy
                        .call_tool(call(&format!("{server}__pid"), json!({})))
                        .await;
                    result.ok().map(|result| text_of(&result))
                };
                let before = pid().await.expect("a pid");
                unsafe { libc::kill(before.parse::<i32>().unwrap(), libc::SIGKILL) };
                let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                // A call waits for the reconnection: the answer comes from the new process.
                loop {
                    let now = pid().await;
                    if now.as_ref().is_some_and(|now| *now != before) {
                        break;
                    }
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "{server} never came back"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    let _ = stream.cancel().await;
}
