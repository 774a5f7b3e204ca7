//! One configured server's slot: what calls and operators read ([`Slot`]), and the one
//! handle that may change it ([`SlotWriter`]).
//!
//! The writer is created with the slot and is not `Clone`: the supervisor holds it while it
//! runs and hands it back when it stops (the gateway then retires the slot with it). So
//! "the supervisor is the only writer of its slot's status, connection and snapshot" is a
//! fact of the types: every field that changes is private to this module, and only the
//! writer's methods change it.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rmcp::{Peer, RoleClient};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use wardgate_policy::{FailureStatus, RecoveryPolicy, ServerContext, TransportKind};
use wardgate_recovery::call::{CallMachine, CallNext, CallRecord, CallStep};
use wardgate_recovery::lifecycle::{self, LifecycleEvent};
use wardgate_recovery::{OperatorAction, Record, View};

use crate::catalogue::Snapshot;
use crate::config::ServerConfig;
use crate::failure::UpstreamError;
use crate::lock::{lock, read, write};
use crate::status::ServerStatus;
use crate::upstream::{self, Links};

/// The live connection of a slot, as calls see it.
pub struct Live {
    pub generation: u64,
    pub peer: Peer<RoleClient>,
    pub links: Arc<Links>,
    /// Changes once, when a stdio server's process exits.
    pub exit: Option<watch::Receiver<Option<upstream::ProcessEnd>>>,
    /// Set when the gateway stopped reading a stdio server's output (an oversized message).
    pub stream_fault: Option<crate::upstream::StreamFault>,
}

/// What a supervisor hears from the rest of the engine.
#[derive(Debug)]
pub enum SlotEvent {
    /// A call on `generation` failed in a way that says the connection is unusable
    /// (`wardgate_recovery::call::CallStep::tell`). `reply`, for a call that gives up: the
    /// status the recovery machine stepped to, which the call's error names. The question
    /// is dropped unanswered when the news is of an older connection.
    CallFailed {
        generation: u64,
        error: UpstreamError,
        status: FailureStatus,
        reply: Option<oneshot::Sender<ServerStatus>>,
    },
    /// A call on `generation` that will retry found the connection unusable
    /// (`wardgate_recovery::call::CallStep::replace`): replace it without telling clients.
    CallBroken {
        generation: u64,
        error: UpstreamError,
    },
    /// Someone wants the server now: skip any reconnect wait and try at once.
    WakeUp,
    /// A call (or an on-demand check) on `generation` finished in a way that tells about
    /// the connection's health (`wardgate_recovery::call::CallStep::evidence`).
    CallOutcome {
        generation: u64,
        succeeded: bool,
        latency_ms: u64,
        error: Option<String>,
    },
    /// An operator action; the reply says whether it happened.
    Operator {
        action: OperatorAction,
        reply: oneshot::Sender<Result<(), ActionError>>,
    },
}

/// What operators read about a slot beyond its status: the recovery machine's view, on
/// the supervisor's clock, and the process id.
#[derive(Debug, Clone)]
pub(crate) struct Recovery {
    /// The supervisor's clock starts here: the view's times are milliseconds after it.
    pub epoch: Instant,
    pub view: View,
    /// The stdio server's process id while it serves.
    pub pid: Option<u32>,
}

impl Recovery {
    /// Milliseconds on the supervisor's clock for `at`.
    pub fn millis(&self, at: Instant) -> u64 {
        millis(at.saturating_duration_since(self.epoch))
    }
}

pub(crate) fn millis(duration: Duration) -> u64 {
    duration.as_millis().min(u64::MAX as u128) as u64
}

/// One configured server: never removed or emptied while it is configured. A server with
/// an instance per client has one slot more for each client's instance (`instance`).
pub struct Slot {
    /// The server's name; an instance's is `SERVER#N`.
    pub name: String,
    /// Whose instance of which server this slot is; `None` for a configured server's own.
    pub instance: Option<InstanceOf>,
    pub config: ServerConfig,
    pub context: ServerContext,
    /// Makes this server's recovery decisions.
    pub policy: Arc<dyn RecoveryPolicy>,
    status: watch::Sender<ServerStatus>,
    live: RwLock<Option<Arc<Live>>>,
    snapshot: RwLock<Arc<Snapshot>>,
    events: mpsc::UnboundedSender<SlotEvent>,
    recovery: Mutex<Recovery>,
    /// `Some(until)` while the server is starting for the first time (or since it was added
    /// or enabled) and catalogue lists should wait for it, at most until `until`; `None` once
    /// it has settled (online with its tools in the catalogue, or failed).
    starting: watch::Sender<Option<Instant>>,
    /// The server's resources some client is subscribed to, by the server's own URIs: a
    /// 2026-07-28 connection asks for their updates on its `subscriptions/listen` stream,
    /// and every new connection starts with them.
    subscriptions: watch::Sender<BTreeSet<String>>,
    /// The resources the live connection's listen stream was acknowledged for.
    listened: watch::Sender<BTreeSet<String>>,
    /// The recovery machine's last [`JOURNAL_RECORDS`] inputs and steps, oldest first.
    journal: Mutex<VecDeque<Record>>,
    /// How many records were ever journaled (the count moves on when old ones drop out).
    journaled: watch::Sender<u64>,
    /// The last [`JOURNAL_RECORDS`] steps of its calls' machines that did something (woke
    /// the server, sent, retried, answered, failed), oldest first.
    call_journal: Mutex<VecDeque<CallRecord>>,
    /// How many calls have started at this server: the next one's number.
    calls_started: std::sync::atomic::AtomicU64,
    /// The last check of its credentials (periodic or an operator's), and what it found.
    credential_check: Mutex<Option<CredentialCheck>>,
    /// Its supervisor has stopped for good: the server was removed from the config, or
    /// replaced by a slot with its changed config.
    retired: std::sync::atomic::AtomicBool,
}

/// When a server's credentials were last checked, and whether they were accepted (`None`:
/// the check failed otherwise, so it could not tell).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CredentialCheck {
    pub at: std::time::SystemTime,
    pub accepted: Option<bool>,
}

/// Records kept per server: enough for the story of an outage, bounded whatever happens.
pub const JOURNAL_RECORDS: usize = 256;

/// A per-client instance of a configured server.
#[derive(Debug, Clone)]
pub struct InstanceOf {
    /// The configured server's name.
    pub server: String,
    /// Its number among the server's instances since the gateway started: the `N` of
    /// `SERVER#N`, never given twice, so a name never means another client's instance.
    pub number: u64,
    /// The sessions it serves: what its server says outside a call goes to them only.
    pub audience: Arc<crate::sessions::Audience>,
}

pub use crate::catalogue::server_of;

impl Slot {
    /// A slot for `server`, its writer, and the receiving end of its supervisor's events.
    pub(crate) fn create(
        server: &ServerConfig,
        policy: Arc<dyn RecoveryPolicy>,
        startup_wait: Duration,
    ) -> (SlotWriter, mpsc::UnboundedReceiver<SlotEvent>) {
        Self::create_as(server, None, policy, startup_wait)
    }

    /// A slot for instance `number` of `server`, named `SERVER#N`: its own status, crash
    /// budget, journal and policy decisions.
    pub(crate) fn create_instance(
        server: &ServerConfig,
        number: u64,
        audience: Arc<crate::sessions::Audience>,
        policy: Arc<dyn RecoveryPolicy>,
        startup_wait: Duration,
    ) -> (SlotWriter, mpsc::UnboundedReceiver<SlotEvent>) {
        let instance = InstanceOf {
            server: server.name.clone(),
            number,
            audience,
        };
        let config = ServerConfig {
            name: format!("{}#{number}", server.name),
            ..server.clone()
        };
        Self::create_as(&config, Some(instance), policy, startup_wait)
    }

    fn create_as(
        server: &ServerConfig,
        instance: Option<InstanceOf>,
        policy: Arc<dyn RecoveryPolicy>,
        startup_wait: Duration,
    ) -> (SlotWriter, mpsc::UnboundedReceiver<SlotEvent>) {
        let (events, receiver) = mpsc::unbounded_channel();
        let mut context = ServerContext::new(
            server.name.clone(),
            upstream::transport_kind(&server.transport),
        );
        context.params = server.params.clone();
        let initial = if server.enabled {
            ServerStatus::Provisioning
        } else {
            ServerStatus::Disabled
        };
        let slot = Arc::new(Slot {
            name: server.name.clone(),
            instance,
            config: server.clone(),
            context,
            policy,
            status: watch::channel(initial).0,
            live: RwLock::new(None),
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            events,
            recovery: Mutex::new(Recovery {
                epoch: Instant::now(),
                view: View::default(),
                pid: None,
            }),
            starting: watch::channel(None).0,
            subscriptions: watch::channel(BTreeSet::new()).0,
            listened: watch::channel(BTreeSet::new()).0,
            journal: Mutex::new(VecDeque::new()),
            journaled: watch::channel(0).0,
            call_journal: Mutex::new(VecDeque::new()),
            calls_started: std::sync::atomic::AtomicU64::new(0),
            credential_check: Mutex::new(None),
            retired: std::sync::atomic::AtomicBool::new(false),
        });
        let writer = SlotWriter { slot };
        if server.enabled {
            writer.start_waiting(startup_wait);
        }
        (writer, receiver)
    }

    /// Whether the server is still in its first start (`wait_settled` would wait).
    pub fn is_starting(&self) -> bool {
        self.starting.borrow().is_some()
    }

    /// Wait until this server has settled, or its startup wait is over.
    pub async fn wait_settled(&self) {
        let mut starting = self.starting.subscribe();
        let Some(until) = *starting.borrow_and_update() else {
            return;
        };
        let _ = tokio::time::timeout_at(until, starting.wait_for(Option::is_none)).await;
    }

    /// Its calls' recent steps, oldest first, on the supervisor's clock: what each call did
    /// and why it retried or gave up.
    pub fn call_journal(&self) -> Vec<CallRecord> {
        lock(&self.call_journal).iter().cloned().collect()
    }

    /// Why the last connection attempt failed, as the recovery machine recorded it (`None`:
    /// it recorded nothing), for a waiting call's `Sight`.
    pub(crate) fn last_connect_failure(&self) -> Option<wardgate_recovery::Failure> {
        let view = lock(&self.recovery).view.clone();
        if view.last_failure.is_none() && view.last_error.is_none() {
            return None;
        }
        Some(wardgate_recovery::Failure::new(
            view.last_failure
                .unwrap_or(wardgate_policy::FailureKind::ConnectRefused),
            view.last_error
                .unwrap_or_else(|| "the connection attempt failed".to_owned()),
        ))
    }

    /// A check of the server's credentials ended: `accepted`, where it could tell.
    pub(crate) fn note_credential_check(&self, accepted: Option<bool>) {
        *lock(&self.credential_check) = Some(CredentialCheck {
            at: std::time::SystemTime::now(),
            accepted,
        });
    }

    /// The last check of the server's credentials.
    pub fn credential_check(&self) -> Option<CredentialCheck> {
        *lock(&self.credential_check)
    }

    /// Whether the server has credentials a check can exercise: HTTP headers, or an OAuth
    /// sign-in (a stdio server's environment was read when it started).
    pub fn has_checkable_credentials(&self) -> bool {
        match &self.config.transport {
            crate::config::TransportConfig::Stdio { .. } => false,
            crate::config::TransportConfig::StreamableHttp { headers, oauth, .. } => {
                !headers.is_empty() || oauth.is_some()
            }
            crate::config::TransportConfig::Sse { headers, .. } => !headers.is_empty(),
        }
    }

    /// A call starts: its number at this server.
    pub(crate) fn start_call(&self) -> u64 {
        self.calls_started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
    }

    /// Journal call `call`'s step, if it did something.
    pub(crate) fn journal_call(&self, call: u64, machine: &CallMachine, step: &CallStep) {
        if step.next == CallNext::Watch {
            return;
        }
        let at_ms = lock(&self.recovery).millis(Instant::now());
        if let Some(record) = CallRecord::of(at_ms, call, machine, step) {
            let mut journal = lock(&self.call_journal);
            if journal.len() == JOURNAL_RECORDS {
                journal.pop_front();
            }
            journal.push_back(record);
        }
    }

    /// The recovery machine's recent inputs and what followed each, oldest first: why
    /// recovery did what it did.
    /// Whether a client's subscription to the server's resource `uri` is held.
    pub fn wants_updates(&self, uri: &str) -> bool {
        self.subscriptions.borrow().contains(uri)
    }

    /// Whether any client's subscription to the server's resources is held.
    pub fn has_subscriptions(&self) -> bool {
        !self.subscriptions.borrow().is_empty()
    }

    pub fn journal(&self) -> Vec<Record> {
        lock(&self.journal).iter().cloned().collect()
    }

    /// Some client wants updates of the server's resource `uri` (its own URI).
    pub fn want_updates(&self, uri: &str) {
        self.subscriptions
            .send_if_modified(|uris| uris.insert(uri.to_owned()));
    }

    /// No client wants updates of `uri` any more.
    pub fn drop_updates(&self, uri: &str) {
        self.subscriptions.send_if_modified(|uris| uris.remove(uri));
    }

    /// The server's resources some client is subscribed to, changing as they come and go.
    pub(crate) fn watch_subscriptions(&self) -> watch::Receiver<BTreeSet<String>> {
        self.subscriptions.subscribe()
    }

    /// Where the listen stream of the live connection says which resources it was
    /// acknowledged for.
    pub(crate) fn listened(&self) -> watch::Sender<BTreeSet<String>> {
        self.listened.clone()
    }

    /// Wait, at most `limit`, until the live connection's listen stream was acknowledged
    /// for `uri`: a subscription is in place when the client hears it is.
    pub async fn until_listened(&self, uri: &str, limit: Duration) -> bool {
        let mut listened = self.listened.subscribe();
        tokio::time::timeout(limit, listened.wait_for(|uris| uris.contains(uri)))
            .await
            .is_ok_and(|result| result.is_ok())
    }

    /// Whether the live connection takes subscriptions on its `subscriptions/listen`
    /// stream (a 2026-07-28 server) rather than by `resources/subscribe`.
    pub fn listens(&self) -> bool {
        self.live().is_some_and(|live| {
            live.peer
                .peer_info()
                .is_some_and(|info| !info.protocol_version.has_initialize())
        })
    }

    /// Changes whenever a record is journaled; holds the count of records ever journaled.
    pub fn watch_journal(&self) -> watch::Receiver<u64> {
        self.journaled.subscribe()
    }

    /// Whether this slot was retired by a config change (removed, or replaced by a new slot
    /// under the same name, which a call should use instead).
    pub fn is_retired(&self) -> bool {
        self.retired.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The status `watch` shows (marking it seen) and the connection attempts that had
    /// ended at that status, read together: the writer publishes both under the same lock.
    pub fn observe(&self, watch: &mut watch::Receiver<ServerStatus>) -> (ServerStatus, u64) {
        let recovery = lock(&self.recovery);
        let status = watch.borrow_and_update().clone();
        (status, recovery.view.attempts_finished)
    }

    /// Whether the recovery machine is counting health failures: then a call's success
    /// is news too (`View::failures_counted`).
    pub(crate) fn health_failures_counted(&self) -> bool {
        let recovery = lock(&self.recovery);
        recovery.view.failures_counted(&self.status.borrow())
    }

    pub(crate) fn recovery(&self) -> Recovery {
        lock(&self.recovery).clone()
    }

    pub fn status(&self) -> ServerStatus {
        self.status.borrow().clone()
    }

    pub fn watch_status(&self) -> watch::Receiver<ServerStatus> {
        self.status.subscribe()
    }

    pub fn live(&self) -> Option<Arc<Live>> {
        read(&self.live).clone()
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        read(&self.snapshot).clone()
    }

    pub fn transport(&self) -> TransportKind {
        self.context.transport
    }

    /// Ask the supervisor to try now, skipping any reconnect wait: what an arriving call does.
    pub fn wake(&self) {
        self.send(SlotEvent::WakeUp);
    }

    /// Tell the supervisor something: what the router does when a call finds the
    /// connection unusable, or an operator's action.
    pub fn send(&self, event: SlotEvent) {
        let _ = self.events.send(event);
    }
}

/// The only handle that changes a slot. Not `Clone`; see the module docs.
pub(crate) struct SlotWriter {
    slot: Arc<Slot>,
}

impl SlotWriter {
    pub fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    /// Publish the recovery machine's status and view; the previous status is returned.
    pub fn publish(&self, status: &ServerStatus, view: View) -> ServerStatus {
        // One lock around both, so `Slot::observe` never sees one without the other.
        let mut recovery = lock(&self.slot.recovery);
        recovery.view = view;
        self.slot.status.send_replace(status.clone())
    }

    /// Keep one step of the recovery machine for operators (the oldest drops out).
    pub fn journal(&self, record: Record) {
        {
            let mut journal = lock(&self.slot.journal);
            if journal.len() == JOURNAL_RECORDS {
                journal.pop_front();
            }
            journal.push_back(record);
        }
        self.slot.journaled.send_modify(|count| *count += 1);
    }

    pub fn set_live(&self, live: Option<Arc<Live>>) {
        *write(&self.slot.live) = live;
    }

    /// The server's offer as discovered, less the tools its config hides from everyone
    /// (`[servers.NAME.tools]`): hidden tools are neither listed nor routable.
    pub fn set_snapshot(&self, mut snapshot: Snapshot) {
        let filter = &self.slot.config.tools;
        if !filter.is_empty() {
            snapshot.tools.retain(|tool| filter.keeps(&tool.name));
        }
        *write(&self.slot.snapshot) = Arc::new(snapshot);
    }

    pub fn set_pid(&self, pid: Option<u32>) {
        lock(&self.slot.recovery).pid = pid;
    }

    /// Lists wait for this server (for at most `startup_wait`) until it settles.
    pub fn start_waiting(&self, startup_wait: Duration) {
        let until = (!startup_wait.is_zero()).then(|| Instant::now() + startup_wait);
        self.slot.starting.send_replace(until);
    }

    /// The server has settled (online and in the catalogue, or failed): lists stop waiting.
    pub fn settled(&self) {
        self.slot
            .starting
            .send_if_modified(|starting| starting.take().is_some());
    }

    /// The supervisor has stopped for good: no connection, and the slot says why — a
    /// removed server is `disabled` (a call still holding the slot fails at once), a
    /// modified one `restarting` (a call still holding it moves to the replacement slot).
    /// Returns the status change, if there was one.
    pub fn retire(self, replaced: bool) -> Option<(ServerStatus, ServerStatus)> {
        self.set_live(None);
        self.set_pid(None);
        self.settled();
        self.slot
            .retired
            .store(true, std::sync::atomic::Ordering::Release);
        let previous = self.slot.status();
        let event = if replaced {
            LifecycleEvent::Restart
        } else {
            LifecycleEvent::Disable
        };
        let next = lifecycle::transition(&previous, &event).ok()?;
        let view = View {
            status_since_ms: {
                let recovery = lock(&self.slot.recovery);
                if previous.name() == next.name() {
                    recovery.view.status_since_ms
                } else {
                    recovery.millis(Instant::now())
                }
            },
            ..View::default()
        };
        self.publish(&next, view);
        (previous != next).then_some((previous, next))
    }
}

/// Why an operator action did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    #[error("no server named \"{0}\" is configured")]
    UnknownServer(String),
    #[error("{0}")]
    Refused(String),
    #[error("the gateway is shutting down")]
    ShuttingDown,
}
