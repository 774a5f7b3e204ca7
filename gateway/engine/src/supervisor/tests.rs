//! The supervisor on paused time, against scripted in-memory servers: every recovery path
//! runs in milliseconds of real time, deterministically.
//!
//! Why this file is long: one test per supervisor behaviour over the in-memory connector,
//! sharing its setup.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::*;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::sync::broadcast;
use wardgate_policy::{Builtin, ExitInfo, FailureKind};

use super::SlotEvent;
use crate::config::{Config, TransportConfig};
use crate::events::GatewayEvent;
use crate::failure::UpstreamError;
use crate::gateway::Gateway;
use crate::upstream::memory::{self, MemoryProcess};
use crate::upstream::{Connection, Connector, Links};
use wardgate_policy::FailureStatus;

/// A tiny MCP server with one tool; `hang_discovery` makes tools/list never answer.
struct FakeUpstream {
    hang_discovery: bool,
    health: Arc<Health>,
}

/// How the fake answers health probes; shared so a test can change it mid-run.
#[derive(Default)]
struct Health {
    ping_hangs: std::sync::atomic::AtomicBool,
    no_ping: std::sync::atomic::AtomicBool,
    pings: AtomicU32,
    lists: AtomicU32,
}

impl ServerHandler for FakeUpstream {
    async fn ping(&self, _context: RequestContext<RoleServer>) -> Result<(), McpError> {
        self.health.pings.fetch_add(1, Ordering::SeqCst);
        if self.health.no_ping.load(Ordering::SeqCst) {
            return Err(McpError::new(ErrorCode::METHOD_NOT_FOUND, "ping", None));
        }
        if self.health.ping_hangs.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(())
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.health.lists.fetch_add(1, Ordering::SeqCst);
        if self.hang_discovery {
            std::future::pending::<()>().await;
        }
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "t",
            "a tool",
            Arc::new(Default::default()),
        )]))
    }
}

#[derive(Debug, Clone)]
enum Step {
    Serve,
    HangDiscovery,
    Fail(FailureKind),
}

/// Connects to in-memory servers as scripted, one step per attempt (then `Serve`).
struct Scripted {
    steps: Mutex<VecDeque<Step>>,
    stdio: bool,
    connects: AtomicU32,
    current: Mutex<Option<MemoryProcess>>,
    health: Arc<Health>,
}

impl Scripted {
    fn new(stdio: bool, steps: &[Step]) -> Arc<Scripted> {
        Arc::new(Scripted {
            steps: Mutex::new(steps.iter().cloned().collect()),
            stdio,
            connects: AtomicU32::new(0),
            current: Mutex::new(None),
            health: Arc::default(),
        })
    }

    /// The current server dies (a crash for stdio, a dropped connection for HTTP).
    fn crash(&self, exit: ExitInfo) {
        if let Some(process) = self.current.lock().unwrap().take() {
            process.end(exit);
        }
    }

    fn connects(&self) -> u32 {
        self.connects.load(Ordering::SeqCst)
    }
}

impl Connector for Scripted {
    fn connect<'a>(
        &'a self,
        _transport: &'a TransportConfig,
        links: Arc<Links>,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<Connection, UpstreamError>> {
        Box::pin(async move {
            self.connects.fetch_add(1, Ordering::SeqCst);
            let step = self
                .steps
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Step::Serve);
            if let Step::Fail(kind) = step {
                return Err(UpstreamError::new(&links.server, kind, "scripted failure"));
            }
            let handler = FakeUpstream {
                hang_discovery: matches!(step, Step::HangDiscovery),
                health: self.health.clone(),
            };
            let (connection, process) = memory::connect(handler, links, self.stdio).await?;
            *self.current.lock().unwrap() = Some(process);
            Ok(connection)
        })
    }
}

fn start(
    stdio: bool,
    steps: &[Step],
) -> (
    Arc<Gateway>,
    Arc<Scripted>,
    broadcast::Receiver<GatewayEvent>,
) {
    let text = if stdio {
        "[servers.s]\ncommand = \"fake\"\n"
    } else {
        "[servers.s]\nurl = \"http://127.0.0.1:9/mcp\"\n"
    };
    let config = Config::parse(std::path::Path::new("test.toml"), text, &|_| None).expect("config");
    let connector = Scripted::new(stdio, steps);
    let gateway = Gateway::start_with(&config, |_| Arc::new(Builtin::default()), connector.clone());
    let events = gateway.subscribe();
    (gateway, connector, events)
}

/// Wait (on paused time) until the server's status is `wanted`.
async fn until(gateway: &Gateway, wanted: &str) {
    let slot = gateway.slot("s").unwrap();
    let mut status = slot.watch_status();
    let reached = tokio::time::timeout(
        Duration::from_secs(3600),
        status.wait_for(|s| s.name() == wanted),
    )
    .await;
    assert!(
        reached.is_ok(),
        "never reached {wanted}; now {}",
        slot.status()
    );
}

/// Every status the server went through so far.
fn statuses(events: &mut broadcast::Receiver<GatewayEvent>) -> Vec<String> {
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let GatewayEvent::StatusChanged { to, .. } = event {
            seen.push(to);
        }
    }
    seen
}

fn killed() -> ExitInfo {
    ExitInfo {
        code: None,
        signal: Some(9),
    }
}

#[tokio::test(start_paused = true)]
async fn stdio_crash_third_time_in_window_is_permanent() {
    let (gateway, connector, mut events) = start(true, &[]);
    for _ in 0..3 {
        until(&gateway, "online").await;
        connector.crash(killed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    until(&gateway, "permanently_failed").await;
    let seen = statuses(&mut events);
    assert_eq!(
        seen.iter().filter(|s| *s == "restarting").count(),
        2,
        "{seen:?}"
    );
    assert_eq!(connector.connects(), 3);
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(
        connector.connects(),
        3,
        "a permanently failed server was restarted"
    );
    assert!(
        gateway.catalogue().tools.is_empty(),
        "tools of a failed server are listed"
    );
}

#[tokio::test(start_paused = true)]
async fn stdio_budget_window_slides() {
    let (gateway, connector, _events) = start(true, &[]);
    for _ in 0..2 {
        until(&gateway, "online").await;
        connector.crash(killed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    until(&gateway, "online").await;
    // Past the 5-minute window the two old crashes no longer count.
    tokio::time::sleep(Duration::from_secs(301)).await;
    connector.crash(killed());
    tokio::time::sleep(Duration::from_millis(10)).await;
    until(&gateway, "online").await;
    assert_eq!(connector.connects(), 4);
}

#[tokio::test(start_paused = true)]
async fn crash_during_discovery_counts_against_the_budget() {
    let (gateway, connector, mut events) = start(true, &[Step::HangDiscovery]);
    until(&gateway, "discovering_tools").await;
    connector.crash(killed());
    until(&gateway, "online").await;
    let seen = statuses(&mut events);
    assert!(
        seen.contains(&"restarting".to_owned()),
        "a crash in discovery was not a crash: {seen:?}"
    );
    assert!(
        !seen.iter().any(|s| s == "offline" || s == "reconnecting"),
        "{seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn http_reconnect_backs_off_as_the_policy_says_then_recovers() {
    let refused = || Step::Fail(FailureKind::ConnectRefused);
    let (gateway, connector, mut events) = start(false, &[Step::Serve, refused(), refused()]);
    until(&gateway, "online").await;
    let lost_at = tokio::time::Instant::now();
    connector.crash(killed());
    until(&gateway, "reconnecting").await;
    until(&gateway, "online").await;
    let took = lost_at.elapsed();
    let mut delays = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let GatewayEvent::Reconnecting { next_delay_ms, .. } = event {
            delays.push(next_delay_ms);
        }
    }
    assert_eq!(delays.len(), 3, "{delays:?}");
    for (delay, base) in delays.iter().zip([1000.0, 2000.0, 4000.0]) {
        assert!(
            (*delay as f64 / base - 1.0).abs() <= 0.1 + 1e-9,
            "{delays:?}"
        );
    }
    let total: u64 = delays.iter().sum();
    assert!(
        took >= Duration::from_millis(total),
        "reconnected before the backoff elapsed: {took:?}"
    );
    assert_eq!(connector.connects(), 4);
    assert_eq!(
        gateway.catalogue().tools.len(),
        1,
        "tools did not come back"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stale_failure_from_an_old_generation_changes_nothing() {
    let (gateway, connector, _events) = start(false, &[]);
    until(&gateway, "online").await;
    let slot = gateway.slot("s").unwrap();
    let first = slot.live().unwrap().generation;
    // The first connection fails; the supervisor reconnects (generation 2), and answers
    // the call that asked with the status its machine stepped to.
    let (reply, told) = tokio::sync::oneshot::channel();
    slot.send(SlotEvent::CallFailed {
        generation: first,
        error: UpstreamError::new("s", FailureKind::ConnectionReset, "reset"),
        status: FailureStatus::Offline,
        reply: Some(reply),
    });
    let told = told
        .await
        .expect("the supervisor answers a failure of its connection");
    assert_eq!(told.name(), "reconnecting", "{told}");
    until(&gateway, "reconnecting").await;
    until(&gateway, "online").await;
    let second = slot.live().unwrap().generation;
    assert!(second > first);
    // A late failure of the old connection arrives after the new one is up: its question
    // is dropped unanswered.
    let (reply, told) = tokio::sync::oneshot::channel();
    slot.send(SlotEvent::CallFailed {
        generation: first,
        error: UpstreamError::new("s", FailureKind::ConnectionReset, "late news"),
        status: FailureStatus::Offline,
        reply: Some(reply),
    });
    assert!(
        told.await.is_err(),
        "news of an older connection is not answered"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(slot.status().is_online(), "{}", slot.status());
    assert_eq!(slot.live().unwrap().generation, second);
    assert_eq!(connector.connects(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_call_while_reconnecting_cancels_the_wait() {
    let refused = || Step::Fail(FailureKind::ConnectRefused);
    let (gateway, connector, _events) =
        start(false, &[Step::Serve, refused(), refused(), refused()]);
    until(&gateway, "online").await;
    connector.crash(killed());
    // After three refusals the next wait is about 8 s; a call wakes it at once.
    while connector.connects() < 4 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    until(&gateway, "reconnecting").await;
    let woke_at = tokio::time::Instant::now();
    gateway.slot("s").unwrap().send(SlotEvent::WakeUp);
    until(&gateway, "online").await;
    assert!(
        woke_at.elapsed() < Duration::from_secs(1),
        "the wait was not cancelled: {:?}",
        woke_at.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn disable_during_discovery_is_complete_and_enable_restarts() {
    let (gateway, connector, _events) = start(true, &[Step::HangDiscovery]);
    until(&gateway, "discovering_tools").await;
    gateway.disable("s").await.unwrap();
    let slot = gateway.slot("s").unwrap();
    assert_eq!(slot.status().name(), "disabled");
    assert!(slot.live().is_none());
    assert!(gateway.reconnect("s").await.is_err());
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(connector.connects(), 1, "a disabled server was started");
    gateway.enable("s").await.unwrap();
    until(&gateway, "online").await;
    assert_eq!(connector.connects(), 2);
}

#[tokio::test(start_paused = true)]
async fn reconnect_resets_the_crash_budget() {
    let (gateway, connector, _events) = start(true, &[]);
    for _ in 0..3 {
        until(&gateway, "online").await;
        connector.crash(killed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    until(&gateway, "permanently_failed").await;
    gateway.reconnect("s").await.unwrap();
    until(&gateway, "online").await;
    // A fresh budget: the next two crashes restart.
    for _ in 0..2 {
        connector.crash(killed());
        tokio::time::sleep(Duration::from_millis(10)).await;
        until(&gateway, "online").await;
    }
}

#[tokio::test(start_paused = true)]
async fn auth_failure_parks_until_an_operator_reconnects() {
    let (gateway, connector, _events) = start(false, &[Step::Fail(FailureKind::HttpStatus(401))]);
    until(&gateway, "requires_reauth").await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(connector.connects(), 1, "a 401 was retried");
    gateway.reconnect("s").await.unwrap();
    until(&gateway, "online").await;
}

#[tokio::test(start_paused = true)]
async fn three_failed_probes_mark_degraded_and_a_success_restores() {
    let (gateway, connector, mut events) = start(false, &[]);
    until(&gateway, "online").await;
    connector.health.ping_hangs.store(true, Ordering::SeqCst);
    let slot = gateway.slot("s").unwrap();
    let mut status = slot.watch_status();
    let degraded = tokio::time::timeout(
        Duration::from_secs(3 * (132 + 60) + 10),
        status.wait_for(|s| *s == crate::status::ServerStatus::Online { degraded: true }),
    )
    .await
    .is_ok();
    assert!(
        degraded,
        "not degraded after three failed probes: {}",
        slot.status()
    );
    // A warning only: the server keeps serving and nothing reconnects.
    assert_eq!(connector.connects(), 1);
    assert!(!gateway.catalogue().tools.is_empty());
    connector.health.ping_hangs.store(false, Ordering::SeqCst);
    let restored = tokio::time::timeout(
        Duration::from_secs(200),
        status.wait_for(|s| *s == crate::status::ServerStatus::Online { degraded: false }),
    )
    .await
    .is_ok();
    assert!(restored, "a successful probe did not restore health");
    let mut kinds = Vec::new();
    while let Ok(event) = events.try_recv() {
        kinds.push(event);
    }
    assert!(
        kinds.iter().any(|e| matches!(
            e,
            GatewayEvent::HealthDegraded {
                consecutive_failures: 3,
                ..
            }
        )),
        "{kinds:?}"
    );
    assert!(
        kinds
            .iter()
            .any(|e| matches!(e, GatewayEvent::HealthRestored { .. })),
        "{kinds:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn probes_fall_back_to_tools_list_without_ping_and_never_initialize_again() {
    let (gateway, connector, _events) = start(false, &[]);
    until(&gateway, "online").await;
    connector.health.no_ping.store(true, Ordering::SeqCst);
    let lists_before = connector.health.lists.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(4 * 135)).await;
    let slot = gateway.slot("s").unwrap();
    assert_eq!(
        slot.status(),
        crate::status::ServerStatus::Online { degraded: false }
    );
    assert!(
        connector.health.lists.load(Ordering::SeqCst) >= lists_before + 3,
        "tools/list was not used as the probe"
    );
    assert_eq!(
        connector.health.pings.load(Ordering::SeqCst),
        1,
        "ping kept being tried after method-not-found"
    );
    assert_eq!(connector.connects(), 1, "a probe re-initialized the server");
}

#[tokio::test(start_paused = true)]
async fn attempts_asked_for_by_calls_leave_the_backoff_schedule_as_it_was() {
    let refused = || Step::Fail(FailureKind::ConnectRefused);
    let (gateway, connector, mut events) =
        start(false, &[Step::Serve, refused(), refused(), refused()]);
    until(&gateway, "online").await;
    connector.crash(killed());
    until(&gateway, "reconnecting").await;
    // Two calls arrive; each tries at once and fails.
    for _ in 0..2 {
        let before = connector.connects();
        gateway.slot("s").unwrap().wake();
        while connector.connects() == before {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        until(&gateway, "reconnecting").await;
    }
    let mut attempts = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let GatewayEvent::Reconnecting { attempt, .. } = event {
            attempts.push(attempt);
        }
    }
    // The calls' attempts asked the policy nothing: one scheduled attempt so far.
    assert_eq!(attempts, [1], "calls pushed the backoff along");
    let view = gateway.slot("s").unwrap().recovery().view;
    assert_eq!(view.reconnect_attempt, Some(1));
    assert_eq!(
        view.attempts_finished, 3,
        "one connection and the two calls' attempts"
    );
}

/// Wait (on paused time) until every server in `names` is online.
async fn all_online(gateway: &Gateway, names: &[&str]) {
    for name in names {
        let slot = gateway
            .slot(name)
            .unwrap_or_else(|| panic!("no slot {name}"));
        let mut status = slot.watch_status();
        let reached =
            tokio::time::timeout(Duration::from_secs(60), status.wait_for(|s| s.is_online())).await;
        assert!(
            reached.is_ok(),
            "{name} never came online; now {}",
            slot.status()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn apply_config_starts_stops_and_restarts_only_what_changed() {
    let parse = |text: &str| {
        Config::parse(std::path::Path::new("test.toml"), text, &|_| None).expect("config")
    };
    let before = parse(
        "[servers.keep]\ncommand = \"fake\"\n[servers.gone]\ncommand = \"fake\"\n\
         [servers.edit]\ncommand = \"fake\"\n",
    );
    let connector = Scripted::new(true, &[]);
    let gateway = Gateway::start_with(&before, |_| Arc::new(Builtin::default()), connector.clone());
    all_online(&gateway, &["keep", "gone", "edit"]).await;
    let keep = gateway.slot("keep").unwrap();
    let keep_live = keep.live().expect("keep is live");
    let gone = gateway.slot("gone").unwrap();
    let mut events = gateway.subscribe();

    let after = parse(
        "[servers.keep]\ncommand = \"fake\"\n[servers.edit]\ncommand = \"fake\"\nargs = [\"-v\"]\n\
         [servers.fresh]\ncommand = \"fake\"\n",
    );
    let change = gateway
        .apply_config(&after, |_| Arc::new(Builtin::default()))
        .await;
    assert_eq!(change.added, ["fresh"]);
    assert_eq!(change.removed, ["gone"]);
    assert_eq!(change.modified, ["edit"]);
    assert_eq!(change.unchanged, ["keep"]);
    assert!(change.not_applied.is_empty());
    all_online(&gateway, &["keep", "edit", "fresh"]).await;

    assert!(
        gateway.slot("gone").is_none(),
        "the removed server left the gateway"
    );
    assert!(
        gone.status().refuses_calls(),
        "a caller holding the old slot is refused at once"
    );
    assert!(gone.live().is_none());
    let still = keep.live().expect("keep still live");
    assert!(
        Arc::ptr_eq(&still, &keep_live),
        "keep's connection was not touched"
    );
    assert!(
        Arc::ptr_eq(&gateway.slot("keep").unwrap(), &keep),
        "keep's slot is the same"
    );
    let edit = gateway.slot("edit").unwrap();
    assert_eq!(
        edit.config.transport.describe(),
        "fake -v",
        "edit runs its new config"
    );
    let heard: Vec<GatewayEvent> = std::iter::from_fn(|| events.try_recv().ok()).collect();
    let keep_changes = heard
        .iter()
        .filter(
            |event| matches!(event, GatewayEvent::StatusChanged { server, .. } if server == "keep"),
        )
        .count();
    assert_eq!(keep_changes, 0, "keep's status never changed");
    // The seeds' words: a config change restarts a server; a removal ends its connection
    // on purpose.
    let to = |name: &str| -> Vec<String> {
        heard
            .iter()
            .filter_map(|event| match event {
                GatewayEvent::StatusChanged { server, to, .. } if server == name => {
                    Some(to.clone())
                }
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        to("edit").first().map(String::as_str),
        Some("restarting"),
        "{heard:?}"
    );
    // The removal says why in its status change; no separate "disconnected" says it again.
    assert_eq!(to("gone"), ["disabled"], "{heard:?}");
    assert!(
        heard.iter().any(|event| matches!(
            event,
            GatewayEvent::StatusChanged { server, reason, .. }
                if server == "gone" && reason == "removed from the config"
        )),
        "{heard:?}"
    );

    let names: Vec<String> = gateway
        .servers()
        .into_iter()
        .map(|info| info.name)
        .collect();
    assert_eq!(names, ["edit", "fresh", "keep"]);
    let tools: Vec<String> = gateway
        .catalogue()
        .tools
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(tools, ["edit__t", "fresh__t", "keep__t"]);
    let detail = gateway.server("keep").expect("keep's detail");
    assert_eq!(detail.info.status.as_str(), "online");
    assert_eq!(detail.info.generation, Some(1));
    assert_eq!(detail.tools[0].name, "keep__t");
    assert_eq!(detail.tools[0].original_name, "t");

    let metrics = gateway.encode_metrics(&[]);
    assert!(
        metrics.contains(r#"wardgate_server_status{server="fresh",status="online"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"wardgate_server_tools{server="keep"} 1"#),
        "{metrics}"
    );
    assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
    gateway.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn server_info_shows_what_the_supervisor_knows() {
    let refused = || Step::Fail(FailureKind::ConnectRefused);
    let (gateway, connector, _events) = start(false, &[Step::Serve, refused(), refused()]);
    until(&gateway, "online").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let online = gateway.servers().remove(0);
    assert_eq!(online.status.as_str(), "online");
    assert_eq!(online.generation, Some(1));
    assert_eq!(online.uptime_ms, Some(5000));
    assert_eq!(
        (online.tools, online.transport.as_str()),
        (1, "streamable-http")
    );
    assert_eq!(online.reconnect_attempt, None);

    connector.crash(killed());
    until(&gateway, "reconnecting").await;
    // The first reconnection (after ~1 s) fails; the second is scheduled.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let down = gateway.servers().remove(0);
    assert_eq!(down.status.as_str(), "reconnecting", "{down:?}");
    assert_eq!(down.reconnect_attempt, Some(2), "{down:?}");
    assert!(down.next_retry_in_ms.is_some_and(|ms| ms > 0), "{down:?}");
    assert_eq!(down.consecutive_failures, 1, "{down:?}");
    assert_eq!(
        down.last_error.as_deref(),
        Some("scripted failure"),
        "{down:?}"
    );
    assert_eq!((down.generation, down.uptime_ms), (None, None), "{down:?}");
    assert_eq!(down.tools, 1, "the last good snapshot is kept: {down:?}");

    until(&gateway, "online").await;
    let back = gateway.servers().remove(0);
    assert_eq!(
        (back.consecutive_failures, back.reconnect_attempt),
        (0, None),
        "{back:?}"
    );
    assert_eq!(back.next_retry_in_ms, None, "{back:?}");
}

#[tokio::test(start_paused = true)]
async fn crashes_are_counted_for_operators() {
    let (gateway, connector, _events) = start(true, &[]);
    until(&gateway, "online").await;
    connector.crash(killed());
    tokio::time::sleep(Duration::from_millis(10)).await;
    until(&gateway, "online").await;
    let info = gateway.servers().remove(0);
    assert_eq!(info.crashes_in_window, 1, "{info:?}");
    assert!(info.last_error.unwrap_or_default().contains("signal 9"));
    let metrics = gateway.encode_metrics(&[]);
    assert!(
        metrics.contains(r#"wardgate_crashes_total{server="s"} 1"#),
        "{metrics}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_server_detail_serializes_its_tool_list_under_one_tools_key() {
    let (gateway, _connector, _events) = start(false, &[]);
    until(&gateway, "online").await;
    let detail = gateway.server("s").expect("s");
    let text = serde_json::to_string(&detail).unwrap();
    assert_eq!(text.matches("\"tools\"").count(), 1, "{text}");
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["tools"][0]["name"], "s__t", "{value}");
    assert_eq!(value["name"], "s", "{value}");
    assert_eq!(value["status"], "online", "{value}");
}

#[tokio::test(start_paused = true)]
async fn a_first_list_waits_until_the_server_is_online_and_in_the_catalogue() {
    let (gateway, _, _) = start(false, &[Step::Serve]);
    gateway.startup_settled().await;
    assert_eq!(gateway.slot("s").unwrap().status().name(), "online");
    assert!(
        gateway.catalogue().tool("s__t").is_some(),
        "settled before its tools were in the catalogue"
    );
}

#[tokio::test(start_paused = true)]
async fn a_server_whose_first_attempt_fails_holds_no_list_up() {
    let (gateway, _, _) = start(false, &[Step::Fail(FailureKind::ConnectRefused)]);
    let started = tokio::time::Instant::now();
    gateway.startup_settled().await;
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "the list waited for a failed server"
    );
    assert_ne!(gateway.slot("s").unwrap().status().name(), "online");
}

#[tokio::test(start_paused = true)]
async fn a_server_hanging_at_start_holds_lists_for_startup_wait_only() {
    let (gateway, _, _) = start(false, &[Step::HangDiscovery]);
    let started = tokio::time::Instant::now();
    gateway.startup_settled().await;
    // The default startup_wait (10 s) ends the wait; the 30 s startup timeout has not run out.
    assert_eq!(started.elapsed(), gateway.settings.startup_wait);
    assert_eq!(
        gateway.slot("s").unwrap().status().name(),
        "discovering_tools"
    );
}

#[tokio::test(start_paused = true)]
async fn an_enabled_server_is_waited_for_again() {
    let (gateway, _, _) = start(false, &[Step::Serve, Step::HangDiscovery]);
    until(&gateway, "online").await;
    gateway.disable("s").await.unwrap();
    gateway.startup_settled().await;
    gateway.enable("s").await.unwrap();
    // Enable answers before the connection is made; a list asked now waits for it.
    gateway.startup_settled().await;
    assert_eq!(gateway.slot("s").unwrap().status().name(), "online");
}
