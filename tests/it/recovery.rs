//! Supervision and recovery with real processes and sockets: crash budgets, reconnection,
//! re-authentication, operator actions, and a chaos run.
//!
//! Why this file is long: one test per recovery behaviour with real processes, sharing the
//! scripted servers' setup.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use wardgate_engine::config::Config;
use wardgate_engine::events::GatewayEvent;
use wardgate_engine::Gateway;
use wardgate_policy::Builtin;

use crate::harness::*;
use crate::measure::free_port;

/// The `to` of every status change the client was told about for `server`, in order; a
/// `reconnecting` event (which says both that an attempt failed and that the next is due)
/// counts as a change to `reconnecting`.
/// The statuses `server` was told to pass through, in order. A `reconnecting` event says
/// the status its server has while the attempt waits (`reconnecting`, or `error`).
fn statuses(running: &Running, server: &str) -> Vec<String> {
    running.handler.heard(|heard| {
        let mut seen: Vec<String> = Vec::new();
        for log in heard
            .logs
            .iter()
            .filter(|log| log["data"]["server"] == server)
        {
            match log["data"]["event"].as_str() {
                Some("status_changed") => {
                    seen.push(log["data"]["to"].as_str().unwrap_or_default().to_owned())
                }
                Some("reconnecting") => seen.push(
                    log["data"]["status"]
                        .as_str()
                        .unwrap_or("reconnecting")
                        .to_owned(),
                ),
                _ => {}
            }
        }
        seen
    })
}

async fn wait_status(
    running: &Running,
    server: &str,
    wanted: &str,
    limit: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + limit;
    loop {
        let seen = statuses(running, server);
        if seen.last().map(String::as_str) == Some(wanted) || Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until `server` has changed to `wanted` `times` times in all.
async fn wait_status_times(
    running: &Running,
    server: &str,
    wanted: &str,
    times: usize,
    limit: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + limit;
    loop {
        let seen = statuses(running, server);
        let reached = seen.iter().filter(|status| *status == wanted).count() >= times;
        if reached || Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn pid_of(running: &Running, server: &str) -> u32 {
    for _ in 0..200 {
        if let Ok(result) = running
            .client
            .peer()
            .call_tool(call(&format!("{server}__pid"), json!({})))
            .await
        {
            return text_of(&result).parse().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{server} never answered pid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_kill_9_three_times_restarts_twice_then_is_permanently_failed() {
    let text = format!("{}{}", stdio_server("s", &[]), stdio_server("other", &[]));
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["s__echo", "other__echo"]).await;
    let mut pids = Vec::new();
    for round in 1..=3 {
        let pid = pid_of(&running, "s").await;
        assert!(
            !pids.contains(&pid),
            "round {round}: the same process answered after a crash"
        );
        pids.push(pid);
        let changed_before = running.handler.heard(|h| h.tools_changed);
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        let wanted = if round < 3 {
            "online"
        } else {
            "permanently_failed"
        };
        // Counted, not read off the end: the client library may hand notifications that
        // arrive back to back to its handler out of order.
        let times = if round < 3 { round + 1 } else { 1 };
        let seen = wait_status_times(&running, "s", wanted, times, Duration::from_secs(15)).await;
        assert_eq!(
            seen.iter().filter(|status| *status == wanted).count(),
            times,
            "round {round}: {seen:?}"
        );
        if round == 3 {
            assert!(
                running
                    .handler
                    .until(Duration::from_secs(5), |h| h.tools_changed > changed_before)
                    .await,
                "no list_changed when the tools left"
            );
        }
    }
    let seen = statuses(&running, "s");
    assert_eq!(
        seen.iter().filter(|s| *s == "restarting").count(),
        2,
        "{seen:?}"
    );

    let names = tool_names(&running.client).await;
    assert!(
        !names.iter().any(|n| n.starts_with("s__")),
        "tools of a failed server still listed: {names:?}"
    );
    assert!(names.iter().any(|n| n == "other__echo"));
    let started = Instant::now();
    let error = running
        .client
        .peer()
        .call_tool(call("s__echo", json!({"text": "x"})))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a call to a failed server waited"
    );
    let message = error.to_string();
    assert!(
        message.contains("permanently_failed") && message.contains("wardgate reconnect s"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_outage_goes_offline_reconnects_and_returns_its_tools() {
    outage_goes_offline_reconnects_and_returns_its_tools("http", "streamable-http").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_server_outage_goes_offline_reconnects_and_returns_its_tools() {
    outage_goes_offline_reconnects_and_returns_its_tools("sse", "sse").await;
}

/// A server of this transport goes away and comes back: offline, its tools, prompts and
/// resources leave the lists, then return with it.
async fn outage_goes_offline_reconnects_and_returns_its_tools(mode: &str, transport: &str) {
    let mut server = FakeHttp::start(mode, &["--name", "web"]).await;
    let port = server.port();
    let text = format!(
        "{}{}",
        stdio_server("local", &[]),
        http_server("web", &server.url(mode), transport)
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["web__echo", "local__echo"]).await;
    server.child.kill().await.unwrap();
    server.child.wait().await.unwrap();
    // A call notices the outage (after its retries) and reports the server.
    let error = running
        .client
        .peer()
        .call_tool(call("web__echo", json!({"text": "x"})))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("\"web\""), "{error}");
    let seen = wait_status(&running, "web", "reconnecting", Duration::from_secs(15)).await;
    assert!(seen.iter().any(|s| s == "offline"), "{seen:?}");
    let names = tool_names(&running.client).await;
    assert!(
        !names.iter().any(|n| n.starts_with("web__")),
        "offline tools listed: {names:?}"
    );
    // Its prompts and resources follow it out (the other server's stay).
    let (prompts, resources) = prompts_and_resources_of(&running.client, "web").await;
    assert_eq!(
        (prompts, resources),
        (0, 0),
        "an offline server's prompts or resources are listed"
    );
    assert_ne!(
        prompts_and_resources_of(&running.client, "local").await,
        (0, 0)
    );
    let changed = running.handler.heard(|h| h.tools_changed);
    let _server = FakeHttp::start_on(mode, port, &["--name", "web"]).await;
    // Online at start, and online again.
    let seen = wait_status_times(&running, "web", "online", 2, Duration::from_secs(30)).await;
    assert_eq!(
        seen.iter().filter(|status| *status == "online").count(),
        2,
        "{seen:?}"
    );
    assert!(
        running
            .handler
            .until(Duration::from_secs(5), |h| h.tools_changed > changed)
            .await,
        "no list_changed on return"
    );
    let names = wait_for_tools(&running.client, &["web__echo"], Duration::from_secs(10)).await;
    assert!(names.iter().any(|n| n == "web__echo"), "{names:?}");
    // ...and its prompts and resources with them.
    let (prompts, resources) = prompts_and_resources_of(&running.client, "web").await;
    assert!(
        prompts > 0 && resources > 0,
        "{prompts} prompts, {resources} resources"
    );
    let result = running
        .client
        .peer()
        .call_tool(call("web__echo", json!({"text": "back"})))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "back");
}

/// How many of `server`'s prompts and resources the gateway lists.
async fn prompts_and_resources_of(client: &Client, server: &str) -> (usize, usize) {
    let peer = client.peer();
    let prompts = peer.list_all_prompts().await.expect("prompts/list");
    let resources = peer.list_all_resources().await.expect("resources/list");
    let prefix = format!("{server}__");
    let namespace = format!("wardgate://{server}/");
    (
        prompts
            .iter()
            .filter(|p| p.name.starts_with(&prefix))
            .count(),
        resources
            .iter()
            .filter(|r| r.uri.starts_with(&namespace))
            .count(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_comes_back_with_different_tools_is_listed_with_its_new_ones() {
    let mut server = FakeHttp::start("http", &["--name", "web"]).await;
    let port = server.port();
    let running = gateway_stdio(config(&http_server(
        "web",
        &server.url("http"),
        "streamable-http",
    )))
    .await;
    let before = list_at_once(&running.client, &["web__echo"]).await;
    assert!(!before.iter().any(|n| n == "web__tool_1"), "{before:?}");
    server.child.kill().await.unwrap();
    server.child.wait().await.unwrap();
    // A call finds it gone (after its retries).
    running
        .client
        .peer()
        .call_tool(call("web__echo", json!({"text": "x"})))
        .await
        .expect_err("the server is gone");
    wait_status(&running, "web", "reconnecting", Duration::from_secs(15)).await;
    // It comes back with two more tools, and says nothing of them itself.
    let _server = FakeHttp::start_on("http", port, &["--name", "web", "--tools-count", "2"]).await;
    let names = wait_for_tools(
        &running.client,
        &["web__tool_0", "web__tool_1"],
        Duration::from_secs(30),
    )
    .await;
    assert!(names.iter().any(|n| n == "web__tool_1"), "{names:?}");
    let result = running
        .client
        .peer()
        .call_tool(call("web__tool_1", json!({"text": "new"})))
        .await
        .expect("the new tool is routed");
    assert!(text_of(&result).contains("new"), "{result:?}");
}

/// Kill `server` (on `port`), call `web__echo` at once, and start the server again after
/// `outage`: what the call answers.
async fn call_across_a_restart(
    client: &Client,
    server: FakeHttp,
    port: u16,
    outage: Duration,
) -> (
    Result<rmcp::model::CallToolResult, rmcp::ServiceError>,
    FakeHttp,
) {
    let mut server = server;
    server.child.kill().await.unwrap();
    server.child.wait().await.unwrap();
    let peer = client.peer().clone();
    let call = tokio::spawn(async move {
        peer.call_tool(call("web__echo", json!({"text": "through"})))
            .await
    });
    tokio::time::sleep(outage).await;
    let server = FakeHttp::start_on("http", port, &["--name", "web"]).await;
    (call.await.unwrap(), server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_shorter_than_the_retry_budget_is_invisible_to_a_call() {
    // The builtin's budget: 3 attempts, 500 ms then 1 s apart, through failed reconnections.
    let mut server = FakeHttp::start("http", &["--name", "web"]).await;
    let port = server.port();
    let text = http_server("web", &server.url("http"), "streamable-http");
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["web__echo"]).await;
    for outage_ms in [300, 800, 1_200] {
        let (answer, restarted) = call_across_a_restart(
            &running.client,
            server,
            port,
            Duration::from_millis(outage_ms),
        )
        .await;
        server = restarted;
        let result = answer.unwrap_or_else(|error| {
            panic!("down {outage_ms} ms, inside the retry budget, yet the call failed: {error}")
        });
        assert_eq!(text_of(&result), "through", "down {outage_ms} ms");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_a_call_rides_through_is_invisible_to_a_bystander_and_an_outage_is_not() {
    // Two clients over HTTP: one calls through the server's restarts, the other only
    // listens to what the gateway tells it.
    let mut server = FakeHttp::start("http", &["--name", "web"]).await;
    let port = server.port();
    let file = config(&http_server("web", &server.url("http"), "streamable-http"));
    let (_gateway, url) = spawn_gateway_http(&file).await;
    let (caller, _) = http_client(&url).await;
    let (bystander, heard) = http_client(&url).await;
    list_at_once(&caller, &["web__echo"]).await;
    list_at_once(&bystander, &["web__echo"]).await;
    let changes = |heard: &Heard| {
        heard
            .logs
            .iter()
            .filter(|log| {
                log["data"]["event"] == "status_changed" && log["data"]["from"] == "online"
            })
            .count()
    };

    // Down 300 ms: the call rides through, and the bystander hears nothing of it.
    let (answer, restarted) =
        call_across_a_restart(&caller, server, port, Duration::from_millis(300)).await;
    server = restarted;
    answer.expect("a 300 ms outage is inside the retry budget");
    // Down 4 s, past the budget: the call fails, and the bystander hears the server go
    // and come back.
    let (answer, _restarted) =
        call_across_a_restart(&caller, server, port, Duration::from_secs(4)).await;
    answer.expect_err("a 4 s outage is past the retry budget");
    let back = |heard: &Heard| {
        heard
            .logs
            .iter()
            .any(|log| log["data"]["event"] == "reconnected" && log["data"]["server"] == "web")
    };
    wait_for_tools(&caller, &["web__echo"], Duration::from_secs(20)).await;
    caller
        .peer()
        .call_tool(call("web__echo", json!({"text": "back"})))
        .await
        .expect("back after the outage");
    assert!(
        heard.until(Duration::from_secs(20), back).await,
        "the bystander hears the server come back: {:?}",
        heard.heard(|heard| heard.logs.clone())
    );
    // One loss of the server in all: the outage's, none for the blip.
    let logs = heard.heard(|heard| heard.logs.clone());
    assert_eq!(heard.heard(changes), 1, "{logs:#?}");
    // The tools left the list once (web is the only server, so the catalogue was empty):
    // the outage's, none for the blip. (The server's first coming online and each return
    // are list changes too, in whatever order they reach the bystander beside the status.)
    let emptied = logs
        .iter()
        .filter(|log| log["data"]["event"] == "tools_changed" && log["data"]["tools"] == 0)
        .count();
    assert_eq!(emptied, 1, "{logs:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_retry_budget_a_call_fails_with_the_status_the_server_really_has() {
    let server = FakeHttp::start("http", &["--name", "web"]).await;
    let port = server.port();
    let text = http_server("web", &server.url("http"), "streamable-http");
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["web__echo"]).await;
    let (answer, _server) =
        call_across_a_restart(&running.client, server, port, Duration::from_secs(4)).await;
    let error = answer.expect_err("down 4 s, past the 1.5 s budget");
    let rmcp::ServiceError::McpError(error) = error else {
        panic!("not a JSON-RPC error: {error}")
    };
    let data = error.data.clone().expect("data");
    let status = data["status"].as_str().unwrap_or_default().to_owned();
    assert!(
        ["offline", "reconnecting", "connecting"].contains(&status.as_str()),
        "{error:?}"
    );
    assert!(
        error.message.contains("after 3 attempts") && error.message.contains(&status),
        "{}",
        error.message
    );
    // It failed when the budget was spent, not at the request deadline.
    assert!(
        !error.message.contains("still not online after"),
        "{}",
        error.message
    );
    // The same story for a program (docs/errors.md): when the status began, the failure,
    // the attempt under way and what to do.
    let since = data["statusSince"].as_str().unwrap_or_default();
    let since = humantime::parse_rfc3339(since).unwrap_or_else(|_| panic!("statusSince: {data}"));
    assert!(since <= std::time::SystemTime::now(), "{data}");
    assert!(
        data["lastError"]
            .as_str()
            .is_some_and(|error| !error.is_empty()),
        "{data}"
    );
    let remedy = data["remedy"].as_str().unwrap_or_default();
    assert!(!remedy.is_empty(), "{data}");
    if status != "connecting" {
        assert!(remedy.contains("keeps reconnecting"), "{data}");
    }
    if status == "reconnecting" {
        assert!(data["attempt"].as_u64().is_some_and(|n| n >= 1), "{data}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_call_says_the_server_is_still_online() {
    let server = FakeHttp::start("http", &["--name", "web"]).await;
    let text = format!(
        "{}request_timeout = \"1s\"\n",
        http_server("web", &server.url("http"), "streamable-http")
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["web__slow"]).await;
    let error = running
        .client
        .peer()
        .call_tool(call("web__slow", json!({"ms": 5_000})))
        .await
        .expect_err("a 5 s call with a 1 s timeout");
    let rmcp::ServiceError::McpError(error) = error else {
        panic!("not a JSON-RPC error: {error}")
    };
    assert_eq!(
        error.data.as_ref().unwrap()["status"],
        "online",
        "{error:?}"
    );
    assert!(
        error.message.contains("still online") || error.message.contains("the server is online"),
        "{}",
        error.message
    );
    assert!(
        !error.message.contains("keeps reconnecting"),
        "{}",
        error.message
    );
}

/// A stdio gateway in front of `web`, a Streamable HTTP server at `port` where nothing
/// listens yet, once it is reconnecting: the server's tools are unknown and its next
/// scheduled attempt is a second or more away.
async fn gateway_before_its_server(port: u16) -> Running {
    let text = format!(
        "[gateway]\nstartup_wait = \"0s\"\n\n{}",
        http_server(
            "web",
            &format!("http://127.0.0.1:{port}/mcp"),
            "streamable-http"
        )
    );
    let running = gateway_stdio(config(&text)).await;
    wait_status(&running, "web", "reconnecting", Duration::from_secs(15)).await;
    running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_wakes_a_server_that_was_down_at_start() {
    // Nothing listens on the port when the gateway starts: the server's tools are unknown
    // and its next scheduled attempt is a second or more away.
    let port = free_port();
    let running = gateway_before_its_server(port).await;
    let _server = FakeHttp::start_on("http", port, &["--name", "web"]).await;
    // The call names a tool the catalogue does not know yet; its server's prefix routes it,
    // and the call itself wakes the reconnection instead of waiting for the backoff.
    let result = running
        .client
        .peer()
        .call_tool(call("web__echo", json!({"text": "woken"})))
        .await
        .expect("the call woke the server");
    assert_eq!(text_of(&result), "woken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnection_that_fails_before_the_call_looks_still_fails_the_call_fast() {
    // The race: the server's binary is gone, so each restart fails the instant it starts,
    // before a waiting call could ever see "connecting". The call must notice anyway, spend
    // its retry budget, and fail with the server's status long before its deadline.
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("vanishing-server");
    std::fs::copy(fake(), &binary).unwrap();
    let text = format!(
        "[servers.v]\ncommand = {:?}\nargs = [\"--name\", \"v\"]\nrequest_timeout = \"60s\"\n",
        binary.display().to_string()
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["v__echo"]).await;
    let pid = pid_of(&running, "v").await;
    std::fs::remove_file(&binary).unwrap();
    // SAFETY: killing the fake server this test started (through the gateway).
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let error = running
        .client
        .peer()
        .call_tool(call("v__echo", json!({"text": "x"})))
        .await
        .expect_err("the server cannot start again");
    let message = error.to_string();
    assert!(
        !message.contains("still not online after"),
        "the call waited for its deadline: {message}"
    );
    assert!(message.contains("\"v\""), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_keep_timing_out_degrade_a_connected_server_and_a_success_restores_it() {
    let server = FakeHttp::start("http", &["--name", "web"]).await;
    let text = format!(
        "{}request_timeout = \"500ms\"\n",
        http_server("web", &server.url("http"), "streamable-http")
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["web__slow", "web__echo"]).await;
    for _ in 0..3 {
        let timed_out = running
            .client
            .peer()
            .call_tool(call("web__slow", json!({"ms": 3_000})))
            .await;
        assert!(timed_out.is_err());
    }
    assert!(
        until_event(&running, "health_degraded", Duration::from_secs(10)).await,
        "three timeouts in a row left the server healthy"
    );
    let degraded = events(&running, "health_degraded");
    assert!(
        degraded[0]["last_error"]
            .as_str()
            .is_some_and(|error| !error.is_empty()),
        "{degraded:?}"
    );
    running
        .client
        .peer()
        .call_tool(call("web__echo", json!({"text": "fine"})))
        .await
        .expect("a quick call");
    assert!(
        until_event(&running, "health_restored", Duration::from_secs(10)).await,
        "a success did not restore it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stays_down_goes_quiet_for_clients() {
    // Nothing ever listens; the backoff is 10 ms flat, so attempts pile up fast.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let text = format!(
        "{}params = {{ reconnect_initial_ms = \"10\", reconnect_factor = \"1\", reconnect_max_ms = \"10\", reconnect_jitter = \"0\" }}\n",
        http_server("down", &format!("http://127.0.0.1:{port}/mcp"), "streamable-http")
    );
    let running = gateway_stdio(config(&text)).await;
    let heard_attempts = || -> Vec<u64> {
        events(&running, "reconnecting")
            .iter()
            .filter_map(|event| event["attempt"].as_u64())
            .collect()
    };
    assert!(
        running
            .handler
            .until(Duration::from_secs(30), |heard| heard.logs.iter().any(
                |log| log["data"]["event"] == "reconnecting" && log["data"]["attempt"] == 64
            ))
            .await,
        "attempt 64 never announced: {:?}",
        heard_attempts()
    );
    let attempts = heard_attempts();
    assert!(
        attempts
            .iter()
            .all(|attempt| *attempt <= 3 || attempt.is_power_of_two()),
        "{attempts:?}"
    );
    // 64 attempts, and the client heard of 9 of them (1, 2, 3, 4, 8, 16, 32, 64, and no
    // more than a few status changes each).
    assert!(attempts.len() <= 12, "{attempts:?}");
    let statuses = statuses(&running, "down");
    assert!(
        statuses.len() < 64,
        "{} status changes reached the client",
        statuses.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_is_requires_reauth_with_no_retry() {
    let denied = FakeHttp::start("http", &["--http-status", "401"]).await;
    let running = gateway_stdio(config(&http_server(
        "private",
        &denied.url("http"),
        "streamable-http",
    )))
    .await;
    let seen = wait_status(
        &running,
        "private",
        "requires_reauth",
        Duration::from_secs(15),
    )
    .await;
    assert_eq!(
        seen.last().map(String::as_str),
        Some("requires_reauth"),
        "{seen:?}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Nothing happens after requires_reauth: no reconnect attempt, no retry.
    let seen = statuses(&running, "private");
    let parked = seen.iter().position(|s| s == "requires_reauth").unwrap();
    assert_eq!(
        &seen[parked..],
        ["requires_reauth"],
        "retried after a 401: {seen:?}"
    );
    let error = running
        .client
        .peer()
        .call_tool(call("private__echo", json!({})))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("requires_reauth"), "{error}");
    let seen = statuses(&running, "private");
    assert_eq!(
        &seen[parked..],
        ["requires_reauth"],
        "a call retried a 401: {seen:?}"
    );
}

fn start_library(text: &str) -> (ConfigFile, Arc<Gateway>) {
    let file = config(text);
    let config = Config::load(&file.path).expect("valid config");
    let gateway = Gateway::start(&config, Arc::new(Builtin::default()));
    (file, gateway)
}

async fn until_status(gateway: &Gateway, server: &str, wanted: &str, limit: Duration) -> String {
    let slot = gateway.slot(server).unwrap();
    let mut watch = slot.watch_status();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let now = watch.borrow_and_update().name().to_owned();
        if now == wanted {
            return now;
        }
        if tokio::time::timeout_at(deadline, watch.changed())
            .await
            .is_err()
        {
            return slot.status().name().to_owned();
        }
    }
}

fn pid_in(gateway: &Gateway, server: &str) -> Option<u32> {
    gateway.slot(server)?;
    descendants(std::process::id()).into_iter().find(|&pid| {
        std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
            .map(|cmd| cmd.contains("wardgate-fake") && cmd.split('\0').any(|arg| arg == server))
            .unwrap_or(false)
    })
}

/// The `disconnected` events `events` holds now, by server.
fn disconnects(events: &mut tokio::sync::broadcast::Receiver<GatewayEvent>) -> Vec<String> {
    let mut servers = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let GatewayEvent::Disconnected {
            server,
            intentional,
            ..
        } = event
        {
            assert!(
                intentional,
                "{server}: only a disconnect on purpose is an event"
            );
            servers.push(server);
        }
    }
    servers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_or_removing_a_server_in_any_state_announces_one_intentional_disconnect() {
    // Two servers nobody answers for (reconnecting), and one that serves.
    let down = |name: &str| {
        http_server(
            name,
            &format!("http://127.0.0.1:{}/mcp", free_port()),
            "streamable-http",
        )
    };
    let off = down("off");
    let text = format!("{}{off}{}", down("gone"), stdio_server("up", &[]));
    let (file, gateway) = start_library(&text);
    let mut events = gateway.subscribe();
    for server in ["gone", "off"] {
        until_status(&gateway, server, "reconnecting", Duration::from_secs(20)).await;
    }
    until_status(&gateway, "up", "online", Duration::from_secs(20)).await;

    // Disabled while reconnecting, and while online: each said once.
    gateway.disable("off").await.unwrap();
    gateway.disable("up").await.unwrap();
    // Removed while reconnecting: said once; removed while disabled: said already.
    std::fs::write(&file.path, &off).unwrap();
    let config = Config::load(&file.path).expect("valid config");
    let change = gateway
        .apply_config(&config, |_| Arc::new(Builtin::default()))
        .await;
    assert_eq!(change.removed.len(), 2, "{change:?}");
    let mut heard = disconnects(&mut events);
    heard.sort();
    assert_eq!(
        heard,
        ["gone", "off", "up"],
        "one intentional disconnect each"
    );
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_stdio_server_twice_or_more_is_harmless() {
    // Disable closes it; disabling again, removing it and shutting the gateway down each
    // close it again: each returns, nothing is left running, and the other server serves.
    let text = format!(
        "{}{}",
        stdio_server("closed", &[]),
        stdio_server("other", &[])
    );
    let (file, gateway) = start_library(&text);
    until_status(&gateway, "closed", "online", Duration::from_secs(20)).await;
    until_status(&gateway, "other", "online", Duration::from_secs(20)).await;
    let pid = pid_in(&gateway, "closed").expect("it runs");
    gateway.disable("closed").await.unwrap();
    gateway
        .disable("closed")
        .await
        .expect("disabling twice is fine");
    assert!(wait_gone(&[pid], Duration::from_secs(10)).await.is_empty());
    std::fs::write(&file.path, stdio_server("other", &[])).unwrap();
    let config = Config::load(&file.path).expect("valid config");
    let change = gateway
        .apply_config(&config, |_| Arc::new(Builtin::default()))
        .await;
    assert_eq!(change.removed, ["closed"], "{change:?}");
    assert_eq!(gateway.slot("other").unwrap().status().name(), "online");
    let other = pid_in(&gateway, "other").expect("the other runs");
    gateway.shutdown().await;
    gateway.shutdown().await;
    assert!(wait_gone(&[other], Duration::from_secs(10))
        .await
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_actions_disable_enable_reconnect_and_restart() {
    let text = format!(
        "[gateway]\nshutdown_grace = \"300ms\"\nkill_grace = \"300ms\"\n\n{}{}",
        stdio_server("opa", &[]),
        stdio_server("opb", &["--ignore-sigterm"])
    );
    let (_file, gateway) = start_library(&text);
    let mut events = gateway.subscribe();
    assert_eq!(
        until_status(&gateway, "opa", "online", Duration::from_secs(20)).await,
        "online"
    );
    assert_eq!(
        until_status(&gateway, "opb", "online", Duration::from_secs(20)).await,
        "online"
    );
    let first = pid_in(&gateway, "opa").expect("opa runs");

    gateway.disable("opa").await.unwrap();
    assert_eq!(gateway.slot("opa").unwrap().status().name(), "disabled");
    assert!(
        wait_gone(&[first], Duration::from_secs(10))
            .await
            .is_empty(),
        "disable left the process running"
    );
    assert!(
        gateway.catalogue().tool("opa__echo").is_some(),
        "the slot's snapshot must survive disable"
    );
    assert!(!gateway
        .catalogue()
        .tools
        .iter()
        .any(|t| t.name.starts_with("opa__")));
    assert!(
        gateway.reconnect("opa").await.is_err(),
        "reconnect must refuse a disabled server"
    );
    assert_eq!(
        gateway.slot("opb").unwrap().status().name(),
        "online",
        "disable touched another server"
    );

    gateway.enable("opa").await.unwrap();
    assert_eq!(
        until_status(&gateway, "opa", "online", Duration::from_secs(20)).await,
        "online"
    );
    let second = pid_in(&gateway, "opa").expect("opa runs again");
    assert_ne!(first, second);

    gateway.restart("opa").await.unwrap();
    assert_eq!(
        until_status(&gateway, "opa", "online", Duration::from_secs(20)).await,
        "online"
    );
    assert!(
        wait_gone(&[second], Duration::from_secs(10))
            .await
            .is_empty(),
        "restart left the old process"
    );
    let third = pid_in(&gateway, "opa").expect("opa restarted");
    assert_ne!(second, third);
    // The restart was announced as one, and its return as a reconnection with what the
    // new process can do.
    let mut restarting = false;
    let mut reconnected = None;
    while let Ok(event) = events.try_recv() {
        match event {
            GatewayEvent::StatusChanged { server, to, .. }
                if server == "opa" && to == "restarting" =>
            {
                restarting = true
            }
            GatewayEvent::Reconnected {
                server,
                capabilities,
                ..
            } if server == "opa" => reconnected = Some(capabilities),
            _ => {}
        }
    }
    assert!(restarting, "an operator's restart shows restarting");
    let capabilities = reconnected.expect("reconnected after the restart");
    assert!(capabilities["tools"].is_object(), "{capabilities}");

    // Spend the crash budget, then bring it back by hand.
    for _ in 0..3 {
        let pid = loop {
            if let Some(pid) = pid_in(&gateway, "opa") {
                if alive(pid) && gateway.slot("opa").unwrap().status().is_online() {
                    break pid;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        assert!(wait_gone(&[pid], Duration::from_secs(5)).await.is_empty());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        until_status(
            &gateway,
            "opa",
            "permanently_failed",
            Duration::from_secs(20)
        )
        .await,
        "permanently_failed"
    );
    gateway.reconnect("opa").await.unwrap();
    assert_eq!(
        until_status(&gateway, "opa", "online", Duration::from_secs(20)).await,
        "online"
    );
    assert!(
        gateway.enable("opa").await.is_err(),
        "enable of an enabled server must be refused"
    );
    assert!(matches!(
        gateway.disable("nobody").await,
        Err(wardgate_engine::gateway::ActionError::UnknownServer(_))
    ));

    // A server that ignores the polite close (SIGTERM) is still fully disabled: escalation to SIGKILL.
    let stubborn = pid_in(&gateway, "opb").expect("opb runs");
    gateway.disable("opb").await.unwrap();
    assert_eq!(gateway.slot("opb").unwrap().status().name(), "disabled");
    assert!(
        wait_gone(&[stubborn], Duration::from_secs(5))
            .await
            .is_empty(),
        "a SIGTERM-proof server survived disable"
    );

    let mut kinds = Vec::new();
    while let Ok(event) = events.try_recv() {
        kinds.push(event);
    }
    // Each intentional close is told once, as the status change that says who asked.
    assert!(
        kinds.iter().any(|e| matches!(
            e,
            GatewayEvent::StatusChanged { to, reason, .. }
                if to == "disabled" && reason.contains("operator")
        )),
        "{kinds:?}"
    );
    assert!(
        kinds
            .iter()
            .any(|e| matches!(e, GatewayEvent::PermanentlyFailed { crashes: 3, .. })),
        "{kinds:?}"
    );
    gateway.shutdown().await;
    assert!(
        pid_in(&gateway, "opa").is_none() && pid_in(&gateway, "opb").is_none(),
        "shutdown left servers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_every_call_ends_and_nothing_is_left_behind() {
    let web = FakeHttp::start("http", &["--name", "web"]).await;
    let web_port = web.port();
    let text = format!(
        "[gateway]\nrequest_timeout = \"5s\"\nshutdown_grace = \"500ms\"\n\n{}{}{}{}",
        stdio_server("c1", &[]),
        stdio_server("c2", &["--spawn-grandchild"]),
        stdio_server("c3", &["--delay-ms", "20"]),
        http_server("web", &web.url("http"), "streamable-http"),
    );
    let running = gateway_stdio(config(&text)).await;
    let all = ["c1__echo", "c2__echo", "c3__echo", "web__echo"];
    list_at_once(&running.client, &all).await;
    let gateway_pid = running.process.id().unwrap();
    let run_for = Duration::from_secs(8);
    let started = Instant::now();

    let callers: Vec<_> = (0..6)
        .map(|caller| {
            let peer = running.client.peer().clone();
            tokio::spawn(async move {
                let (mut ok, mut failed, mut hung) = (0u32, 0u32, 0u32);
                let mut i = caller;
                while started.elapsed() < run_for {
                    let tool = all[i % all.len()];
                    i += 1;
                    match tokio::time::timeout(
                        Duration::from_secs(30),
                        peer.call_tool(call(tool, json!({"text": "c"}))),
                    )
                    .await
                    {
                        Ok(Ok(_)) => ok += 1,
                        Ok(Err(_)) => failed += 1,
                        Err(_) => hung += 1,
                    }
                }
                (ok, failed, hung)
            })
        })
        .collect();

    let mut web = Some(web);
    let mut kills = 0;
    let mut step = 0u64;
    while started.elapsed() < run_for {
        step += 1;
        tokio::time::sleep(Duration::from_millis(400 + (step * 137) % 400)).await;
        if step.is_multiple_of(4) {
            // Take the HTTP server down or bring it back.
            match web.take() {
                Some(mut server) => {
                    server.child.kill().await.ok();
                }
                None => web = Some(FakeHttp::start_on("http", web_port, &["--name", "web"]).await),
            }
            continue;
        }
        let servers: Vec<u32> = children_of(gateway_pid);
        if !servers.is_empty() {
            let victim = servers[(step as usize * 7) % servers.len()];
            unsafe { libc::kill(victim as i32, libc::SIGKILL) };
            kills += 1;
        }
    }
    let (mut ok, mut failed, mut hung) = (0, 0, 0);
    for caller in callers {
        let (o, f, h) = caller.await.unwrap();
        ok += o;
        failed += f;
        hung += h;
    }
    println!("chaos: {kills} kills, {ok} calls ok, {failed} failed with an error, {hung} hung");
    assert_eq!(hung, 0, "calls hung");
    assert!(ok > 0, "no call succeeded at all");
    let Running {
        client,
        mut process,
        ..
    } = running;
    assert!(
        process.try_wait().unwrap().is_none(),
        "the gateway exited during chaos"
    );
    let tree = descendants(gateway_pid);
    drop(client);
    let status = tokio::time::timeout(Duration::from_secs(20), process.wait())
        .await
        .expect("gateway exits")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let left = wait_gone(&tree, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "orphans after chaos: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_a_tool_not_yet_known_retries_through_a_failed_reconnection() {
    // The server was down at start, so its tools are unknown and the call is routed by its
    // prefix. The reconnection the call wakes fails (nothing listens yet); the server comes
    // up a moment later, within the policy's retry budget (500 ms, then 1 s), and the call
    // must get there on a retry rather than fail with the first failed reconnection.
    let port = free_port();
    let running = gateway_before_its_server(port).await;
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        FakeHttp::start_on("http", port, &["--name", "web"]).await
    });
    let result = running
        .client
        .peer()
        .call_tool(call("web__echo", json!({"text": "retried"})))
        .await;
    let _server = late.await.expect("the server started");
    let result = result.expect("the call retried until the server was back");
    assert_eq!(text_of(&result), "retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_on_a_server_follows_it_when_a_config_edit_replaces_it() {
    let server = FakeHttp::start("http", &["--name", "web"]).await;
    let port = server.port();
    let gateway = "[gateway]\nshutdown_grace = \"1s\"\n\n";
    let before = format!(
        "{gateway}{}",
        http_server("web", &server.url("http"), "streamable-http")
    );
    let file = config(&before);
    let path = file.path.clone();
    let running = gateway_stdio(file).await;
    list_at_once(&running.client, &["web__echo"]).await;
    // The server goes away and a tarpit takes its port: the kernel accepts connections and
    // nobody answers, so the reconnection hangs in `connecting` and the call waits on it.
    let mut server = server;
    server.child.kill().await.unwrap();
    server.child.wait().await.unwrap();
    // An idle Streamable HTTP connection does not notice; the first call does, spends its
    // retry budget on refused reconnections, and fails.
    running
        .client
        .peer()
        .call_tool(call("web__echo", json!({"text": "refused"})))
        .await
        .expect_err("nothing listens on the port");
    let seen = wait_status(&running, "web", "reconnecting", Duration::from_secs(15)).await;
    assert_eq!(
        seen.last().map(String::as_str),
        Some("reconnecting"),
        "{seen:?}"
    );
    let _tarpit = std::net::TcpListener::bind(("127.0.0.1", port)).expect("rebind the port");
    let peer = running.client.peer().clone();
    let waiting = tokio::spawn(async move {
        peer.call_tool(call("web__echo", json!({"text": "followed"})))
            .await
    });
    // The call wakes a reconnection (quiet for clients by now: its attempt number is past
    // the announced ones), which hangs on the tarpit.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !waiting.is_finished(),
        "the call is waiting on the old server"
    );
    // The operator points the server somewhere that works.
    let replacement = FakeHttp::start("http", &["--name", "web"]).await;
    let after = format!(
        "{gateway}{}",
        http_server("web", &replacement.url("http"), "streamable-http")
    );
    std::fs::write(&path, after).expect("rewrite the config");
    let result = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the call finished before its own deadline")
        .expect("the call task")
        .expect("the call moved to the replacement and succeeded");
    assert_eq!(text_of(&result), "followed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_answered_with_http_500_name_the_real_status_degrade_the_server_and_recover() {
    let dir = tempfile::tempdir().unwrap();
    let failing = dir.path().join("status");
    let failing_flag = failing.display().to_string();
    let server = FakeHttp::start(
        "http",
        &["--name", "web", "--http-status-file", &failing_flag],
    )
    .await;
    let running = gateway_stdio(config(&http_server(
        "web",
        &server.url("http"),
        "streamable-http",
    )))
    .await;
    list_at_once(&running.client, &["web__echo"]).await;
    std::fs::write(&failing, "500").unwrap();
    for _ in 0..3 {
        let error = running
            .client
            .peer()
            .call_tool(call("web__echo", json!({"text": "x"})))
            .await
            .expect_err("the server answers 500");
        let rmcp::ServiceError::McpError(error) = error else {
            panic!("not an MCP error: {error}");
        };
        let data = error
            .data
            .clone()
            .expect("the error names server and status");
        assert_eq!(data["server"], "web", "{error:?}");
        let status = data["status"].as_str().unwrap_or_default().to_owned();
        assert!(error.message.contains("500"), "{}", error.message);
        // The status named is the one the server has: still online (and then the message
        // says the failure was this call's), or one the client was told it moved to.
        if status == "online" {
            assert!(error.message.contains("this call's"), "{}", error.message);
        } else {
            let told = statuses(&running, "web");
            assert!(
                told.contains(&status),
                "{status} not among {told:?}: {}",
                error.message
            );
        }
    }
    assert!(
        until_event(&running, "health_degraded", Duration::from_secs(10)).await
            || statuses(&running, "web")
                .iter()
                .any(|status| status != "online"),
        "calls failing with 500 left the server healthy and online"
    );
    let noise = running.handler.heard(|heard| {
        heard.logs.iter().any(|log| {
            log["data"]["event"] == "status_changed" && log["data"]["from"] == log["data"]["to"]
        })
    });
    assert!(
        !noise,
        "a status_changed that changed nothing reached the client"
    );
    std::fs::remove_file(&failing).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let result = running
            .client
            .peer()
            .call_tool(call("web__echo", json!({"text": "back"})))
            .await;
        match result {
            Ok(result) => {
                assert_eq!(text_of(&result), "back");
                break;
            }
            Err(error) if Instant::now() < deadline => {
                eprintln!("not yet: {error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("the server never came back after answering 500: {error}"),
        }
    }
}

/// A server that answers pings and `initialize` while its tools hang: five calls in a row
/// time out, and it is `error` (told once, with the failure's words), its tools leave the
/// list while it waits, and the reconnection on the policy's schedule brings it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_calls_keep_timing_out_goes_to_error_without_its_tools_and_comes_back() {
    let text = format!(
        "{}request_timeout = \"300ms\"\nparams = {{ reconnect_initial_ms = \"3000\", reconnect_jitter = \"0\" }}\n\n{}",
        stdio_server("hung", &[]),
        stdio_server("other", &[]),
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(
        &running.client,
        &["hung__slow", "hung__echo", "other__echo"],
    )
    .await;
    let first_pid = pid_of(&running, "hung").await;
    for n in 1..=5 {
        let timed_out = running
            .client
            .peer()
            .call_tool(call("hung__slow", json!({"ms": 5_000})))
            .await;
        assert!(timed_out.is_err(), "call {n} answered");
        if n < 5 {
            assert!(
                !statuses(&running, "hung").iter().any(|s| s == "error"),
                "error before the fifth failure, at {n}"
            );
        }
    }
    wait_status(&running, "hung", "error", Duration::from_secs(10)).await;
    let told = events(&running, "status_changed");
    let to_error: Vec<_> = told.iter().filter(|e| e["to"] == "error").collect();
    assert_eq!(to_error.len(), 1, "told once: {told:#?}");
    let reason = to_error[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("5 calls or probes in a row failed")
            && reason.contains("no answer within 300ms"),
        "{reason}"
    );
    // While it waits (3 s), its tools are not offered; the other server's are.
    let names = tool_names(&running.client).await;
    assert!(
        !names.iter().any(|n| n.starts_with("hung__")) && names.iter().any(|n| n == "other__echo"),
        "{names:?}"
    );
    // The reconnection on the policy's schedule: online again, with its tools.
    let names = wait_for_tools(&running.client, &["hung__echo"], Duration::from_secs(30)).await;
    assert!(names.iter().any(|n| n == "hung__echo"), "{names:?}");
    let result = running
        .client
        .peer()
        .call_tool(call("hung__echo", json!({"text": "back"})))
        .await
        .expect("the first call after the reconnection succeeds");
    assert_eq!(text_of(&result), "back");
    // A new process: the failing one was stopped, not left running.
    assert_ne!(
        first_pid,
        pid_of(&running, "hung").await,
        "the failing process was kept"
    );
    let old = first_pid as i32;
    assert!(
        unsafe { libc::kill(old, 0) } != 0,
        "the failing process {old} still runs"
    );
    let mut after = statuses(&running, "hung");
    after.dedup();
    assert_eq!(
        after.iter().filter(|s| *s == "error").count(),
        1,
        "one error, then online: {after:?}"
    );
    assert_eq!(
        after.last().map(String::as_str),
        Some("online"),
        "{after:?}"
    );
}

/// After a restart the last tools are served at once and listed again beside the calls:
/// calls made while the new process's `tools/list` cannot answer are answered (re-discovery
/// blocks no call), and ten calls at once cost the server one list, not ten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_discovery_blocks_no_call_and_many_calls_cost_one_list() {
    let dir = tempfile::tempdir().unwrap();
    let hang = dir.path().join("hang-lists");
    let flag = hang.display().to_string();
    let text = format!(
        "{}params = {{ stable_uptime_ms = \"0\" }}\n\n",
        stdio_server("s", &["--hang-lists-file", &flag])
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["s__lists", "s__echo"]).await;
    let lists = |peer: rmcp::Peer<rmcp::RoleClient>| async move {
        let result = peer
            .call_tool(call("s__lists", json!({})))
            .await
            .expect("lists answers");
        serde_json::from_str::<serde_json::Value>(&text_of(&result)).expect("JSON")
    };
    let old = pid_of(&running, "s").await;
    // From now on no tools/list of the server can answer.
    std::fs::write(&hang, "").unwrap();
    unsafe { libc::kill(old as i32, libc::SIGKILL) };
    let seen = wait_status_times(&running, "s", "online", 2, Duration::from_secs(20)).await;
    assert!(
        seen.iter().filter(|s| *s == "online").count() >= 2,
        "never back online with its last tools: {seen:?}"
    );
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..10 {
        calls.spawn(lists(running.client.peer().clone()));
    }
    while let Some(answer) = calls.join_next().await {
        let answer = answer.unwrap();
        // Answered while the file exists: no list of this process has finished.
        assert!(answer["received"].as_u64().unwrap() <= 1, "{answer}");
    }
    assert!(hang.exists());
    // The refresh reaches the server once, and waits there.
    let deadline = Instant::now() + Duration::from_secs(20);
    let waiting = loop {
        let answer = lists(running.client.peer().clone()).await;
        if answer["waiting"] == 1 || Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(waiting, json!({"received": 1, "waiting": 1}), "one refresh");
    assert_ne!(pid_of(&running, "s").await, old, "a new process");
    std::fs::remove_file(&hang).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let done = loop {
        let answer = lists(running.client.peer().clone()).await;
        if answer["waiting"] == 0 || Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done, json!({"received": 1, "waiting": 0}), "still one list");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_refresh_keeps_the_tools_and_a_failed_first_discovery_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let failing = dir.path().join("fail-lists");
    let flag = failing.display().to_string();
    // `kept` lists fine at first; `broken` cannot list from the start.
    std::fs::write(dir.path().join("broken-fails"), "").unwrap();
    let broken_flag = dir.path().join("broken-fails").display().to_string();
    let text = format!(
        "{}{}",
        stdio_server("kept", &["--fail-lists-file", &flag]),
        stdio_server("broken", &["--fail-lists-file", &broken_flag])
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["kept__echo"]).await;
    // A first discovery that fails: the server answers but fails, so it is `error` (and
    // stays so while its next attempt waits), it is not listed, and the reason names the
    // failing list.
    let seen = wait_status(&running, "broken", "error", Duration::from_secs(20)).await;
    assert_eq!(seen.last().map(String::as_str), Some("error"), "{seen:?}");
    let named = |heard: &Heard| {
        heard.logs.iter().any(|log| {
            log["data"]["server"] == "broken"
                && log["data"]["reason"]
                    .as_str()
                    .is_some_and(|reason| reason.contains("tools/list is failing"))
        })
    };
    assert!(
        running.handler.until(Duration::from_secs(20), named).await,
        "{:#?}",
        running.handler.heard(|heard| heard.logs.clone())
    );
    assert!(!tool_names(&running.client)
        .await
        .iter()
        .any(|n| n.starts_with("broken__")));
    std::fs::remove_file(&broken_flag).unwrap();
    let names = wait_for_tools(&running.client, &["broken__echo"], Duration::from_secs(30)).await;
    assert!(
        names.iter().any(|n| n == "broken__echo"),
        "it came back: {names:?}"
    );

    // kept's listing breaks, then it announces a change: the refresh fails, and the
    // tools it had stay listed and callable.
    let both = tool_names(&running.client).await.len();
    let logged = running.handler.heard(|h| h.logs.len());
    std::fs::write(&failing, "").unwrap();
    let before = running.handler.heard(|h| h.tools_changed);
    running
        .client
        .peer()
        .call_tool(call("kept__add_tool", json!({"name": "unseen"})))
        .await
        .expect("add_tool answers");
    // The refresh has run when a later list change (after listing works again) arrives.
    std::fs::remove_file(&failing).unwrap();
    running
        .client
        .peer()
        .call_tool(call("kept__add_tool", json!({"name": "seen"})))
        .await
        .expect("add_tool answers");
    assert!(
        running
            .handler
            .until(Duration::from_secs(20), |h| h.tools_changed > before)
            .await
    );
    let names = wait_for_tools(&running.client, &["kept__seen"], Duration::from_secs(20)).await;
    assert!(names.iter().any(|n| n == "kept__echo"), "{names:?}");
    // Never, between the failed refresh and the good one, did the catalogue shrink.
    let shrunk = running.handler.heard(|h| {
        h.logs[logged..]
            .iter()
            .filter(|log| log["data"]["event"] == "tools_changed")
            .any(|log| log["data"]["tools"].as_u64().unwrap_or(0) < both as u64)
    });
    assert!(!shrunk, "a failed refresh dropped tools");
    assert!(names.iter().any(|n| n == "kept__seen"), "{names:?}");
    let result = running
        .client
        .peer()
        .call_tool(call("kept__echo", json!({"text": "still"})))
        .await
        .expect("kept__echo is still routed");
    assert_eq!(text_of(&result), "still");
}
