//! One task per server: connect, discover, serve, probe, and recover as the policy decides.
//!
//! The supervisor is the only writer of its slot's live connection and snapshot, and it
//! changes status only through the lifecycle state machine (`Gateway::apply`).

use std::sync::Arc;
use std::time::Duration;

use rmcp::{Peer, RoleClient};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wardgate_policy::{
    CrashReport, CrashVerdict, ExitInfo, FailureKind, FailureStatus, HealthVerdict, ProbeOutcome,
    ReconnectVerdict,
};

use crate::catalogue::Snapshot;
use crate::events::GatewayEvent;
use crate::failure::UpstreamError;
use crate::gateway::{ActionError, Gateway, Live, Slot};
use crate::lifecycle::LifecycleEvent as E;
use crate::upstream::{self, Connection, Links, UpstreamSignal};

/// What a supervisor hears from the rest of the engine.
#[derive(Debug)]
pub enum SlotEvent {
    /// A call on `generation` gave up with a failure that says the connection is unusable.
    CallFailed {
        generation: u64,
        error: UpstreamError,
        status: FailureStatus,
    },
    /// Someone wants the server now: skip any reconnect wait and try at once.
    WakeUp,
    /// An operator action; the reply says whether it happened.
    Operator {
        action: OperatorAction,
        reply: oneshot::Sender<Result<(), ActionError>>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorAction {
    Reconnect,
    Restart,
    Enable,
    Disable,
}

/// What the supervisor does next.
enum Phase {
    Connect,
    Wait(Duration),
    Park,
    Disabled,
    Exit,
}

/// Why serving one connection ended.
enum Ended {
    Shutdown,
    /// The process exited after serving for this long.
    Exited(ExitInfo, Duration),
    Lost(UpstreamError, FailureStatus),
    Operator(OperatorAction, oneshot::Sender<Result<(), ActionError>>),
}

pub(crate) async fn run(
    gateway: Arc<Gateway>,
    slot: Arc<Slot>,
    events: mpsc::UnboundedReceiver<SlotEvent>,
    shutdown: CancellationToken,
) {
    let (signal_sender, signals) = mpsc::unbounded_channel();
    let enabled = slot.config.enabled;
    let mut supervisor = Supervisor {
        gateway,
        slot,
        events,
        signals,
        signal_sender,
        shutdown,
        generation: 0,
        reconnect_attempt: 0,
        crashes: Vec::new(),
        started: Instant::now(),
        discovered: false,
        woken: false,
    };
    let mut phase = if enabled {
        Phase::Connect
    } else {
        Phase::Disabled
    };
    loop {
        phase = match phase {
            Phase::Connect => supervisor.connect_and_serve().await,
            Phase::Wait(delay) => supervisor.wait(delay).await,
            Phase::Park => supervisor.park().await,
            Phase::Disabled => supervisor.disabled().await,
            Phase::Exit => return,
        };
    }
}

struct Supervisor {
    gateway: Arc<Gateway>,
    slot: Arc<Slot>,
    events: mpsc::UnboundedReceiver<SlotEvent>,
    signals: mpsc::UnboundedReceiver<UpstreamSignal>,
    signal_sender: mpsc::UnboundedSender<UpstreamSignal>,
    shutdown: CancellationToken,
    generation: u64,
    reconnect_attempt: u32,
    /// When recent crashes happened, on the engine's clock.
    crashes: Vec<Instant>,
    started: Instant,
    /// A discovery has succeeded before: its snapshot can serve while a refresh runs.
    discovered: bool,
    /// The next connection attempt was asked for by a call, not scheduled by the backoff:
    /// its failure does not advance the backoff (steady traffic must not push it to the cap).
    woken: bool,
}

impl Supervisor {
    fn apply(&self, event: E, reason: &str) -> bool {
        self.gateway.apply(&self.slot, event, reason)
    }

    fn startup_timeout(&self) -> Duration {
        self.slot
            .config
            .effective_startup_timeout(&self.gateway.settings)
    }

    async fn connect_and_serve(&mut self) -> Phase {
        self.generation += 1;
        self.apply(E::Connect, "connecting");
        let links = Links::new(
            &self.slot.name,
            self.generation,
            self.gateway.sessions.clone(),
            self.signal_sender.clone(),
        );
        let (gateway, slot) = (self.gateway.clone(), self.slot.clone());
        let connected = {
            let attempt = connect_and_discover(
                &gateway,
                &slot,
                links,
                self.startup_timeout(),
                self.discovered,
            );
            tokio::pin!(attempt);
            loop {
                tokio::select! {
                    _ = self.shutdown.cancelled() => return Phase::Exit,
                    result = &mut attempt => break Ok(result),
                    event = self.events.recv() => match event {
                        None => return Phase::Exit,
                        // Dropping the attempt kills a half-started process with its group.
                        Some(SlotEvent::Operator { action, reply }) => break Err((action, reply)),
                        Some(_) => {}
                    },
                }
            }
        };
        let connected = match connected {
            Ok(result) => result,
            Err((action, reply)) => {
                self.slot.settled();
                return self.operator(action, reply, false);
            }
        };
        match connected {
            Ok((connection, snapshot)) => {
                let reused = snapshot.is_none();
                if let Some(snapshot) = snapshot {
                    *self
                        .slot
                        .snapshot
                        .write()
                        .unwrap_or_else(|p| p.into_inner()) = Arc::new(snapshot);
                }
                self.discovered = true;
                self.woken = false;
                if self.reconnect_attempt > 0 {
                    self.gateway.emit(GatewayEvent::Reconnected {
                        server: self.slot.name.clone(),
                        attempts: self.reconnect_attempt,
                    });
                }
                self.reconnect_attempt = 0;
                if reused {
                    // Serve the last good snapshot at once; refresh it in the background.
                    let _ = self.signal_sender.send(UpstreamSignal::ListChanged {
                        generation: self.generation,
                    });
                }
                let ended = self.serve(connection).await;
                self.after_serving(ended)
            }
            Err(error) => self.after_connect_failure(error),
        }
    }

    fn after_serving(&mut self, ended: Ended) -> Phase {
        match ended {
            Ended::Shutdown => Phase::Exit,
            Ended::Operator(action, reply) => self.operator(action, reply, true),
            Ended::Exited(exit, uptime) => {
                self.gateway.emit(GatewayEvent::Disconnected {
                    server: self.slot.name.clone(),
                    intentional: false,
                    reason: format!("the process {exit}"),
                });
                self.crashed(exit, uptime, None)
            }
            Ended::Lost(error, status) => {
                self.slot
                    .record(|stats| stats.last_error = Some(error.message.clone()));
                self.gateway.emit(GatewayEvent::Disconnected {
                    server: self.slot.name.clone(),
                    intentional: false,
                    reason: error.message.clone(),
                });
                self.apply(
                    E::ConnectionLost {
                        status,
                        reason: error.message.clone(),
                    },
                    &error.message,
                );
                self.schedule_reconnect(status, &error.message)
            }
        }
    }

    fn after_connect_failure(&mut self, error: UpstreamError) -> Phase {
        tracing::warn!(server = %self.slot.name, "could not connect: {}", error.message);
        // A server that fails at once holds no list up.
        self.slot.settled();
        self.slot.record(|stats| {
            stats.consecutive_failures += 1;
            stats.last_error = Some(error.message.clone());
        });
        if let FailureKind::ProcessExited { code, signal } = error.kind {
            // A process that dies before it serves is a crash like any other.
            return self.crashed(
                ExitInfo { code, signal },
                Duration::ZERO,
                Some(&error.message),
            );
        }
        let status = if error.kind.is_auth() {
            FailureStatus::RequiresReauth
        } else if error.kind.is_connection_class() {
            FailureStatus::Offline
        } else {
            FailureStatus::Error
        };
        self.apply(
            E::ConnectFailed {
                status,
                reason: error.message.clone(),
            },
            &error.message,
        );
        self.schedule_reconnect(status, &error.message)
    }

    fn schedule_reconnect(&mut self, status: FailureStatus, reason: &str) -> Phase {
        if status == FailureStatus::RequiresReauth {
            return Phase::Park;
        }
        if !std::mem::take(&mut self.woken) || self.reconnect_attempt == 0 {
            self.reconnect_attempt += 1;
        }
        let attempt = self.reconnect_attempt;
        match self
            .slot
            .policy
            .reconnect_delay(&self.slot.context, attempt, seed())
        {
            ReconnectVerdict::RetryAfter { delay_ms } => {
                self.gateway.metrics.reconnect(&self.slot.name);
                self.slot.record(|stats| {
                    stats.reconnect_attempt = Some(attempt);
                    stats.next_retry_at = Some(Instant::now() + Duration::from_millis(delay_ms));
                });
                self.apply(
                    E::ReconnectScheduled { attempt, delay_ms },
                    &format!("reconnecting in {delay_ms} ms"),
                );
                self.gateway.emit(GatewayEvent::Reconnecting {
                    server: self.slot.name.clone(),
                    attempt,
                    next_delay_ms: delay_ms,
                });
                Phase::Wait(Duration::from_millis(delay_ms))
            }
            ReconnectVerdict::Stop => {
                self.apply(
                    E::ReconnectStopped {
                        attempts: attempt,
                        reason: reason.to_owned(),
                    },
                    "the policy stopped reconnecting",
                );
                self.gateway.emit(GatewayEvent::PermanentlyFailed {
                    server: self.slot.name.clone(),
                    crashes: self.crashes.len() as u32,
                    reason: reason.to_owned(),
                });
                Phase::Park
            }
        }
    }

    fn crashed(&mut self, exit: ExitInfo, uptime: Duration, detail: Option<&str>) -> Phase {
        let now = Instant::now();
        let report = CrashReport {
            exit,
            uptime_ms: uptime.as_millis() as u64,
            now_ms: self.millis(now),
            recent_crashes_ms: self.crashes.iter().map(|at| self.millis(*at)).collect(),
        };
        self.crashes.push(now);
        // Policies see at most the last hour; older history cannot matter to any sane budget.
        self.crashes
            .retain(|at| now.duration_since(*at) < Duration::from_secs(3600));
        let crashes = self.crashes.len() as u32;
        let reason = detail
            .map(str::to_owned)
            .unwrap_or_else(|| format!("the process {exit}"));
        self.gateway.metrics.crash(&self.slot.name);
        self.slot.record(|stats| {
            stats.crashes_in_window = crashes;
            stats.last_error = Some(reason.clone());
        });
        match self.slot.policy.crash(&self.slot.context, &report) {
            CrashVerdict::RestartAfter { delay_ms } => {
                self.slot.record(|stats| {
                    stats.next_retry_at = Some(now + Duration::from_millis(delay_ms));
                });
                self.apply(
                    E::Crashed { exit, crashes },
                    &format!("{reason}; restarting in {delay_ms} ms"),
                );
                Phase::Wait(Duration::from_millis(delay_ms))
            }
            CrashVerdict::GiveUp => {
                self.apply(E::CrashBudgetSpent { exit, crashes }, &reason);
                self.gateway.emit(GatewayEvent::PermanentlyFailed {
                    server: self.slot.name.clone(),
                    crashes,
                    reason,
                });
                Phase::Park
            }
        }
    }

    fn millis(&self, at: Instant) -> u64 {
        at.duration_since(self.started).as_millis() as u64
    }

    /// Handle an operator action outside of `serve`; `was_serving` says a connection was just closed for it.
    fn operator(
        &mut self,
        action: OperatorAction,
        reply: oneshot::Sender<Result<(), ActionError>>,
        was_serving: bool,
    ) -> Phase {
        if was_serving {
            self.gateway.emit(GatewayEvent::Disconnected {
                server: self.slot.name.clone(),
                intentional: true,
                reason: format!("operator {action:?}").to_lowercase(),
            });
        }
        let (phase, answer) = match action {
            OperatorAction::Reconnect | OperatorAction::Restart => {
                self.reconnect_attempt = 0;
                self.crashes.clear();
                self.slot.record(|stats| {
                    stats.reconnect_attempt = None;
                    stats.next_retry_at = None;
                    stats.crashes_in_window = 0;
                });
                // The status says so before the operator hears "done": no caller may see the
                // old connection's "online" after the action returned.
                self.apply(
                    E::Connect,
                    &format!("{action:?} requested by an operator").to_lowercase(),
                );
                (Phase::Connect, Ok(()))
            }
            OperatorAction::Disable => {
                self.apply(E::Disable, "disabled by an operator");
                (Phase::Disabled, Ok(()))
            }
            OperatorAction::Enable => (
                Phase::Connect,
                Err(ActionError::Refused(format!(
                    "server \"{}\" is already enabled",
                    self.slot.name
                ))),
            ),
        };
        let _ = reply.send(answer);
        phase
    }

    /// Sleep before the next attempt, unless a call or an operator wants it sooner.
    async fn wait(&mut self, delay: Duration) -> Phase {
        let deadline = tokio::time::sleep(delay);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return Phase::Exit,
                _ = &mut deadline => return Phase::Connect,
                event = self.events.recv() => match event {
                    None => return Phase::Exit,
                    Some(SlotEvent::WakeUp) => {
                        self.woken = true;
                        return Phase::Connect;
                    }
                    Some(SlotEvent::Operator { action, reply }) => return self.operator(action, reply, false),
                    Some(SlotEvent::CallFailed { .. }) => {} // news of an older connection
                },
            }
        }
    }

    /// Wait for an operator: requires_reauth and permanently_failed end only by one.
    async fn park(&mut self) -> Phase {
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return Phase::Exit,
                event = self.events.recv() => match event {
                    None => return Phase::Exit,
                    Some(SlotEvent::Operator { action, reply }) => return self.operator(action, reply, false),
                    Some(_) => {}
                },
            }
        }
    }

    async fn disabled(&mut self) -> Phase {
        *self.slot.live.write().unwrap_or_else(|p| p.into_inner()) = None;
        self.slot.settled();
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return Phase::Exit,
                event = self.events.recv() => match event {
                    None => return Phase::Exit,
                    Some(SlotEvent::Operator { action: OperatorAction::Enable, reply }) => {
                        self.apply(E::Enable, "enabled by an operator");
                        self.slot.start_waiting(self.gateway.settings.startup_wait);
                        self.reconnect_attempt = 0;
                        self.crashes.clear();
                        self.slot.record(|stats| *stats = Default::default());
                        let _ = reply.send(Ok(()));
                        return Phase::Connect;
                    }
                    Some(SlotEvent::Operator { action: OperatorAction::Disable, reply }) => {
                        let _ = reply.send(Ok(()));
                    }
                    Some(SlotEvent::Operator { reply, .. }) => {
                        let _ = reply.send(Err(ActionError::Refused(format!(
                            "server \"{}\" is disabled; enable it first (wardgate enable {})", self.slot.name, self.slot.name
                        ))));
                    }
                    Some(_) => {}
                },
            }
        }
    }

    /// Serve one connection until it ends; the slot shows it as live meanwhile.
    async fn serve(&mut self, connection: Connection) -> Ended {
        let Connection {
            service,
            process,
            links,
        } = connection;
        let generation = self.generation;
        let peer = service.peer().clone();
        let cancel = service.cancellation_token();
        let mut waiting = tokio::spawn(service.waiting());
        let exit = process.as_ref().map(|process| process.exit_watch());
        *self.slot.live.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(Live {
            generation,
            peer: peer.clone(),
            links,
            exit: exit.clone(),
            stream_fault: process.as_ref().map(|process| process.stream_fault()),
        }));
        let online_since = Instant::now();
        let pid = process.as_ref().and_then(|process| process.pid());
        self.slot.record(|stats| {
            stats.pid = pid;
            stats.connected_at = Some(online_since);
            stats.consecutive_failures = 0;
            stats.reconnect_attempt = None;
            stats.next_retry_at = None;
        });
        self.apply(E::Ready, "online");
        self.gateway.rebuild_catalogue();
        // Only now are its tools in the catalogue: a list waiting for it may answer.
        self.slot.settled();

        let mut prober = Prober::new(&self.slot);
        let mut exit_watch = exit.clone();
        // A JoinHandle must not be polled again once it has completed.
        let mut service_ended = false;
        let ended = loop {
            let next_probe = prober.next_at;
            tokio::select! {
                _ = self.shutdown.cancelled() => break Ended::Shutdown,
                exit = async { exit_watch.as_mut().expect("guarded").wait_for(Option::is_some).await.map(|e| e.expect("some")) }, if exit_watch.is_some() => {
                    match exit {
                        Ok(exit) => break Ended::Exited(exit, online_since.elapsed()),
                        Err(_) => exit_watch = None,
                    }
                }
                _ = &mut waiting, if !service_ended => {
                    service_ended = true;
                    if let Some(process) = &process {
                        // stdout closed: the exit status, if it comes soon, tells more.
                        let exit = tokio::time::timeout(self.gateway.settings.shutdown_grace, upstream::exited(&**process)).await;
                        let exit = match exit { Ok(exit) => exit, Err(_) => { process.kill(); upstream::exited(&**process).await } };
                        break Ended::Exited(exit, online_since.elapsed());
                    }
                    break Ended::Lost(
                        UpstreamError::new(&self.slot.name, FailureKind::ConnectionClosed, "the connection to the server closed"),
                        FailureStatus::Offline,
                    );
                }
                _ = tokio::time::sleep_until(next_probe) => {
                    if let Some(lost) = prober.probe(&self.gateway, &self.slot, &peer).await {
                        break lost;
                    }
                }
                signal = self.signals.recv() => {
                    if let Some(UpstreamSignal::ListChanged { generation: from }) = signal {
                        if from == generation {
                            // Coalesce a burst of announcements (or recovery detections) into one refresh.
                            while self.signals.try_recv().is_ok() {}
                            refresh(&self.gateway, &self.slot, &peer).await;
                        }
                    }
                }
                event = self.events.recv() => match event {
                    None => break Ended::Shutdown,
                    Some(SlotEvent::CallFailed { generation: from, error, status }) if from == generation => {
                        if let Some(process) = &process {
                            // For a stdio server the process's exit is the real news: count it as a crash.
                            if let Ok(exit) = tokio::time::timeout(Duration::from_millis(300), upstream::exited(&**process)).await {
                                break Ended::Exited(exit, online_since.elapsed());
                            }
                        }
                        break Ended::Lost(error, status);
                    }
                    Some(SlotEvent::Operator { action: OperatorAction::Enable, reply }) => {
                        let _ = reply.send(Err(ActionError::Refused(format!("server \"{}\" is already enabled", self.slot.name))));
                    }
                    Some(SlotEvent::Operator { action, reply }) => break Ended::Operator(action, reply),
                    Some(_) => {}
                },
            }
        };

        *self.slot.live.write().unwrap_or_else(|p| p.into_inner()) = None;
        self.slot.record(|stats| {
            stats.pid = None;
            stats.connected_at = None;
        });
        cancel.cancel();
        if !service_ended {
            let _ = tokio::time::timeout(self.gateway.settings.shutdown_grace, &mut waiting).await;
        }
        waiting.abort();
        if let Some(process) = process {
            match ended {
                // Polite: stdin is closed; wait, SIGTERM, wait, SIGKILL the group.
                Ended::Shutdown | Ended::Operator(..) => {
                    process.shutdown(self.gateway.settings.shutdown_grace).await;
                }
                _ => {
                    process.kill();
                    upstream::exited(&*process).await;
                }
            }
        }
        ended
    }
}

/// Health probes of one live connection: MCP `ping`, or `tools/list` for servers without ping.
struct Prober {
    next_at: Instant,
    timeout: Duration,
    use_list: bool,
    consecutive_failures: u32,
    consecutive_successes: u32,
    degraded: bool,
}

impl Prober {
    fn new(slot: &Slot) -> Prober {
        let schedule = slot.policy.probe_schedule(&slot.context, seed());
        Prober {
            next_at: Instant::now() + Duration::from_millis(schedule.interval_ms.max(10)),
            timeout: Duration::from_millis(schedule.timeout_ms.max(1)),
            use_list: false,
            consecutive_failures: 0,
            consecutive_successes: 0,
            degraded: false,
        }
    }

    /// Probe once; `Some` when the policy says the connection is beyond saving.
    async fn probe(
        &mut self,
        gateway: &Gateway,
        slot: &Slot,
        peer: &Peer<RoleClient>,
    ) -> Option<Ended> {
        let started = Instant::now();
        let mut outcome = self.ask(peer).await;
        if let Err(rmcp::ServiceError::McpError(error)) = &outcome {
            if error.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND && !self.use_list {
                // The server does not implement ping: tools/list proves as much.
                self.use_list = true;
                outcome = self.ask(peer).await;
            }
        }
        let succeeded = outcome.is_ok();
        if succeeded {
            self.consecutive_successes += 1;
            self.consecutive_failures = 0;
        } else {
            self.consecutive_failures += 1;
            self.consecutive_successes = 0;
        }
        let failures = self.consecutive_failures;
        slot.record(|stats| stats.consecutive_failures = failures);
        let probe = ProbeOutcome {
            succeeded,
            latency_ms: started.elapsed().as_millis() as u64,
            consecutive_failures: self.consecutive_failures,
            consecutive_successes: self.consecutive_successes,
        };
        let schedule = slot.policy.probe_schedule(&slot.context, seed());
        self.next_at = Instant::now() + Duration::from_millis(schedule.interval_ms.max(10));
        self.timeout = Duration::from_millis(schedule.timeout_ms.max(1));
        match slot.policy.health(&slot.context, &probe) {
            HealthVerdict::Healthy if self.degraded => {
                self.degraded = false;
                gateway.apply(
                    slot,
                    E::Health { degraded: false },
                    "a health probe succeeded",
                );
                gateway.emit(GatewayEvent::HealthRestored {
                    server: slot.name.clone(),
                });
            }
            HealthVerdict::Degraded if !self.degraded => {
                self.degraded = true;
                let reason = format!(
                    "{} consecutive health probes failed",
                    self.consecutive_failures
                );
                gateway.apply(slot, E::Health { degraded: true }, &reason);
                gateway.emit(GatewayEvent::HealthDegraded {
                    server: slot.name.clone(),
                    consecutive_failures: self.consecutive_failures,
                });
            }
            HealthVerdict::Unhealthy => {
                // Only a policy that says so explicitly turns probes into a reconnection.
                let reason = format!(
                    "the policy judged the server unhealthy after {} failed probes",
                    self.consecutive_failures
                );
                return Some(Ended::Lost(
                    UpstreamError::new(&slot.name, FailureKind::TimedOut, reason),
                    FailureStatus::Offline,
                ));
            }
            _ => {}
        }
        None
    }

    async fn ask(&self, peer: &Peer<RoleClient>) -> Result<(), rmcp::ServiceError> {
        let request = if self.use_list {
            rmcp::model::ClientRequest::ListToolsRequest(rmcp::model::ListToolsRequest::default())
        } else {
            rmcp::model::ClientRequest::PingRequest(rmcp::model::PingRequest::default())
        };
        let options = rmcp::service::PeerRequestOptions::with_timeout(self.timeout);
        peer.send_request_with_option(request, options)
            .await?
            .await_response()
            .await
            .map(|_| ())
    }
}

fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    hasher.finish()
}

/// Connect, initialize, and discover — unless a snapshot from an earlier connection can
/// serve while a background refresh runs (then the snapshot is `None`).
async fn connect_and_discover(
    gateway: &Gateway,
    slot: &Slot,
    links: Arc<Links>,
    timeout: Duration,
    discovered_before: bool,
) -> Result<(Connection, Option<Snapshot>), UpstreamError> {
    let deadline = Instant::now() + timeout;
    let connection = gateway
        .connector
        .connect(&slot.config.transport, links, timeout)
        .await?;
    let _ = connection
        .service
        .peer()
        .set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
        .await;
    gateway.apply(slot, E::Initialized, "initialized; discovering tools");
    if discovered_before {
        return Ok((connection, None));
    }
    let remaining = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_secs(1));
    match tokio::time::timeout(remaining, discover(&slot.name, connection.service.peer())).await {
        Ok(Ok(snapshot)) => Ok((connection, Some(snapshot))),
        Ok(Err(error)) => {
            // A process that died during discovery crashed; say so, so the crash budget counts it.
            let exit = match &connection.process {
                Some(process) => {
                    tokio::time::timeout(Duration::from_millis(250), upstream::exited(&**process))
                        .await
                        .ok()
                }
                None => None,
            };
            close(connection, gateway.settings.shutdown_grace).await;
            Err(match exit {
                Some(exit) => UpstreamError::process_exited(&slot.name, exit),
                None => error,
            })
        }
        Err(_) => {
            close(connection, gateway.settings.shutdown_grace).await;
            Err(UpstreamError::new(
                &slot.name,
                FailureKind::TimedOut,
                "discovery did not finish within the startup timeout",
            ))
        }
    }
}

/// Ask a server for everything it offers, following pagination.
pub(crate) async fn discover(
    server: &str,
    peer: &Peer<RoleClient>,
) -> Result<Snapshot, UpstreamError> {
    let capabilities = peer
        .peer_info()
        .map(|info| info.capabilities.clone())
        .unwrap_or_default();
    let fail = |error: rmcp::ServiceError| UpstreamError::from_service(server, &error);
    let mut snapshot = Snapshot::default();
    if capabilities.tools.is_some() {
        snapshot.tools = peer.list_all_tools().await.map_err(fail)?;
    }
    if capabilities.prompts.is_some() {
        snapshot.prompts = peer.list_all_prompts().await.map_err(fail)?;
    }
    if capabilities.resources.is_some() {
        snapshot.resources = peer.list_all_resources().await.map_err(fail)?;
        snapshot.templates = peer.list_all_resource_templates().await.map_err(fail)?;
    }
    Ok(snapshot)
}

/// Re-discover (after list_changed or a recovery); a failure keeps the previous snapshot.
async fn refresh(gateway: &Gateway, slot: &Slot, peer: &Peer<RoleClient>) {
    match tokio::time::timeout(gateway.settings.request_timeout, discover(&slot.name, peer)).await {
        Ok(Ok(snapshot)) => {
            *slot.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(snapshot);
            gateway.rebuild_catalogue();
        }
        Ok(Err(error)) => {
            tracing::warn!(server = %slot.name, "refresh failed; keeping the last snapshot: {}", error.message)
        }
        Err(_) => {
            tracing::warn!(server = %slot.name, "refresh timed out; keeping the last snapshot")
        }
    }
}

/// Close a connection that never went live.
async fn close(connection: Connection, grace: Duration) {
    let Connection {
        mut service,
        process,
        ..
    } = connection;
    let _ = service.close_with_timeout(grace).await;
    if let Some(process) = process {
        process.kill();
        upstream::exited(&*process).await;
    }
}

#[cfg(test)]
mod tests;
