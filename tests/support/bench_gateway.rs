//! What the recovery benchmarks share: the `wardgate` binary in front of fake servers, a
//! client over its stdio, calls, and fake HTTP servers on chosen ports.

use std::process::Stdio;
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use rmcp::service::{RunningService, ServiceExt};
use rmcp::{ClientHandler, RoleClient};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

#[path = "gateway_binary.rs"]
mod gateway_binary;

pub use gateway_binary::gateway_binary;

pub const FAKE: &str = env!("CARGO_BIN_EXE_wardgate-fake");

/// The gateway on `config` (logs off), with `handler` as its client over stdio; the gateway
/// ends when the client closes its stdin. The directory holds the config file.
pub async fn gateway<H: ClientHandler>(
    config: &str,
    handler: H,
) -> (RunningService<RoleClient, H>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.toml");
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(gateway_binary())
        .arg("--config")
        .arg(&path)
        .args(["--log-level", "error"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (stdout, stdin) = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    std::mem::forget(child); // ends when its stdin closes with the client
    let client = handler.serve((stdout, stdin)).await.unwrap();
    (client, dir)
}

/// Call `tool` with `{"text": "x"}`: its text, or why it failed (a tool error included).
pub async fn call<H: ClientHandler>(
    client: &RunningService<RoleClient, H>,
    tool: &str,
) -> Result<String, String> {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = serde_json::json!({"text": "x"}).as_object().cloned();
    match client.peer().call_tool(params).await {
        Ok(result) if result.is_error != Some(true) => Ok(result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect()),
        Ok(result) => Err(format!("{result:?}")),
        Err(error) => Err(error.to_string()),
    }
}

/// Call `tool` until it succeeds.
pub async fn until_ok<H: ClientHandler>(client: &RunningService<RoleClient, H>, tool: &str) {
    while call(client, tool).await.is_err() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A fake Streamable HTTP server named `web` on `port` (0: any); the port it took.
pub async fn start_http(port: u16) -> (Child, u16) {
    let mut child = Command::new(FAKE)
        .args([
            "--transport",
            "http",
            "--port",
            &port.to_string(),
            "--name",
            "web",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().unwrap();
    let port = line.rsplit(':').next().unwrap().trim().parse().unwrap();
    (child, port)
}
