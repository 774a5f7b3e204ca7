//! The gateway: one slot per configured server, the aggregate catalogue, and the client sessions.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use rmcp::model::LoggingLevel;
use rmcp::{Peer, RoleClient};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use wardgate_policy::{ExitInfo, RecoveryPolicy, ServerContext, TransportKind};

use crate::catalogue::{Catalogue, Snapshot};
use crate::config::{Config, GatewaySettings, ServerConfig};
use crate::sessions::{ListKind, Sessions};
use crate::status::ServerStatus;
use crate::supervisor::{self, SlotEvent};
use crate::upstream::{self, Links};

/// The live connection of a slot, as calls see it.
pub struct Live {
    pub generation: u64,
    pub peer: Peer<RoleClient>,
    pub links: Arc<Links>,
    /// Changes once, when a stdio server's process exits.
    pub exit: Option<watch::Receiver<Option<ExitInfo>>>,
}

/// One configured server: never removed or emptied while it is configured.
pub struct Slot {
    pub name: String,
    pub config: ServerConfig,
    pub context: ServerContext,
    pub(crate) status: watch::Sender<ServerStatus>,
    pub(crate) live: RwLock<Option<Arc<Live>>>,
    pub(crate) snapshot: RwLock<Arc<Snapshot>>,
    pub(crate) events: mpsc::UnboundedSender<SlotEvent>,
}

impl Slot {
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

    pub(crate) fn send(&self, event: SlotEvent) {
        let _ = self.events.send(event);
    }
}

/// The running gateway. Cheap to share (`Arc`); [`Gateway::shutdown`] stops it.
pub struct Gateway {
    pub settings: GatewaySettings,
    pub(crate) slots: BTreeMap<String, Arc<Slot>>,
    pub sessions: Arc<Sessions>,
    pub(crate) policy: Arc<dyn RecoveryPolicy>,
    catalogue: RwLock<Arc<Catalogue>>,
    rebuild: Mutex<()>,
    shutdown: CancellationToken,
    supervisors: tokio::sync::Mutex<JoinSet<()>>,
}

impl Gateway {
    /// Create a slot per server and start supervising them all; returns at once; servers
    /// join the catalogue as they come online.
    pub fn start(config: &Config, policy: Arc<dyn RecoveryPolicy>) -> Arc<Gateway> {
        let mut receivers = Vec::new();
        let slots = config
            .servers
            .values()
            .map(|server| {
                let (events, receiver) = mpsc::unbounded_channel();
                let context = ServerContext::new(
                    server.name.clone(),
                    upstream::transport_kind(&server.transport),
                );
                let initial = if server.enabled {
                    ServerStatus::Provisioning
                } else {
                    ServerStatus::Disabled
                };
                let slot = Arc::new(Slot {
                    name: server.name.clone(),
                    config: server.clone(),
                    context,
                    status: watch::channel(initial).0,
                    live: RwLock::new(None),
                    snapshot: RwLock::new(Arc::new(Snapshot::default())),
                    events,
                });
                receivers.push((slot.clone(), receiver));
                (server.name.clone(), slot)
            })
            .collect();
        let gateway = Arc::new(Gateway {
            settings: config.gateway.clone(),
            slots,
            sessions: Arc::new(Sessions::default()),
            policy,
            catalogue: RwLock::new(Arc::new(Catalogue::default())),
            rebuild: Mutex::new(()),
            shutdown: CancellationToken::new(),
            supervisors: tokio::sync::Mutex::new(JoinSet::new()),
        });
        let mut supervisors = JoinSet::new();
        for (slot, receiver) in receivers {
            supervisors.spawn(supervisor::run(
                gateway.clone(),
                slot,
                receiver,
                gateway.shutdown.child_token(),
            ));
        }
        *gateway
            .supervisors
            .try_lock()
            .expect("nobody else holds it yet") = supervisors;
        gateway
    }

    pub fn slot(&self, name: &str) -> Option<&Arc<Slot>> {
        self.slots.get(name)
    }

    pub fn slots(&self) -> impl Iterator<Item = &Arc<Slot>> {
        self.slots.values()
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
        let visible: BTreeMap<String, Arc<Snapshot>> = self
            .slots
            .values()
            .filter(|slot| slot.status().is_online() || self.settings.list_unavailable_tools)
            .map(|slot| (slot.name.clone(), slot.snapshot()))
            .collect();
        let next = Arc::new(Catalogue::build(&self.settings.separator, &visible));
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
    }

    /// Record a status change: log it with its reason and tell connected clients.
    pub(crate) fn set_status(&self, slot: &Slot, next: ServerStatus, reason: &str) {
        let previous = slot.status.send_replace(next.clone());
        if previous == next {
            return;
        }
        let level = match &next {
            ServerStatus::Offline { .. }
            | ServerStatus::Error { .. }
            | ServerStatus::RequiresReauth { .. }
            | ServerStatus::PermanentlyFailed { .. } => LoggingLevel::Warning,
            _ => LoggingLevel::Info,
        };
        if level == LoggingLevel::Warning {
            tracing::warn!(server = %slot.name, from = previous.name(), to = next.name(), "{reason}");
        } else {
            tracing::info!(server = %slot.name, from = previous.name(), to = next.name(), "{reason}");
        }
        self.sessions.log(
            level,
            "wardgate",
            serde_json::json!({
                "event": "status_changed",
                "server": slot.name,
                "from": previous.name(),
                "to": next.name(),
                "reason": reason,
            }),
        );
        if previous.is_online() != next.is_online() {
            self.rebuild_catalogue();
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
        while supervisors.join_next().await.is_some() {}
    }
}
