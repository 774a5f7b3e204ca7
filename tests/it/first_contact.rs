//! First contact: clients that ask at once, with no readiness wait, as the clients people use do.
//!
//! Every test here sends its first request right after `initialize`, while the configured
//! servers are still starting. Each server that matters takes over a second to start.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::process::Command;

use crate::harness::*;
use crate::node::*;

/// A fake that needs 1.5 s before it answers `initialize`.
fn slow(name: &str) -> String {
    stdio_server(name, &["--start-delay-ms", "1500"])
}

/// Servers that fail at once: a missing command and one that exits at start.
fn broken() -> String {
    format!(
        "[servers.missing]\ncommand = \"/nonexistent/wardgate-no-such-server\"\n\n{}",
        stdio_server("dies", &["--exit-on-start", "7"])
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_lists_at_once_sees_every_server_over_stdio() {
    let text = format!("{}{}{}", slow("slow"), stdio_server("quick", &[]), broken());
    let running = gateway_stdio(config(&text)).await;
    let names = tool_names(&running.client).await;
    assert!(names.contains(&"slow__echo".to_owned()), "{names:?}");
    assert!(names.contains(&"quick__echo".to_owned()), "{names:?}");
    let prompts = running.client.peer().list_all_prompts().await.unwrap();
    assert!(
        prompts.iter().any(|p| p.name == "slow__greet"),
        "{prompts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_lists_at_once_sees_every_server_over_http() {
    let text = format!("{}{}", slow("slow"), broken());
    let running = gateway_http(config(&text)).await;
    let names = tool_names(&running.client).await;
    assert!(names.contains(&"slow__echo".to_owned()), "{names:?}");
    let resources = running.client.peer().list_all_resources().await.unwrap();
    assert!(
        resources
            .iter()
            .any(|r| r.uri.starts_with("wardgate://slow/")),
        "{resources:?}"
    );
    let templates = running
        .client
        .peer()
        .list_all_resource_templates()
        .await
        .unwrap();
    assert!(
        templates
            .iter()
            .any(|t| t.uri_template.starts_with("wardgate://slow/")),
        "{templates:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_sent_at_once_is_routed_by_its_prefix_to_a_starting_server() {
    let running = gateway_stdio(config(&slow("slow"))).await;
    let result = running
        .client
        .peer()
        .call_tool(call("slow__echo", json!({"text": "first"})))
        .await
        .expect("the call waits for its server instead of failing");
    assert_eq!(text_of(&result), "first");
    let prompt = running
        .client
        .peer()
        .get_prompt({
            let mut params = rmcp::model::GetPromptRequestParams::new("slow__greet");
            params.arguments = json!({"name": "ada"}).as_object().cloned();
            params
        })
        .await;
    assert!(prompt.is_ok(), "{prompt:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_sent_at_once_for_a_tool_the_server_lacks_is_an_unknown_tool() {
    let running = gateway_stdio(config(&slow("slow"))).await;
    let error = running
        .client
        .peer()
        .call_tool(call("slow__no_such_tool", json!({})))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("unknown tool \"slow__no_such_tool\"") && error.contains("no such tool"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_hanging_in_initialize_holds_lists_for_startup_wait_only() {
    // startup_timeout is far longer than the wait, so only startup_wait can end the wait.
    let text = format!(
        "[gateway]\nstartup_wait = \"5s\"\nstartup_timeout = \"5m\"\n\n{}{}",
        stdio_server("hangs", &["--hang-on-initialize"]),
        stdio_server("quick", &[]),
    );
    let running = gateway_stdio(config(&text)).await;
    let names = tokio::time::timeout(Duration::from_secs(120), tool_names(&running.client))
        .await
        .expect("tools/list answered although one server never initializes");
    assert!(names.contains(&"quick__echo".to_owned()), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("hangs__")), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_wait_zero_answers_with_what_is_online_and_announces_the_rest() {
    let text = format!(
        "[gateway]\nstartup_wait = \"0s\"\n\n{}{}",
        stdio_server("early", &[]),
        stdio_server("late", &["--start-delay-ms", "3000"])
    );
    let running = gateway_stdio(config(&text)).await;
    let names = tool_names(&running.client).await;
    assert!(
        !names.iter().any(|n| n.starts_with("late__")),
        "with startup_wait = 0s the list did not wait, yet shows the late server: {names:?}"
    );
    assert!(
        running
            .handler
            .until(Duration::from_secs(30), |h| h.tools_changed >= 1)
            .await,
        "no list_changed when the late server joined"
    );
    // list_changed came (for early, late or both); the late server joins within the wait.
    let names = wait_for_tools(&running.client, &["late__echo"], Duration::from_secs(30)).await;
    assert!(names.contains(&"late__echo".to_owned()), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_added_by_a_config_edit_is_waited_for_like_one_at_start() {
    let running = gateway_stdio(config(&stdio_server("first", &[]))).await;
    tool_names(&running.client).await;
    let text = format!("{}{}", stdio_server("first", &[]), slow("added"));
    std::fs::write(&running.config.path, text).unwrap();
    assert!(
        until_event(&running, "config_applied", Duration::from_secs(30)).await,
        "the edit was not applied"
    );
    let names = tool_names(&running.client).await;
    assert!(names.contains(&"added__echo".to_owned()), "{names:?}");
}

/// Run the MCP Inspector's CLI once and return its stdout, failing with its output.
async fn inspector_cli(args: &[&str]) -> String {
    let catalog = tempfile::tempdir().unwrap();
    let output = Command::new("node")
        .arg(inspector())
        .arg("--cli")
        .args(args)
        // Its catalogue of servers would otherwise be written under $HOME.
        .env("MCP_CATALOG_PATH", catalog.path().join("mcp.json"))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output)
        .await
        .expect("the Inspector CLI finished")
        .expect("run node with the Inspector CLI");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "inspector --cli {args:?} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_cli_lists_and_calls_through_a_gateway_launched_over_stdio() {
    inspector();
    let config = config(&slow("slow"));
    let gateway = wardgate().to_str().unwrap();
    let path = config.path.to_str().unwrap();
    // The Inspector's own options come first; after `--`, the command it launches.
    let listed = inspector_cli(&["--method", "tools/list", "--", gateway, "--config", path]).await;
    assert!(listed.contains("\"slow__echo\""), "{listed}");
    let called = inspector_cli(&[
        "--method",
        "tools/call",
        "--tool-name",
        "slow__echo",
        "--tool-arg",
        "text=from the inspector",
        "--",
        gateway,
        "--config",
        path,
    ])
    .await;
    assert!(called.contains("from the inspector"), "{called}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_cli_lists_and_calls_through_a_gateway_over_http() {
    inspector();
    let config = config(&slow("slow"));
    for method in ["tools/list", "tools/call"] {
        // A fresh gateway each time, so each one-shot client meets servers that are starting.
        let (_gateway, url) = spawn_gateway_http(&config).await;
        let mut args = vec![url.as_str(), "--transport", "http", "--method", method];
        if method == "tools/call" {
            args.extend(["--tool-name", "slow__add", "--tool-arg", "a=40", "b=2"]);
        }
        let out = inspector_cli(&args).await;
        match method {
            "tools/list" => assert!(out.contains("\"slow__add\""), "{out}"),
            _ => assert!(out.contains("42"), "{out}"),
        }
    }
}
