//! Per-client instances: a server with `instances = "per-client"` runs a process (or
//! connection) for each client, besides its configured slot, which lists the tools.
//!
//! An instance is a slot of its own (`SERVER#N`, [`Slot::create_instance`]) with a
//! supervisor of its own, so its status, crash budget, journal and policy decisions are its
//! own, and its server's questions (sampling, elicitation, roots) can be for one client
//! only. It starts on its client's first call and stops when it has been unused for its
//! server's `instance_idle_timeout`, when its session ends (an instance per session), when
//! its server's config changes, or with the gateway. The caps are the server's
//! `max_instances` and the gateway's; past either a client is told which to raise.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Gateway;
use crate::config::{InstanceOwner, Instances};
use crate::events::GatewayEvent;
use crate::info::{server_info, InstanceInfo};
use crate::lock::lock;
use crate::sessions::SessionId;
use crate::slot::Slot;
use crate::supervisor;
use crate::tasks::Owner;

/// Who is calling, as far as the gateway can tell: what an instance's owner is made of.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The client's session, for a client that began with `initialize`.
    pub session: Option<SessionId>,
    /// An authenticated client: its identity key (what it is counted by) and its name
    /// (what operators are shown).
    pub identity: Option<(Arc<str>, Arc<str>)>,
}

impl Caller {
    /// The owner of this caller's instance under `mode`, with the words operators see, or
    /// `None` for a caller that cannot be told from any other (anonymous and sessionless).
    fn owner(&self, mode: InstanceOwner) -> Option<(Owner, String)> {
        let session = || {
            self.session
                .map(|session| (Owner::Session(session), format!("session {session}")))
        };
        let identity = || {
            self.identity
                .as_ref()
                .map(|(key, name)| (Owner::Client(key.clone()), format!("client {name}")))
        };
        match mode {
            InstanceOwner::Session => session().or_else(identity),
            InstanceOwner::Identity => identity().or_else(session),
        }
    }
}

/// The slot a request goes to: the server's own, or the caller's instance, which counts as
/// in use (never idle) while this is held.
pub struct Routed {
    slot: Arc<Slot>,
    _use: Option<InUse>,
}

impl std::ops::Deref for Routed {
    type Target = Arc<Slot>;

    fn deref(&self) -> &Arc<Slot> {
        &self.slot
    }
}

/// How an instance is used: requests under way, and when the last one ended.
#[derive(Debug)]
struct Usage {
    active: AtomicUsize,
    last_used: Mutex<Instant>,
}

impl Usage {
    /// When the instance becomes idle, if nothing uses it meanwhile; `None` while in use.
    fn idle_at(&self, timeout: Duration) -> Option<Instant> {
        if self.active.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(*lock(&self.last_used) + timeout)
    }
}

struct InUse(Arc<Usage>);

impl Drop for InUse {
    fn drop(&mut self) {
        *lock(&self.0.last_used) = Instant::now();
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

fn in_use(usage: &Arc<Usage>) -> InUse {
    usage.active.fetch_add(1, Ordering::AcqRel);
    InUse(usage.clone())
}

/// One running instance.
struct Running {
    owner: Owner,
    /// Who it is for, as operators see it (`session 7`, `client alice`).
    shown: String,
    slot: Arc<Slot>,
    /// The configured slot it was started from: a replaced one (its config changed)
    /// starts no more calls on it.
    template: Arc<Slot>,
    usage: Arc<Usage>,
    started: SystemTime,
    stop: CancellationToken,
    /// Why it was told to stop, for the event that says it stopped.
    why: Arc<Mutex<Option<&'static str>>>,
}

/// The running instances of every server; a handful per server, so lists.
#[derive(Default)]
pub(crate) struct Registry {
    servers: BTreeMap<String, Vec<Running>>,
    /// The number the next instance of each server gets.
    numbers: BTreeMap<String, u64>,
    /// The tasks that run each instance (supervisor, idle watch, retirement).
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Registry {
    fn count(&self) -> usize {
        self.servers.values().map(Vec::len).sum()
    }
}

/// Why a client has no instance: the words to tell it, naming the setting to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NoInstance {
    /// The configured server.
    pub server: String,
    pub message: String,
}

fn refusal(server: &str, message: String) -> NoInstance {
    NoInstance {
        server: server.to_owned(),
        message,
    }
}

impl Gateway {
    /// Where a request of `caller` to `slot`'s server goes: the slot itself, or for a
    /// server with an instance per client the caller's instance, started now if it has
    /// none. Refused past a cap, or for a caller that cannot be told apart.
    pub fn route(&self, slot: Arc<Slot>, caller: &Caller) -> Result<Routed, NoInstance> {
        let Instances::PerClient(per_client) = &slot.config.instances else {
            return Ok(Routed { slot, _use: None });
        };
        let server = slot.name.clone();
        let Some((owner, shown)) = caller.owner(per_client.owner) else {
            return Err(refusal(
                &server,
                format!(
                    "server \"{server}\" runs an instance for each client, and this request has neither a session nor an authenticated client to tell its client by; \
                     connect with `initialize` (a session), or authenticate to the gateway"
                ),
            ));
        };
        // A session that has ended (a task still running for it) joins no audience, and
        // with instances by session its request starts nothing.
        let session = caller
            .session
            .filter(|session| self.sessions.contains(*session));
        if caller.session.is_some() && session.is_none() && matches!(owner, Owner::Session(_)) {
            return Err(refusal(
                &server,
                format!("the client session of this request has ended, and with it its instance of server \"{server}\""),
            ));
        }
        let mut guard = lock(&self.instances);
        let registry = &mut *guard;
        if self.shutdown.is_cancelled() {
            return Err(refusal(&server, "the gateway is shutting down".to_owned()));
        }
        // Instances start from the server's slot of the config in force: a request that
        // found the slot a reload has since replaced starts none from the old config
        // (`apply_config` stops a changed server's instances after the new slot is in the
        // map, under this lock).
        let slot = match self.announcer.slot_map().get(&server) {
            Some(current) if current.config == slot.config => current.clone(),
            Some(_) | None => {
                return Err(refusal(
                    &server,
                    format!("server \"{server}\" was removed or changed by a config change while the request was under way; try again"),
                ))
            }
        };

        let running = registry.servers.entry(server.clone()).or_default();
        if let Some(found) = running
            .iter()
            .find(|running| running.owner == owner && Arc::ptr_eq(&running.template, &slot))
        {
            if let (Some(session), Some(of)) = (session, &found.slot.instance) {
                of.audience.add(session);
            }
            return Ok(Routed {
                slot: found.slot.clone(),
                _use: Some(in_use(&found.usage)),
            });
        }
        if running.len() >= per_client.max {
            return Err(refusal(
                &server,
                format!(
                    "server \"{server}\" already runs {} instances, one per client, its `max_instances`; \
                     another starts when one ends (after {} unused, or with its session); raise `max_instances` in [servers.{server}] for more",
                    running.len(),
                    crate::config::human_duration(per_client.idle_timeout),
                ),
            ));
        }
        let total = registry.count();
        if total >= self.settings.max_instances {
            return Err(refusal(
                &server,
                format!(
                    "the gateway already runs {total} per-client instances, its `max_instances`; \
                     another starts when one ends; raise `max_instances` in [gateway] for more"
                ),
            ));
        }
        let next = registry.numbers.entry(server.clone()).or_insert(1);
        let number = *next;
        *next += 1;
        let audience = Arc::new(crate::sessions::Audience::default());
        if let Some(session) = session {
            audience.add(session);
        }
        let (writer, receiver) = Slot::create_instance(
            &slot.config,
            number,
            audience,
            slot.policy.clone(),
            self.settings.startup_wait,
        );
        let instance = writer.slot().clone();
        let stop = self.shutdown.child_token();
        let usage = Arc::new(Usage {
            active: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
        });
        let routed = Routed {
            slot: instance.clone(),
            _use: Some(in_use(&usage)),
        };
        let why = Arc::new(Mutex::new(None));
        let seed = supervisor::server_seed(self.seed, &instance.name);
        let supervised = tokio::spawn(supervisor::run(
            self.driver.clone(),
            writer,
            receiver,
            stop.clone(),
            seed,
        ));
        self.announcer
            .emit_to_operators(GatewayEvent::InstanceStarted {
                server: server.clone(),
                instance: instance.name.clone(),
                owner: shown.clone(),
            });
        let task = tokio::spawn(run_instance(
            self.instances_handle(),
            server.clone(),
            instance.clone(),
            per_client.idle_timeout,
            usage.clone(),
            stop.clone(),
            why.clone(),
            supervised,
        ));
        registry.tasks.retain(|task| !task.is_finished());
        registry.tasks.push(task);
        registry.servers.entry(server).or_default().push(Running {
            owner,
            shown,
            slot: instance,
            template: slot.clone(),
            usage,
            started: SystemTime::now(),
            stop,
            why,
        });
        Ok(routed)
    }

    /// What the instance tasks need of the gateway: the registry and the announcer.
    fn instances_handle(&self) -> InstancesHandle {
        InstancesHandle {
            registry: self.instances.clone(),
            announcer: self.announcer.clone(),
            tasks: self.tasks.clone(),
        }
    }

    /// A client session ended: its instances (by session) stop, and it leaves the audience
    /// of its identity's.
    pub fn session_ended(&self, session: SessionId) {
        let owner = Owner::Session(session);
        self.stop_instances(|running| running.owner == owner, "its session ended");
        for running in lock(&self.instances).servers.values().flatten() {
            if let Some(of) = &running.slot.instance {
                of.audience.remove(session);
            }
        }
    }

    /// Stop every instance of `server` started from a slot that is no longer its slot in
    /// the map (its config changed, or it was removed); one started from the new slot
    /// meanwhile stays.
    pub(crate) fn stop_server_instances(&self, server: &str, why: &'static str) {
        let current = self.slot(server);
        let stale = |running: &Running| {
            running.template.name == server
                && current
                    .as_ref()
                    .is_none_or(|current| !Arc::ptr_eq(current, &running.template))
        };
        self.stop_instances(stale, why);
    }

    /// The caller's running instance of `slot`'s server (the slot itself for a shared
    /// server), without starting one: for what only undoes (an unsubscribe).
    pub fn running_for(&self, slot: Arc<Slot>, caller: &Caller) -> Option<Routed> {
        let Instances::PerClient(per_client) = &slot.config.instances else {
            return Some(Routed { slot, _use: None });
        };
        let (owner, _) = caller.owner(per_client.owner)?;
        let registry = lock(&self.instances);
        let found = registry
            .servers
            .get(&slot.name)?
            .iter()
            .find(|running| running.owner == owner)?;
        Some(Routed {
            slot: found.slot.clone(),
            _use: Some(in_use(&found.usage)),
        })
    }

    fn stop_instances(&self, which: impl Fn(&Running) -> bool, why: &'static str) {
        let mut registry = lock(&self.instances);
        for running in registry.servers.values_mut() {
            running.retain(|running| {
                let stopping = which(running);
                if stopping {
                    stop(running, why);
                }
                !stopping
            });
        }
        registry.servers.retain(|_, running| !running.is_empty());
    }

    /// Wait until every instance has stopped (at shutdown, after the token was cancelled).
    pub(crate) async fn instances_stopped(&self) {
        let tasks = {
            let mut registry = lock(&self.instances);
            registry.servers.clear();
            std::mem::take(&mut registry.tasks)
        };
        futures::future::join_all(tasks).await;
    }

    /// How many instances of `server` run.
    pub fn instance_count(&self, server: &str) -> usize {
        lock(&self.instances)
            .servers
            .get(server)
            .map_or(0, Vec::len)
    }

    /// The running instances of `server`, in the order of their numbers (the order they
    /// were started in, which the registry keeps).
    pub fn instances(&self, server: &str) -> Vec<InstanceInfo> {
        let config = self.config();
        let registry = lock(&self.instances);
        let Some(running) = registry.servers.get(server) else {
            return Vec::new();
        };
        let now = Instant::now();
        running
            .iter()
            .map(|running| {
                let idle_ms = match running.usage.active.load(Ordering::Acquire) {
                    0 => crate::slot::millis(now.duration_since(*lock(&running.usage.last_used))),
                    _ => 0,
                };
                InstanceInfo {
                    info: server_info(&running.slot, super::policy_name(&config, &running.slot)),
                    owner: running.shown.clone(),
                    age_ms: running.started.elapsed().map_or(0, crate::slot::millis),
                    idle_ms,
                }
            })
            .collect()
    }

    /// The running instances whose audience holds `session`.
    pub fn instances_of(&self, session: SessionId) -> Vec<Arc<Slot>> {
        lock(&self.instances)
            .servers
            .values()
            .flatten()
            .filter(|running| {
                running
                    .slot
                    .instance
                    .as_ref()
                    .is_some_and(|of| of.audience.contains(session))
            })
            .map(|running| running.slot.clone())
            .collect()
    }

    /// The slot of a running instance by its name (`SERVER#N`).
    pub(super) fn instance_slot(&self, name: &str) -> Option<Arc<Slot>> {
        let server = crate::slot::server_of(name);
        lock(&self.instances)
            .servers
            .get(server)?
            .iter()
            .find(|running| running.slot.name == name)
            .map(|running| running.slot.clone())
    }
}

fn stop(running: &Running, why: &'static str) {
    lock(&running.why).get_or_insert(why);
    running.stop.cancel();
}

#[derive(Clone)]
struct InstancesHandle {
    registry: Arc<Mutex<Registry>>,
    announcer: Arc<crate::announce::Announcer>,
    tasks: Arc<crate::tasks::Tasks>,
}

/// One instance's life after its start: watch for idleness until told to stop, then wait
/// for its supervisor to close it (the server's shutdown sequence) and retire its slot.
#[allow(clippy::too_many_arguments)]
async fn run_instance(
    handle: InstancesHandle,
    server: String,
    instance: Arc<Slot>,
    idle_timeout: Duration,
    usage: Arc<Usage>,
    stop: CancellationToken,
    why: Arc<Mutex<Option<&'static str>>>,
    supervised: tokio::task::JoinHandle<crate::slot::SlotWriter>,
) {
    loop {
        // While a request uses it, look again a timeout later (a request's end moves the
        // deadline on).
        let at = usage
            .idle_at(idle_timeout)
            .unwrap_or_else(|| Instant::now() + idle_timeout);
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep_until(at) => {
                // A client's resource subscriptions keep its instance, as requests do,
                // while a session it serves is there to hear their updates.
                let heard = instance
                    .instance
                    .as_ref()
                    .is_some_and(|of| !of.audience.sessions().is_empty());
                // So does a task of its server's whose result may still be asked for.
                if (heard && instance.has_subscriptions()) || handle.tasks.any_on(&instance.name) {
                    *lock(&usage.last_used) = Instant::now();
                    continue;
                }
                let idle = |usage: &Usage| {
                    usage.idle_at(idle_timeout).is_some_and(|at| at <= Instant::now())
                };
                if idle(&usage) {
                    let mut registry = lock(&handle.registry);
                    // Decided again and taken out of the registry under its lock, so no
                    // request finds it after this, and one that came meanwhile keeps it.
                    if idle(&usage) {
                        if let Some(running) = registry.servers.get_mut(&server) {
                            running.retain(|running| !Arc::ptr_eq(&running.slot, &instance));
                        }
                        registry.servers.retain(|_, running| !running.is_empty());
                        lock(&why).get_or_insert("it was idle");
                        stop.cancel();
                        break;
                    }
                }
            }
        }
    }
    let reason = lock(&why).unwrap_or("the gateway stopped");
    if let Ok(writer) = supervised.await {
        writer.retire(false);
    }
    handle
        .announcer
        .emit_to_operators(GatewayEvent::InstanceStopped {
            server,
            instance: instance.name.clone(),
            reason: reason.to_owned(),
        });
}
