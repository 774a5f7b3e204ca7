//! One task per server: the driver of its recovery machine.
//!
//! Why this file is long: one task's loop over the machine's steps (spawn, connect,
//! discover, serve, probe, wait, close), whose arms share the loop's state; subscriptions
//! are in `supervisor/subscriptions`, and the tests in `supervisor/tests`.
//!
//! The [`Machine`] (crate `wardgate-recovery`) decides everything about recovery: statuses,
//! backoff, the crash budget, probe verdicts, what an operator action does. This task turns
//! what happens (process exits, connection outcomes, failed calls, probe results, operator
//! actions) into the machine's inputs and carries out its steps: spawn and connect,
//! discover, serve and probe, wait, close. It holds narrow handles only: the slot's
//! [`SlotWriter`] (it alone has it, and hands it back when it stops) and the [`Announcer`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wardgate_policy::{FailureKind, FailureStatus};
use wardgate_recovery::{
    Failure, Input, Machine, Next, OperatorAction, Record, ServerStatus, Step,
};

use crate::announce::{Announcer, StepContext};
use crate::config::GatewaySettings;
use crate::failure::UpstreamError;
use crate::slot::ActionError;
use crate::slot::{millis, Live, Slot, SlotEvent, SlotWriter};
use crate::upstream::{self, Connection, Connector, Links, UpstreamSignal};

/// What a supervisor needs besides its slot: how to reach servers, and whom to tell.
#[derive(Clone)]
pub(crate) struct Driver {
    pub announcer: Arc<Announcer>,
    pub connector: Arc<dyn Connector>,
}

impl Driver {
    fn settings(&self) -> &GatewaySettings {
        &self.announcer.settings
    }
}

/// What the supervisor does next (a [`Next`] the driver can carry out, or the end).
enum Phase {
    Connect,
    Wait(Duration),
    Park,
    Disabled,
    Exit,
}

fn phase(next: Next) -> Option<Phase> {
    match next {
        Next::Connect => Some(Phase::Connect),
        Next::Wait { delay_ms } => Some(Phase::Wait(Duration::from_millis(delay_ms))),
        Next::Park => Some(Phase::Park),
        Next::Disabled => Some(Phase::Disabled),
        Next::Serve { .. } | Next::Continue => None,
    }
}

/// Run `writer`'s server until `shutdown`; returns the writer, so whoever stopped the
/// supervisor can retire the slot.
pub(crate) async fn run(
    driver: Driver,
    writer: SlotWriter,
    events: mpsc::UnboundedReceiver<SlotEvent>,
    shutdown: CancellationToken,
    seed: u64,
) -> SlotWriter {
    let (signal_sender, signals) = mpsc::unbounded_channel();
    let slot = writer.slot().clone();
    let machine = Machine::new(slot.context.clone(), slot.config.enabled, seed);
    let mut supervisor = Supervisor {
        driver,
        writer,
        slot,
        machine,
        epoch: Instant::now(),
        events,
        signals,
        signal_sender,
        shutdown,
        generation: 0,
        discovered: false,
        learned: Default::default(),
    };
    let start = supervisor.feed(Input::Start);
    let mut phase = phase(start.next).unwrap_or(Phase::Park);
    loop {
        phase = match phase {
            Phase::Connect => supervisor.connect_and_serve().await,
            Phase::Wait(delay) => supervisor.wait(delay).await,
            Phase::Park => supervisor.park().await,
            Phase::Disabled => supervisor.disabled().await,
            Phase::Exit => return supervisor.writer,
        };
    }
}

struct Supervisor {
    driver: Driver,
    writer: SlotWriter,
    slot: Arc<Slot>,
    machine: Machine,
    /// The machine's clock starts here.
    epoch: Instant,
    events: mpsc::UnboundedReceiver<SlotEvent>,
    signals: mpsc::UnboundedReceiver<UpstreamSignal>,
    signal_sender: mpsc::UnboundedSender<UpstreamSignal>,
    shutdown: CancellationToken,
    generation: u64,
    /// A discovery has succeeded before: its snapshot can serve while a refresh runs.
    discovered: bool,
    /// What earlier connections taught about opening the next one.
    learned: Arc<crate::upstream::Learned>,
}

/// How long a new connection may take to renew clients' resource subscriptions.
const RENEW_SUBSCRIPTIONS: Duration = Duration::from_secs(5);

/// Why serving one connection ended: the phase that follows, and whether the connection
/// closes politely (an operator's action, shutdown) or is killed (it is already lost).
struct Ended {
    phase: Phase,
    polite: bool,
}

impl Supervisor {
    fn now_ms(&self) -> u64 {
        millis(self.epoch.elapsed())
    }

    /// Feed the machine, then publish and announce its step.
    fn feed(&mut self, input: Input) -> Step {
        self.feed_with(input, &StepContext::default(), false)
    }

    /// [`Supervisor::feed`], with what only the driver knows for the announcements, and
    /// whether the server's snapshot changed since the catalogue was last built.
    ///
    /// The status and the catalogue are published together, once: a server that comes
    /// online is in the catalogue before anyone can see it online (so a call that waited
    /// for it finds its route), and one that goes offline is seen offline before its items
    /// leave the catalogue.
    fn feed_with(&mut self, input: Input, context: &StepContext, snapshot_changed: bool) -> Step {
        let now_ms = self.now_ms();
        if let (
            Input::Served {
                succeeded: false, ..
            }
            | Input::Probed {
                succeeded: false, ..
            },
            Some(error),
        ) = (&input, &context.error)
        {
            // The failure's own words are the last error operators read.
            self.machine.note_failure(now_ms, error.clone());
        }
        let step = self.machine.on(now_ms, input.clone(), &*self.slot.policy);
        let status = self.machine.status();
        let announcer = &self.driver.announcer;
        let was_online = self.slot.status().is_online();
        // An instance's tools are its server's, listed from the configured slot.
        let rebuild =
            self.slot.instance.is_none() && (snapshot_changed || was_online != status.is_online());
        if rebuild && status.is_online() {
            let (writer, view) = (&self.writer, self.machine.view());
            announcer.rebuild_catalogue_then(Some((&self.slot.name, status)), || {
                writer.publish(status, view);
            });
        } else {
            self.writer.publish(status, self.machine.view());
            if rebuild {
                announcer.rebuild_catalogue();
            }
        }
        self.writer
            .journal(Record::new(now_ms, input, status, &step));
        announcer.step(&self.slot.name, &step, context);
        step
    }

    /// An operator action: the machine decides, the operator hears the answer. `Some`:
    /// what was under way stops and this phase follows.
    fn operator(
        &mut self,
        action: OperatorAction,
        reply: oneshot::Sender<Result<(), ActionError>>,
    ) -> Option<Phase> {
        let step = self.feed(Input::Operator(action));
        let answer = match step.reply {
            Some(Err(refusal)) => Err(ActionError::Refused(refusal)),
            _ => Ok(()),
        };
        if action == OperatorAction::Enable && answer.is_ok() {
            self.writer
                .start_waiting(self.driver.settings().startup_wait);
        }
        // The status says so before the operator hears "done": no caller may see the old
        // connection's "online" after the action returned.
        let _ = reply.send(answer);
        phase(step.next)
    }

    /// Run `work` while answering operators; `Err` when shutdown or an operator's action
    /// ends it (dropping `work` kills a half-started process with its group).
    async fn meanwhile<T>(
        &mut self,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, Phase> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return Err(Phase::Exit),
                result = &mut work => return Ok(result),
                event = self.events.recv() => match event {
                    None => return Err(Phase::Exit),
                    Some(SlotEvent::Operator { action, reply }) => {
                        if let Some(phase) = self.operator(action, reply) {
                            return Err(phase);
                        }
                    }
                    // Calls wait for this attempt; failures are news of an older connection.
                    Some(SlotEvent::WakeUp | SlotEvent::CallFailed { .. } | SlotEvent::CallBroken { .. } | SlotEvent::CallOutcome { .. }) => {}
                },
            }
        }
    }

    async fn connect_and_serve(&mut self) -> Phase {
        self.generation += 1;
        let links = Links::new(
            &self.slot.name,
            &self.slot.config.prefix,
            self.generation,
            self.learned.clone(),
            self.driver.announcer.sessions.clone(),
            self.slot
                .instance
                .as_ref()
                .map(|instance| instance.audience.clone()),
            self.signal_sender.clone(),
        );
        let timeout = self
            .slot
            .config
            .effective_startup_timeout(self.driver.settings());
        let deadline = Instant::now() + timeout;
        let connector = self.driver.connector.clone();
        let slot = self.slot.clone();
        let connected = self
            .meanwhile(connector.connect(&slot.config.transport, links, timeout))
            .await;
        let connection = match connected {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => return self.connect_failed(error),
            Err(phase) => {
                self.writer.settled();
                return phase;
            }
        };
        let _ = connection
            .service
            .peer()
            .set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
            .await;
        self.feed(Input::Initialized);
        let snapshot = if self.discovered {
            None
        } else {
            let grace = self.driver.settings().shutdown_grace;
            let remaining = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_secs(1));
            let discovery =
                tokio::time::timeout(remaining, discover(&slot.name, connection.service.peer()));
            match self.meanwhile(discovery).await {
                Ok(Ok(Ok(snapshot))) => Some(snapshot),
                Ok(Ok(Err(error))) => {
                    // A process that died during discovery crashed; say so, so the crash budget counts it.
                    let exit = match &connection.process {
                        Some(process) => tokio::time::timeout(
                            Duration::from_millis(250),
                            upstream::exited(&**process),
                        )
                        .await
                        .ok(),
                        None => None,
                    };
                    close(connection, grace).await;
                    return self.connect_failed(match exit {
                        Some(end) => end.error(&slot.name),
                        None => error,
                    });
                }
                Ok(Err(_)) => {
                    close(connection, grace).await;
                    return self.connect_failed(UpstreamError::new(
                        &slot.name,
                        FailureKind::TimedOut,
                        "discovery did not finish within the startup timeout",
                    ));
                }
                Err(phase) => {
                    close(connection, grace).await;
                    self.writer.settled();
                    return phase;
                }
            }
        };
        let reused = snapshot.is_none();
        if let Some(snapshot) = snapshot {
            self.writer.set_snapshot(snapshot);
        }
        self.discovered = true;
        if reused {
            // Serve the last good snapshot at once; refresh it in the background.
            let _ = self.signal_sender.send(UpstreamSignal::ListChanged {
                generation: self.generation,
            });
        }
        let ended = self.serve(connection).await;
        ended.phase
    }

    fn connect_failed(&mut self, error: UpstreamError) -> Phase {
        tracing::warn!(server = %self.slot.name, "could not connect: {}", error.message);
        let step = self.feed(Input::ConnectFailed(Failure::new(
            error.kind,
            error.message,
        )));
        // A server that fails at once holds no list up.
        self.writer.settled();
        phase(step.next).unwrap_or(Phase::Park)
    }

    /// Sleep before the next attempt, unless a call or an operator wants it sooner.
    async fn wait(&mut self, delay: Duration) -> Phase {
        let deadline = tokio::time::sleep(delay);
        tokio::pin!(deadline);
        loop {
            let input = tokio::select! {
                _ = self.shutdown.cancelled() => return Phase::Exit,
                _ = &mut deadline => Input::RetryDue,
                event = self.events.recv() => match event {
                    None => return Phase::Exit,
                    Some(SlotEvent::WakeUp) => Input::WakeUp,
                    Some(SlotEvent::Operator { action, reply }) => match self.operator(action, reply) {
                        Some(phase) => return phase,
                        None => continue,
                    },
                    Some(SlotEvent::CallFailed { .. } | SlotEvent::CallBroken { .. } | SlotEvent::CallOutcome { .. }) => continue, // news of an older connection
                },
            };
            if let Some(phase) = phase(self.feed(input).next) {
                return phase;
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
                    Some(SlotEvent::Operator { action, reply }) => {
                        if let Some(phase) = self.operator(action, reply) {
                            return phase;
                        }
                    }
                    Some(_) => {}
                },
            }
        }
    }

    async fn disabled(&mut self) -> Phase {
        self.writer.set_live(None);
        self.writer.settled();
        self.park().await
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
        let modern = peer
            .peer_info()
            .is_some_and(|info| !info.protocol_version.has_initialize());
        // Ends with this connection's serving (the guard drops when `serve` returns).
        let listening = tokio_util::sync::CancellationToken::new();
        let _listening = listening.clone().drop_guard();
        if modern {
            tokio::spawn(subscriptions::listen_for_changes(
                peer.clone(),
                links.clone(),
                self.slot.watch_subscriptions(),
                self.slot.listened(),
                listening,
            ));
        }
        // A new connection takes the subscriptions clients hold before it is online, so
        // no update falls between the reconnection and the client's next touch.
        let subscribed: Vec<String> = self
            .slot
            .watch_subscriptions()
            .borrow()
            .iter()
            .cloned()
            .collect();
        let subscribable = peer.peer_info().is_some_and(|info| {
            info.capabilities
                .resources
                .as_ref()
                .is_some_and(|resources| resources.subscribe == Some(true))
        });
        if subscribable && !subscribed.is_empty() {
            let renewed =
                subscriptions::renew_subscriptions(&peer, &self.slot, modern, &subscribed);
            if tokio::time::timeout(RENEW_SUBSCRIPTIONS, renewed)
                .await
                .is_err()
            {
                tracing::warn!(server = %self.slot.name, "the server did not take back its resource subscriptions within {}; their updates may be missed", humantime::format_duration(RENEW_SUBSCRIPTIONS));
            }
        }
        let mut waiting = tokio::spawn(service.waiting());
        let exit = process.as_ref().map(|process| process.exit_watch());
        // Live before the status says online: a call that sees "online" finds the connection.
        self.writer.set_live(Some(Arc::new(Live {
            generation,
            peer: peer.clone(),
            links,
            exit: exit.clone(),
            stream_fault: process.as_ref().map(|process| process.stream_fault()),
        })));
        self.writer
            .set_pid(process.as_ref().and_then(|process| process.pid()));
        let capabilities = peer
            .peer_info()
            .and_then(|info| serde_json::to_value(&info.capabilities).ok());
        // Its new snapshot and its status reach the catalogue together.
        let ready = self.feed_with(
            Input::Ready,
            &StepContext {
                capabilities,
                error: None,
            },
            true,
        );
        // Only now are its tools in the catalogue: a list waiting for it may answer.
        self.writer.settled();
        let mut prober = Prober::new(ready.next);
        // Listing the server again on its own, for changes it does not announce.
        let announces = peer.peer_info().is_some_and(|info| {
            info.capabilities
                .tools
                .as_ref()
                .is_some_and(|tools| tools.list_changed == Some(true))
        });
        let relist_every = self.slot.config.effective_relist_interval(announces);
        let mut relist_at = relist_every.map(|every| Instant::now() + every);
        // Its credentials, checked on their own interval: a health check with them.
        let credentials_every = crate::health::credential_check_interval(&self.slot);
        let mut credentials_at = credentials_every.map(|every| Instant::now() + every);

        let mut exit_watch = exit.clone();
        // A JoinHandle must not be polled again once it has completed.
        let mut service_ended = false;
        // Events that arrived while a refresh ran, handled before any newer one.
        let mut deferred: std::collections::VecDeque<Option<SlotEvent>> = Default::default();
        let ended = loop {
            // A call that gave up asks which status its failure left the server in.
            let mut told: Option<oneshot::Sender<ServerStatus>> = None;
            let input = tokio::select! {
                _ = self.shutdown.cancelled() => break Ended { phase: Phase::Exit, polite: true },
                exit = async { exit_watch.as_mut().expect("guarded").wait_for(Option::is_some).await.map(|e| e.clone().expect("some")) }, if exit_watch.is_some() => {
                    match exit {
                        Ok(end) => exited(end),
                        Err(_) => { exit_watch = None; continue }
                    }
                }
                _ = &mut waiting, if !service_ended => {
                    service_ended = true;
                    match &process {
                        Some(process) => {
                            // stdout closed: the exit status, if it comes soon, tells more.
                            let grace = self.driver.settings().shutdown_grace;
                            let end = match tokio::time::timeout(grace, upstream::exited(&**process)).await {
                                Ok(end) => end,
                                Err(_) => { process.kill(); upstream::exited(&**process).await }
                            };
                            exited(end)
                        }
                        None => Input::Lost {
                            failure: Failure::new(FailureKind::ConnectionClosed, "the connection to the server closed"),
                            status: FailureStatus::Offline,
                        },
                    }
                }
                _ = async { tokio::time::sleep_until(credentials_at.expect("guarded")).await }, if credentials_at.is_some() => {
                    // Beside the supervisor, as an operator's check runs: its outcome comes
                    // back as a call's does (refused credentials: requires_reauth).
                    let slot = self.slot.clone();
                    let timeout = slot.config.effective_request_timeout(self.driver.settings());
                    tokio::spawn(async move {
                        let _ = crate::health::check(&slot, timeout).await;
                    });
                    credentials_at = credentials_every.map(|every| Instant::now() + every);
                    continue;
                }
                _ = async { tokio::time::sleep_until(relist_at.expect("guarded")).await }, if relist_at.is_some() => {
                    // The same refresh a list_changed starts: changes are announced, once.
                    let _ = self.signal_sender.send(UpstreamSignal::ListChanged { generation });
                    relist_at = relist_every.map(|every| Instant::now() + every);
                    continue;
                }
                _ = tokio::time::sleep_until(prober.next_at) => {
                    let probe = prober.probe(&self.slot.name, &peer).await;
                    match probe.failure {
                        // Credentials refused (an OAuth server's token was refreshed once first,
                        // by its HTTP client): not a health question; a sign-in, or new
                        // credentials, is what brings it back.
                        Some(refused) if refused.kind.is_auth() => {
                            let message = format!("a health probe: {}", refused.message);
                            Input::Lost { failure: Failure::new(refused.kind, message), status: FailureStatus::RequiresReauth }
                        }
                        failure => {
                            let error = failure.map(|failure| format!("health probe: {}", failure.message));
                            let step = self.feed_with(Input::Probed { succeeded: probe.succeeded, latency_ms: probe.latency_ms }, &StepContext { capabilities: None, error }, false);
                            match step.next {
                                Next::Serve { probe_in_ms, probe_timeout_ms } => prober.plan(probe_in_ms, probe_timeout_ms),
                                next => if let Some(phase) = phase(next) {
                                    break Ended { phase, polite: step.intentional() };
                                },
                            }
                            continue;
                        }
                    }
                }
                signal = self.signals.recv() => {
                    if let Some(UpstreamSignal::ListChanged { generation: from }) = signal {
                        if from == generation {
                            // Coalesce a burst of announcements (or recovery detections) into one refresh.
                            while self.signals.try_recv().is_ok() {}
                            // A refresh may be slow (a server that went away mid-refresh answers
                            // nothing until the request times out). Events keep arriving meanwhile:
                            // they are kept in order for after it, and a call's failure ends the
                            // refresh at once, so the connection's loss is acted on now, not after it.
                            let refreshing = refresh(&self.driver.announcer, &self.writer, &peer);
                            tokio::pin!(refreshing);
                            loop {
                                tokio::select! {
                                    _ = &mut refreshing => break,
                                    _ = self.shutdown.cancelled() => break,
                                    event = self.events.recv() => {
                                        let failed = matches!(event, Some(SlotEvent::CallFailed { .. } | SlotEvent::CallBroken { .. }) | None);
                                        deferred.push_back(event);
                                        if failed {
                                            break;
                                        }
                                    }
                                }
                            }
                        }
                    }
                    continue;
                }
                event = async {
                    match deferred.pop_front() {
                        Some(event) => event,
                        None => self.events.recv().await,
                    }
                } => match event {
                    None => break Ended { phase: Phase::Exit, polite: true },
                    Some(SlotEvent::CallFailed { generation: from, error, status, reply }) if from == generation => {
                        told = reply;
                        match &process {
                            // For a stdio server the process's exit is the real news: count it as a crash.
                            Some(process) => match tokio::time::timeout(Duration::from_millis(300), upstream::exited(&**process)).await {
                                Ok(end) => exited(end),
                                Err(_) => Input::Lost { failure: Failure::new(error.kind, error.message), status },
                            },
                            None => Input::Lost { failure: Failure::new(error.kind, error.message), status },
                        }
                    }
                    Some(SlotEvent::CallBroken { generation: from, error }) if from == generation => {
                        let failure = Failure::new(error.kind, error.message);
                        match &process {
                            // A stdio server's broken connection is its process's exit, a crash.
                            Some(process) => match tokio::time::timeout(Duration::from_millis(300), upstream::exited(&**process)).await {
                                Ok(end) => exited(end),
                                Err(_) => Input::Lost { failure, status: FailureStatus::Offline },
                            },
                            None => Input::Broken { failure },
                        }
                    }
                    Some(SlotEvent::Operator { action, reply }) => match self.operator(action, reply) {
                        Some(phase) => break Ended { phase, polite: true },
                        None => continue,
                    },
                    Some(SlotEvent::CallOutcome { generation: from, succeeded, latency_ms, error }) if from == generation => {
                        let step = self.feed_with(Input::Served { succeeded, latency_ms }, &StepContext { capabilities: None, error }, false);
                        match phase(step.next) {
                            Some(phase) => break Ended { phase, polite: false },
                            None => continue,
                        }
                    }
                    Some(_) => continue,
                },
            };
            let step = self.feed(input);
            if let Some(reply) = told {
                let _ = reply.send(self.machine.status().clone());
            }
            match step.next {
                Next::Serve {
                    probe_in_ms,
                    probe_timeout_ms,
                } => prober.plan(probe_in_ms, probe_timeout_ms),
                next => {
                    if let Some(phase) = phase(next) {
                        break Ended {
                            phase,
                            polite: step.intentional(),
                        };
                    }
                }
            }
        };

        self.writer.set_live(None);
        self.writer.set_pid(None);
        cancel.cancel();
        let grace = self.driver.settings().shutdown_grace;
        if !service_ended {
            let _ = tokio::time::timeout(grace, &mut waiting).await;
        }
        waiting.abort();
        if let Some(process) = process {
            if ended.polite {
                // Polite: stdin is closed; wait, SIGTERM, wait, SIGKILL the group.
                let kill_grace = self.driver.settings().kill_grace;
                process.shutdown(grace, kill_grace).await;
            } else {
                process.kill();
                upstream::exited(&*process).await;
            }
        }
        ended
    }
}

/// A base seed for the jitter of every recovery machine the gateway starts.
pub(crate) fn random_seed() -> u64 {
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

/// The seed of `server`'s machine for a gateway seeded with `seed`: servers that fail at
/// the same moment still draw different jitter.
pub fn server_seed(seed: u64, server: &str) -> u64 {
    server
        .bytes()
        .fold(seed ^ 0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
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

mod discovery;
mod probes;
mod subscriptions;

pub(crate) use discovery::discover;
use discovery::refresh;
use probes::Prober;

#[cfg(test)]
mod tests;

/// The machine's input for a process that ended, with what it said last as the reason.
fn exited(end: upstream::ProcessEnd) -> Input {
    let reason = (!end.last_words.is_empty())
        .then(|| crate::failure::exit_message(end.exit, &end.last_words));
    Input::Exited {
        exit: end.exit,
        reason,
    }
}
