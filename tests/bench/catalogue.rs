//! Benchmark: what a client pays in context for the tool list of a gateway in front of 30
//! real-world-sized servers, with every tool listed (`tool_discovery = "list"`, the default)
//! and with the two search tools instead (`"search"`). The servers are the fake offering
//! real servers' `tools/list` answers (`tests/fixtures/catalogues`, 13 published servers,
//! cycled to 30). Prints the bytes of the `tools` arrays a client reads from `tools/list`
//! (all pages, as JSON), an estimate in tokens (bytes / 4), and the bytes of typical
//! `discover_tools` answers, so the cost of finding one tool in search mode is in view too.
//! `WARDGATE_BENCH_GATEWAY=path` measures another build.
//!
//! Run: `cargo bench -p wardgate-tests --bench catalogue`.

use std::path::PathBuf;

use rmcp::model::CallToolRequestParams;

#[path = "../support/bench_gateway.rs"]
#[expect(
    dead_code,
    reason = "the support module serves several benches; this one starts a gateway only"
)]
mod bench_gateway;

use bench_gateway::{gateway, FAKE};

const SERVERS: usize = 30;

/// The fixture files, in name order.
fn fixtures() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/catalogues");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "the fixtures are missing: {files:?}");
    files
}

fn config(mode: &str) -> String {
    let files = fixtures();
    let mut text = format!("[gateway]\ntool_discovery = {mode:?}\n\n");
    for index in 0..SERVERS {
        let file = &files[index % files.len()];
        let stem = file
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .replace('-', "_");
        text.push_str(&format!(
            "[servers.{stem}_{index}]\ncommand = {FAKE:?}\nargs = [\"--name\", \"{stem}\", \"--tools-file\", {:?}]\n\n",
            file.display().to_string()
        ));
    }
    text
}

/// Bytes of the JSON `tools` arrays of every page of `tools/list`, and the tool count.
async fn listed(mode: &str) -> (usize, usize, Vec<(String, usize)>) {
    let (client, _dir) = gateway(&config(mode), ()).await;
    let tools = client.peer().list_all_tools().await.expect("tools/list");
    let bytes = serde_json::to_vec(&tools).unwrap().len();
    let mut searches = Vec::new();
    if mode == "search" {
        for (label, arguments) in [
            (
                "query \"create issue\"",
                serde_json::json!({"query": "create issue"}),
            ),
            (
                "query \"read file\", with schemas",
                serde_json::json!({"query": "read file", "include_schemas": true}),
            ),
            (
                "one tool by name (its schema)",
                serde_json::json!({"names": ["github_3__create_issue"]}),
            ),
        ] {
            let mut params = CallToolRequestParams::new("discover_tools");
            params.arguments = arguments.as_object().cloned();
            let answer = client
                .peer()
                .call_tool(params)
                .await
                .expect("discover_tools");
            // The whole result, as the client reads it: the text and the structured copy.
            let bytes = serde_json::to_vec(&answer).unwrap().len();
            searches.push((label.to_owned(), bytes));
        }
    }
    let _ = client.cancel().await;
    (tools.len(), bytes, searches)
}

#[tokio::main]
async fn main() {
    let (all_tools, all_bytes, _) = listed("list").await;
    let (meta_tools, meta_bytes, searches) = listed("search").await;
    println!("tools/list of {SERVERS} real-world-sized servers (13 published servers' catalogues, cycled)");
    println!(
        "  tool_discovery = \"list\":   {all_tools:>4} tools, {all_bytes:>8} bytes (~{} tokens)",
        all_bytes / 4
    );
    println!(
        "  tool_discovery = \"search\": {meta_tools:>4} tools, {meta_bytes:>8} bytes (~{} tokens)",
        meta_bytes / 4
    );
    println!(
        "  search mode's list is {:.2} % of the full list ({:.0}x smaller)",
        100.0 * meta_bytes as f64 / all_bytes as f64,
        all_bytes as f64 / meta_bytes as f64
    );
    for (label, bytes) in searches {
        println!(
            "  discover_tools, {label}: {bytes} bytes (~{} tokens)",
            bytes / 4
        );
    }
}
