//! Per-client instances (`instances = "per-client"`): each client gets a process of its own,
//! asked and answered by itself, with state of its own, supervised on its own, bounded,
//! reaped when idle or when its session ends, and gone with the gateway.
//!
//! Clients ask at once, as real ones do: nothing here waits for a server to be online
//! before calling it.

use std::time::Duration;

use serde_json::{json, Value};

use crate::admin::support::{start, AdminGateway};
use crate::harness::*;

const SETTLE: Duration = Duration::from_secs(20);

/// A fake server `s` with an instance per client, and these extra settings.
fn per_client(flags: &[&str], settings: &str) -> ConfigFile {
    config(&format!(
        "{}\ninstances = \"per-client\"\n{settings}\n",
        stdio_server("s", flags).trim_end()
    ))
}

async fn pid_of(client: &Client) -> u32 {
    let result = client
        .peer()
        .call_tool(call("s__pid", json!({})))
        .await
        .expect("pid answers");
    text_of(&result).parse().expect("a pid")
}

/// `GET /servers/s`: the server with its instances.
async fn detail(admin: &AdminGateway) -> Value {
    let (status, body) = admin.get("/servers/s").await;
    assert_eq!(status, 200, "{body}");
    body
}

/// `wardgate ARGS` against the gateway's admin API: its standard output.
async fn operator_cli(admin: &AdminGateway, args: &[&str]) -> String {
    let output = tokio::process::Command::new(wardgate())
        .args(args)
        .env("WARDGATE_ADMIN", &admin.address)
        .env_remove("WARDGATE_ADMIN_TOKEN")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "wardgate {args:?}: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

fn instances(detail: &Value) -> Vec<Value> {
    detail["instances"]
        .as_array()
        .unwrap_or_else(|| panic!("no instances in {detail}"))
        .clone()
}

/// Wait until `/servers/s` shows `count` instances.
async fn until_instances(admin: &AdminGateway, count: usize) -> Value {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let detail = detail(admin).await;
        if instances(&detail).len() == count {
            return detail;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never {count} instances: {detail}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_calling_an_interactive_server_at_once_are_each_asked_by_their_own_instance() {
    // The fake waits 2 s in every call before it asks, so both calls are in flight when
    // each asks: with one shared process the gateway would have to refuse.
    let admin = start(per_client(&["--delay-ms", "2000"], ""), &[], &[]).await;
    let (a, heard_a) = http_client_as(&admin.mcp, "A").await;
    let (b, heard_b) = http_client_as(&admin.mcp, "B").await;
    let ask = |client: &Client, prompt: &'static str| {
        let peer = client.peer().clone();
        async move {
            peer.call_tool(call("s__sample", json!({ "prompt": prompt })))
                .await
                .map(|result| text_of(&result))
        }
    };
    let (answer_a, answer_b) = tokio::join!(ask(&a, "A's prompt"), ask(&b, "B's prompt"));
    let (answer_a, answer_b) = (answer_a.expect("A's call"), answer_b.expect("B's call"));
    assert!(answer_a.contains("by client A"), "{answer_a}");
    assert!(answer_b.contains("by client B"), "{answer_b}");
    assert_eq!(heard_a.heard(|heard| heard.sampling_requests), 1);
    assert_eq!(heard_b.heard(|heard| heard.sampling_requests), 1);
    // Roots and elicitation too, each client's own.
    let roots = |client: &Client| {
        let peer = client.peer().clone();
        async move {
            peer.call_tool(call("s__roots", json!({})))
                .await
                .map(|result| text_of(&result))
        }
    };
    let (roots_a, roots_b) = tokio::join!(roots(&a), roots(&b));
    let (roots_a, roots_b) = (roots_a.unwrap(), roots_b.unwrap());
    assert!(
        roots_a.contains("wardgate-test-rootA") && !roots_a.contains("rootB"),
        "{roots_a}"
    );
    assert!(
        roots_b.contains("wardgate-test-rootB") && !roots_b.contains("rootA"),
        "{roots_b}"
    );
    // Two processes, neither of them the one that lists the tools.
    let (pid_a, pid_b) = tokio::join!(pid_of(&a), pid_of(&b));
    let listed = admin.wait_status("s", "online", SETTLE).await;
    assert_ne!(pid_a, pid_b);
    assert_ne!(Some(u64::from(pid_a)), listed["pid"].as_u64());
    assert_ne!(Some(u64::from(pid_b)), listed["pid"].as_u64());
    assert_eq!(listed["instances"], 2, "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clients_state_is_not_another_clients() {
    let admin = start(per_client(&[], ""), &[], &[]).await;
    let (a, _) = http_client_as(&admin.mcp, "A").await;
    let (b, _) = http_client_as(&admin.mcp, "B").await;
    // `flaky` fails its first call with a key, then succeeds: state kept by the process.
    let flaky = |client: &Client| {
        let peer = client.peer().clone();
        async move {
            peer.call_tool(call(
                "s__flaky",
                json!({"key": "shared-key", "fails": 1, "code": -32000}),
            ))
            .await
        }
    };
    assert!(flaky(&a).await.is_err(), "A's first call fails");
    // With one shared process B's first call would see A's count and succeed.
    assert!(
        flaky(&b).await.is_err(),
        "B's first call saw A's state: the instances are not apart"
    );
    assert!(flaky(&a).await.is_ok(), "A's second call succeeds");
    assert!(flaky(&b).await.is_ok(), "B's second call succeeds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_a_client_is_told_which_setting_and_an_ended_session_frees_its_instance() {
    let admin = start(per_client(&[], "max_instances = 1"), &[], &[]).await;
    let (a, _) = http_client_as(&admin.mcp, "A").await;
    let (b, _) = http_client_as(&admin.mcp, "B").await;
    let pid_a = pid_of(&a).await;
    let refused = b
        .peer()
        .call_tool(call("s__pid", json!({})))
        .await
        .expect_err("B is past the cap");
    let text = refused.to_string();
    assert!(
        text.contains("max_instances") && text.contains("[servers.s]"),
        "the refusal names the setting: {text}"
    );
    // Operators see the instance: owner, status, process, age and idle time.
    let shown = instances(&until_instances(&admin, 1).await);
    let instance = &shown[0];
    assert_eq!(instance["name"], "s#1", "{instance}");
    assert_eq!(instance["status"], "online", "{instance}");
    assert_eq!(
        instance["pid"].as_u64(),
        Some(u64::from(pid_a)),
        "{instance}"
    );
    assert!(
        instance["owner"].as_str().unwrap().starts_with("session "),
        "{instance}"
    );
    assert!(instance["age_ms"].as_u64().is_some(), "{instance}");
    assert!(instance["idle_ms"].as_u64().is_some(), "{instance}");
    let metrics = admin.get_text("/metrics").await;
    assert!(
        metrics.contains("wardgate_server_instances{server=\"s\",status=\"online\"} 1"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("s#1"),
        "instances must not multiply metric series"
    );
    // So does `wardgate servers`: the count in the list, the instances in the detail.
    let servers = operator_cli(&admin, &["servers"]).await;
    assert!(servers.contains("s (1 instance)"), "{servers}");
    let detail_text = operator_cli(&admin, &["servers", "s"]).await;
    assert!(
        detail_text.contains("instances   1 (one per client)") && detail_text.contains("s#1"),
        "{detail_text}"
    );
    assert!(detail_text.contains(&pid_a.to_string()), "{detail_text}");
    // A's session ends: its instance ends with it, and B gets one.
    a.cancel().await.unwrap();
    assert!(
        wait_gone(&[pid_a], SETTLE).await.is_empty(),
        "A's instance outlived its session"
    );
    until_instances(&admin, 0).await;
    let pid_b = pid_of(&b).await;
    assert_ne!(pid_a, pid_b);
    let events = admin.get_text("/events?follow=false").await;
    assert!(
        events.contains("instance_started") && events.contains("instance_stopped"),
        "{events}"
    );
    assert!(events.contains("its session ended"), "{events}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_instance_is_stopped_and_the_next_call_starts_another() {
    let admin = start(per_client(&[], "instance_idle_timeout = \"1s\""), &[], &[]).await;
    let (a, _) = http_client_as(&admin.mcp, "A").await;
    let first = pid_of(&a).await;
    assert!(
        wait_gone(&[first], SETTLE).await.is_empty(),
        "an idle instance was not stopped"
    );
    until_instances(&admin, 0).await;
    let second = pid_of(&a).await;
    assert_ne!(first, second, "a new instance serves the next call");
    // Under a name of its own: an old name never comes to mean another instance.
    let shown = instances(&until_instances(&admin, 1).await);
    assert_eq!(shown[0]["name"], "s#2", "{shown:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    deprecated,
    reason = "resources/subscribe is what handshake-era clients send"
)]
async fn what_an_instance_says_outside_a_call_reaches_its_own_client_only() {
    use rmcp::model::SubscribeRequestParams;

    let admin = start(per_client(&[], ""), &[], &[]).await;
    let (a, heard_a) = http_client_as(&admin.mcp, "A").await;
    let (b, heard_b) = http_client_as(&admin.mcp, "B").await;
    // Both subscribe to the same listed resource: each on its own instance.
    let uri = "wardgate://s/fake://s/readme";
    a.peer()
        .subscribe(SubscribeRequestParams::new(uri))
        .await
        .expect("A subscribes");
    b.peer()
        .subscribe(SubscribeRequestParams::new(uri))
        .await
        .expect("B subscribes");
    let updated = |heard: &Heard| heard.resource_updates.iter().any(|u| u == uri);
    // A's instance changes the resource: A hears it, B (whose instance did not) does not.
    a.peer()
        .call_tool(call("s__touch", json!({"uri": "fake://s/readme"})))
        .await
        .unwrap();
    assert!(
        heard_a.until(SETTLE, updated).await,
        "A did not hear its instance's update"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!heard_b.heard(updated), "B heard A's instance's update");
    // B's subscription was made on B's own instance, though A subscribed first.
    b.peer()
        .call_tool(call("s__touch", json!({"uri": "fake://s/readme"})))
        .await
        .unwrap();
    assert!(
        heard_b.until(SETTLE, updated).await,
        "B's instance was never subscribed for B"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_in_one_clients_instance_leaves_the_other_clients_alone() {
    let admin = start(per_client(&[], ""), &[], &[]).await;
    let (a, _) = http_client_as(&admin.mcp, "A").await;
    let (b, _) = http_client_as(&admin.mcp, "B").await;
    let pid_b = pid_of(&b).await;
    let pid_a = pid_of(&a).await;
    let crashed = a
        .peer()
        .call_tool(call("s__crash", json!({"code": 9})))
        .await;
    assert!(crashed.is_err(), "a crashed call fails: {crashed:?}");
    // A's instance is restarted by its own supervisor; B's never noticed.
    let again = pid_of(&a).await;
    assert_ne!(again, pid_a, "A's instance was restarted");
    assert_eq!(pid_of(&b).await, pid_b, "B's instance was touched");
    let shown = instances(&detail(&admin).await);
    let crashes = |owner_pid: u32| {
        shown
            .iter()
            .find(|instance| instance["pid"].as_u64() == Some(u64::from(owner_pid)))
            .map(|instance| instance["crashes_in_window"].as_u64().unwrap_or(0))
            .unwrap_or_else(|| panic!("no instance with pid {owner_pid}: {shown:?}"))
    };
    assert!(crashes(again) >= 1, "{shown:?}");
    assert_eq!(crashes(pid_b), 0, "{shown:?}");
    // The listing server was not touched either.
    assert_eq!(admin.server("s").await["crashes_in_window"], 0);
    // The decision timeline tells the instances apart: the crash was decided for A's.
    let crashed_name = shown
        .iter()
        .find(|instance| instance["pid"].as_u64() == Some(u64::from(again)))
        .map(|instance| instance["name"].as_str().unwrap().to_owned())
        .unwrap();
    let (_, decisions) = admin.get("/decisions").await;
    let servers: Vec<&str> = decisions["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|decision| decision["server"].as_str())
        .collect();
    assert!(
        servers.contains(&crashed_name.as_str()),
        "no decision for {crashed_name}: {servers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_outright_takes_every_instance_with_it() {
    let admin = start(per_client(&[], ""), &[], &[]).await;
    let (a, _) = http_client_as(&admin.mcp, "A").await;
    let (b, _) = http_client_as(&admin.mcp, "B").await;
    let pids = vec![pid_of(&a).await, pid_of(&b).await];
    let gateway = admin.process.id().unwrap();
    let tree = descendants(gateway);
    assert!(
        pids.iter().all(|pid| tree.contains(pid)),
        "{pids:?} not under {tree:?}"
    );
    unsafe { libc::kill(gateway as i32, libc::SIGKILL) };
    let left = wait_gone(&tree, SETTLE).await;
    assert!(
        left.is_empty(),
        "processes outlived a gateway killed by SIGKILL: {left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_launched_gateway_gives_its_client_an_instance_that_asks_it() {
    let running = gateway_stdio(per_client(&[], "")).await;
    let answer = running
        .client
        .peer()
        .call_tool(call("s__sample", json!({"prompt": "hello"})))
        .await
        .expect("the call answers");
    assert!(text_of(&answer).contains("sampled"), "{}", text_of(&answer));
    // It was asked by an instance of its own, beside the process that lists the tools
    // (a shared server would be one process, answering the same).
    let pid = pid_of(&running.client).await;
    let tree = descendants(running.process.id().unwrap());
    assert!(
        tree.contains(&pid) && tree.len() >= 2,
        "the call's process {pid} and the listing one under the gateway: {tree:?}"
    );
}

#[test]
fn check_shows_the_instances_and_refuses_their_settings_on_a_shared_server() {
    let good = per_client(&[], "max_instances = 3\ninstance_idle_timeout = \"5m\"");
    let output = std::process::Command::new(wardgate())
        .arg("--config")
        .arg(&good.path)
        .arg("check")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains(
            "instances: one per client session (at most 3 at once, stopped after 5m unused)"
        ),
        "{text}"
    );
    let bad = config(&format!(
        "{}\nmax_instances = 3\n",
        stdio_server("s", &[]).trim_end()
    ));
    let output = std::process::Command::new(wardgate())
        .arg("--config")
        .arg(&bad.path)
        .arg("check")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!output.status.success(), "{text}");
    assert!(
        text.contains("max_instances") && text.contains("instances = \"per-client\""),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_server_asks_each_client_itself_and_keeps_each_clients_notes_apart() {
    let python = crate::python::python_sdk();
    let server = crate::python::script("interactive_server.py");
    let admin = start(
        config(&format!(
            "[servers.py]\ncommand = {:?}\nargs = [{:?}]\ninstances = \"per-client\"\n",
            python.display().to_string(),
            server.display().to_string()
        )),
        &[],
        &[],
    )
    .await;
    let (a, heard_a) = http_client_as(&admin.mcp, "A").await;
    let (b, heard_b) = http_client_as(&admin.mcp, "B").await;
    let tool = |client: &Client, name: &'static str, arguments: Value| {
        let peer = client.peer().clone();
        async move {
            peer.call_tool(call(name, arguments))
                .await
                .map(|result| text_of(&result))
        }
    };
    let (asked_a, asked_b) = tokio::join!(
        tool(&a, "py__ask", json!({"prompt": "A?"})),
        tool(&b, "py__ask", json!({"prompt": "B?"}))
    );
    let (asked_a, asked_b) = (asked_a.expect("A's ask"), asked_b.expect("B's ask"));
    assert!(asked_a.contains("by client A"), "{asked_a}");
    assert!(asked_b.contains("by client B"), "{asked_b}");
    assert_eq!(heard_a.heard(|heard| heard.sampling_requests), 1);
    assert_eq!(heard_b.heard(|heard| heard.sampling_requests), 1);
    tool(&a, "py__remember", json!({"note": "a1"}))
        .await
        .unwrap();
    let notes_b = tool(&b, "py__remember", json!({"note": "b1"}))
        .await
        .unwrap();
    let notes_a = tool(&a, "py__remember", json!({"note": "a2"}))
        .await
        .unwrap();
    assert_eq!(notes_b, "b1", "B saw A's notes");
    assert_eq!(notes_a, "a1, a2", "A saw B's notes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_asking_outside_a_call_asks_its_own_client() {
    let admin = start(per_client(&[], ""), &[], &[]).await;
    let (a, heard_a) = http_client_as(&admin.mcp, "A").await;
    let (b, heard_b) = http_client_as(&admin.mcp, "B").await;
    pid_of(&a).await;
    pid_of(&b).await;
    // A's roots change: its instance asks for them at once, outside any call, and says
    // what it got in a log message.
    a.peer()
        .notify_roots_list_changed()
        .await
        .expect("A tells of its roots");
    let asked = |heard: &Heard| {
        heard
            .logs
            .iter()
            .any(|log| log.to_string().contains("roots after the change"))
    };
    assert!(
        heard_a.until(SETTLE, asked).await,
        "A's instance never told A: {:?}",
        heard_a.heard(|heard| heard.logs.clone())
    );
    let told = heard_a.heard(|heard| heard.logs.clone());
    let told = format!("{told:?}");
    assert!(
        told.contains("wardgate-test-rootA") && !told.contains("failed"),
        "A's instance got A's roots: {told}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!heard_b.heard(asked), "B heard of A's roots");
}
