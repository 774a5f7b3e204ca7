//! A small model of the engine's supervisor and router on simulated time: when it asks the policy what, and what status follows.
//!
//! It mirrors `wardgate-engine` decision for decision (attempt numbers, the request
//! deadline, wake-ups by calls, probe counters, the crash history of the last hour) but
//! simplifies the mechanism: connecting is instant, a call's outcome depends only on the
//! world at the moment it is sent, and statuses are set directly rather than through the
//! engine's `lifecycle::transition`, which remains the authority.

use std::collections::BTreeMap;

use wardgate_policy::{
    CrashReport, CrashVerdict, ExitInfo, FailedRequest, FailureKind, FailureStatus, HealthVerdict,
    Operation, ProbeOutcome, ReconnectVerdict, RecoveryPolicy, RetryVerdict, ServerContext,
    TransportKind,
};

use super::{describe_failure, format_delay, CallHints, Entry, Script, Timeline, WorldEvent};

/// The engine's default request timeout: a call gives up when a retry would pass it.
const REQUEST_TIMEOUT_MS: u64 = 60_000;
/// The engine shows policies the crashes of the last hour only.
const CRASH_MEMORY_MS: u64 = 3_600_000;
/// The engine's floors on a probe plan.
const MIN_PROBE_INTERVAL_MS: u64 = 10;
/// Bounds on a run, so a policy that loops with zero delays cannot hang the simulator.
const MAX_ENTRIES: usize = 5_000;
const MAX_STEPS: usize = 200_000;

/// What the model believes the server's status is; names as in the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Connecting,
    Online { degraded: bool },
    Restarting { attempt: u32 },
    Reconnecting { attempt: u32 },
    Failed(FailureStatus),
    PermanentlyFailed,
}

impl Status {
    fn text(self) -> String {
        match self {
            Status::Connecting => "connecting".into(),
            Status::Online { degraded: false } => "online".into(),
            Status::Online { degraded: true } => "online (degraded)".into(),
            Status::Restarting { attempt } => format!("restarting #{attempt}"),
            Status::Reconnecting { attempt } => format!("reconnecting #{attempt}"),
            Status::Failed(status) => status.as_str().into(),
            Status::PermanentlyFailed => "permanently_failed".into(),
        }
    }

    /// A call fails at once: only an operator changes these.
    fn refuses_calls(self) -> bool {
        matches!(
            self,
            Status::Failed(FailureStatus::RequiresReauth) | Status::PermanentlyFailed
        )
    }
}

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
    Connect {
        token: u64,
        why: String,
    },
    Probe {
        generation: u64,
    },
    ProbeDone {
        generation: u64,
        latency_ms: u64,
    },
    ProcessDies {
        generation: u64,
    },
    CallAttempt {
        call: usize,
        attempt: u32,
    },
    CallTimedOut {
        call: usize,
        attempt: u32,
        generation: u64,
    },
    CallDeadline {
        call: usize,
    },
    End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallState {
    Waiting { attempt: u32 },
    Busy,
    Done,
}

struct Call {
    hints: CallHints,
    fails_with: Option<(FailureKind, bool)>,
    deadline_ms: u64,
    state: CallState,
}

/// Successes folded into one line, so a healthy stretch does not bury the failures.
#[derive(Default)]
struct Quiet {
    since_ms: u64,
    calls: Vec<usize>,
    probes: u32,
}

pub(super) struct Model<'a> {
    policy: &'a dyn RecoveryPolicy,
    server: &'a ServerContext,
    seed: u64,
    now_ms: u64,
    status: Status,
    condition: Condition,
    crash_loop: Option<(u64, ExitInfo)>,
    /// Time-ordered actions; the sequence number keeps equal times in scheduling order.
    queue: BTreeMap<(u64, u64), Action>,
    next_sequence: u64,
    /// Bumped by every new connection and every loss: news of an older one is stale.
    generation: u64,
    /// The pending reconnect's token; connecting early (a call's wake-up) makes it stale.
    connect_token: u64,
    reconnect_attempt: u32,
    crashes_ms: Vec<u64>,
    process_started_ms: Option<u64>,
    probe_timeout_ms: u64,
    consecutive_failures: u32,
    consecutive_successes: u32,
    calls: Vec<Call>,
    quiet: Quiet,
    entries: Vec<Entry>,
}

/// The jitter seed of the `n`-th decision at `now_ms`: reproducible for a given `--seed`.
pub(super) fn jitter_seed(seed: u64, now_ms: u64, n: u64) -> u64 {
    let mut z = seed ^ now_ms.rotate_left(24) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Failures after which the router reports the connection unusable even while retrying.
fn breaks_connection(kind: &FailureKind) -> bool {
    kind.is_connection_class() && *kind != FailureKind::TimedOut
}

impl<'a> Model<'a> {
    pub(super) fn new(
        policy: &'a dyn RecoveryPolicy,
        server: &'a ServerContext,
        seed: u64,
    ) -> Self {
        Model {
            policy,
            server,
            seed,
            now_ms: 0,
            status: Status::Connecting,
            condition: Condition::Up,
            crash_loop: None,
            queue: BTreeMap::new(),
            next_sequence: 0,
            generation: 0,
            connect_token: 0,
            reconnect_attempt: 0,
            crashes_ms: Vec::new(),
            process_started_ms: None,
            probe_timeout_ms: 1,
            consecutive_failures: 0,
            consecutive_successes: 0,
            calls: Vec::new(),
            quiet: Quiet::default(),
            entries: Vec::new(),
        }
    }

    pub(super) fn run(mut self, script: &Script) -> Timeline {
        // World events first: one at t=0 shapes the first connection attempt.
        for happening in &script.events {
            self.schedule(happening.at_ms, Action::World(happening.event.clone()));
        }
        self.schedule(
            0,
            Action::Connect {
                token: 0,
                why: "start".into(),
            },
        );
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
            self.step(action);
            self.settle_waiting_calls();
        }
        self.flush_quiet();
        Timeline {
            entries: self.entries,
            truncated,
        }
    }

    fn schedule(&mut self, at_ms: u64, action: Action) {
        self.queue.insert((at_ms, self.next_sequence), action);
        self.next_sequence += 1;
    }

    fn seed(&self, n: u64) -> u64 {
        jitter_seed(self.seed, self.now_ms, n)
    }

    fn record(
        &mut self,
        event: impl Into<String>,
        decision: impl Into<String>,
        delay_ms: Option<u64>,
    ) {
        self.flush_quiet();
        self.entries.push(Entry {
            at_ms: self.now_ms,
            event: event.into(),
            decision: decision.into(),
            delay_ms,
            status: self.status.text(),
        });
    }

    fn flush_quiet(&mut self) {
        let quiet = std::mem::take(&mut self.quiet);
        let mut parts = Vec::new();
        match quiet.calls.as_slice() {
            [] => {}
            [only] => parts.push(format!("tool call #{} ok", only + 1)),
            [first, .., last] => parts.push(format!("tool calls #{}–#{} ok", first + 1, last + 1)),
        }
        match quiet.probes {
            0 => {}
            1 => parts.push("probe ok".into()),
            n => parts.push(format!("{n} probes ok")),
        }
        if !parts.is_empty() {
            self.entries.push(Entry {
                at_ms: quiet.since_ms,
                event: parts.join(", "),
                decision: String::new(),
                delay_ms: None,
                status: self.status.text(),
            });
        }
    }

    fn quiet_since_now(&mut self) {
        if self.quiet.calls.is_empty() && self.quiet.probes == 0 {
            self.quiet.since_ms = self.now_ms;
        }
    }

    fn live(&self, generation: u64) -> bool {
        generation == self.generation && matches!(self.status, Status::Online { .. })
    }

    fn step(&mut self, action: Action) {
        match action {
            Action::World(event) => self.world(event),
            Action::Connect { token, why } if token == self.connect_token => self.connect(&why),
            Action::Connect { .. } | Action::End => {}
            Action::Probe { generation } if self.live(generation) => self.probe(generation),
            Action::ProbeDone {
                generation,
                latency_ms,
            } if self.live(generation) => self.probe_done(generation, latency_ms),
            Action::ProcessDies { generation } if self.live(generation) => {
                if let Some((_, exit)) = self.crash_loop {
                    self.crashed(exit);
                }
            }
            Action::Probe { .. } | Action::ProbeDone { .. } | Action::ProcessDies { .. } => {}
            Action::CallAttempt { call, attempt } => self.call_attempt(call, attempt),
            Action::CallTimedOut {
                call,
                attempt,
                generation,
            } => self.call_failed(call, attempt, FailureKind::TimedOut, true, generation),
            Action::CallDeadline { call } => {
                if let CallState::Waiting { .. } = self.calls[call].state {
                    self.calls[call].state = CallState::Done;
                    let status = self.status.text();
                    self.record(
                        format!("tool call #{} still waiting", call + 1),
                        format!(
                            "fails: server still {status} after {}",
                            format_delay(REQUEST_TIMEOUT_MS)
                        ),
                        None,
                    );
                }
            }
        }
    }

    fn world(&mut self, event: WorldEvent) {
        match event {
            WorldEvent::Up => {
                self.condition = Condition::Up;
                self.crash_loop = None;
                self.record("server is healthy again", "", None);
            }
            WorldEvent::Down { kind } => {
                self.record(
                    format!("server goes down ({})", describe_failure(&kind)),
                    "",
                    None,
                );
                self.condition = Condition::Down(kind);
            }
            WorldEvent::Slow => {
                self.condition = Condition::Slow;
                self.record("server turns slow: calls and probes time out", "", None);
            }
            WorldEvent::AuthRejected { status } => {
                self.condition = Condition::AuthRejected(status);
                self.record(
                    format!("server starts rejecting the credentials (HTTP {status})"),
                    "",
                    None,
                );
            }
            WorldEvent::Crash { exit } => match (self.server.transport, self.status) {
                (TransportKind::Stdio, Status::Online { .. }) => self.crashed(exit),
                (_, Status::Online { .. }) => {
                    self.record(format!("server process {exit}"), "", None);
                    self.connection_lost(FailureStatus::Offline, "connection closed");
                }
                _ => self.record(format!("crash ({exit}) while no process runs"), "", None),
            },
            WorldEvent::CrashLoop { every_ms, exit } => {
                self.crash_loop = Some((every_ms, exit));
                self.record(
                    format!(
                        "server starts crashing {} after each start",
                        format_delay(every_ms)
                    ),
                    "",
                    None,
                );
                if matches!(self.status, Status::Online { .. }) {
                    let generation = self.generation;
                    self.schedule(self.now_ms + every_ms, Action::ProcessDies { generation });
                }
            }
            WorldEvent::Call { hints, fails_with } => {
                self.calls.push(Call {
                    hints,
                    fails_with,
                    deadline_ms: self.now_ms + REQUEST_TIMEOUT_MS,
                    state: CallState::Busy,
                });
                let call = self.calls.len() - 1;
                self.schedule(
                    self.now_ms + REQUEST_TIMEOUT_MS,
                    Action::CallDeadline { call },
                );
                self.call_attempt(call, 1);
            }
            WorldEvent::OperatorReconnect => {
                // Like the engine: the old connection closes, backoff and crash budget reset.
                self.generation += 1;
                self.reconnect_attempt = 0;
                self.crashes_ms.clear();
                self.record("operator runs `wardgate reconnect`", "", None);
                self.connect("operator reconnect");
            }
        }
    }

    fn connect(&mut self, why: &str) {
        // Any scheduled reconnect is superseded by this attempt.
        self.connect_token += 1;
        let failure = match &self.condition {
            Condition::Up | Condition::Slow => None,
            Condition::Down(kind) => Some(kind.clone()),
            Condition::AuthRejected(status) => Some(FailureKind::HttpStatus(*status)),
        };
        let Some(kind) = failure else {
            self.generation += 1;
            self.status = Status::Online { degraded: false };
            self.reconnect_attempt = 0;
            self.consecutive_failures = 0;
            self.consecutive_successes = 0;
            let generation = self.generation;
            if self.server.transport == TransportKind::Stdio {
                self.process_started_ms = Some(self.now_ms);
                if let Some((every_ms, _)) = self.crash_loop {
                    self.schedule(self.now_ms + every_ms, Action::ProcessDies { generation });
                }
            }
            let plan = self.policy.probe_schedule(self.server, self.seed(1));
            self.probe_timeout_ms = plan.timeout_ms.max(1);
            let interval_ms = plan.interval_ms.max(MIN_PROBE_INTERVAL_MS);
            self.schedule(self.now_ms + interval_ms, Action::Probe { generation });
            self.record(
                format!("{why}: connected"),
                format!("first probe in {}", format_delay(interval_ms)),
                Some(interval_ms),
            );
            return;
        };
        // The engine decides this status itself; the policy only picks the reconnect delay.
        let status = if kind.is_auth() {
            FailureStatus::RequiresReauth
        } else if kind.is_connection_class() {
            FailureStatus::Offline
        } else {
            FailureStatus::Error
        };
        self.status = Status::Failed(status);
        let (decision, delay_ms) = self.schedule_reconnect(status);
        self.record(
            format!("{why}: {}", describe_failure(&kind)),
            decision,
            delay_ms,
        );
    }

    /// The supervisor's `schedule_reconnect`: ask for the next delay, or park.
    fn schedule_reconnect(&mut self, status: FailureStatus) -> (String, Option<u64>) {
        if status == FailureStatus::RequiresReauth {
            self.status = Status::Failed(status);
            return (
                "wait for an operator (no retry on auth failures)".into(),
                None,
            );
        }
        self.reconnect_attempt += 1;
        let attempt = self.reconnect_attempt;
        match self
            .policy
            .reconnect_delay(self.server, attempt, self.seed(2))
        {
            ReconnectVerdict::RetryAfter { delay_ms } => {
                self.status = Status::Reconnecting { attempt };
                self.connect_token += 1;
                let (token, why) = (self.connect_token, format!("reconnect #{attempt}"));
                self.schedule(self.now_ms + delay_ms, Action::Connect { token, why });
                (
                    format!("reconnect in {}", format_delay(delay_ms)),
                    Some(delay_ms),
                )
            }
            ReconnectVerdict::Stop => {
                self.status = Status::PermanentlyFailed;
                ("stop reconnecting → permanently_failed".into(), None)
            }
        }
    }

    fn connection_lost(&mut self, status: FailureStatus, reason: &str) {
        self.generation += 1;
        self.process_started_ms = None;
        self.status = Status::Failed(status);
        let (decision, delay_ms) = self.schedule_reconnect(status);
        self.record(format!("connection lost ({reason})"), decision, delay_ms);
    }

    fn crashed(&mut self, exit: ExitInfo) {
        let report = CrashReport {
            exit,
            uptime_ms: self.now_ms - self.process_started_ms.unwrap_or(self.now_ms),
            now_ms: self.now_ms,
            recent_crashes_ms: self.crashes_ms.clone(),
        };
        self.crashes_ms.push(self.now_ms);
        let now_ms = self.now_ms;
        self.crashes_ms.retain(|&at| now_ms - at < CRASH_MEMORY_MS);
        let crashes = self.crashes_ms.len() as u32;
        self.generation += 1;
        self.process_started_ms = None;
        match self.policy.crash(self.server, &report) {
            CrashVerdict::RestartAfter { delay_ms } => {
                self.status = Status::Restarting { attempt: crashes };
                self.connect_token += 1;
                let (token, why) = (self.connect_token, format!("restart #{crashes}"));
                self.schedule(self.now_ms + delay_ms, Action::Connect { token, why });
                let decision = match delay_ms {
                    0 => "restart now".into(),
                    _ => format!("restart in {}", format_delay(delay_ms)),
                };
                self.record(format!("process {exit}"), decision, Some(delay_ms));
            }
            CrashVerdict::GiveUp => {
                self.status = Status::PermanentlyFailed;
                self.record(
                    format!("process {exit}"),
                    "give up → permanently_failed",
                    None,
                );
            }
        }
    }

    fn probe(&mut self, generation: u64) {
        // A probe that times out reports at its deadline; any other outcome at once.
        let latency_ms = match self.condition {
            Condition::Slow => self.probe_timeout_ms,
            _ => 0,
        };
        self.schedule(
            self.now_ms + latency_ms,
            Action::ProbeDone {
                generation,
                latency_ms,
            },
        );
    }

    fn probe_done(&mut self, generation: u64, latency_ms: u64) {
        let (succeeded, what) = match &self.condition {
            Condition::Up => (true, "probe ok".to_string()),
            Condition::Slow => (
                false,
                format!("probe timed out after {}", format_delay(latency_ms)),
            ),
            Condition::Down(kind) => (false, format!("probe failed: {}", describe_failure(kind))),
            Condition::AuthRejected(status) => (false, format!("probe failed: HTTP {status}")),
        };
        if succeeded {
            self.consecutive_successes += 1;
            self.consecutive_failures = 0;
        } else {
            self.consecutive_failures += 1;
            self.consecutive_successes = 0;
        }
        let probe = ProbeOutcome {
            succeeded,
            latency_ms,
            consecutive_failures: self.consecutive_failures,
            consecutive_successes: self.consecutive_successes,
        };
        let plan = self.policy.probe_schedule(self.server, self.seed(3));
        self.probe_timeout_ms = plan.timeout_ms.max(1);
        let interval_ms = plan.interval_ms.max(MIN_PROBE_INTERVAL_MS);
        self.schedule(self.now_ms + interval_ms, Action::Probe { generation });
        let next = format!("next probe in {}", format_delay(interval_ms));
        let degraded = matches!(self.status, Status::Online { degraded: true });
        match self.policy.health(self.server, &probe) {
            HealthVerdict::Healthy if degraded => {
                self.status = Status::Online { degraded: false };
                self.record(what, format!("healthy again; {next}"), Some(interval_ms));
            }
            HealthVerdict::Healthy if succeeded => {
                self.quiet_since_now();
                self.quiet.probes += 1;
            }
            HealthVerdict::Healthy => {
                self.record(what, format!("healthy; {next}"), Some(interval_ms))
            }
            HealthVerdict::Degraded => {
                self.status = Status::Online { degraded: true };
                let verdict = if degraded {
                    "still degraded"
                } else {
                    "degraded"
                };
                self.record(what, format!("{verdict}; {next}"), Some(interval_ms));
            }
            HealthVerdict::Unhealthy => {
                self.record(what, "unhealthy → drop the connection", None);
                self.connection_lost(FailureStatus::Offline, "judged unhealthy");
            }
        }
    }

    fn call_attempt(&mut self, call: usize, attempt: u32) {
        let number = call + 1;
        let status = self.status;
        match status {
            _ if status.refuses_calls() => {
                self.calls[call].state = CallState::Done;
                self.record(
                    format!("tool call #{number}"),
                    format!("fails at once: server is {}", status.text()),
                    None,
                );
            }
            Status::Online { .. } => self.send(call, attempt),
            // On the way up: the router waits for it to settle.
            Status::Connecting | Status::Restarting { .. } => {
                self.calls[call].state = CallState::Waiting { attempt };
            }
            Status::Reconnecting { .. } | Status::Failed(_) | Status::PermanentlyFailed => {
                // A call is how recovery is detected: the router wakes the supervisor.
                self.calls[call].state = CallState::Waiting { attempt };
                self.record(
                    format!("tool call #{number} waits; wakes the reconnect"),
                    "",
                    None,
                );
                self.connect(&format!("reconnect (woken by call #{number})"));
            }
        }
    }

    fn send(&mut self, call: usize, attempt: u32) {
        self.calls[call].state = CallState::Busy;
        let forced = if attempt == 1 {
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
            None => {
                self.calls[call].state = CallState::Done;
                self.quiet_since_now();
                self.quiet.calls.push(call);
            }
            // A timeout is known only when the per-request timeout runs out.
            Some((FailureKind::TimedOut, _)) => self.schedule(
                self.now_ms + REQUEST_TIMEOUT_MS,
                Action::CallTimedOut {
                    call,
                    attempt,
                    generation,
                },
            ),
            Some((kind, reached)) => self.call_failed(call, attempt, kind, reached, generation),
        }
    }

    /// The router's retry loop: classify, then retry, or give up and tell the supervisor.
    fn call_failed(
        &mut self,
        call: usize,
        attempt: u32,
        kind: FailureKind,
        reached: bool,
        generation: u64,
    ) {
        let hints = self.calls[call].hints;
        let failure = FailedRequest {
            operation: Operation::Call,
            kind: kind.clone(),
            message: describe_failure(&kind),
            attempt,
            may_have_reached_server: reached,
            idempotent: hints.idempotent,
            read_only: hints.read_only,
        };
        let event = format!(
            "tool call #{} (attempt {attempt}): {}",
            call + 1,
            describe_failure(&kind)
        );
        let give_up_status = match self.policy.classify(self.server, &failure) {
            RetryVerdict::RetryAfter { delay_ms }
                if self.now_ms + delay_ms < self.calls[call].deadline_ms =>
            {
                self.record(
                    event,
                    format!("retry in {}", format_delay(delay_ms)),
                    Some(delay_ms),
                );
                self.schedule(
                    self.now_ms + delay_ms,
                    Action::CallAttempt {
                        call,
                        attempt: attempt + 1,
                    },
                );
                if breaks_connection(&kind) && self.live(generation) {
                    self.connection_lost(FailureStatus::Offline, &describe_failure(&kind));
                }
                return;
            }
            RetryVerdict::RetryAfter { delay_ms } => {
                let decision = format!(
                    "retry in {} passes the deadline → give up",
                    format_delay(delay_ms)
                );
                self.record(event, decision, Some(delay_ms));
                FailureStatus::Offline
            }
            RetryVerdict::GiveUp { status } => {
                self.record(event, format!("give up → {}", status.as_str()), None);
                status
            }
        };
        self.calls[call].state = CallState::Done;
        // A JSON-RPC error comes from a live server: it changes no status.
        let tells_supervisor = kind.is_connection_class() || kind.is_auth();
        if tells_supervisor && self.live(generation) {
            self.connection_lost(give_up_status, &describe_failure(&kind));
        }
    }

    /// Calls waiting for a usable connection proceed once online, or fail once an operator is needed.
    fn settle_waiting_calls(&mut self) {
        for call in 0..self.calls.len() {
            let CallState::Waiting { attempt } = self.calls[call].state else {
                continue;
            };
            if matches!(self.status, Status::Online { .. }) {
                self.send(call, attempt);
            } else if self.status.refuses_calls() {
                self.calls[call].state = CallState::Done;
                let status = self.status.text();
                self.record(
                    format!("tool call #{} stops waiting", call + 1),
                    format!("fails: server is {status}"),
                    None,
                );
            }
        }
    }
}
