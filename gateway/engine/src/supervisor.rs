//! One task per server: connect, discover, serve, and recover according to the policy.

use std::sync::Arc;
use std::time::Duration;

use rmcp::{Peer, RoleClient};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wardgate_policy::{
    CrashReport, CrashVerdict, ExitInfo, FailureKind, FailureStatus, ReconnectVerdict,
    TransportKind,
};

use crate::catalogue::Snapshot;
use crate::failure::UpstreamError;
use crate::gateway::{Gateway, Live, Slot};
use crate::status::ServerStatus;
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
    /// Someone wants the server now: skip any wait and try at once.
    WakeUp,
}

/// Why the serving phase of one connection ended.
enum Ended {
    Shutdown,
    Exited(ExitInfo, Duration),
    Lost(UpstreamError, FailureStatus),
}

/// What to do after a failure.
enum Next {
    RetryAfter(Duration, ServerStatus),
    Park(ServerStatus),
}

pub(crate) async fn run(
    gateway: Arc<Gateway>,
    slot: Arc<Slot>,
    mut events: mpsc::UnboundedReceiver<SlotEvent>,
    shutdown: CancellationToken,
) {
    if matches!(slot.status(), ServerStatus::Disabled) {
        // Nothing to run until enabled (operator actions arrive with issue 6).
        shutdown.cancelled().await;
        return;
    }
    let (signal_sender, mut signals) = mpsc::unbounded_channel();
    let mut generation = 0u64;
    let mut reconnect_attempt = 0u32;
    let mut crashes: Vec<Instant> = Vec::new();
    let started = Instant::now();
    let timeout = slot
        .config
        .startup_timeout
        .unwrap_or(gateway.settings.startup_timeout);

    loop {
        generation += 1;
        if !slot.status().is_transitional() {
            gateway.set_status(&slot, ServerStatus::Connecting, "connecting");
        } else if matches!(slot.status(), ServerStatus::Provisioning) {
            gateway.set_status(&slot, ServerStatus::Connecting, "starting");
        }
        let links = Links::new(
            &slot.name,
            generation,
            gateway.sessions.clone(),
            signal_sender.clone(),
        );
        let connected = tokio::select! {
            _ = shutdown.cancelled() => return,
            result = connect_and_discover(&gateway, &slot, links, timeout) => result,
        };
        let next = match connected {
            Ok((connection, snapshot)) => {
                reconnect_attempt = 0;
                *slot.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(snapshot);
                let ended = serve(
                    &gateway,
                    &slot,
                    connection,
                    generation,
                    &mut events,
                    &mut signals,
                    &shutdown,
                )
                .await;
                match ended {
                    Ended::Shutdown => return,
                    Ended::Exited(exit, uptime) => {
                        let now = Instant::now();
                        let report = CrashReport {
                            exit,
                            uptime_ms: uptime.as_millis() as u64,
                            now_ms: (now - started).as_millis() as u64,
                            recent_crashes_ms: crashes
                                .iter()
                                .map(|at| (*at - started).as_millis() as u64)
                                .collect(),
                        };
                        crashes.push(now);
                        crashes.retain(|at| now.duration_since(*at) < Duration::from_secs(3600));
                        match gateway.policy.crash(&slot.context, &report) {
                            CrashVerdict::RestartAfter { delay_ms } => Next::RetryAfter(
                                Duration::from_millis(delay_ms),
                                ServerStatus::Restarting {
                                    attempt: crashes.len() as u32,
                                },
                            ),
                            CrashVerdict::GiveUp => Next::Park(ServerStatus::PermanentlyFailed {
                                reason: format!(
                                    "the process {exit}; {} crashes, the crash budget is spent",
                                    crashes.len()
                                ),
                            }),
                        }
                    }
                    Ended::Lost(error, status) => {
                        reconnect_attempt += 1;
                        after_failure(&gateway, &slot, &error, status, reconnect_attempt)
                    }
                }
            }
            Err(error) => {
                tracing::warn!(server = %slot.name, "could not connect: {}", error.message);
                if let FailureKind::ProcessExited { code, signal } = error.kind {
                    // A process that dies before answering is a crash too.
                    let now = Instant::now();
                    let report = CrashReport {
                        exit: ExitInfo { code, signal },
                        uptime_ms: 0,
                        now_ms: (now - started).as_millis() as u64,
                        recent_crashes_ms: crashes
                            .iter()
                            .map(|at| (*at - started).as_millis() as u64)
                            .collect(),
                    };
                    crashes.push(now);
                    match gateway.policy.crash(&slot.context, &report) {
                        CrashVerdict::RestartAfter { delay_ms } => Next::RetryAfter(
                            Duration::from_millis(delay_ms.max(100)),
                            ServerStatus::Restarting {
                                attempt: crashes.len() as u32,
                            },
                        ),
                        CrashVerdict::GiveUp => Next::Park(ServerStatus::PermanentlyFailed {
                            reason: format!(
                                "{}; {} failed starts, the crash budget is spent",
                                error.message,
                                crashes.len()
                            ),
                        }),
                    }
                } else {
                    reconnect_attempt += 1;
                    let status = if error.kind.is_auth() {
                        FailureStatus::RequiresReauth
                    } else if error.kind.is_connection_class() {
                        FailureStatus::Offline
                    } else {
                        FailureStatus::Error
                    };
                    after_failure(&gateway, &slot, &error, status, reconnect_attempt)
                }
            }
        };
        match next {
            Next::RetryAfter(delay, status) => {
                gateway.set_status(&slot, status.clone(), &format!("{status}"));
                if !wait_or_wake(delay, &mut events, &shutdown).await {
                    return;
                }
            }
            Next::Park(status) => {
                gateway.set_status(&slot, status.clone(), &format!("{status}"));
                // Parked until an operator acts (issue 6) or the gateway stops.
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        event = events.recv() => if event.is_none() { return },
                    }
                }
            }
        }
    }
}

/// The status and wait that follow a failed connection or a lost one.
fn after_failure(
    gateway: &Gateway,
    slot: &Slot,
    error: &UpstreamError,
    status: FailureStatus,
    attempt: u32,
) -> Next {
    let reason = error.message.clone();
    match status {
        FailureStatus::RequiresReauth => Next::Park(ServerStatus::RequiresReauth { reason }),
        FailureStatus::Offline | FailureStatus::Error => {
            let offline = if status == FailureStatus::Offline {
                ServerStatus::Offline {
                    reason: reason.clone(),
                }
            } else {
                ServerStatus::Error {
                    reason: reason.clone(),
                }
            };
            gateway.set_status(slot, offline, &reason);
            if slot.transport() == TransportKind::Stdio {
                // A stdio server that fails without exiting is restarted like a crash would be,
                // but with the reconnect backoff so a broken command does not spin.
            }
            match gateway
                .policy
                .reconnect_delay(&slot.context, attempt, rand_seed())
            {
                ReconnectVerdict::RetryAfter { delay_ms } => Next::RetryAfter(
                    Duration::from_millis(delay_ms),
                    ServerStatus::Reconnecting {
                        attempt,
                        next_try_in_ms: delay_ms,
                    },
                ),
                ReconnectVerdict::Stop => Next::Park(ServerStatus::PermanentlyFailed {
                    reason: format!("gave up reconnecting after {attempt} attempts: {reason}"),
                }),
            }
        }
    }
}

fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64,
    );
    hasher.finish()
}

/// Sleep for `delay` unless woken or shut down; false on shutdown.
async fn wait_or_wake(
    delay: Duration,
    events: &mut mpsc::UnboundedReceiver<SlotEvent>,
    shutdown: &CancellationToken,
) -> bool {
    let deadline = tokio::time::sleep(delay);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = &mut deadline => return true,
            event = events.recv() => match event {
                None => return false,
                Some(SlotEvent::WakeUp) => return true,
                Some(_) => {} // stale news of an older connection
            },
        }
    }
}

async fn connect_and_discover(
    gateway: &Gateway,
    slot: &Slot,
    links: Arc<Links>,
    timeout: Duration,
) -> Result<(Connection, Snapshot), UpstreamError> {
    let deadline = Instant::now() + timeout;
    let connection = upstream::connect(&slot.config.transport, links, timeout).await?;
    gateway.set_status(
        slot,
        ServerStatus::DiscoveringTools,
        "initialized; discovering tools",
    );
    let remaining = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_secs(1));
    match tokio::time::timeout(remaining, discover(&slot.name, connection.service.peer())).await {
        Ok(Ok(snapshot)) => Ok((connection, snapshot)),
        Ok(Err(error)) => {
            close(connection, gateway.settings.shutdown_grace).await;
            Err(error)
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

/// Serve one connection until it ends; the slot shows it as live meanwhile.
async fn serve(
    gateway: &Gateway,
    slot: &Slot,
    connection: Connection,
    generation: u64,
    events: &mut mpsc::UnboundedReceiver<SlotEvent>,
    signals: &mut mpsc::UnboundedReceiver<UpstreamSignal>,
    shutdown: &CancellationToken,
) -> Ended {
    let Connection {
        service,
        process,
        links,
    } = connection;
    let peer = service.peer().clone();
    let _ = peer
        .set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
        .await;
    let cancel = service.cancellation_token();
    let mut waiting = tokio::spawn(service.waiting());
    let exit = process.as_ref().map(|process| process.exit_watch());
    *slot.live.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(Live {
        generation,
        peer: peer.clone(),
        links,
        exit: exit.clone(),
    }));
    gateway.set_status(slot, ServerStatus::Online { degraded: false }, "online");
    gateway.rebuild_catalogue();
    let online_since = Instant::now();

    let mut exit_watch = exit.clone();
    let ended = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break Ended::Shutdown,
            exit = async { exit_watch.as_mut().expect("guarded").wait_for(Option::is_some).await.map(|e| e.expect("some")) }, if exit_watch.is_some() => {
                match exit {
                    Ok(exit) => break Ended::Exited(exit, online_since.elapsed()),
                    Err(_) => exit_watch = None,
                }
            }
            _ = &mut waiting => {
                if let Some(process) = &process {
                    // stdout closed: the exit status, if it comes soon, tells more.
                    let exit = tokio::time::timeout(gateway.settings.shutdown_grace, process.exited()).await;
                    let exit = match exit { Ok(exit) => exit, Err(_) => { process.kill(); process.exited().await } };
                    break Ended::Exited(exit, online_since.elapsed());
                }
                break Ended::Lost(
                    UpstreamError::new(&slot.name, FailureKind::ConnectionClosed, "the connection to the server closed"),
                    FailureStatus::Offline,
                );
            }
            signal = signals.recv() => {
                if let Some(UpstreamSignal::ListChanged { generation: from }) = signal {
                    if from == generation {
                        // Coalesce a burst of announcements into one refresh.
                        while signals.try_recv().is_ok() {}
                        refresh(gateway, slot, &peer).await;
                    }
                }
            }
            event = events.recv() => match event {
                None => break Ended::Shutdown,
                Some(SlotEvent::CallFailed { generation: from, error, status }) if from == generation => {
                    break Ended::Lost(error, status);
                }
                Some(_) => {}
            },
        }
    };

    *slot.live.write().unwrap_or_else(|p| p.into_inner()) = None;
    cancel.cancel();
    let _ = tokio::time::timeout(gateway.settings.shutdown_grace, &mut waiting).await;
    waiting.abort();
    if let Some(process) = process {
        if matches!(ended, Ended::Shutdown) {
            process.shutdown(gateway.settings.shutdown_grace).await;
        } else {
            process.kill();
            process.exited().await;
        }
    }
    ended
}

/// Re-discover after a list_changed; a failure keeps the previous snapshot.
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
        process.exited().await;
    }
}
