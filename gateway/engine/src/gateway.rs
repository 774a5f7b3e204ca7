//! The gateway: one slot per configured server, the aggregate catalogue, and the client sessions.
//!
//! The set of servers changes at run time ([`Gateway::apply_config`], in `gateway/reload.rs`):
//! readers take a cheap snapshot of the slot map, and each slot's supervisor has its own stop
//! token, so one server can be stopped or replaced without disturbing the others.

mod reload;

pub use reload::ConfigChange;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rmcp::model::LoggingLevel;
use rmcp::{Peer, RoleClient};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wardgate_policy::{ExitInfo, RecoveryPolicy, ServerContext, TransportKind};

use crate::catalogue::{Catalogue, Snapshot};
use crate::config::{Config, GatewaySettings, ServerConfig};
use crate::events::GatewayEvent;
use crate::info::SlotStats;
use crate::lifecycle::{self, LifecycleEvent};
use crate::metrics::Metrics;
use crate::sessions::{ListKind, Sessions};
use crate::status::ServerStatus;
use crate::supervisor::{self, OperatorAction, SlotEvent};
use crate::upstream::{self, Connector, Links};

/// The live connection of a slot, as calls see it.
pub struct Live {
    pub generation: u64,
    pub peer: Peer<RoleClient>,
    pub links: Arc<Links>,
    /// Changes once, when a stdio server's process exits.
    pub exit: Option<watch::Receiver<Option<ExitInfo>>>,
    /// Set when the gateway stopped reading a stdio server's output (an oversized message).
    pub stream_fault: Option<crate::upstream::StreamFault>,
}

/// One configured server: never removed or emptied while it is configured.
pub struct Slot {
    pub name: String,
    pub config: ServerConfig,
    pub context: ServerContext,
    /// Makes this server's recovery decisions.
    pub policy: Arc<dyn RecoveryPolicy>,
    pub(crate) status: watch::Sender<ServerStatus>,
    pub(crate) live: RwLock<Option<Arc<Live>>>,
    pub(crate) snapshot: RwLock<Arc<Snapshot>>,
    pub(crate) events: mpsc::UnboundedSender<SlotEvent>,
    /// What the supervisor knows (pid, failures, next retry), for operators.
    pub(crate) stats: Mutex<SlotStats>,
    /// Held across a status transition and its announcement, so that changes made from
    /// different tasks are applied and announced in one order.
    transition: Mutex<()>,
    /// `Some(until)` while the server is starting for the first time (or since it was added
    /// or enabled) and catalogue lists should wait for it, at most until `until`; `None` once
    /// it has settled (online with its tools in the catalogue, or failed).
    starting: watch::Sender<Option<Instant>>,
}

impl Slot {
    /// A slot for `server`, and the receiving end of its supervisor's event channel.
    fn new(
        server: &ServerConfig,
        policy: Arc<dyn RecoveryPolicy>,
        startup_wait: Duration,
    ) -> (Arc<Slot>, mpsc::UnboundedReceiver<SlotEvent>) {
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
            config: server.clone(),
            context,
            policy,
            status: watch::channel(initial).0,
            live: RwLock::new(None),
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            events,
            stats: Mutex::new(SlotStats::default()),
            transition: Mutex::new(()),
            starting: watch::channel(None).0,
        });
        if server.enabled {
            slot.start_waiting(startup_wait);
        }
        (slot, receiver)
    }

    /// Lists wait for this server (for at most `startup_wait`) until it settles.
    pub(crate) fn start_waiting(&self, startup_wait: Duration) {
        let until = (!startup_wait.is_zero()).then(|| Instant::now() + startup_wait);
        self.starting.send_replace(until);
    }

    /// The server has settled (online and in the catalogue, or failed): lists stop waiting.
    pub(crate) fn settled(&self) {
        self.starting
            .send_if_modified(|starting| starting.take().is_some());
    }

    /// Wait until this server has settled, or its startup wait is over.
    pub async fn wait_settled(&self) {
        let mut starting = self.starting.subscribe();
        let Some(until) = *starting.borrow_and_update() else {
            return;
        };
        let _ = tokio::time::timeout_at(until, starting.wait_for(Option::is_none)).await;
    }

    /// Update what operators can read about this slot.
    pub(crate) fn record(&self, update: impl FnOnce(&mut SlotStats)) {
        update(&mut self.stats.lock().unwrap_or_else(|p| p.into_inner()));
    }

    pub(crate) fn stats(&self) -> SlotStats {
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn status(&self) -> ServerStatus {
        self.status.borrow().clone()
    }

    pub fn watch_status(&self) -> watch::Receiver<ServerStatus> {
        self.status.subscribe()
    }

    pub fn live(&self) -> Option<Arc<Live>> {
        self.live.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn transport(&self) -> TransportKind {
        self.context.transport
    }

    /// Ask the supervisor to try now, skipping any reconnect wait: what an arriving call does.
    pub fn wake(&self) {
        self.send(SlotEvent::WakeUp);
    }

    pub(crate) fn send(&self, event: SlotEvent) {
        let _ = self.events.send(event);
    }
}

/// The running gateway. Cheap to share (`Arc`); [`Gateway::shutdown`] stops it.
pub struct Gateway {
    /// The `[gateway]` settings the gateway started with; a reload does not change them
    /// (`ConfigChange::not_applied` names the ones that differ).
    pub settings: GatewaySettings,
    /// The config last applied (at start or by [`Gateway::apply_config`]).
    config: RwLock<Arc<Config>>,
    /// Replaced as a whole when the server set changes; readers clone the `Arc`.
    slots: RwLock<Arc<BTreeMap<String, Arc<Slot>>>>,
    pub sessions: Arc<Sessions>,
    pub(crate) connector: Arc<dyn Connector>,
    catalogue: RwLock<Arc<Catalogue>>,
    rebuild: Mutex<()>,
    events: broadcast::Sender<GatewayEvent>,
    shutdown: CancellationToken,
    /// One entry per running supervisor; holding the lock serializes config changes and shutdown.
    supervisors: tokio::sync::Mutex<BTreeMap<String, Supervised>>,
    pub(crate) metrics: Metrics,
}

/// A running supervisor: cancelling `stop` ends it the way gateway shutdown does.
struct Supervised {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// Create a slot per server and start supervising them all; returns at once; servers
    /// join the catalogue as they come online.
    pub fn start(config: &Config, policy: Arc<dyn RecoveryPolicy>) -> Arc<Gateway> {
        Self::start_with(
            config,
            move |_| policy.clone(),
            Arc::new(upstream::RealConnector),
        )
    }

    /// Start with each server's own policy (`policy_for` is asked once per server).
    pub fn start_with_policies(
        config: &Config,
        policy_for: impl Fn(&ServerConfig) -> Arc<dyn RecoveryPolicy>,
    ) -> Arc<Gateway> {
        Self::start_with(config, policy_for, Arc::new(upstream::RealConnector))
    }

    /// [`Gateway::start`] with another way to reach servers (tests script one).
    pub fn start_with(
        config: &Config,
        policy_for: impl Fn(&ServerConfig) -> Arc<dyn RecoveryPolicy>,
        connector: Arc<dyn Connector>,
    ) -> Arc<Gateway> {
        let gateway = Arc::new(Gateway {
            settings: config.gateway.clone(),
            config: RwLock::new(Arc::new(config.clone())),
            slots: RwLock::new(Arc::new(BTreeMap::new())),
            sessions: Arc::new(Sessions::default()),
            connector,
            catalogue: RwLock::new(Arc::new(Catalogue::default())),
            rebuild: Mutex::new(()),
            events: broadcast::channel(1024).0,
            shutdown: CancellationToken::new(),
            supervisors: tokio::sync::Mutex::new(BTreeMap::new()),
            metrics: Metrics::new(),
        });
        let mut slots = BTreeMap::new();
        let mut receivers = Vec::new();
        for server in config.servers.values() {
            let (slot, receiver) =
                Slot::new(server, policy_for(server), config.gateway.startup_wait);
            receivers.push((slot.clone(), receiver));
            slots.insert(server.name.clone(), slot);
        }
        // Every slot is in the map before any supervisor runs and rebuilds the catalogue.
        *gateway.slots.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(slots);
        let supervisors = receivers
            .into_iter()
            .map(|(slot, receiver)| (slot.name.clone(), gateway.supervise(slot, receiver)))
            .collect();
        if let Ok(mut running) = gateway.supervisors.try_lock() {
            *running = supervisors;
        }
        gateway
    }

    /// Start `slot`'s supervisor with a stop token of its own (a child of shutdown).
    fn supervise(
        self: &Arc<Self>,
        slot: Arc<Slot>,
        receiver: mpsc::UnboundedReceiver<SlotEvent>,
    ) -> Supervised {
        let stop = self.shutdown.child_token();
        let task = tokio::spawn(supervisor::run(self.clone(), slot, receiver, stop.clone()));
        Supervised { stop, task }
    }

    /// The config last applied.
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn slot_map(&self) -> Arc<BTreeMap<String, Arc<Slot>>> {
        self.slots.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn slot(&self, name: &str) -> Option<Arc<Slot>> {
        self.slot_map().get(name).cloned()
    }

    /// Every configured server's slot, by name.
    pub fn slots(&self) -> Vec<Arc<Slot>> {
        self.slot_map().values().cloned().collect()
    }

    /// Wait until every server that is starting has settled (online, or failed), each for
    /// at most `startup_wait` from its start: what a client's first `tools/list` needs.
    pub async fn startup_settled(&self) {
        for slot in self.slot_map().values() {
            slot.wait_settled().await;
        }
    }

    pub fn catalogue(&self) -> Arc<Catalogue> {
        self.catalogue
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Recompute what clients can see and announce each list that changed — and only those.
    pub(crate) fn rebuild_catalogue(&self) {
        let _serialized = self.rebuild.lock().unwrap_or_else(|p| p.into_inner());
        let snapshots: BTreeMap<String, (Arc<Snapshot>, bool)> = self
            .slot_map()
            .values()
            .map(|slot| {
                let status = slot.status();
                let visible = status.is_online()
                    || (self.settings.list_unavailable_tools
                        && !matches!(status, ServerStatus::Disabled));
                (slot.name.clone(), (slot.snapshot(), visible))
            })
            .collect();
        let next = Arc::new(Catalogue::build(&self.settings.separator, &snapshots));
        let previous = std::mem::replace(
            &mut *self.catalogue.write().unwrap_or_else(|p| p.into_inner()),
            next.clone(),
        );
        if previous.tools != next.tools {
            self.sessions.list_changed(ListKind::Tools);
        }
        if previous.prompts != next.prompts {
            self.sessions.list_changed(ListKind::Prompts);
        }
        if previous.resources != next.resources || previous.templates != next.templates {
            self.sessions.list_changed(ListKind::Resources);
        }
        if previous.tools != next.tools
            || previous.prompts != next.prompts
            || previous.resources != next.resources
        {
            self.emit(GatewayEvent::ToolsChanged {
                tools: next.tools.len(),
                prompts: next.prompts.len(),
                resources: next.resources.len(),
            });
        }
    }

    /// Feed a lifecycle event to the slot's state machine; log and announce the change.
    /// A refused transition changes nothing (and says so in the debug log).
    pub(crate) fn apply(&self, slot: &Slot, event: LifecycleEvent, reason: &str) -> bool {
        let (previous, next) = {
            let _one_at_a_time = slot.transition.lock().unwrap_or_else(|p| p.into_inner());
            let previous = slot.status();
            let next = match lifecycle::transition(&previous, &event) {
                Ok(next) => next,
                Err(refused) => {
                    tracing::debug!(server = %slot.name, "{refused}");
                    return false;
                }
            };
            slot.status.send_replace(next.clone());
            if previous != next {
                self.emit(GatewayEvent::StatusChanged {
                    server: slot.name.clone(),
                    from: previous.name().to_owned(),
                    to: next.name().to_owned(),
                    reason: reason.to_owned(),
                });
            }
            (previous, next)
        };
        if previous.is_online() != next.is_online() {
            self.rebuild_catalogue();
        }
        true
    }

    /// Log an event, tell every client session, and publish it to subscribers.
    pub fn emit(&self, event: GatewayEvent) {
        let data = serde_json::to_value(&event).unwrap_or_default();
        if event.is_warning() {
            tracing::warn!(target: "wardgate::events", "{data}");
        } else {
            tracing::info!(target: "wardgate::events", "{data}");
        }
        let level = if event.is_warning() {
            LoggingLevel::Warning
        } else {
            LoggingLevel::Info
        };
        self.sessions.log(level, "wardgate", data);
        let _ = self.events.send(event);
    }

    /// Every event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<GatewayEvent> {
        self.events.subscribe()
    }

    /// Reconnect a server now, whatever its state (but disabled): resets backoff and crash budget.
    pub async fn reconnect(&self, server: &str) -> Result<(), ActionError> {
        self.act(server, OperatorAction::Reconnect).await
    }

    /// Restart a stdio server's process (for HTTP servers, the same as reconnect).
    pub async fn restart(&self, server: &str) -> Result<(), ActionError> {
        self.act(server, OperatorAction::Restart).await
    }

    /// Close the server's connection and keep its slot, status `disabled`.
    pub async fn disable(&self, server: &str) -> Result<(), ActionError> {
        self.act(server, OperatorAction::Disable).await
    }

    /// Start a disabled server again.
    pub async fn enable(&self, server: &str) -> Result<(), ActionError> {
        self.act(server, OperatorAction::Enable).await
    }

    async fn act(&self, server: &str, action: OperatorAction) -> Result<(), ActionError> {
        let slot = self
            .slot(server)
            .ok_or_else(|| ActionError::UnknownServer(server.to_owned()))?;
        let (reply, answer) = oneshot::channel();
        slot.send(SlotEvent::Operator { action, reply });
        match answer.await {
            Ok(answered) => answered,
            Err(_) if self.shutdown.is_cancelled() => Err(ActionError::ShuttingDown),
            // The supervisor stopped for good: a config change removed or replaced the server.
            Err(_) => Err(ActionError::Refused(format!(
                "server \"{server}\" was removed or replaced by a config change while the action was under way; check `wardgate servers` and try again"
            ))),
        }
    }

    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stop every server (closing stdin, then SIGTERM, then SIGKILL of each process group)
    /// and wait until all are gone.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        let mut supervisors = self.supervisors.lock().await;
        let running = std::mem::take(&mut *supervisors);
        futures::future::join_all(running.into_values().map(|supervised| supervised.task)).await;
    }

    /// Counters and histograms for `/metrics`.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
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
