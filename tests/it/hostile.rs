//! No client message brings the gateway down: deep nesting, huge strings, invalid UTF-8 and
//! random token soup, sent over Streamable HTTP and over stdio; the gateway answers or
//! refuses each, and keeps serving.

use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::harness::*;

/// Inputs no parser should trip over, each at most a few MiB.
fn hostile_messages() -> Vec<Vec<u8>> {
    let mut messages: Vec<Vec<u8>> = vec![
        format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"s__echo","arguments":{}1{}}}}}"#,
            r#"{"a":"#.repeat(50_000),
            "}".repeat(50_000)
        )
        .into_bytes(),
        format!(
            r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":"{}","arguments":{{}}}}}}"#,
            "n".repeat(3 * 1024 * 1024)
        )
        .into_bytes(),
        b"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"\xff\xfe\xc0\"}".to_vec(),
        br#"{"jsonrpc":"2.0","id":{"nested":true},"method":"ping"}"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":null}"#.to_vec(),
        br#"{"jsonrpc":"1.0","id":11}"#.to_vec(),
        b"\0\0\0\0".to_vec(),
    ];
    // Random token soup from a fixed seed, so a failure reproduces.
    let tokens = [
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        "\"jsonrpc\"",
        "\"2.0\"",
        "\"id\"",
        "1",
        "\"method\"",
        "\"tools/call\"",
        "\"params\"",
        "\"name\"",
        "null",
        "-1e999",
        "\"\\ud800\"",
        " ",
    ];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..200 {
        let mut text = String::new();
        for _ in 0..40 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            text.push_str(tokens[(state % tokens.len() as u64) as usize]);
        }
        messages.push(text.into_bytes());
    }
    messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_over_http_are_refused_and_the_gateway_keeps_serving() {
    let config = config(&stdio_server("s", &[]));
    let (mut process, url) = spawn_gateway_http(&config).await;
    let (client, _) = http_client(&url).await;
    let session = client
        .peer()
        .call_tool(call("s__echo", json!({"text": "before"})))
        .await
        .unwrap();
    assert_eq!(text_of(&session), "before");
    let http = reqwest::Client::new();
    for (index, body) in hostile_messages().into_iter().enumerate() {
        let response = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .unwrap_or_else(|error| panic!("message {index} got no answer: {error}"));
        let _ = response.text().await;
    }
    assert!(
        process.try_wait().unwrap().is_none(),
        "the gateway exited under hostile input"
    );
    let result = client
        .peer()
        .call_tool(call("s__echo", json!({"text": "after"})))
        .await
        .expect("the gateway still serves its clients");
    assert_eq!(text_of(&result), "after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_lines_over_stdio_are_survived_and_the_session_goes_on() {
    use tokio::io::AsyncBufReadExt;
    let config = config(&stdio_server("s", &[]));
    // Its log would hold the hostile lines: kept off the test's output.
    let mut process = stdio_gateway_command(&config)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn wardgate");
    let mut stdin = process.stdin.take().unwrap();
    let mut stdout = tokio::io::BufReader::new(process.stdout.take().unwrap()).lines();
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    stdin
        .write_all(
            format!(
                "{initialize}\n{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}}\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    for mut line in hostile_messages() {
        line.retain(|byte| *byte != b'\n');
        line.push(b'\n');
        stdin
            .write_all(&line)
            .await
            .expect("the gateway still reads its stdin");
    }
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"ping\"}\n")
        .await
        .unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = stdout.next_line().await {
            if line.contains("\"id\":99") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        answered,
        Ok(true),
        "the session did not survive hostile lines"
    );
    assert!(process.try_wait().unwrap().is_none(), "the gateway exited");
}
