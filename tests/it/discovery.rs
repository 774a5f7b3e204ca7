//! Tool discovery by search (`tool_discovery = "search"`): a client offered two tools,
//! `discover_tools` and `call_tool`, instead of every tool; per gateway and per client,
//! within the client's grant, and through the same router as a direct call.

use rmcp::model::ErrorCode;
use serde_json::{json, Value};

use crate::harness::*;

const TOKEN_A: &str = "token-a-0123456789abcdef0123456789";
const TOKEN_B: &str = "token-b-fedcba9876543210fedcba9876";

/// `discover_tools` with `arguments`: its structured answer.
async fn discover(client: &Client, arguments: Value) -> Value {
    let found = client
        .peer()
        .call_tool(call("discover_tools", arguments))
        .await
        .expect("discover_tools answers");
    let structured = found
        .structured_content
        .clone()
        .expect("a structured answer");
    // Clients that read text only get the same answer.
    let text: Value = serde_json::from_str(&text_of(&found)).expect("JSON text");
    assert_eq!(text, structured);
    structured
}

fn found_names(answer: &Value) -> Vec<String> {
    answer["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_in_search_mode_finds_and_calls_tools_within_its_grant_and_others_list_all() {
    let text = format!(
        "[gateway.auth.clients.agent-a]\ntoken = \"${{TOKEN_A}}\"\nallow = [\"alpha\"]\ntool_discovery = \"search\"\n\n\
         [gateway.auth.clients.agent-b]\ntoken = \"${{TOKEN_B}}\"\n\n{}{}",
        stdio_server("alpha", &[]),
        stdio_server("beta", &[])
    );
    let (_gateway, url) = spawn_gateway_http_with_env(
        &config(&text),
        &[("TOKEN_A", TOKEN_A), ("TOKEN_B", TOKEN_B)],
    )
    .await;
    // Both ask at once.
    let a = client_with_token(&url, TOKEN_A).await;
    let b = client_with_token(&url, TOKEN_B).await;
    assert_eq!(tool_names(&a).await, ["call_tool", "discover_tools"]);
    let all = list_at_once(&b, &["alpha__add", "beta__add"]).await;
    assert!(all.len() > 20, "{all:?}");

    // Words find tools of the servers a may use only, best first.
    let found = discover(&a, json!({"query": "add numbers"})).await;
    let names = found_names(&found);
    assert_eq!(
        names.first().map(String::as_str),
        Some("alpha__add"),
        "{found}"
    );
    assert!(names.iter().all(|n| n.starts_with("alpha__")), "{found}");
    assert!(found["tools"][0].get("inputSchema").is_none(), "{found}");
    // By name, with its schema.
    let described = discover(&a, json!({"names": ["alpha__add", "beta__add"]})).await;
    assert_eq!(found_names(&described), ["alpha__add"]);
    assert_eq!(
        described["tools"][0]["inputSchema"]["required"],
        json!(["a", "b"])
    );
    assert_eq!(described["tools"][0]["server"], "alpha");

    // call_tool runs the tool as a direct call does.
    let sum = a
        .peer()
        .call_tool(call(
            "call_tool",
            json!({"name": "alpha__add", "arguments": {"a": 20, "b": 22}}),
        ))
        .await
        .expect("call_tool answers");
    assert_eq!(sum.structured_content.as_ref().unwrap()["sum"], 42.0);
    let direct = a
        .peer()
        .call_tool(call("alpha__echo", json!({"text": "direct"})))
        .await
        .expect("a direct call still works");
    assert_eq!(text_of(&direct), "direct");
    // Outside the grant, call_tool is refused as a direct call is.
    for refused in [
        a.peer()
            .call_tool(call(
                "call_tool",
                json!({"name": "beta__echo", "arguments": {"text": "x"}}),
            ))
            .await,
        a.peer()
            .call_tool(call("beta__echo", json!({"text": "x"})))
            .await,
    ] {
        let Err(rmcp::ServiceError::McpError(error)) = refused else {
            panic!("not refused: {refused:?}");
        };
        assert_eq!(error.code, ErrorCode(-32011), "{error:?}");
        assert!(error.message.contains("agent-a"), "{}", error.message);
    }
    // A bad call names what it takes.
    let Err(rmcp::ServiceError::McpError(bad)) = a
        .peer()
        .call_tool(call("call_tool", json!({"tool": "alpha__echo"})))
        .await
    else {
        panic!("a call_tool without a name was accepted");
    };
    assert!(bad.message.contains("name"), "{}", bad.message);
    // b lists every tool, and has no search tools.
    assert!(b
        .peer()
        .call_tool(call("discover_tools", json!({})))
        .await
        .is_err());
}

/// The gateway-wide setting, over stdio: a call through `call_tool` rides through its
/// server's restart as a direct call does (the router's retries), and a search finds the
/// server's tools again once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_tool_goes_through_the_router_and_rides_through_a_restart() {
    let text = format!(
        "[gateway]\ntool_discovery = \"search\"\n\n{}",
        stdio_server("s", &[])
    );
    let running = gateway_stdio(config(&text)).await;
    assert_eq!(
        tool_names(&running.client).await,
        ["call_tool", "discover_tools"]
    );
    let pid = |result: rmcp::model::CallToolResult| -> i32 { text_of(&result).parse().unwrap() };
    let first = running
        .client
        .peer()
        .call_tool(call("call_tool", json!({"name": "s__pid"})))
        .await
        .map(pid)
        .expect("pid");
    unsafe { libc::kill(first, libc::SIGKILL) };
    let echoed = running
        .client
        .peer()
        .call_tool(call(
            "call_tool",
            json!({"name": "s__echo", "arguments": {"text": "through"}}),
        ))
        .await
        .expect("the call rides through the restart");
    assert_eq!(text_of(&echoed), "through");
    let second = running
        .client
        .peer()
        .call_tool(call("call_tool", json!({"name": "s__pid"})))
        .await
        .map(pid)
        .expect("pid");
    assert_ne!(first, second);
    let found = discover(&running.client, json!({"server": "s", "query": "echo"})).await;
    assert_eq!(
        found_names(&found).first().map(String::as_str),
        Some("s__echo")
    );
}
