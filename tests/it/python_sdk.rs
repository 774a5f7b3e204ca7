//! The official MCP Python SDK as a third-party client, on both handshakes.
//!
//! The SDK is installed on first use into a virtualenv under the target directory (from
//! tests/python/requirements.txt), so `cargo test` needs nothing installed by hand.

use std::path::PathBuf;
use std::process::Command;

use crate::harness::*;

fn python() -> &'static PathBuf {
    crate::python::python_sdk()
}

fn run_client(args: &[&str]) -> serde_json::Value {
    run_script("sdk_client.py", args)
}

/// Runs `tests/python/SCRIPT` with the SDK's interpreter: the JSON report it prints last.
fn run_script(script: &str, args: &[&str]) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(script);
    let output = Command::new(python())
        .arg(script)
        .args(args)
        .output()
        .expect("run the Python SDK client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "python client failed:\n{}\n{}",
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .expect("the client prints a JSON report")
}

fn check(report: &serde_json::Value, mode: &str) {
    assert_eq!(report["server"], "wardgate", "{report}");
    assert!(
        report["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "s__echo"),
        "{report}"
    );
    assert_eq!(report["echo"], "from python", "{report}");
    assert_eq!(report["structured"]["sum"], 42.0, "{report}");
    if mode == "legacy" {
        assert_eq!(report["protocol"], "2025-11-25", "{mode}: {report}");
        assert_eq!(report["sample"], "python sampled", "{report}");
    } else {
        // "auto" asks for 2026-07-28 first, and the gateway speaks it. That revision has no
        // server-to-client requests: the server's sampling request is refused, and the
        // client reads why, with the server's name, instead of waiting.
        assert_eq!(report["protocol"], "2026-07-28", "{mode}: {report}");
        assert_eq!(report["sample_is_error"], true, "{report}");
        let sample = report["sample"].as_str().unwrap_or_default();
        assert!(
            sample.contains("2026-07-28") && sample.contains("\"s\""),
            "{report}"
        );
    }
    assert!(
        report["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "s__greet"),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_stdio_on_both_handshakes() {
    python();
    // The server takes over a second to start; each client lists at once, right after connecting.
    let config = config(&stdio_server("s", &["--start-delay-ms", "1500"]));
    let gateway = wardgate().to_str().unwrap().to_owned();
    let path = config.path.to_str().unwrap().to_owned();
    for mode in ["legacy", "auto"] {
        let report = tokio::task::spawn_blocking({
            let (gateway, path) = (gateway.clone(), path.clone());
            move || run_client(&["stdio", &gateway, &path, mode])
        })
        .await
        .unwrap();
        check(&report, mode);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_http_on_both_handshakes() {
    python();
    let config = config(&stdio_server("s", &["--start-delay-ms", "1500"]));
    for mode in ["legacy", "auto"] {
        // A fresh gateway for each client, so each one meets a server that is still starting.
        let (_process, url) = spawn_gateway_http(&config).await;
        let report = tokio::task::spawn_blocking(move || run_client(&["http", &url, mode]))
            .await
            .unwrap();
        check(&report, mode);
    }
}

/// Search mode as an agent meets it through the SDK: two tools listed, a search that finds
/// the tool, its schema, and the call made through `call_tool`; on both handshakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_finds_and_calls_tools_in_search_mode() {
    python();
    // Beside it, a real server's catalogue (26 tools): the search must pick the one that adds.
    let github = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/catalogues/github.json")
        .display()
        .to_string();
    let config = config(&format!(
        "[gateway]\ntool_discovery = \"search\"\n\n{}{}",
        stdio_server("s", &["--start-delay-ms", "500"]),
        stdio_server("github", &["--tools-file", &github])
    ));
    let gateway = wardgate().to_str().unwrap().to_owned();
    let path = config.path.to_str().unwrap().to_owned();
    for mode in ["legacy", "auto"] {
        let report = tokio::task::spawn_blocking({
            let (gateway, path) = (gateway.clone(), path.clone());
            move || run_script("discover_client.py", &[&gateway, &path, mode])
        })
        .await
        .unwrap();
        assert_eq!(
            report["tools"],
            serde_json::json!(["call_tool", "discover_tools"]),
            "{mode}: {report}"
        );
        assert_eq!(report["found"][0], "s__add", "{mode}: {report}");
        assert_eq!(
            report["schema"]["required"],
            serde_json::json!(["a", "b"]),
            "{report}"
        );
        assert_eq!(report["sum"], 42.0, "{mode}: {report}");
        assert_eq!(report["is_error"], false, "{report}");
    }
}
