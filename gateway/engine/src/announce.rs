//! What every part of the engine tells the world through: the slot map, the aggregate
//! catalogue, client sessions, the event stream and the metrics.
//!
//! The [`Announcer`] is shared (`Arc`) by the gateway and every supervisor. A supervisor
//! needs nothing else of the gateway: it announces what its recovery machine decided and
//! asks for the catalogue to be rebuilt; it cannot start, stop or reconfigure servers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::broadcast;
use wardgate_recovery::{Announcement, Decision, Step};

use crate::catalogue::{Catalogue, Naming, Namings, Snapshot};
use crate::config::GatewaySettings;
use crate::events::GatewayEvent;
use crate::lock::{lock, read, write};
use crate::metrics::Metrics;
use crate::sessions::{ListKind, Sessions};
use crate::slot::Slot;
use crate::status::ServerStatus;

pub(crate) struct Announcer {
    /// The `[gateway]` settings the gateway started with.
    pub settings: GatewaySettings,
    pub sessions: Arc<Sessions>,
    pub metrics: Metrics,
    /// Replaced as a whole when the server set changes; readers clone the `Arc`.
    slots: RwLock<Arc<BTreeMap<String, Arc<Slot>>>>,
    catalogue: RwLock<Arc<Catalogue>>,
    rebuild: Mutex<()>,
    events: broadcast::Sender<GatewayEvent>,
}

impl Announcer {
    pub fn new(settings: GatewaySettings) -> Announcer {
        let metrics = Metrics::new();
        Announcer {
            settings,
            sessions: Arc::new(Sessions::counting_drops(
                metrics.notifications_dropped.clone(),
            )),
            metrics,
            slots: RwLock::new(Arc::new(BTreeMap::new())),
            catalogue: RwLock::new(Arc::new(Catalogue::default())),
            rebuild: Mutex::new(()),
            events: broadcast::channel(1024).0,
        }
    }

    pub fn slot_map(&self) -> Arc<BTreeMap<String, Arc<Slot>>> {
        read(&self.slots).clone()
    }

    /// The configured servers; the catalogue follows at once, so every server's prefix
    /// routes before its first discovery.
    pub fn set_slots(&self, slots: BTreeMap<String, Arc<Slot>>) {
        *write(&self.slots) = Arc::new(slots);
        self.rebuild_catalogue();
    }

    pub fn catalogue(&self) -> Arc<Catalogue> {
        read(&self.catalogue).clone()
    }

    /// Recompute what clients can see and announce each list that changed — and only those.
    pub fn rebuild_catalogue(&self) {
        self.rebuild_catalogue_then(None, || {});
    }

    /// [`Announcer::rebuild_catalogue`], taking one server's status as `status_of` says
    /// rather than as its slot says yet, then `publish` (which publishes that status),
    /// before any other rebuild may read the slots: no one sees the server online before
    /// the catalogue routes to it, and no concurrent rebuild leaves it out.
    pub fn rebuild_catalogue_then(
        &self,
        status_of: Option<(&str, &ServerStatus)>,
        publish: impl FnOnce(),
    ) {
        let _serialized = lock(&self.rebuild);
        self.rebuild_locked(status_of);
        publish();
    }

    fn rebuild_locked(&self, status_of: Option<(&str, &ServerStatus)>) {
        let slots = self.slot_map();
        let namings: Namings = slots
            .values()
            .map(|slot| {
                let naming = Naming {
                    prefix: slot.config.prefix.clone(),
                    rename: slot.config.rename.clone(),
                };
                (slot.name.clone(), naming)
            })
            .collect();
        let snapshots: BTreeMap<String, (Arc<Snapshot>, bool)> = slots
            .values()
            .map(|slot| {
                let status = match status_of {
                    Some((name, status)) if name == slot.name => status.clone(),
                    _ => slot.status(),
                };
                let visible = status.is_online()
                    || (self.settings.list_unavailable_tools
                        && !matches!(status, ServerStatus::Disabled));
                (slot.name.clone(), (slot.snapshot(), visible))
            })
            .collect();
        let next = Arc::new(Catalogue::build(
            &self.settings.separator,
            &snapshots,
            &namings,
        ));
        let previous = std::mem::replace(&mut *write(&self.catalogue), next.clone());
        // A collision is said once, when it appears.
        for collision in &next.collisions {
            if !previous.collisions.contains(collision) {
                self.emit(GatewayEvent::NameCollision {
                    kind: collision.kind.to_owned(),
                    listed: collision.listed.clone(),
                    server: collision.kept.0.clone(),
                    item: collision.kept.1.clone(),
                    left_out_server: collision.left_out.0.clone(),
                    left_out_item: collision.left_out.1.clone(),
                    reason: collision.to_string(),
                });
            }
        }
        // Each client is told of the servers it may use only.
        let changed = previous.changed_servers(&next);
        if !changed.tools.is_empty() {
            self.sessions.list_changed(ListKind::Tools, &changed.tools);
        }
        if !changed.prompts.is_empty() {
            self.sessions
                .list_changed(ListKind::Prompts, &changed.prompts);
        }
        if !changed.resources.is_empty() {
            self.sessions
                .list_changed(ListKind::Resources, &changed.resources);
        }
        if previous.tools != next.tools
            || previous.prompts != next.prompts
            || previous.resources != next.resources
        {
            self.emit(GatewayEvent::ToolsChanged {
                tools: next.tools.len(),
                prompts: next.prompts.len(),
                resources: next.resources.len(),
                servers: changed.servers().into_iter().collect(),
            });
        }
    }

    /// Log an event, tell every client session, and publish it to subscribers.
    pub fn emit(&self, event: GatewayEvent) {
        self.emit_to(event, Heard::Everyone);
    }

    /// Log an event and publish it to subscribers, telling no client session: news of one
    /// client's instance is no other client's business.
    pub fn emit_to_operators(&self, event: GatewayEvent) {
        self.emit_to(event, Heard::Operators);
    }

    /// Log an event and publish it to subscribers, and tell whom `heard` says.
    #[expect(
        deprecated,
        reason = "logging is current in the protocol versions the gateway speaks (SEP-2577)"
    )]
    fn emit_to(&self, event: GatewayEvent, heard: Heard) {
        let data = serde_json::to_value(&event).unwrap_or_default();
        trace_event(&event);
        let clients = heard == Heard::Everyone;
        if heard == Heard::Quietly {
            tracing::debug!(target: "wardgate::events", "{data}");
        } else if event.is_warning() {
            tracing::warn!(target: "wardgate::events", "{data}");
        } else {
            tracing::info!(target: "wardgate::events", "{data}");
        }
        let level = if event.is_warning() {
            rmcp::model::LoggingLevel::Warning
        } else {
            rmcp::model::LoggingLevel::Info
        };
        if clients {
            let catalogue = self.catalogue();
            self.sessions.event(level, "wardgate", &event, |grant| {
                catalogue.counts(grant, &self.settings.separator)
            });
        }
        let _ = self.events.send(event);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<GatewayEvent> {
        self.events.subscribe()
    }

    /// Announce what one step of `server`'s recovery machine decided: events in order
    /// (a quiet step's to operators and the debug log only), and the metrics its
    /// decisions count. `context` fills in what only the driver knows.
    pub fn step(&self, server: &str, step: &Step, context: &StepContext) {
        // One event per thing that happened, not per turn of the retry wheel: a step that
        // schedules the next reconnection attempt says so once, with the reason the last
        // attempt failed, instead of "connecting → offline", "offline → reconnecting" and
        // "reconnecting"; an attempt's start ("→ connecting", "→ discovering_tools") is no
        // news, its outcome is. The journal and `/decisions` keep every step.
        let schedules_attempt = step
            .announcements
            .iter()
            .any(|announcement| matches!(announcement, Announcement::Reconnecting { .. }));
        // The status the step leaves: what a `reconnecting` event says the server is.
        let left_in = step
            .announcements
            .iter()
            .rev()
            .find_map(|announcement| match announcement {
                Announcement::Status { to, .. } => Some(to.name()),
                _ => None,
            });
        let mut attempt_failed: Option<String> = None;
        for announcement in &step.announcements {
            if let Announcement::Status { from, to, reason } = announcement {
                // `degraded` is a flag on `online`, not a status: health_degraded and
                // health_restored say it, and an "online → online" change would be noise.
                if from.name() == to.name() {
                    continue;
                }
                let attempt = |status: &ServerStatus| {
                    matches!(
                        status,
                        ServerStatus::Connecting | ServerStatus::DiscoveringTools
                    )
                };
                if attempt(to)
                    || matches!(
                        (from, to),
                        (
                            ServerStatus::Offline { .. },
                            ServerStatus::Reconnecting { .. }
                        )
                    )
                {
                    continue;
                }
                if schedules_attempt && attempt(from) {
                    attempt_failed = Some(reason.clone());
                    continue;
                }
            }
            // A closed connection always comes with the status change that says why (the
            // server left `online`): no event of its own.
            let Some(mut event) = event_of(server, announcement, context) else {
                continue;
            };
            if let GatewayEvent::Reconnecting { reason, status, .. } = &mut event {
                *reason = attempt_failed.take();
                if let Some(left_in) = left_in {
                    *status = left_in.to_owned();
                }
            }
            // An instance's news is its operators' (its own client hears of a failure
            // from the call that failed).
            let heard = if step.quiet {
                Heard::Quietly
            } else if crate::slot::server_of(server) != server {
                Heard::Operators
            } else {
                Heard::Everyone
            };
            self.emit_to(event, heard);
        }
        for decision in &step.decisions {
            match decision {
                Decision::Reconnect {
                    verdict: wardgate_policy::ReconnectVerdict::RetryAfter { .. },
                    ..
                } => self.metrics.reconnect(server),
                Decision::Crash { .. } => self.metrics.crash(server),
                _ => {}
            }
        }
    }

    /// A status change made outside a recovery machine (a retired slot).
    /// `server` was disconnected on purpose (removed from the config).
    pub fn disconnected(&self, server: &str, why: &str) {
        self.emit(GatewayEvent::Disconnected {
            server: server.to_owned(),
            intentional: true,
            reason: why.to_owned(),
        });
    }

    pub fn status_changed(&self, server: &str, from: &ServerStatus, to: &ServerStatus, why: &str) {
        self.emit(GatewayEvent::StatusChanged {
            server: server.to_owned(),
            from: from.name().to_owned(),
            to: to.name().to_owned(),
            reason: why.to_owned(),
        });
    }
}

/// Who hears an event besides the event stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    /// Every client session too, and the log at its level.
    Everyone,
    /// The log at its level, no client: a per-client instance's news.
    Operators,
    /// The debug log only: a quiet step of a reconnection that keeps failing.
    Quietly,
}

/// What the driver knows of a step that the machine does not.
#[derive(Debug, Default)]
pub(crate) struct StepContext {
    /// The capabilities of the connection that just came online.
    pub capabilities: Option<serde_json::Value>,
    /// The error of the probe, call or check the step judged.
    pub error: Option<String>,
}

fn event_of(
    server: &str,
    announcement: &Announcement,
    context: &StepContext,
) -> Option<GatewayEvent> {
    let server = server.to_owned();
    Some(match announcement.clone() {
        Announcement::Status { from, to, reason } => GatewayEvent::StatusChanged {
            server,
            from: from.name().to_owned(),
            to: to.name().to_owned(),
            // A server failing its calls: the count is the machine's, the words the last
            // failure's own.
            reason: match (&to, &context.error) {
                (ServerStatus::Error { .. }, Some(error)) => format!("{reason}; the last: {error}"),
                _ => reason,
            },
        },
        Announcement::Disconnected {
            intentional: true,
            reason,
        } => GatewayEvent::Disconnected {
            server,
            intentional: true,
            reason,
        },
        // A loss by accident is told by the status change that follows it.
        Announcement::Disconnected { .. } => return None,
        Announcement::Reconnecting {
            attempt,
            next_delay_ms,
        } => GatewayEvent::Reconnecting {
            server,
            attempt,
            next_delay_ms,
            reason: None,
            status: "reconnecting".to_owned(),
        },
        Announcement::Reconnected { attempts } => GatewayEvent::Reconnected {
            server,
            attempts,
            capabilities: context.capabilities.clone().unwrap_or_default(),
        },
        Announcement::PermanentlyFailed { crashes, reason } => GatewayEvent::PermanentlyFailed {
            server,
            crashes,
            reason,
        },
        Announcement::HealthDegraded {
            consecutive_failures,
            last_error,
        } => GatewayEvent::HealthDegraded {
            server,
            consecutive_failures,
            last_error: context.error.clone().or(last_error),
        },
        Announcement::HealthRestored => GatewayEvent::HealthRestored { server },
    })
}

/// A server's status change, reconnection or failure, as OpenTelemetry sees it: an event on
/// the span of the call it happened under, or a span of its own (supervisors run outside
/// any call).
fn trace_event(event: &GatewayEvent) {
    if !crate::telemetry::on() {
        return;
    }
    let (server, status, what) = match event {
        GatewayEvent::StatusChanged {
            server, to, reason, ..
        } => (server, to.as_str(), reason.clone()),
        GatewayEvent::Reconnecting {
            server,
            attempt,
            next_delay_ms,
            status,
            ..
        } => (
            server,
            status.as_str(),
            format!("reconnection attempt {attempt} in {next_delay_ms} ms"),
        ),
        GatewayEvent::Reconnected {
            server, attempts, ..
        } => (
            server,
            "online",
            format!("reconnected after {attempts} attempts"),
        ),
        GatewayEvent::PermanentlyFailed { server, reason, .. } => {
            (server, "permanently_failed", reason.clone())
        }
        _ => return,
    };
    crate::telemetry::status_event(server, status, &crate::secrets::mask(&what));
}
