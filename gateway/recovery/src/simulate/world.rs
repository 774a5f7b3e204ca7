//! The world around the recovery machine on simulated time: a server that is up, down,
//! slow, refusing credentials or crashing, and the tool calls that arrive.
//!
//! Why this file is long: the simulated server and the calls that meet it share the world's
//! clock and state, and a timeline line is written for each thing either does.
//!
//! Every decision is the [`Machine`]'s, and every call is a [`CallMachine`]'s; this module
//! only plays the mechanism, simplified: a connection attempt finishes at once, a probe at
//! once (or at its timeout on a slow server), and a call's outcome depends only on the
//! world at the moment it is sent.

use std::collections::BTreeMap;

use wardgate_policy::{
    CrashVerdict, ExitInfo, FailureKind, FailureStatus, HealthVerdict, Operation, Question,
    ReconnectVerdict, RecoveryPolicy, RetryVerdict, ServerContext, TransportKind,
};

use super::Journals;
use super::{describe_failure, format_delay, format_time, Entry, Script, Timeline};
use super::{Happening, WorldEvent};
use crate::call::{
    AttemptFailure, CallInput, CallMachine, CallNext, CallRecord, CallStep, Ending, Sight,
};
use crate::{
    Announcement, Decision, Failure, Input, Machine, Next, OperatorAction, Record, ServerStatus,
    Step,
};

/// The engine's default request timeout: a call gives up when a retry would pass it.
pub const REQUEST_TIMEOUT_MS: u64 = 60_000;
/// Bounds on a run, so a policy that loops with zero delays cannot hang the simulator.
const MAX_ENTRIES: usize = 5_000;
const MAX_STEPS: usize = 200_000;

/// How the server behaves right now.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Condition {
    Up,
    Down(FailureKind),
    Slow,
    AuthRejected(u16),
}

#[derive(Debug, Clone)]
enum Action {
    World(WorldEvent),
    RetryDue {
        token: u64,
    },
    Probe {
        generation: u64,
    },
    ProbeDone {
        generation: u64,
        succeeded: bool,
        latency_ms: u64,
        event: String,
        /// Refused credentials, with this HTTP status: the server needs a sign-in.
        refused: Option<u16>,
    },
    ProcessDies {
        generation: u64,
    },
    CallRetryDue {
        call: usize,
    },
    CallTimedOut {
        call: usize,
        generation: u64,
    },
    CallDeadline {
        call: usize,
    },
    End,
}

struct Call {
    fails_with: Option<(FailureKind, bool)>,
    machine: CallMachine,
}

/// Successes folded into one line, so a healthy stretch does not bury the failures.
#[derive(Default)]
struct Quiet {
    since_ms: u64,
    until_ms: u64,
    /// Indices of the calls that succeeded.
    calls: Vec<usize>,
    probes: u32,
    /// The status while they succeeded; the line may be written after it changed.
    status: String,
}

pub(super) struct World<'a> {
    policy: &'a dyn RecoveryPolicy,
    machine: Machine,
    now_ms: u64,
    condition: Condition,
    crash_loop: Option<(u64, ExitInfo)>,
    /// Time-ordered actions; the sequence number keeps equal times in scheduling order.
    queue: BTreeMap<(u64, u64), Action>,
    next_sequence: u64,
    /// Bumped by every new connection and every end of one: news of an older one is stale.
    generation: u64,
    /// A connection serves (a replaced one does not, while its status still says online).
    connected: bool,
    /// The pending wait's token; any later step that moves the server makes it stale.
    wait_token: u64,
    /// What the next connection attempt is, as the timeline says it ("reconnect #2").
    connect_why: String,
    /// The timeout of the probe plan last decided.
    probe_timeout: u64,
    calls: Vec<Call>,
    quiet: Quiet,
    entries: Vec<Entry>,
    /// Every input fed to the machine, and what followed.
    journal: Vec<Record>,
    /// Every step of a call's machine that did something.
    call_journal: Vec<CallRecord>,
}

/// How a status reads in a timeline: short, with the attempt number where there is one.
pub fn status_text(status: &ServerStatus) -> String {
    match status {
        ServerStatus::Online { degraded: true } => "online (degraded)".into(),
        ServerStatus::Restarting { attempt } => format!("restarting #{attempt}"),
        ServerStatus::Reconnecting { attempt, .. } => format!("reconnecting #{attempt}"),
        other => other.name().into(),
    }
}

impl<'a> World<'a> {
    pub(super) fn new(policy: &'a dyn RecoveryPolicy, server: &ServerContext, seed: u64) -> Self {
        World {
            policy,
            machine: Machine::new(server.clone(), true, seed),
            now_ms: 0,
            condition: Condition::Up,
            crash_loop: None,
            queue: BTreeMap::new(),
            next_sequence: 0,
            generation: 0,
            connected: false,
            wait_token: 0,
            connect_why: "start".into(),
            probe_timeout: 1,
            calls: Vec::new(),
            quiet: Quiet::default(),
            entries: Vec::new(),
            journal: Vec::new(),
            call_journal: Vec::new(),
        }
    }

    pub(super) fn run(mut self, script: &Script) -> (Timeline, Journals) {
        // World events at t=0 shape the first connection attempt, so they go first.
        let (at_start, later): (Vec<&Happening>, Vec<&Happening>) = script
            .events
            .iter()
            .partition(|happening| happening.at_ms == 0 && is_condition(&happening.event));
        for happening in at_start {
            self.world(happening.event.clone());
        }
        for happening in later {
            self.schedule(happening.at_ms, Action::World(happening.event.clone()));
        }
        self.feed(Input::Start, None);
        self.schedule(script.end_ms, Action::End);
        let mut truncated = true;
        for _ in 0..MAX_STEPS {
            let Some(((at_ms, _), action)) = self.queue.pop_first() else {
                truncated = false;
                break;
            };
            if self.entries.len() >= MAX_ENTRIES {
                break;
            }
            self.now_ms = at_ms;
            if matches!(action, Action::End) {
                truncated = false;
                break;
            }
            self.act(action);
        }
        self.flush_quiet();
        let timeline = Timeline {
            entries: self.entries,
            truncated,
        };
        let journals = Journals {
            machine: self.journal,
            calls: self.call_journal,
        };
        (timeline, journals)
    }

    fn schedule(&mut self, at_ms: u64, action: Action) {
        self.queue.insert((at_ms, self.next_sequence), action);
        self.next_sequence += 1;
    }

    /// `delay_ms` from now; saturating, since a module may answer with any `u64`.
    fn after(&self, delay_ms: u64) -> u64 {
        self.now_ms.saturating_add(delay_ms)
    }

    fn online(&self) -> bool {
        self.machine.status().is_online()
    }

    fn live(&self, generation: u64) -> bool {
        generation == self.generation && self.online()
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::World(event) => self.world(event),
            Action::RetryDue { token } if token == self.wait_token => {
                self.feed(Input::RetryDue, None);
            }
            Action::RetryDue { .. } | Action::End => {}
            Action::Probe { generation } if self.live(generation) => self.probe(generation),
            Action::ProbeDone {
                generation,
                succeeded,
                latency_ms,
                event,
                refused,
            } if self.live(generation) => {
                let input = match refused {
                    // As the gateway's prober: refused credentials are no health question.
                    Some(status) => {
                        let kind = FailureKind::HttpStatus(status);
                        Input::Lost {
                            failure: Failure::new(
                                kind.clone(),
                                format!("a health probe: {}", describe_failure(&kind)),
                            ),
                            status: FailureStatus::RequiresReauth,
                        }
                    }
                    None => {
                        if !succeeded {
                            self.machine
                                .note_failure(self.now_ms, format!("a health probe: {event}"));
                        }
                        Input::Probed {
                            succeeded,
                            latency_ms,
                        }
                    }
                };
                self.feed(input, Some(event));
            }
            Action::ProcessDies { generation } if self.live(generation) => {
                if let Some((_, exit)) = self.crash_loop {
                    self.feed(
                        Input::Exited { exit, reason: None },
                        Some(format!("process {exit}")),
                    );
                }
            }
            Action::Probe { .. } | Action::ProbeDone { .. } | Action::ProcessDies { .. } => {}
            Action::CallRetryDue { call } => {
                self.call_on(call, CallInput::RetryDue, None);
                let status = self.machine.status().clone();
                self.call_sees(call, &status);
            }
            Action::CallTimedOut { call, generation } => {
                let failure = AttemptFailure {
                    kind: FailureKind::TimedOut,
                    message: describe_failure(&FailureKind::TimedOut),
                    reached: true,
                };
                self.answered(call, Some(failure), generation);
            }
            Action::CallDeadline { call } => self.call_on(call, CallInput::DeadlinePassed, None),
        }
    }
}

impl World<'_> {
    /// Feed the machine one input and carry out its step; `event` (what happened, as the
    /// timeline says it) makes an entry with the decisions the policy made.
    fn feed(&mut self, input: Input, event: Option<String>) {
        let step = self.machine.on(self.now_ms, input.clone(), self.policy);
        let status = self.machine.status();
        self.journal
            .push(Record::new(self.now_ms, input, status, &step));
        if let Some(event) = event {
            let said = describe(&step);
            if said.text.is_empty() && is_quiet_probe(&step.decisions) {
                self.quiet_probe_ok();
            } else {
                self.record(event, said);
            }
        }
        if step.ends_connection() {
            self.generation += 1;
            self.connected = false;
        }
        if matches!(step.next, Next::Serve { .. }) {
            self.connected = true;
        }
        let seen: Vec<ServerStatus> = step
            .announcements
            .iter()
            .filter_map(|announcement| match announcement {
                Announcement::Status { to, .. } => Some(to.clone()),
                _ => None,
            })
            .collect();
        match step.next {
            Next::Continue => {}
            next => {
                // Whatever was pending is superseded by this step.
                self.wait_token += 1;
                match next {
                    Next::Wait { delay_ms } => {
                        self.connect_why = match step.decisions.last() {
                            Some(Decision::Crash { crashes, .. }) => format!("restart #{crashes}"),
                            Some(Decision::Reconnect { attempt, .. }) => {
                                format!("reconnect #{attempt}")
                            }
                            _ => "reconnect".into(),
                        };
                        let token = self.wait_token;
                        self.schedule(self.after(delay_ms), Action::RetryDue { token });
                    }
                    Next::Serve {
                        probe_in_ms,
                        probe_timeout_ms,
                    } => {
                        self.probe_timeout = probe_timeout_ms;
                        let generation = self.generation;
                        self.schedule(self.after(probe_in_ms), Action::Probe { generation });
                    }
                    _ => {}
                }
            }
        }
        // A call waiting in the gateway wakes at every step its server's supervisor
        // publishes, a step that changed no status included (a quiet replacement's).
        let seen = if seen.is_empty() {
            vec![self.machine.status().clone()]
        } else {
            seen
        };
        for status in seen {
            self.calls_see(&status);
        }
        if step.next == Next::Connect {
            self.connect();
        }
    }

    /// A connection attempt, finished at once as the world says.
    fn connect(&mut self) {
        let why = std::mem::take(&mut self.connect_why);
        let failure = match &self.condition {
            Condition::Up | Condition::Slow => None,
            Condition::Down(kind) => Some(kind.clone()),
            Condition::AuthRejected(status) => Some(FailureKind::HttpStatus(*status)),
        };
        match failure {
            None => {
                self.feed(Input::Initialized, None);
                self.generation += 1;
                let generation = self.generation;
                if self.machine.server().transport == TransportKind::Stdio {
                    if let Some((every_ms, _)) = self.crash_loop {
                        self.schedule(self.after(every_ms), Action::ProcessDies { generation });
                    }
                }
                self.feed(Input::Ready, Some(format!("{why}: connected")));
            }
            Some(kind) => {
                let text = describe_failure(&kind);
                self.feed(
                    Input::ConnectFailed(Failure::new(kind, text.clone())),
                    Some(format!("{why}: {text}")),
                );
            }
        }
    }
}

/// A timeline line's decision column: what the policy decided, in words, the delay it
/// chose, and the questions it was asked.
struct Said {
    text: String,
    delay_ms: Option<u64>,
    asked: Vec<Question>,
}

impl Said {
    fn nothing() -> Said {
        Said {
            text: String::new(),
            delay_ms: None,
            asked: Vec::new(),
        }
    }
}

/// The decisions of a step as the timeline's decision column says them.
fn describe(step: &Step) -> Said {
    let mut parts = Vec::new();
    let mut delay = None;
    let restored = step.announcements.contains(&Announcement::HealthRestored);
    let newly_degraded = step
        .announcements
        .iter()
        .any(|announcement| matches!(announcement, Announcement::HealthDegraded { .. }));
    for decision in &step.decisions {
        match decision {
            Decision::Reconnect { verdict, .. } => match verdict {
                ReconnectVerdict::RetryAfter { delay_ms } => {
                    parts.push(format!("reconnect in {}", format_delay(*delay_ms)));
                    delay = Some(*delay_ms);
                }
                ReconnectVerdict::Stop => {
                    parts.push("stop reconnecting → permanently_failed".into())
                }
            },
            Decision::Crash { verdict, .. } => match verdict {
                CrashVerdict::RestartAfter { delay_ms: 0 } => {
                    parts.push("restart now".into());
                    delay = Some(0);
                }
                CrashVerdict::RestartAfter { delay_ms } => {
                    parts.push(format!("restart in {}", format_delay(*delay_ms)));
                    delay = Some(*delay_ms);
                }
                CrashVerdict::GiveUp => parts.push("give up → permanently_failed".into()),
            },
            Decision::FirstProbe { interval_ms, .. } => {
                parts.push(format!("first probe in {}", format_delay(*interval_ms)));
                delay = Some(*interval_ms);
            }
            Decision::Health {
                outcome,
                verdict,
                next_probe_ms,
            } => {
                let next = match next_probe_ms {
                    Some(ms) => format!("; next probe in {}", format_delay(*ms)),
                    None => String::new(),
                };
                match verdict {
                    HealthVerdict::Healthy if restored => {
                        parts.push(format!("healthy again{next}"));
                        delay = *next_probe_ms;
                    }
                    // A plain success: folded into the quiet line.
                    HealthVerdict::Healthy if outcome.succeeded => {}
                    HealthVerdict::Healthy => {
                        parts.push(format!("healthy{next}"));
                        delay = *next_probe_ms;
                    }
                    HealthVerdict::Degraded => {
                        let verdict = if newly_degraded {
                            "degraded"
                        } else {
                            "still degraded"
                        };
                        parts.push(format!("{verdict}{next}"));
                        delay = *next_probe_ms;
                    }
                    HealthVerdict::Unhealthy => {
                        parts.push("unhealthy → error, connection dropped".into())
                    }
                }
            }
            Decision::AwaitOperator => parts.push("wait for an operator".into()),
        }
    }
    Said {
        text: parts.join("; "),
        delay_ms: delay,
        asked: step
            .decisions
            .iter()
            .flat_map(|decision| decision.questions().iter().copied())
            .collect(),
    }
}

/// A world event that sets the server's condition (rather than acting on a connection).
fn is_condition(event: &WorldEvent) -> bool {
    matches!(
        event,
        WorldEvent::Up
            | WorldEvent::Down { .. }
            | WorldEvent::Slow
            | WorldEvent::AuthRejected { .. }
            | WorldEvent::CrashLoop { .. }
    )
}

/// A healthy probe that changed nothing: folded into the quiet line.
fn is_quiet_probe(decisions: &[Decision]) -> bool {
    matches!(
        decisions,
        [Decision::Health {
            outcome,
            verdict: HealthVerdict::Healthy,
            ..
        }] if outcome.succeeded
    )
}

impl World<'_> {
    fn world(&mut self, event: WorldEvent) {
        match event {
            WorldEvent::Up => {
                self.condition = Condition::Up;
                self.crash_loop = None;
                self.record("server is healthy again", Said::nothing());
            }
            WorldEvent::Down { kind } => {
                let event = format!("server goes down ({})", describe_failure(&kind));
                self.record(event, Said::nothing());
                self.condition = Condition::Down(kind);
            }
            WorldEvent::Slow => {
                self.condition = Condition::Slow;
                let event = "server turns slow: calls and probes time out";
                self.record(event, Said::nothing());
            }
            WorldEvent::AuthRejected { status } => {
                self.condition = Condition::AuthRejected(status);
                let event = format!("credentials rejected (HTTP {status})");
                self.record(event, Said::nothing());
            }
            WorldEvent::Crash { exit } => {
                let stdio = self.machine.server().transport == TransportKind::Stdio;
                match (stdio, self.online()) {
                    (true, true) => self.feed(
                        Input::Exited { exit, reason: None },
                        Some(format!("process {exit}")),
                    ),
                    (false, true) => {
                        let failure =
                            Failure::new(FailureKind::ConnectionClosed, "connection closed");
                        let lost = Input::Lost {
                            failure,
                            status: FailureStatus::Offline,
                        };
                        let event = format!("server process {exit}: connection closed");
                        self.feed(lost, Some(event));
                    }
                    _ => {
                        let event = format!("crash ({exit}) while no process runs");
                        self.record(event, Said::nothing());
                    }
                }
            }
            WorldEvent::CrashLoop { every_ms, exit } => {
                self.crash_loop = Some((every_ms, exit));
                let event = format!(
                    "server starts crashing {} after each start",
                    format_delay(every_ms)
                );
                self.record(event, Said::nothing());
                if self.online() {
                    let generation = self.generation;
                    self.schedule(self.after(every_ms), Action::ProcessDies { generation });
                }
            }
            WorldEvent::Call { hints, fails_with } => {
                let machine =
                    CallMachine::call(Operation::Call, hints, self.now_ms, REQUEST_TIMEOUT_MS);
                let deadline = machine.deadline_ms();
                self.calls.push(Call {
                    fails_with,
                    machine,
                });
                let call = self.calls.len() - 1;
                self.schedule(deadline, Action::CallDeadline { call });
                let status = self.machine.status().clone();
                self.call_sees(call, &status);
            }
            WorldEvent::OperatorReconnect => {
                self.connect_why = "operator reconnect".into();
                let event = "operator runs `wardgate reconnect`".to_owned();
                self.feed(Input::Operator(OperatorAction::Reconnect), Some(event));
            }
        }
    }

    /// A probe's outcome is the world's when it is sent; one that times out reports at its
    /// deadline (even if the server recovers meanwhile), any other outcome at once.
    fn probe(&mut self, generation: u64) {
        let timeout_ms = self.probe_timeout;
        let (succeeded, latency_ms, event) = match &self.condition {
            Condition::Up => (true, 0, "probe ok".to_owned()),
            Condition::Slow => (
                false,
                timeout_ms,
                format!("probe timed out after {}", format_delay(timeout_ms)),
            ),
            Condition::Down(kind) => (
                false,
                0,
                format!("probe failed: {}", describe_failure(kind)),
            ),
            Condition::AuthRejected(status) => (false, 0, format!("probe failed: HTTP {status}")),
        };
        let refused = match self.condition {
            Condition::AuthRejected(status) => Some(status),
            _ => None,
        };
        let done = Action::ProbeDone {
            generation,
            succeeded,
            latency_ms,
            event,
            refused,
        };
        self.schedule(self.after(latency_ms), done);
    }

    /// Every waiting call sees a status the server passed through.
    fn calls_see(&mut self, status: &ServerStatus) {
        for call in 0..self.calls.len() {
            if self.calls[call].machine.is_waiting() {
                self.call_sees(call, status);
            }
        }
    }

    fn call_sees(&mut self, call: usize, status: &ServerStatus) {
        let view = self.machine.view();
        let last_failure = view
            .last_failure
            .map(|kind| Failure::new(kind.clone(), describe_failure(&kind)));
        let sight = Sight {
            status,
            live: status.is_online() && self.connected,
            attempts_finished: view.attempts_finished,
            last_failure: last_failure.as_ref(),
        };
        self.call_on(call, CallInput::Seen(sight), None);
    }

    /// Feed call `call`'s machine, and carry out its step as the router does. `sent`: the
    /// connection the attempt went out on, and how long it took, for an answer.
    fn call_on(&mut self, call: usize, input: CallInput<'_>, sent: Option<(u64, u64)>) {
        let server = self.machine.server().clone();
        let seen = match &input {
            CallInput::Seen(sight) => sight.status.clone(),
            _ => self.machine.status().clone(),
        };
        let step = self.calls[call]
            .machine
            .on(self.now_ms, input, self.policy, &server);
        let number = call as u64 + 1;
        let record = CallRecord::of(self.now_ms, number, &self.calls[call].machine, &step);
        self.call_journal.extend(record);
        let number = call + 1;
        let CallStep {
            next,
            evidence,
            tell,
            replace,
            judged,
        } = step;
        match next {
            CallNext::Watch => {}
            CallNext::Wake => {
                self.connect_why = format!("tool call #{number} wakes the reconnect");
                self.feed(Input::WakeUp, None);
            }
            CallNext::Send => self.send(call),
            CallNext::Succeeded => self.quiet_call_ok(call),
            CallNext::Fail(Ending::Refused) => {
                let event = format!(
                    "tool call #{number} fails at once: server is {}",
                    status_text(&seen)
                );
                self.record(event, Said::nothing());
            }
            CallNext::Fail(Ending::NotOnlineInTime) => {
                let event = format!(
                    "tool call #{number} fails: not online within {}",
                    format_delay(REQUEST_TIMEOUT_MS)
                );
                self.record(event, Said::nothing());
            }
            CallNext::Sleep { delay_ms } => {
                self.judged(
                    call,
                    judged.as_ref(),
                    format!("retry in {}", format_delay(delay_ms)),
                    Some(delay_ms),
                );
                self.schedule(self.after(delay_ms), Action::CallRetryDue { call });
            }
            CallNext::Fail(Ending::GaveUp {
                status,
                past_deadline,
            }) => {
                let (decision, delay) = match judged.as_ref().map(|(_, verdict)| *verdict) {
                    Some(RetryVerdict::RetryAfter { delay_ms }) if past_deadline => (
                        format!(
                            "retry in {} passes the deadline → give up",
                            format_delay(delay_ms)
                        ),
                        Some(delay_ms),
                    ),
                    _ => (format!("give up → {}", status.as_str()), None),
                };
                self.judged(call, judged.as_ref(), decision, delay);
            }
        }
        // What the router tells the supervisor about the connection the attempt went out
        // on: news of its health (a failure it survives), or that it is unusable.
        let Some((generation, latency_ms)) = sent else {
            return;
        };
        if let Some(succeeded) = evidence {
            if self.live(generation) {
                let event = match &judged {
                    None => "a call succeeds".to_owned(),
                    Some((failure, _)) => {
                        let words = describe_failure(&failure.kind);
                        self.machine
                            .note_failure(self.now_ms, format!("a call: {words}"));
                        format!("a call fails: {words}")
                    }
                };
                let served = Input::Served {
                    succeeded,
                    latency_ms,
                };
                self.feed(served, Some(event));
            }
        }
        if let (Some(status), Some((failure, _))) = (tell, &judged) {
            if self.live(generation) {
                self.tell_supervisor(&failure.kind, status);
            }
        }
        if let (true, Some((failure, _))) = (replace, &judged) {
            if self.live(generation) {
                self.replace_connection(&failure.kind);
            }
        }
    }

    /// A timeline line for a failed attempt and what the policy made of it.
    fn judged(
        &mut self,
        call: usize,
        judged: Option<&(AttemptFailure, RetryVerdict)>,
        decision: String,
        delay_ms: Option<u64>,
    ) {
        let attempt = self.calls[call].machine.attempt();
        let kind = judged.map_or(FailureKind::ConnectRefused, |(failure, _)| {
            failure.kind.clone()
        });
        let event = format!(
            "tool call #{} (attempt {attempt}): {}",
            call + 1,
            describe_failure(&kind)
        );
        let asked = match judged {
            Some(_) => vec![Question::Classify],
            None => Vec::new(),
        };
        self.record(
            event,
            Said {
                text: decision,
                delay_ms,
                asked,
            },
        );
    }

    /// The attempt's request goes out; its outcome is the world's at this moment.
    fn send(&mut self, call: usize) {
        let forced = if self.calls[call].machine.attempt() == 1 {
            self.calls[call].fails_with.clone()
        } else {
            None
        };
        let outcome = forced.or_else(|| match &self.condition {
            Condition::Up => None,
            Condition::Down(kind) => {
                let reached = !matches!(kind, FailureKind::ConnectRefused | FailureKind::Dns);
                Some((kind.clone(), reached))
            }
            Condition::Slow => Some((FailureKind::TimedOut, true)),
            Condition::AuthRejected(status) => Some((FailureKind::HttpStatus(*status), true)),
        });
        let generation = self.generation;
        match outcome {
            None => self.answered(call, None, generation),
            // A timeout is known only when the per-request timeout runs out.
            Some((FailureKind::TimedOut, _)) => {
                let timed_out = Action::CallTimedOut { call, generation };
                self.schedule(self.after(REQUEST_TIMEOUT_MS), timed_out);
            }
            Some((kind, reached)) => {
                let failure = AttemptFailure {
                    message: describe_failure(&kind),
                    kind,
                    reached,
                };
                self.answered(call, Some(failure), generation);
            }
        }
    }

    /// The attempt's request came back on connection `generation`.
    fn answered(&mut self, call: usize, failure: Option<AttemptFailure>, generation: u64) {
        let latency_ms = match &failure {
            Some(failure) if failure.kind == FailureKind::TimedOut => REQUEST_TIMEOUT_MS,
            _ => 0,
        };
        let failures_counted = self.machine.view().failures_counted(self.machine.status());
        let answered = CallInput::Answered {
            failure,
            failures_counted,
        };
        self.call_on(call, answered, Some((generation, latency_ms)));
    }

    /// A call that will retry found the connection unusable: an HTTP server's is replaced
    /// without telling clients; a stdio server's process exit is a crash, as ever.
    fn replace_connection(&mut self, kind: &FailureKind) {
        if self.machine.server().transport == TransportKind::Stdio {
            return self.tell_supervisor(kind, FailureStatus::Offline);
        }
        let broken = Input::Broken {
            failure: Failure::new(kind.clone(), describe_failure(kind)),
        };
        self.connect_why = "the quiet replacement".into();
        let event = format!("connection unusable ({})", describe_failure(kind));
        self.feed(broken, Some(event));
    }

    /// The supervisor hears that the connection is unusable; for a stdio server whose
    /// process exited, that exit is the real news and counts as a crash.
    fn tell_supervisor(&mut self, kind: &FailureKind, status: FailureStatus) {
        let stdio = self.machine.server().transport == TransportKind::Stdio;
        let input = match kind {
            FailureKind::ProcessExited { code, signal } if stdio => Input::Exited {
                exit: ExitInfo {
                    code: *code,
                    signal: *signal,
                },
                reason: None,
            },
            _ => Input::Lost {
                failure: Failure::new(kind.clone(), describe_failure(kind)),
                status,
            },
        };
        let event = format!("connection unusable ({})", describe_failure(kind));
        self.feed(input, Some(event));
    }

    fn record(&mut self, event: impl Into<String>, said: Said) {
        self.flush_quiet();
        self.entries.push(Entry {
            at_ms: self.now_ms,
            event: event.into(),
            decision: said.text,
            delay_ms: said.delay_ms,
            asked: said.asked,
            status: status_text(self.machine.status()),
        });
    }

    fn flush_quiet(&mut self) {
        let quiet = std::mem::take(&mut self.quiet);
        let mut parts = Vec::new();
        let (first, last) = (quiet.calls.iter().min(), quiet.calls.iter().max());
        match (quiet.calls.len(), first, last) {
            (0, ..) => {}
            (1, Some(call), _) => parts.push(format!("tool call #{} ok", call + 1)),
            (n, Some(first), Some(last)) => {
                parts.push(format!("{n} tool calls ok (#{}–#{})", first + 1, last + 1))
            }
            _ => {}
        }
        match quiet.probes {
            0 => {}
            1 => parts.push("probe ok".into()),
            n => parts.push(format!("{n} probes ok")),
        }
        if quiet.until_ms > quiet.since_ms {
            parts.push(format!("until {}", format_time(quiet.until_ms)));
        }
        if !parts.is_empty() {
            self.entries.push(Entry {
                at_ms: quiet.since_ms,
                event: parts.join(", "),
                decision: String::new(),
                delay_ms: None,
                asked: Vec::new(),
                status: quiet.status,
            });
        }
    }

    fn quiet_call_ok(&mut self, call: usize) {
        self.quiet_now();
        self.quiet.calls.push(call);
    }

    fn quiet_probe_ok(&mut self) {
        self.quiet_now();
        self.quiet.probes += 1;
    }

    fn quiet_now(&mut self) {
        if self.quiet.calls.is_empty() && self.quiet.probes == 0 {
            self.quiet.since_ms = self.now_ms;
        }
        self.quiet.until_ms = self.now_ms;
        self.quiet.status = status_text(self.machine.status());
    }
}
