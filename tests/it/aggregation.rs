//! Aggregation and routing of tools, prompts and resources, over every transport pair.

use rmcp::model::*;
use serde_json::json;

use crate::harness::*;

/// A config with one fake per upstream transport; returns the HTTP fakes to keep them alive.
async fn three_transports() -> (ConfigFile, Vec<FakeHttp>) {
    let http = FakeHttp::start("http", &["--name", "web"]).await;
    let sse = FakeHttp::start("sse", &["--name", "legacy"]).await;
    let text = format!(
        "{}{}{}",
        stdio_server("local", &[]),
        http_server("web", &http.url("http"), "streamable-http"),
        http_server("legacy", &sse.url("sse"), "sse"),
    );
    (config(&text), vec![http, sse])
}

const ALL: [&str; 3] = ["local__echo", "web__echo", "legacy__echo"];

async fn exercise(running: &Running) {
    let peer = running.client.peer();
    let names = list_at_once(&running.client, &ALL).await;
    for wanted in ALL {
        assert!(
            names.iter().any(|n| n == wanted),
            "{wanted} missing from {names:?}"
        );
    }
    // Each call reaches its own server, with the original name.
    for server in ["local", "web", "legacy"] {
        let result = peer
            .call_tool(call(
                &format!("{server}__echo"),
                json!({"text": format!("hi {server}")}),
            ))
            .await
            .unwrap();
        assert_eq!(text_of(&result), format!("hi {server}"));
    }
    // Structured content and output schemas survive.
    let tools = peer.list_all_tools().await.unwrap();
    let add = tools
        .iter()
        .find(|t| t.name == "web__add")
        .expect("web__add listed");
    assert!(add.output_schema.is_some(), "output schema lost");
    let echo = tools.iter().find(|t| t.name == "local__echo").unwrap();
    assert_eq!(
        echo.annotations.as_ref().and_then(|a| a.read_only_hint),
        Some(true),
        "annotations lost"
    );
    let result = peer
        .call_tool(call("web__add", json!({"a": 2, "b": 3})))
        .await
        .unwrap();
    assert_eq!(
        result
            .structured_content
            .as_ref()
            .and_then(|v| v["sum"].as_f64()),
        Some(5.0)
    );
    // isError results come back unchanged, not as protocol errors.
    let failed = peer
        .call_tool(call("legacy__fail", json!({"message": "nope"})))
        .await
        .unwrap();
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(text_of(&failed), "nope");
    // Prompts are namespaced and routed.
    let prompts = peer.list_all_prompts().await.unwrap();
    assert!(
        prompts.iter().any(|p| p.name == "local__greet"),
        "{prompts:?}"
    );
    let mut get = GetPromptRequestParams::new("web__greet");
    get.arguments = json!({"name": "Ada"}).as_object().cloned();
    let prompt = peer.get_prompt(get).await.unwrap();
    let rendered = serde_json::to_string(&prompt.messages).unwrap();
    assert!(rendered.contains("Hello, Ada from web"), "{rendered}");
    // Resources: reversible URIs, read routed back.
    let resources = peer.list_all_resources().await.unwrap();
    let uri = "wardgate://legacy/fake://legacy/readme";
    assert!(resources.iter().any(|r| r.uri == uri), "{resources:?}");
    let read = peer
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .unwrap();
    match &read.contents[0] {
        ResourceContents::TextResourceContents { text, uri: got, .. } => {
            assert_eq!(text, "readme of legacy");
            assert_eq!(got, uri);
        }
        other => panic!("unexpected contents {other:?}"),
    }
    let templates = peer.list_all_resource_templates().await.unwrap();
    assert!(
        templates
            .iter()
            .any(|t| t.uri_template == "wardgate://web/fake://web/items/{id}"),
        "{templates:?}"
    );
    let item = peer
        .read_resource(ReadResourceRequestParams::new(
            "wardgate://web/fake://web/items/7",
        ))
        .await
        .unwrap();
    assert!(serde_json::to_string(&item)
        .unwrap()
        .contains("item 7 of web"));
    // A server's error answer reaches the client as it was sent, with the gateway's
    // context under its own key.
    let error = peer
        .read_resource(ReadResourceRequestParams::new(
            "wardgate://web/fake://web/nope",
        ))
        .await
        .unwrap_err();
    let rmcp::ServiceError::McpError(error) = error else {
        panic!("{error:?}");
    };
    assert_eq!(error.code, rmcp::model::ErrorCode::RESOURCE_NOT_FOUND);
    assert_eq!(error.message, "no resource fake://web/nope on fake web");
    assert_eq!(
        error.data,
        Some(json!({"uri": "fake://web/nope", "wardgate": {"server": "web"}}))
    );
    // Unknown names are clear errors.
    let error = peer
        .call_tool(call("nobody__echo", json!({})))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("no server named \"nobody\""),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_client_sees_every_upstream_transport() {
    let (config, _fakes) = three_transports().await;
    let running = gateway_stdio(config).await;
    let info = running.client.peer().peer_info().unwrap();
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("wardgate")
    );
    exercise(&running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_client_sees_every_upstream_transport() {
    let (config, _fakes) = three_transports().await;
    let running = gateway_http(config).await;
    exercise(&running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_spans_servers_and_pages() {
    let text = format!(
        "{}{}",
        stdio_server("many", &["--tools-count", "400", "--page-size", "50"]),
        stdio_server("more", &["--tools-count", "300"])
    );
    let running = gateway_stdio(config(&text)).await;
    let names = list_at_once(&running.client, &["many__tool_399", "more__tool_299"]).await;
    assert!(names.len() > 700, "{} tools", names.len());
    // The first page is not everything: the gateway paginates too.
    let first = running.client.peer().list_tools(None).await.unwrap();
    assert!(
        first.next_cursor.is_some(),
        "no second page for {} tools",
        names.len()
    );
    let mut unique = names.clone();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "duplicate names across pages");
}
