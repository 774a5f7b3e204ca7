//! Config hot reload on a running gateway: edits add, remove and restart servers without
//! disturbing the others; a bad edit changes nothing.

use std::time::Duration;

use serde_json::json;

use crate::harness::*;

async fn pid_of(client: &Client, server: &str) -> u32 {
    let result = client
        .peer()
        .call_tool(call(&format!("{server}__pid"), json!({})))
        .await
        .unwrap_or_else(|error| panic!("{server}__pid failed: {error}"));
    text_of(&result).parse().expect("a pid")
}

fn gateway_table() -> &'static str {
    "[gateway]\nshutdown_grace = \"1s\"\n\n"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_edit_adds_removes_and_restarts_servers_while_an_untouched_one_serves() {
    let before = format!(
        "{}{}{}{}",
        gateway_table(),
        stdio_server("keep", &[]),
        stdio_server("gone", &[]),
        stdio_server("edit", &[]),
    );
    let config = config(&before);
    let path = config.path.clone();
    let running = gateway_stdio(config).await;
    let client = &running.client;
    let names = list_at_once(client, &["keep__echo", "gone__echo", "edit__echo"]).await;
    assert!(names.contains(&"gone__echo".to_owned()), "{names:?}");
    let keep_pid = pid_of(client, "keep").await;
    let gone_pid = pid_of(client, "gone").await;
    let edit_pid = pid_of(client, "edit").await;
    let changes_before = running.handler.heard(|heard| heard.tools_changed);

    // A call in flight on the untouched server while the config changes under it.
    let peer = client.peer().clone();
    let in_flight = tokio::spawn(async move {
        peer.call_tool(call("keep__slow", json!({ "ms": 2500 })))
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let after = format!(
        "{}{}{}{}",
        gateway_table(),
        stdio_server("keep", &[]),
        stdio_server("edit", &["--tools-count", "2"]),
        stdio_server("fresh", &[]),
    );
    std::fs::write(&path, after).expect("rewrite the config");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let names = loop {
        let names = tool_names(client).await;
        let settled = names.contains(&"fresh__echo".to_owned())
            && names.contains(&"edit__tool_1".to_owned())
            && !names.iter().any(|name| name.starts_with("gone__"));
        if settled || tokio::time::Instant::now() >= deadline {
            break names;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(names.contains(&"fresh__echo".to_owned()), "{names:?}");
    assert!(names.contains(&"edit__tool_1".to_owned()), "{names:?}");
    assert!(
        !names.iter().any(|name| name.starts_with("gone__")),
        "{names:?}"
    );

    let result = in_flight
        .await
        .expect("the call task")
        .expect("the in-flight call on the untouched server succeeded");
    assert_eq!(text_of(&result), "done");
    assert_eq!(
        pid_of(client, "keep").await,
        keep_pid,
        "keep was not restarted"
    );
    assert_ne!(pid_of(client, "edit").await, edit_pid, "edit was restarted");
    assert!(
        wait_gone(&[gone_pid, edit_pid], Duration::from_secs(10))
            .await
            .is_empty(),
        "the removed server's and the old edited server's processes are gone"
    );
    assert!(
        running
            .handler
            .until(Duration::from_secs(5), |heard| heard.tools_changed
                > changes_before)
            .await,
        "clients were told the tool list changed"
    );
    let applied = events(&running, "config_applied");
    let last = applied.last().expect("a config_applied event");
    assert_eq!(last["added"], json!(["fresh"]), "{last}");
    assert_eq!(last["removed"], json!(["gone"]), "{last}");
    assert_eq!(last["modified"], json!(["edit"]), "{last}");
    let changed_keep = running.handler.heard(|heard| {
        heard.logs.iter().any(|log| {
            log["data"]["event"] == "status_changed"
                && log["data"]["server"] == "keep"
                && log["data"]["to"] != "online"
                && log["data"]["from"] == "online"
        })
    });
    assert!(!changed_keep, "the untouched server never left online");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_edit_leaves_the_gateway_serving_as_before() {
    let good = format!("{}{}", gateway_table(), stdio_server("steady", &[]));
    let config = config(&good);
    let path = config.path.clone();
    let running = gateway_stdio(config).await;
    let client = &running.client;
    list_at_once(client, &["steady__echo"]).await;
    let pid = pid_of(client, "steady").await;
    let tools_before = tool_names(client).await;

    // An unknown key and a server with no transport: both invalid.
    std::fs::write(
        &path,
        format!("{good}[servers.broken]\ncomand = \"nothing\"\n"),
    )
    .expect("write a bad config");
    assert!(
        until_event(&running, "config_rejected", Duration::from_secs(10)).await,
        "the bad config was reported"
    );
    let rejected = events(&running, "config_rejected");
    let reason = rejected[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("comand"),
        "the reason names the key: {reason}"
    );

    assert_eq!(tool_names(client).await, tools_before, "the same tools");
    assert_eq!(pid_of(client, "steady").await, pid, "the same process");
    let echoed = client
        .peer()
        .call_tool(call("steady__echo", json!({ "text": "still here" })))
        .await
        .expect("calls still work");
    assert_eq!(text_of(&echoed), "still here");
    assert!(events(&running, "config_applied").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_edit_that_adds_a_policy_loads_it_and_restarts_the_servers_bound_to_it() {
    let patient = module("patient");
    let before = format!(
        "{}{}{}",
        gateway_table(),
        stdio_server("bound", &[]),
        stdio_server("other", &[])
    );
    let config = config(&before);
    let path = config.path.clone();
    let running = gateway_stdio(config).await;
    let client = &running.client;
    list_at_once(client, &["bound__echo", "other__echo"]).await;
    let other_pid = pid_of(client, "other").await;

    let after = format!(
        "{}[policies.patient]\npath = {:?}\n\n{}\npolicy = \"patient\"\n\n{}",
        gateway_table(),
        patient.display().to_string(),
        stdio_server("bound", &[]).trim_end(),
        stdio_server("other", &[])
    );
    std::fs::write(&path, after).expect("rewrite the config");
    assert!(
        until_event(&running, "config_applied", Duration::from_secs(30)).await,
        "the config was applied"
    );
    let applied = events(&running, "config_applied");
    assert_eq!(applied[0]["modified"], json!(["bound"]), "{}", applied[0]);
    let loaded = events(&running, "policy_loaded");
    assert!(
        loaded.iter().any(|event| event["policy"] == "patient"),
        "the added policy was loaded: {loaded:?}"
    );
    list_at_once(client, &["bound__echo"]).await;
    assert_eq!(
        pid_of(client, "other").await,
        other_pid,
        "other was not restarted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rereads_the_config_and_reloads_policies_through_the_command_queue() {
    let running = gateway_stdio(config(&stdio_server("s", &[]))).await;
    list_at_once(&running.client, &["s__echo"]).await;
    let pid = running.process.id().expect("the gateway's pid") as i32;
    // SAFETY: sending a signal to a child process this test owns.
    unsafe { libc::kill(pid, libc::SIGHUP) };
    assert!(
        running
            .handler
            .until(Duration::from_secs(10), |heard| heard.logs.iter().any(
                |log| {
                    log["data"]["event"] == "command"
                        && log["data"]["command"] == "reload_policies"
                        && log["data"]["state"] == "completed"
                }
            ))
            .await,
        "SIGHUP ran reload_policies"
    );
    let configured = running.handler.heard(|heard| {
        heard.logs.iter().any(|log| {
            log["data"]["event"] == "command"
                && log["data"]["command"] == "configure"
                && log["data"]["state"] == "completed"
        })
    });
    assert!(configured, "SIGHUP re-read the config first");
    let echoed = running
        .client
        .peer()
        .call_tool(call("s__echo", json!({ "text": "after SIGHUP" })))
        .await
        .expect("still serving");
    assert_eq!(text_of(&echoed), "after SIGHUP");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_config_edit_is_rejected_and_the_gateway_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.json");
    let good = format!(
        r#"{{"mcpServers": {{"steady": {{"command": {:?}, "args": ["--name", "steady"]}}}}}}"#,
        fake()
    );
    std::fs::write(&path, &good).unwrap();
    let running = gateway_stdio(ConfigFile {
        dir,
        path: path.clone(),
    })
    .await;
    list_at_once(&running.client, &["steady__echo"]).await;
    // 8,000 nested arrays: once enough to overflow the parser's stack and abort the process.
    let nested = format!(
        r#"{{"mcpServers": {{"steady": {{"command": "x", "args": {}{}}}}}}}"#,
        "[".repeat(8000),
        "]".repeat(8000)
    );
    std::fs::write(&path, nested).unwrap();
    assert!(
        until_event(&running, "config_rejected", Duration::from_secs(20)).await,
        "the nested config was not rejected"
    );
    let rejected = events(&running, "config_rejected");
    assert!(
        rejected
            .iter()
            .any(|event| event.to_string().contains("nest")),
        "{rejected:?}"
    );
    let result = running
        .client
        .peer()
        .call_tool(call("steady__echo", json!({"text": "still here"})))
        .await
        .expect("the gateway survived the edit");
    assert_eq!(text_of(&result), "still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_reading_during_reloads_see_whole_lists_and_lose_no_request() {
    // Three clients list tools, prompts and resources in a loop while the config file flips
    // a server in and out three times: every answer is a whole list (the untouched server's
    // tools always in it, the flipping one's all or none), and no request fails.
    let with = format!(
        "{}{}{}",
        gateway_table(),
        stdio_server("keep", &[]),
        stdio_server("flip", &["--tools-count", "3"]),
    );
    let without = format!("{}{}", gateway_table(), stdio_server("keep", &[]));
    let config = config(&with);
    let path = config.path.clone();
    let (_gateway, url) = spawn_gateway_http(&config).await;
    let mut readers = Vec::new();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for _ in 0..3 {
        let (client, _) = http_client(&url).await;
        list_at_once(&client, &["keep__echo", "flip__tool_2"]).await;
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            let mut lists = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let names = tool_names(&client).await;
                assert!(names.iter().any(|n| n == "keep__echo"), "{names:?}");
                let flipped = ["flip__echo", "flip__tool_0", "flip__tool_1", "flip__tool_2"]
                    .iter()
                    .filter(|name| names.iter().any(|n| n == *name))
                    .count();
                assert!(flipped == 0 || flipped == 4, "a partial list: {names:?}");
                client
                    .peer()
                    .list_all_prompts()
                    .await
                    .expect("prompts/list");
                client
                    .peer()
                    .list_all_resources()
                    .await
                    .expect("resources/list");
                lists += 1;
            }
            lists
        }));
    }
    let (watcher, _) = http_client(&url).await;
    for round in 0..3 {
        std::fs::write(&path, &without).unwrap();
        let gone = wait_until_tools(&watcher, |names| {
            !names.iter().any(|n| n.starts_with("flip__"))
        })
        .await;
        assert!(gone, "round {round}: flip never left");
        std::fs::write(&path, &with).unwrap();
        let back =
            wait_until_tools(&watcher, |names| names.iter().any(|n| n == "flip__tool_2")).await;
        assert!(back, "round {round}: flip never came back");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        let lists = reader.await.expect("a reader failed");
        assert!(lists > 0);
    }
}

/// Poll the tool list until `done` holds, for at most 20 s.
async fn wait_until_tools(client: &Client, done: impl Fn(&[String]) -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::time::Instant::now() < deadline {
        if done(&tool_names(client).await) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
