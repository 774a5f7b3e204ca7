//! Tasks (the `io.modelcontextprotocol/tasks` extension) through the gateway, as a
//! 2026-07-28 rmcp client declaring the extension sees them: a server's task listed under
//! its server's prefix, visible to the client that created it only, and a task whose
//! server's process died reads as failed at once. (The conformance suite's `tasks-*`
//! scenarios, in conformance.rs, cover the protocol itself.)

use std::time::Duration;

use rmcp::model::{
    CallToolRequest, ClientCapabilities, ClientConfig, ClientRequest, ErrorCode, GetTaskParams,
    GetTaskRequest, GetTaskResult, Implementation, ProtocolVersion, ServerResult, TaskPayload,
    TaskStatus,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::RoleClient;
use serde_json::json;

use crate::harness::*;

const TOKEN_A: &str = "tasks-token-a-0123456789abcdef012345";
const TOKEN_B: &str = "tasks-token-b-fedcba9876543210fedcba";

type Client = RunningService<RoleClient, ClientConfig>;

/// A 2026-07-28 rmcp client declaring the tasks extension, presenting `token` if any.
async fn tasks_client(url: &str, token: Option<&str>) -> Client {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(token) = token {
        config = config.auth_header(token.to_owned());
    }
    let handler = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("tasks-test", "1"),
    );
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    };
    tokio::time::timeout(
        Duration::from_secs(20),
        handler.serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(config),
            lifecycle,
        ),
    )
    .await
    .expect("connected in time")
    .expect("connected")
}

/// Call `tool`, expecting a task; its listed id.
async fn create_task(client: &Client, tool: &str, arguments: serde_json::Value) -> String {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(tool, arguments)));
    match client.send_request(request).await.expect("tools/call") {
        ServerResult::CreateTaskResult(created) => created.task.task_id,
        other => panic!("{tool}: expected a task, got {other:?}"),
    }
}

async fn get_task(client: &Client, id: &str) -> Result<GetTaskResult, rmcp::ServiceError> {
    let request = ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(id)));
    match client.send_request(request).await? {
        ServerResult::GetTaskResult(result) => Ok(result),
        other => panic!("tasks/get {id}: {other:?}"),
    }
}

/// `tasks/get` until the task is terminal (within 30 s).
async fn until_terminal(client: &Client, id: &str) -> GetTaskResult {
    for _ in 0..300 {
        let result = get_task(client, id).await.expect("tasks/get");
        if result.task.status().is_terminal() {
            return result;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("task {id} did not end within 30 s");
}

fn unknown_task(result: Result<GetTaskResult, rmcp::ServiceError>) -> bool {
    matches!(result, Err(rmcp::ServiceError::McpError(error)) if error.code == ErrorCode::INVALID_PARAMS)
}

#[tokio::test]
async fn a_task_is_listed_under_its_server_s_prefix_and_only_its_client_sees_it() {
    let config = config(&format!(
        "[gateway.auth.clients.agent-a]\ntoken = \"${{TOKEN_A}}\"\n\n\
         [gateway.auth.clients.agent-b]\ntoken = \"${{TOKEN_B}}\"\n\n{}",
        stdio_server("fake", &["--protocol", "modern", "--tasks"])
    ));
    let (_gateway, url) =
        spawn_gateway_http_with_env(&config, &[("TOKEN_A", TOKEN_A), ("TOKEN_B", TOKEN_B)]).await;
    let a = tasks_client(&url, Some(TOKEN_A)).await;
    let b = tasks_client(&url, Some(TOKEN_B)).await;

    // Asked at once: the call waits for the server still starting.
    let id = create_task(
        &a,
        "fake__slow_compute",
        json!({"seconds": 1, "label": "mine"}),
    )
    .await;
    assert!(
        id.starts_with("fake__"),
        "listed under the server's prefix: {id}"
    );

    let seen_by_b = get_task(&b, &id).await;
    assert!(
        unknown_task(seen_by_b),
        "another client must not see the task"
    );
    let b_own = create_task(
        &b,
        "fake__slow_compute",
        json!({"seconds": 0, "label": "b"}),
    )
    .await;
    assert!(
        unknown_task(get_task(&a, &b_own).await),
        "nor the other way round"
    );

    let done = until_terminal(&a, &id).await;
    assert_eq!(done.task.task.task_id, id, "the answer names the listed id");
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("completed: {done:?}")
    };
    assert!(
        serde_json::Value::Object(result.clone())
            .to_string()
            .contains("computed mine after 1 s"),
        "the server's result, inlined: {result:?}"
    );
    assert!(
        unknown_task(get_task(&b, &id).await),
        "nor once it has ended"
    );
    let _ = a.cancel().await;
    let _ = b.cancel().await;
}

#[tokio::test]
async fn a_task_whose_server_process_died_reads_as_failed_naming_the_server() {
    // The server's first counted tools/call (`echo`, not a tasks tool) kills its process.
    let config = config(&stdio_server(
        "fake",
        &["--protocol", "modern", "--tasks", "--crash-after", "0"],
    ));
    let (_gateway, url) = spawn_gateway_http(&config).await;
    let client = tasks_client(&url, None).await;
    let id = create_task(&client, "fake__slow_compute", json!({"seconds": 600})).await;
    assert_eq!(
        get_task(&client, &id)
            .await
            .expect("tasks/get")
            .task
            .status(),
        TaskStatus::Working
    );

    let crashed = client
        .call_tool(call("fake__echo", json!({"text": "bye"})))
        .await;
    assert!(
        crashed.is_err(),
        "the call that killed the server fails: {crashed:?}"
    );

    let failed = tokio::time::timeout(Duration::from_secs(30), get_task(&client, &id))
        .await
        .expect("the status comes at once, not after the task's 600 s")
        .expect("tasks/get answers");
    assert_eq!(failed.task.status(), TaskStatus::Failed, "{failed:?}");
    let TaskPayload::Failed { error } = &failed.task.payload else {
        panic!("failed: {failed:?}")
    };
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"fake\"") && message.contains("call the tool again"),
        "names the server and what to do: {message}"
    );
    assert_eq!(error["data"]["wardgate"]["server"], "fake", "{error:?}");
    // It stays failed, also once the server is back.
    let again = until_terminal(&client, &id).await;
    assert_eq!(again.task.status(), TaskStatus::Failed);
    let _ = client.cancel().await;
}
