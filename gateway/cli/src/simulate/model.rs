//! A small model of the engine's supervisor and router on simulated time: when it asks the policy what, and what status follows.
//!
//! It mirrors `wardgate-engine` decision for decision (attempt numbers, the request
//! deadline, wake-ups by calls, probe counters, the crash history of the last hour) but
//! simplifies the mechanism: connecting is instant, a call's outcome depends only on the
//! world at the moment it is sent, and statuses are set directly rather than through the
//! engine's `lifecycle::transition`, which remains the authority.

mod calls;
mod journal;
mod probes;
mod recovery;

use std::collections::BTreeMap;

use wardgate_policy::{
    CrashReport, CrashVerdict, ExitInfo, FailedRequest, FailureKind, FailureStatus, HealthVerdict,
    Operation, ProbeOutcome, ReconnectVerdict, RecoveryPolicy, RetryVerdict, ServerContext,
    TransportKind,
};

use super::{describe_failure, format_delay, CallHints, Entry, Script, Timeline, WorldEvent};
use calls::{Call, CallState};
use journal::Quiet;

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

    /// `delay_ms` from now; saturating, since a module may answer with any `u64`.
    fn after(&self, delay_ms: u64) -> u64 {
        self.now_ms.saturating_add(delay_ms)
    }

    fn seed(&self, n: u64) -> u64 {
        jitter_seed(self.seed, self.now_ms, n)
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
                    let event = format!(
                        "tool call #{} fails: not online within {}",
                        call + 1,
                        format_delay(REQUEST_TIMEOUT_MS)
                    );
                    self.record(event, "", None);
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
                self.record(format!("credentials rejected (HTTP {status})"), "", None);
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
                    self.schedule(self.after(every_ms), Action::ProcessDies { generation });
                }
            }
            WorldEvent::Call { hints, fails_with } => {
                self.calls.push(Call {
                    hints,
                    fails_with,
                    deadline_ms: self.after(REQUEST_TIMEOUT_MS),
                    state: CallState::Busy,
                });
                let call = self.calls.len() - 1;
                self.schedule(
                    self.after(REQUEST_TIMEOUT_MS),
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
}

#[cfg(test)]
mod tests;
