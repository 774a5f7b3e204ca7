//! The gateway: one slot per configured server, the aggregate catalogue, and the client sessions.
//!
//! The set of servers changes at run time ([`Gateway::apply_config`], in `gateway/reload.rs`):
//! readers take a cheap snapshot of the slot map, and each slot's supervisor has its own stop
//! token, so one server can be stopped or replaced without disturbing the others. Every
//! supervisor gets the [`Announcer`] and its slot's writer, never the gateway.

mod instances;
mod reload;

pub use instances::{Caller, NoInstance, Routed};
pub use reload::ConfigChange;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use wardgate_policy::RecoveryPolicy;
use wardgate_recovery::OperatorAction;

use crate::announce::Announcer;
use crate::catalogue::Catalogue;
use crate::config::{Config, GatewaySettings, ServerConfig, BUILTIN_POLICY};
use crate::events::GatewayEvent;
use crate::health::HealthReport;
use crate::info::{ServerDetail, ServerInfo};
use crate::lock::read;
use crate::metrics::{Metrics, PolicyMetricsSample};
use crate::sessions::Sessions;
use crate::slot::{SlotEvent, SlotWriter};
use crate::supervisor::{self, Driver};
use crate::upstream::{self, Connector};

pub use crate::slot::{ActionError, Live, Slot};

/// The running gateway. Cheap to share (`Arc`); [`Gateway::shutdown`] stops it.
pub struct Gateway {
    /// The `[gateway]` settings the gateway started with; a reload does not change them
    /// (`ConfigChange::not_applied` names the ones that differ).
    pub settings: GatewaySettings,
    pub sessions: Arc<Sessions>,
    /// The tasks servers created for clients: whose each is, and where it runs.
    pub tasks: Arc<crate::tasks::Tasks>,
    /// The tasks the gateway runs itself for handshake-era clients (2025-11-25).
    pub runs: crate::runs::Runs,
    /// The config last applied (at start or by [`Gateway::apply_config`]).
    config: RwLock<Arc<Config>>,
    announcer: Arc<Announcer>,
    driver: Driver,
    /// The base of every recovery machine's jitter seed.
    seed: u64,
    shutdown: CancellationToken,
    /// One entry per running supervisor; holding the lock serializes config changes and shutdown.
    supervisors: tokio::sync::Mutex<BTreeMap<String, Supervised>>,
    /// The per-client instances of servers that have them (`gateway/instances`).
    instances: Arc<std::sync::Mutex<instances::Registry>>,
}

/// A running supervisor: cancelling `stop` ends it the way gateway shutdown does, and the
/// task hands back the slot's writer.
struct Supervised {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<SlotWriter>,
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
        Self::start_seeded(config, policy_for, connector, supervisor::random_seed())
    }

    /// [`Gateway::start_with`] with a fixed jitter seed: each server's recovery machine is
    /// seeded with [`supervisor::server_seed`]`(seed, name)`, so a run can be replayed.
    pub fn start_seeded(
        config: &Config,
        policy_for: impl Fn(&ServerConfig) -> Arc<dyn RecoveryPolicy>,
        connector: Arc<dyn Connector>,
        seed: u64,
    ) -> Arc<Gateway> {
        let announcer = Arc::new(Announcer::new(config.gateway.clone()));
        let gateway = Arc::new(Gateway {
            settings: config.gateway.clone(),
            sessions: announcer.sessions.clone(),
            tasks: Arc::default(),
            runs: crate::runs::Runs::default(),
            config: RwLock::new(Arc::new(config.clone())),
            driver: Driver {
                announcer: announcer.clone(),
                connector,
            },
            announcer,
            seed,
            shutdown: CancellationToken::new(),
            supervisors: tokio::sync::Mutex::new(BTreeMap::new()),
            instances: Default::default(),
        });
        let mut slots = BTreeMap::new();
        let mut writers = Vec::new();
        for server in config.servers.values() {
            let (writer, receiver) =
                Slot::create(server, policy_for(server), config.gateway.startup_wait);
            slots.insert(server.name.clone(), writer.slot().clone());
            writers.push((writer, receiver));
        }
        // Every slot is in the map before any supervisor runs and rebuilds the catalogue.
        gateway.announcer.set_slots(slots);
        let supervisors = writers
            .into_iter()
            .map(|(writer, receiver)| {
                (
                    writer.slot().name.clone(),
                    gateway.supervise(writer, receiver),
                )
            })
            .collect();
        if let Ok(mut running) = gateway.supervisors.try_lock() {
            *running = supervisors;
        }
        gateway
    }

    /// Start a supervisor for `writer`'s slot with a stop token of its own (a child of shutdown).
    fn supervise(
        &self,
        writer: SlotWriter,
        receiver: mpsc::UnboundedReceiver<SlotEvent>,
    ) -> Supervised {
        let stop = self.shutdown.child_token();
        let seed = supervisor::server_seed(self.seed, &writer.slot().name);
        let task = tokio::spawn(supervisor::run(
            self.driver.clone(),
            writer,
            receiver,
            stop.clone(),
            seed,
        ));
        Supervised { stop, task }
    }

    /// The config last applied.
    pub fn config(&self) -> Arc<Config> {
        read(&self.config).clone()
    }

    /// A configured server's slot by its name. Operators' actions, health checks and
    /// routes find these only, never a client's instance.
    pub fn slot(&self, name: &str) -> Option<Arc<Slot>> {
        self.announcer.slot_map().get(name).cloned()
    }

    /// [`Gateway::slot`], or a running instance's by its name (`SERVER#N`, never given
    /// twice), for what was recorded against an instance (a task, a decision).
    pub fn any_slot(&self, name: &str) -> Option<Arc<Slot>> {
        self.slot(name).or_else(|| self.instance_slot(name))
    }

    /// Every configured server's slot, by name.
    pub fn slots(&self) -> Vec<Arc<Slot>> {
        self.announcer.slot_map().values().cloned().collect()
    }

    /// Wait until every server that is starting has settled (online, or failed), each for
    /// at most `startup_wait` from its start: what a client's first `tools/list` needs.
    pub async fn startup_settled(&self) {
        for slot in self.announcer.slot_map().values() {
            slot.wait_settled().await;
        }
    }

    pub fn catalogue(&self) -> Arc<Catalogue> {
        self.announcer.catalogue()
    }

    /// Recompute what clients can see and announce each list that changed — and only those.
    pub(crate) fn rebuild_catalogue(&self) {
        self.announcer.rebuild_catalogue();
    }

    /// Log an event, tell every client session, and publish it to subscribers.
    pub fn emit(&self, event: GatewayEvent) {
        self.announcer.emit(event);
    }

    /// Every event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<GatewayEvent> {
        self.announcer.subscribe()
    }

    /// Every configured server, sorted by name.
    pub fn servers(&self) -> Vec<ServerInfo> {
        let config = self.config();
        self.slots()
            .iter()
            .map(|slot| {
                let mut info = crate::info::server_info(slot, policy_name(&config, slot));
                if slot.config.instances != crate::config::Instances::Shared {
                    info.instances = Some(self.instance_count(&slot.name));
                }
                info
            })
            .collect()
    }

    /// One server and its tools; `None` when no server has that name.
    pub fn server(&self, name: &str) -> Option<ServerDetail> {
        let slot = self.slot(name)?;
        let config = self.config();
        let mut detail =
            crate::info::server_detail(&slot, policy_name(&config, &slot), &self.catalogue());
        if slot.config.instances != crate::config::Instances::Shared {
            let instances = self.instances(name);
            detail.info.instances = Some(instances.len());
            detail.instances = Some(instances);
        }
        Some(detail)
    }

    /// Probe `server` once now (see [`crate::health`]).
    pub async fn health_check(
        &self,
        server: &str,
        timeout: Duration,
    ) -> Result<HealthReport, ActionError> {
        let slot = self
            .slot(server)
            .ok_or_else(|| ActionError::UnknownServer(server.to_owned()))?;
        crate::health::check(&slot, timeout).await
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
        self.instances_stopped().await;
    }

    /// Counters and histograms for `/metrics`.
    pub fn metrics(&self) -> &Metrics {
        &self.announcer.metrics
    }

    /// Everything for `/metrics`, in Prometheus text format (see [`crate::metrics::encode`]).
    pub fn encode_metrics(&self, policies: &[PolicyMetricsSample]) -> String {
        let servers = self.servers();
        // Each per-client server's instances, by status.
        let instances: Vec<(String, Vec<String>)> = servers
            .iter()
            .filter(|server| server.instances.is_some())
            .map(|server| {
                let statuses = self
                    .instances(&server.name)
                    .into_iter()
                    .map(|instance| instance.info.status.as_str().to_owned())
                    .collect();
                (server.name.clone(), statuses)
            })
            .collect();
        crate::metrics::encode(&self.announcer.metrics, &servers, &instances, policies)
    }
}

/// The name of the policy `slot`'s server is bound to (`builtin` for the native one).
fn policy_name<'a>(config: &'a Config, slot: &'a Slot) -> &'a str {
    slot.config
        .effective_policy(&config.gateway)
        .unwrap_or(BUILTIN_POLICY)
}
