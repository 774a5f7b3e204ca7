//! Connection-level limits of the Streamable HTTP listener: each refuses cleanly, and the
//! gateway keeps serving everyone else.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::*;
use crate::measure::rss_kib;

fn address(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned()
}

/// Read until the peer closes or `limit` passes; what arrived.
async fn read_some(stream: &mut TcpStream, limit: Duration) -> String {
    let mut buffer = vec![0u8; 4096];
    match tokio::time::timeout(limit, stream.read(&mut buffer)).await {
        Ok(Ok(read)) => String::from_utf8_lossy(&buffer[..read]).into_owned(),
        Ok(Err(error)) => format!("error: {error}"),
        Err(_) => "still open".to_owned(),
    }
}

/// A gateway in front of one stdio server, with test-sized limits.
async fn gateway(env: &[(&str, &str)]) -> (tokio::process::Child, String, ConfigFile) {
    let config = config(&stdio_server("s", &[]));
    let (process, url) = spawn_gateway_http_with_env(&config, env).await;
    (process, url, config)
}

/// A client's whole session still works.
async fn still_serves(url: &str) {
    let (client, _) = http_client(url).await;
    let result = client
        .peer()
        .call_tool(call("s__echo", json!({"text": "served"})))
        .await
        .expect("the gateway still serves");
    assert_eq!(text_of(&result), "served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_headers_are_cut_off_and_the_connection_cap_answers_503() {
    // Every connection here comes from 127.0.0.1: one address may hold the whole cap, so
    // the slow ones fill the cap itself (with the default share, a quarter of it, the third
    // was refused and the client at the end could be refused its third connection).
    let config = config(&format!(
        "[gateway.http]\nmax_connections_per_address = 8\n\n{}",
        stdio_server("s", &[])
    ));
    let (_gateway, url) = spawn_gateway_http_with_env(
        &config,
        &[
            ("WARDGATE_MAX_CONNECTIONS", "8"),
            // Long enough that all eight still hold the cap when the ninth comes, on a
            // loaded machine too.
            ("WARDGATE_HEADER_TIMEOUT_MS", "3000"),
        ],
    )
    .await;
    let address = address(&url);
    // Slowloris: eight connections that never finish their header block.
    let mut slow = Vec::new();
    for _ in 0..8 {
        let mut stream = TcpStream::connect(&address).await.unwrap();
        stream
            .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .unwrap();
        slow.push(stream);
    }
    // The ninth is over the cap: a clean 503, not silence.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut ninth = TcpStream::connect(&address).await.unwrap();
    let answer = read_some(&mut ninth, Duration::from_secs(20)).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("limit"), "{answer}");
    // The half-sent ones are closed once the header timeout passes.
    for stream in &mut slow {
        let answer = read_some(stream, Duration::from_secs(30)).await;
        assert_ne!(
            answer, "still open",
            "a half-sent request kept its connection"
        );
    }
    still_serves(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_is_413_and_a_body_that_never_ends_is_cut_off() {
    let (_gateway, url, _config) = gateway(&[("WARDGATE_BODY_TIMEOUT_MS", "1000")]).await;
    let address = address(&url);
    let mut big = TcpStream::connect(&address).await.unwrap();
    big.write_all(
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
          Accept: application/json, text/event-stream\r\nContent-Length: 999999999\r\n\r\n",
    )
    .await
    .unwrap();
    let answer = read_some(&mut big, Duration::from_secs(20)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    let mut stalled = TcpStream::connect(&address).await.unwrap();
    stalled
        .write_all(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
              Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"json",
        )
        .await
        .unwrap();
    let answer = read_some(&mut stalled, Duration::from_secs(30)).await;
    assert_ne!(
        answer, "still open",
        "a body that never ends held its connection"
    );
    assert!(
        !answer.starts_with("HTTP/1.1 2"),
        "an unfinished body was accepted: {answer}"
    );
    still_serves(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_flood_on_one_connection_keeps_memory_bounded() {
    // At the default log level: at info, rmcp logs each 256 KiB notification whole.
    let config = config(&stdio_server("s", &[]));
    let mut gateway = tokio::process::Command::new(wardgate())
        .arg("--config")
        .arg(&config.path)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = url_in_log(&mut gateway, "Streamable HTTP", Duration::from_secs(30)).await;
    let pid = gateway.id().unwrap();
    still_serves(&url).await;
    let before = rss_kib(pid);
    let stream = TcpStream::connect(address(&url)).await.unwrap();
    let (client, connection) = h2::client::handshake(stream)
        .await
        .expect("h2c prior knowledge");
    tokio::spawn(connection);
    // 100 streams, each pushing 4 MiB of a body that never ends; the gateway allows a few
    // streams at once and small windows, so most of this cannot even be sent.
    let mut opened = Vec::new();
    let chunk = bytes::Bytes::from(vec![b' '; 64 * 1024]);
    for _ in 0..100 {
        // Past the gateway's stream limit, a new stream waits for one to end: stop there.
        let mut client =
            match tokio::time::timeout(Duration::from_millis(500), client.clone().ready()).await {
                Ok(Ok(client)) => client,
                _ => break,
            };
        let request = http::Request::post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(())
            .unwrap();
        let Ok((response, mut body)) = client.send_request(request, false) else {
            break;
        };
        let chunk = chunk.clone();
        opened.push(tokio::spawn(async move {
            for _ in 0..64 {
                body.reserve_capacity(chunk.len());
                if body.send_data(chunk.clone(), false).is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let _ = tokio::time::timeout(Duration::from_secs(5), response).await;
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = rss_kib(pid);
    let grown_mib = during.saturating_sub(before) / 1024;
    assert!(
        grown_mib < 100,
        "one HTTP/2 connection grew the gateway by {grown_mib} MiB (before: {before} kB, during: {during} kB)"
    );
    for task in opened {
        task.abort();
    }
    still_serves(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_across_connections_cannot_hold_more_than_the_budget() {
    // Room for 1 MiB of request bodies in all; each slow client sends 400 KiB of 1 MiB.
    let (_gateway, url, _config) = gateway(&[("WARDGATE_BODY_BUDGET_BYTES", "1048576")]).await;
    let address = address(&url);
    let head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                 Accept: application/json, text/event-stream\r\nContent-Length: 1048576\r\n\r\n";
    let mut slow = Vec::new();
    let mut refused = 0;
    for _ in 0..6 {
        let mut stream = TcpStream::connect(&address).await.unwrap();
        stream.write_all(head).await.unwrap();
        stream.write_all(&vec![b' '; 400 * 1024]).await.unwrap();
        // Past the budget the body fails at once, before its timeout.
        let answer = read_some(&mut stream, Duration::from_secs(2)).await;
        if answer.starts_with("HTTP/1.1 4") || answer.starts_with("HTTP/1.1 5") {
            refused += 1;
        }
        slow.push(stream);
    }
    assert!(
        refused >= 3,
        "only {refused} of 6 slow bodies were refused with a 1 MiB budget"
    );
    // Closed connections give their bodies' bytes back.
    drop(slow);
    tokio::time::sleep(Duration::from_secs(1)).await;
    still_serves(&url).await;
}

/// Session `session`'s GET stream, asked for on a socket of its own (nothing read yet).
async fn get_stream(url: &str, session: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address(url)).await.unwrap();
    stream
        .write_all(
            format!(
                "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\
                 Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-06-18\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    stream
}

/// POST `body` to the session `session` (or none) and return the answer's session id and text.
async fn post_json(
    url: &str,
    session: Option<&str>,
    body: serde_json::Value,
) -> (Option<String>, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .timeout(Duration::from_secs(120))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = request.json(&body).send().await.expect("an answer");
    let id = response
        .headers()
        .get("mcp-session-id")
        .map(|value| value.to_str().unwrap().to_owned());
    (id, response.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_its_stream_holds_a_bounded_number_of_bytes() {
    let (gateway, url, _config) = gateway(&[]).await;
    let pid = gateway.id().unwrap();
    let (session, _) = post_json(
        &url,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "stalled", "version": "1"}}}),
    )
    .await;
    let session = session.expect("a session id");
    post_json(
        &url,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    post_json(
        &url,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "debug"}}),
    )
    .await;
    // Its GET stream, opened and never read.
    let mut stream = get_stream(&url, &session).await;
    // Its answer's head says the stream is open; from here on the client reads nothing.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut byte))
            .await
            .expect("the GET stream's head came")
            .unwrap();
        assert_eq!(
            read,
            1,
            "the GET stream closed: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let before = rss_kib(pid);
    // The peak resident size while a call of its own logs 400 messages of 256 KiB
    // (100 MiB) for it to read.
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(before));
    let sampling = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let (_, answer) = post_json(
        &url,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "s__log",
            "arguments": {"message": "x".repeat(256 * 1024), "repeat": 400}}}),
    )
    .await;
    sampling.abort();
    // Its own request is answered on its own stream, the stalled GET stream notwithstanding.
    assert!(
        answer.contains("\"result\""),
        "{}",
        &answer[..answer.len().min(400)]
    );
    let grew_mib = peak
        .load(std::sync::atomic::Ordering::Relaxed)
        .saturating_sub(before)
        / 1024;
    println!(
        "resident size grew by {grew_mib} MiB at most while 100 MiB of notifications were not read"
    );
    assert!(
        grew_mib < 50,
        "the gateway held {grew_mib} MiB for a client that stopped reading"
    );
    // It goes on not reading until the gateway closes the stream (10 s without a read,
    // checked every 2.5 s; 20 s leaves room on a loaded machine). Reading again, it is told first that the stream was closed, then,
    // after the notifications the session kept for it, how many were lost.
    tokio::time::sleep(Duration::from_secs(20)).await;
    drop(stream);
    let mut stream = get_stream(&url, &session).await;
    let mut told = String::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let _ = tokio::time::timeout(Duration::from_secs(20), async {
        while !told.contains("notifications were dropped while this client was not reading") {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => told.push_str(&String::from_utf8_lossy(&buffer[..read])),
            }
        }
    })
    .await;
    let cut = told.find("notifications sent meanwhile were lost");
    let counted = told.find("notifications were dropped while this client was not reading");
    assert!(
        cut.is_some() && counted.is_some() && cut < counted,
        "{}",
        &told[..told.len().min(2000)]
    );
    // The session still works.
    let (_, answer) = post_json(
        &url,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "s__echo", "arguments": {"text": "still here"}}}),
    )
    .await;
    assert!(answer.contains("still here"), "{answer}");
    drop(stream);
    still_serves(&url).await;
}
