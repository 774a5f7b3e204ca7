//! Tasks of 2025-11-25, as a client of that revision uses them (the TypeScript SDK v1's
//! experimental tasks API, `tests/conformance/tasks-2025-client.mjs`), over Streamable HTTP
//! and stdio: the gateway declares the `tasks` capability and each tool's task support,
//! runs a `tools/call` as a task, and answers `tasks/get`, `tasks/result`, `tasks/list` and
//! `tasks/cancel` for the client that created the task only; a cancelled task's call is
//! cancelled at the server, and a task whose server died reads as failed, naming it.

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
}

#[tokio::test]
async fn a_2025_11_25_client_runs_tools_as_tasks_over_http_and_no_other_client_sees_them() {
    let config = config(&stdio_server("fake", &[]));
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
    let config = config(&stdio_server("fake", &[]));
    let wardgate = wardgate().display().to_string();
    let config_path = config.path.display().to_string();
    let seen = client_run(&["stdio", &wardgate, &config_path]).await;
    check(&seen);
}
