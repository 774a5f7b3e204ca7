//! Tasks of 2025-11-25, as a client of that revision uses them (the TypeScript SDK v1's
//! experimental tasks API, `tests/conformance/tasks-2025-client.mjs`), over Streamable HTTP
//! and stdio: the gateway declares the `tasks` capability and each tool's task support,
//! runs a `tools/call` as a task, and answers `tasks/get`, `tasks/result`, `tasks/list` and
//! `tasks/cancel` for the client that created the task only; a cancelled task's call is
//! cancelled at the server, and a task whose server died reads as failed, naming it; a
//! question the server asks during a task names the task, which reads `input_required`
//! until it is answered.

use serde_json::Value;
use tokio::process::Command;

use crate::conformance::suite::{node, tasks_2025_client};
use crate::harness::*;

/// What the client script saw, driving a gateway in `mode` (`http URL` or
/// `stdio WARDGATE CONFIG`).
async fn client_run(args: &[&str]) -> Value {
    let output = Command::new(node())
        .arg(tasks_2025_client())
        .args(args)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(120), output)
        .await
        .expect("the tasks client ends within two minutes")
        .expect("node runs tasks-2025-client.mjs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "tasks-2025-client.mjs failed ({}): {stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|error| panic!("{error}: {stdout}"))
}

fn types(messages: &Value) -> Vec<&str> {
    messages
        .as_array()
        .expect("a list of messages")
        .iter()
        .filter_map(|message| message["type"].as_str())
        .collect()
}

/// The fake as `fake`, and speaking 2026-07-28 as `modern`.
fn tasks_config() -> ConfigFile {
    config(&format!(
        "{}\n{}",
        stdio_server("fake", &[]),
        stdio_server("modern", &["--protocol", "modern"])
    ))
}

/// What both transports must show.
fn check(seen: &Value) {
    assert_eq!(
        seen["serverTasks"]["requests"]["tools"]["call"],
        serde_json::json!({}),
        "{seen:#}"
    );
    assert_eq!(seen["taskSupport"], "optional", "{seen:#}");

    let completed = &seen["completed"];
    let id = completed[0]["taskId"].as_str().expect("the task's id");
    assert!(
        id.starts_with("fake__"),
        "listed under its server's prefix: {id}"
    );
    assert_eq!(completed[0]["ttl"], 60000);
    assert_eq!(types(completed).last(), Some(&"result"), "{completed:#}");
    let result = completed.as_array().unwrap().last().unwrap();
    assert_eq!(result["text"], "done");
    assert_eq!(result["related"], id, "tasks/result names its task");
    assert!(seen["listed"]
        .as_array()
        .unwrap()
        .iter()
        .any(|task| task["taskId"] == id && task["status"] == "completed"));

    let cancelled = &seen["cancelled"];
    let cancel = cancelled
        .as_array()
        .unwrap()
        .iter()
        .find(|message| message["type"] == "cancel")
        .expect("the cancellation's answer");
    assert_eq!(cancel["status"], "cancelled", "{cancelled:#}");
    assert!(
        cancelled
            .as_array()
            .unwrap()
            .iter()
            .any(|message| message["status"] == "cancelled" && message["type"] == "taskStatus"),
        "{cancelled:#}"
    );
    assert!(
        seen["serverCancelled"].as_u64() > Some(0),
        "the server's call was cancelled with the task: {seen:#}"
    );

    let crashed = &seen["crashed"];
    let failed = crashed
        .as_array()
        .unwrap()
        .iter()
        .find(|message| message["status"] == "failed")
        .unwrap_or_else(|| panic!("a failed status: {crashed:#}"));
    let why = failed["statusMessage"].as_str().unwrap_or_default();
    assert!(
        why.contains("server \"fake\"") && why.contains("exited"),
        "the failure names the server and what happened: {why}"
    );
    assert_eq!(types(crashed).last(), Some(&"error"));

    let notified: Vec<&Value> = seen["statusNotifications"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|notification| notification["taskId"] == id)
        .collect();
    assert!(
        notified.iter().any(|n| n["status"] == "completed"),
        "notifications/tasks/status told the client: {seen:#}"
    );

    let asked = &seen["asked"];
    let task = asked[0]["taskId"].as_str().expect("the asking task's id");
    let sampled = &seen["sampled"];
    let modern_task = sampled[0]["taskId"]
        .as_str()
        .expect("the modern server's task's id");
    assert_eq!(
        seen["questions"],
        serde_json::json!([
            { "kind": "elicitation", "related": task, "status": "input_required" },
            { "kind": "sampling", "related": modern_task, "status": "input_required" },
        ]),
        "each question names its task, which waits on it (the second is a 2026-07-28 \
         server's, asked by the gateway): {seen:#}"
    );
    let sampled_result = sampled.as_array().unwrap().last().unwrap();
    assert_eq!(sampled_result["text"], "sampled", "{sampled:#}");
    let result = asked.as_array().unwrap().last().unwrap();
    assert_eq!(result["type"], "result", "{asked:#}");
    let answer: Value = serde_json::from_str(result["text"].as_str().unwrap_or_default())
        .unwrap_or_else(|error| panic!("{error}: {asked:#}"));
    assert_eq!(answer["action"], "accept", "{asked:#}");
    assert_eq!(answer["content"]["answer"], "yes", "{asked:#}");
    assert_eq!(
        seen["askedAfter"],
        serde_json::json!(["completed", "completed"]),
        "answered, the tasks went on to their end: {seen:#}"
    );
    let told: Vec<&str> = seen["askedNotifications"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|notification| notification["taskId"] == task)
        .filter_map(|notification| notification["status"].as_str())
        .collect();
    assert!(
        told.contains(&"input_required") && told.last() == Some(&"completed"),
        "notifications/tasks/status told the client when the task waited on it: {seen:#}"
    );
}

#[tokio::test]
async fn a_2025_11_25_client_runs_tools_as_tasks_over_http_and_no_other_client_sees_them() {
    let config = tasks_config();
    let (_gateway, url) = spawn_gateway_http(&config).await;
    let seen = client_run(&["http", &url]).await;
    check(&seen);
    for asked in ["otherGet", "otherResult"] {
        let error = seen[asked]["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("unknown task"),
            "{asked}: another client is told the task does not exist: {seen:#}"
        );
    }
    assert_eq!(seen["otherList"], 0, "{seen:#}");
}

#[tokio::test]
async fn a_2025_11_25_client_runs_tools_as_tasks_over_stdio() {
    let config = tasks_config();
    let wardgate = wardgate().display().to_string();
    let config_path = config.path.display().to_string();
    let seen = client_run(&["stdio", &wardgate, &config_path]).await;
    check(&seen);
}

/// The JSON-RPC messages of an SSE (or JSON) answer.
fn messages(body: &str) -> Vec<Value> {
    if let Ok(one) = serde_json::from_str::<Value>(body) {
        return vec![one];
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim_start()).ok())
        .collect()
}

/// POST `body` as a client speaking `version` (in session `session`, if any): the session id
/// it was given and the answer to request `id`.
pub(crate) async fn post(
    url: &str,
    version: &str,
    session: Option<&str>,
    body: Value,
) -> (Option<String>, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .timeout(std::time::Duration::from_secs(60))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", version)
        .json(&body);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = request.send().await.expect("an answer");
    let id = response
        .headers()
        .get("mcp-session-id")
        .map(|value| value.to_str().unwrap().to_owned());
    let text = response.text().await.unwrap_or_default();
    let answer = messages(&text)
        .into_iter()
        .find(|message| message.get("id") == body.get("id"))
        .unwrap_or(Value::Null);
    (id, answer)
}

#[tokio::test]
async fn an_older_client_is_not_told_of_tasks_and_its_calls_run_as_it_asked_them() {
    let config = config(&stdio_server("fake", &[]));
    let (_gateway, url) = spawn_gateway_http(&config).await;
    for (version, told) in [("2025-06-18", false), ("2025-11-25", true)] {
        let (session, initialized) = post(
            &url,
            version,
            None,
            serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}),
        )
        .await;
        let session = session.expect("a session");
        assert_eq!(initialized["result"]["protocolVersion"], version);
        assert_eq!(
            initialized["result"]["capabilities"].get("tasks").is_some(),
            told,
            "{version}: {initialized}"
        );
        let (_, listed) = post(
            &url,
            version,
            Some(&session),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
        let echo = listed["result"]["tools"]
            .as_array()
            .and_then(|tools| tools.iter().find(|tool| tool["name"] == "fake__echo"))
            .unwrap_or_else(|| panic!("{version}: fake__echo listed at once: {listed}"));
        assert_eq!(echo.get("execution").is_some(), told, "{version}: {echo}");
        // A `task` parameter from a session that was not told of tasks is ignored: the call
        // runs as any call (2025-11-25: receivers that did not declare tasks process such
        // requests normally).
        let (_, called) = post(
            &url,
            version,
            Some(&session),
            serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "fake__echo", "arguments": {"text": "hi"}, "task": {"ttl": 60000}}}),
        )
        .await;
        if told {
            assert_eq!(called["result"]["task"]["status"], "working", "{called}");
        } else {
            assert_eq!(called["result"]["content"][0]["text"], "hi", "{called}");
        }
    }
}

/// POST `body` in `session` and read its answer as a stream of events.
pub(crate) async fn open(url: &str, session: &str, body: Value) -> crate::sse::SseReader {
    let response = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", session)
        .json(&body)
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), 200, "{body}");
    crate::sse::SseReader::new(response)
}

/// The next JSON-RPC message on `stream`, within 30 s.
pub(crate) async fn next_message(stream: &mut crate::sse::SseReader) -> Value {
    loop {
        let event = stream
            .next(std::time::Duration::from_secs(30))
            .await
            .expect("the stream stays open");
        if let Some(data) = event.data.filter(|data| !data.is_empty()) {
            return serde_json::from_str(&data).unwrap_or_else(|error| panic!("{error}: {data}"));
        }
    }
}

#[tokio::test]
async fn a_question_the_server_asks_during_a_task_comes_on_the_stream_of_its_waiting_tasks_result()
{
    let config = config(&stdio_server("fake", &[]));
    let (_gateway, url) = spawn_gateway_http(&config).await;
    let version = "2025-11-25";
    let (session, _) = post(
        &url,
        version,
        None,
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "raw", "version": "1"}}}),
    )
    .await;
    let session = session.expect("a session");
    // The server asks at once, before this client has asked for the task's result: the
    // question waits for the tasks/result it posts next (as the revision has a client do
    // when it sees `input_required`), and comes on that request's stream.
    let (_, created) = post(
        &url,
        version,
        Some(&session),
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "fake__elicit", "arguments": {"message": "Go on?"},
            "task": {"ttl": 60000}}}),
    )
    .await;
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    let mut result = open(
        &url,
        &session,
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/result",
            "params": {"taskId": task}}),
    )
    .await;
    let question = next_message(&mut result).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    assert_eq!(question["params"]["message"], "Go on?", "{question}");
    assert_eq!(
        question["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], task,
        "the question names its task: {question}"
    );

    let status = || {
        post(
            &url,
            version,
            Some(&session),
            serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get",
                "params": {"taskId": task}}),
        )
    };
    let (_, waiting) = status().await;
    assert_eq!(waiting["result"]["status"], "input_required", "{waiting}");

    let answered = reqwest::Client::new()
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", version)
        .header("mcp-session-id", &session)
        .json(
            &serde_json::json!({"jsonrpc": "2.0", "id": question["id"], "result": {
            "action": "accept", "content": {"answer": "sure"}}}),
        )
        .send()
        .await
        .expect("the answer is taken");
    assert_eq!(answered.status(), 202);

    let ended = next_message(&mut result).await;
    assert_eq!(ended["id"], 2, "tasks/result's answer: {ended}");
    let text = ended["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("sure"), "the call had the answer: {ended}");
    assert_eq!(
        ended["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], task,
        "{ended}"
    );
    let (_, done) = status().await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
}
