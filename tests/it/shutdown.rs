//! Shutdown leaves no process behind, and what a child is given: checked in the process table.

use std::time::Duration;

use serde_json::json;

use crate::harness::*;

async fn pids_of(running: &Running, servers: &[&str]) -> Vec<u32> {
    let mut pids = Vec::new();
    for server in servers {
        let result = running
            .client
            .peer()
            .call_tool(call(&format!("{server}__pid"), json!({})))
            .await
            .unwrap();
        pids.push(text_of(&result).parse::<u32>().unwrap());
    }
    pids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_stdin_stops_every_child_and_grandchild() {
    let text = format!(
        "{}{}",
        stdio_server("a", &["--spawn-grandchild"]),
        stdio_server("b", &["--ignore-sigterm"])
    );
    let text = format!("[gateway]\nshutdown_grace = \"500ms\"\nkill_grace = \"500ms\"\n\n{text}");
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["a__pid", "b__pid"]).await;
    let gateway_pid = running.process.id().unwrap();
    let tree = descendants(gateway_pid);
    let servers = pids_of(&running, &["a", "b"]).await;
    assert!(servers.iter().all(|pid| tree.contains(pid)));
    assert!(
        tree.len() >= 3,
        "expected two servers and a grandchild, found {tree:?}"
    );
    let Running {
        client,
        mut process,
        ..
    } = running;
    drop(client); // closes the gateway's stdin
    let status = tokio::time::timeout(Duration::from_secs(15), process.wait())
        .await
        .expect("gateway exits")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let left = wait_gone(&tree, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "processes outlived the gateway: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_every_child_and_grandchild() {
    let running = gateway_http(config(&stdio_server("a", &["--spawn-grandchild"]))).await;
    list_at_once(&running.client, &["a__pid"]).await;
    let gateway_pid = running.process.id().unwrap();
    let tree = descendants(gateway_pid);
    assert!(
        tree.len() >= 2,
        "expected a server and a grandchild, found {tree:?}"
    );
    unsafe { libc::kill(gateway_pid as i32, libc::SIGTERM) };
    let Running { mut process, .. } = running;
    let status = tokio::time::timeout(Duration::from_secs(15), process.wait())
        .await
        .expect("gateway exits")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let left = wait_gone(&tree, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "processes outlived the gateway: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_initializes_is_killed_with_its_group() {
    let text = format!(
        "[gateway]\nstartup_timeout = \"1s\"\n\n{}{}",
        stdio_server("mute", &["--hang-on-initialize", "--spawn-grandchild"]),
        stdio_server("ok", &[])
    );
    let running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["ok__echo"]).await;
    let gateway_pid = running.process.id().unwrap();
    let ok_pid = pids_of(&running, &["ok"]).await[0];
    // Over a few startup timeouts, no stuck process may pile up: at most the current attempt
    // (server + grandchild) besides the healthy server.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let tree: Vec<u32> = descendants(gateway_pid)
        .into_iter()
        .filter(|&pid| pid != ok_pid && alive(pid))
        .collect();
    assert!(
        tree.len() <= 2,
        "failed starts left processes behind: {tree:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_outright_takes_even_a_stuck_server_with_it() {
    // SIGKILL (or the OOM killer) leaves the gateway no chance to kill its groups, so the
    // kernel's parent-death signal must. `stuck` hangs in initialize and never notices its
    // stdin closing: only that signal ends it.
    let text = format!(
        "[gateway]\nstartup_timeout = \"60s\"\n\n{}{}",
        stdio_server("stuck", &["--hang-on-initialize"]),
        stdio_server("ok", &[])
    );
    let mut running = gateway_stdio(config(&text)).await;
    list_at_once(&running.client, &["ok__echo"]).await;
    let gateway_pid = running.process.id().unwrap();
    let ok_pid = pids_of(&running, &["ok"]).await[0];
    let servers: Vec<u32> = descendants(gateway_pid);
    assert!(
        servers.len() >= 2 && servers.contains(&ok_pid),
        "expected the stuck server besides {ok_pid}, found {servers:?}"
    );
    unsafe { libc::kill(gateway_pid as i32, libc::SIGKILL) };
    running.process.wait().await.unwrap();
    let left = wait_gone(&servers, Duration::from_secs(10)).await;
    assert!(
        left.is_empty(),
        "servers outlived a gateway killed by SIGKILL: {left:?}"
    );
}

/// The environment of a running process, from /proc.
fn environ(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .expect("read /proc/PID/environ")
        .split(|byte| *byte == 0)
        .map(|entry| String::from_utf8_lossy(entry).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_gets_a_minimal_environment_and_never_the_gateways_secrets() {
    let text = format!(
        "{}env = {{ GIVEN = \"configured\" }}\n\n{}inherit_env = true\n\n",
        stdio_server("minimal", &[]),
        stdio_server("everything", &[]),
    );
    let secrets = [
        ("WARDGATE_ADMIN_TOKEN", "admin-secret-token"),
        ("UNRELATED_SECRET", "someone-elses-token"),
    ];
    let running = gateway_stdio_with_env(config(&text), &secrets).await;
    let pids = pids_of(&running, &["minimal", "everything"]).await;
    let minimal = environ(pids[0]);
    let everything = environ(pids[1]);
    let has = |env: &[String], entry: &str| env.iter().any(|e| e == entry);
    let named = |env: &[String], name: &str| env.iter().any(|e| e.starts_with(&format!("{name}=")));
    assert!(
        named(&minimal, "PATH") && named(&minimal, "HOME"),
        "{minimal:?}"
    );
    assert!(has(&minimal, "GIVEN=configured"), "{minimal:?}");
    assert!(!named(&minimal, "UNRELATED_SECRET"), "{minimal:?}");
    assert!(
        named(&everything, "UNRELATED_SECRET"),
        "inherit_env = true: {everything:?}"
    );
    for env in [&minimal, &everything] {
        assert!(
            !env.iter()
                .any(|e| e.contains("admin-secret-token") || e.starts_with("WARDGATE_")),
            "the gateway's own settings reached a child: {env:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_gets_no_package_manager_credentials_unless_its_config_says_so() {
    let text = format!(
        "{}{}env = {{ UV_PUBLISH_TOKEN = \"${{UV_PUBLISH_TOKEN}}\" }}\n\n{}inherit_env = true\n\n",
        stdio_server("minimal", &[]),
        stdio_server("named", &[]),
        stdio_server("everything", &[]),
    );
    let credentials = [
        ("npm_config__authToken", "npm-token"),
        ("NPM_CONFIG__AUTH", "npm-basic-auth"),
        (
            "npm_config_//registry.example/:_authToken",
            "npm-registry-token",
        ),
        ("NPM_TOKEN", "npm-token-variable"),
        ("UV_PUBLISH_TOKEN", "pypi-token"),
        ("UV_INDEX_PRIVATE_PASSWORD", "index-password"),
        (
            "UV_INDEX",
            "private=https://me:index-url-password@pypi.example/simple",
        ),
        (
            "PIP_INDEX_URL",
            "https://me:pip-password@pypi.example/simple",
        ),
        ("CARGO_REGISTRY_TOKEN", "cargo-token"),
    ];
    let settings = [
        ("npm_config_registry", "https://registry.example/"),
        ("UV_CACHE_DIR", "/tmp/uv-cache"),
    ];
    let env: Vec<(&str, &str)> = credentials.iter().chain(&settings).copied().collect();
    let running = gateway_stdio_with_env(config(&text), &env).await;
    let pids = pids_of(&running, &["minimal", "named", "everything"]).await;
    let [minimal, named, everything] = [0, 1, 2].map(|index| environ(pids[index]));
    let entry = |(name, value): &(&str, &str)| format!("{name}={value}");
    for credential in &credentials {
        // `named` asks for UV_PUBLISH_TOKEN in its `env`, and gets it (below).
        let unasked = if credential.0 == "UV_PUBLISH_TOKEN" {
            vec![&minimal]
        } else {
            vec![&minimal, &named]
        };
        for env in unasked {
            assert!(
                !env.iter().any(|e| e.contains(credential.1)),
                "{} reached a child that did not ask for it: {env:?}",
                credential.0
            );
        }
        assert!(
            everything.contains(&entry(credential)),
            "inherit_env = true passes {}: {everything:?}",
            credential.0
        );
    }
    for setting in &settings {
        assert!(minimal.contains(&entry(setting)), "{minimal:?}");
    }
    assert!(
        named.contains(&"UV_PUBLISH_TOKEN=pypi-token".to_owned()),
        "{named:?}"
    );
}
