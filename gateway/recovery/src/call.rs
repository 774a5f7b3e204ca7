//! One call's attempts, as a pure machine: waiting for a usable connection (waking a server
//! that is down), sending, and what follows a failed attempt within the call's deadline.
//!
//! The engine's router (every client request), its on-demand health check (a call with a
//! ping) and the simulator's world drive this one machine through [`CallMachine::on`], so
//! `wardgate policy simulate` shows calls exactly as the gateway makes them. Like
//! [`crate::Machine`], it never sleeps, reads a clock or draws a random number: its driver
//! feeds it what the call saw (the server's status, a send's outcome, a retry falling due,
//! the deadline passing) and carries out the [`CallStep`] it returns: watch, wake, send,
//! sleep, tell the recovery machine, or end the call.

use wardgate_policy::{
    FailedRequest, FailureKind, FailureStatus, Operation, RecoveryPolicy, RetryVerdict,
    ServerContext,
};

use crate::machine::Failure;
use crate::status::ServerStatus;

/// The hints a tool declares that decide whether replaying a call is safe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallHints {
    pub idempotent: bool,
    pub read_only: bool,
}

/// What went wrong with one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptFailure {
    pub kind: FailureKind,
    pub message: String,
    /// The request may have reached the server (it may have acted on it).
    pub reached: bool,
}

/// The server as a waiting call sees it.
#[derive(Debug, Clone, Copy)]
pub struct Sight<'a> {
    pub status: &'a ServerStatus,
    /// A connection is there to use.
    pub live: bool,
    /// The recovery machine's count of connection attempts that have ended.
    pub attempts_finished: u64,
    /// Why the last connection attempt failed, as the recovery machine recorded it.
    pub last_failure: Option<&'a Failure>,
}

/// What a call's driver feeds its machine.
#[derive(Debug, Clone)]
pub enum CallInput<'a> {
    /// The server's status: when an attempt starts, and at every change while it waits.
    Seen(Sight<'a>),
    /// The attempt's request came back: answered (`failure: None`) or failed.
    /// `failures_counted`: the recovery machine is counting failures (some have been seen,
    /// or the server is degraded), so a success is news to it.
    Answered {
        failure: Option<AttemptFailure>,
        failures_counted: bool,
    },
    /// A retry's delay has passed: the next attempt starts waiting for a connection.
    RetryDue,
    /// A config change replaced the server (a new recovery machine, with its own count of
    /// connection attempts): the waiting attempt watches the replacement afresh.
    Replaced,
    /// The call's deadline passed while it waited for a usable connection.
    DeadlinePassed,
}

/// Why a call ended without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The server's status is one only an operator can change.
    Refused,
    /// The server was not online before the call's deadline.
    NotOnlineInTime,
    /// The last attempt failed, and the policy gave up; `past_deadline`: it would have
    /// retried, but not within the call's deadline (or its one attempt, for a check).
    GaveUp {
        status: FailureStatus,
        past_deadline: bool,
    },
}

/// What the driver does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallNext {
    /// Nothing now: keep watching the server's status (or, while sending, the answer).
    Watch,
    /// Ask the supervisor to try now (skipping a reconnect wait), then keep watching.
    Wake,
    /// Send the request on the live connection, and feed back how it came back.
    Send,
    /// Sleep, then feed [`CallInput::RetryDue`].
    Sleep { delay_ms: u64 },
    /// The call is answered.
    Succeeded,
    /// The call fails.
    Fail(Ending),
}

/// One step of a call: what to do next, and what the recovery machine must hear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallStep {
    pub next: CallNext,
    /// The attempt's news of the connection's health, for the recovery machine
    /// (`Input::Served { succeeded }`), where it says anything.
    pub evidence: Option<bool>,
    /// The call gives up, and the connection its attempt went out on is unusable: the
    /// recovery machine hears so (`Input::Lost`), and leaves the server in this status.
    pub tell: Option<FailureStatus>,
    /// The call retries, and the connection its attempt went out on is unusable: the
    /// recovery machine replaces it without telling clients (`Input::Broken`), so a blip
    /// the call rides through is invisible to everyone else.
    pub replace: bool,
    /// The failed attempt this step judged, and the policy's verdict on it.
    pub judged: Option<(AttemptFailure, RetryVerdict)>,
}

impl CallStep {
    fn next(next: CallNext) -> CallStep {
        CallStep {
            next,
            evidence: None,
            tell: None,
            replace: false,
            judged: None,
        }
    }
}

/// One line of a server's call journal: a step of one call's machine that did something
/// (every step but [`CallNext::Watch`]). The gateway's router and the simulator keep the
/// same journal, so the two can be compared line by line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRecord {
    pub at_ms: u64,
    /// The call's number at its server, from 1, in the order calls started.
    pub call: u64,
    /// The attempt the step belongs to (a failed attempt's, for a retry or a give-up).
    pub attempt: u32,
    pub next: CallNext,
    /// The failed attempt the step judged, by its kind.
    pub failure: Option<FailureKind>,
}

impl CallRecord {
    /// The record of `step`, which `machine` just took at `at_ms`; `None` for a step that
    /// only keeps watching.
    pub fn of(at_ms: u64, call: u64, machine: &CallMachine, step: &CallStep) -> Option<Self> {
        (step.next != CallNext::Watch).then(|| CallRecord {
            at_ms,
            call,
            attempt: machine.attempt(),
            next: step.next,
            failure: step
                .judged
                .as_ref()
                .map(|(failure, _)| failure.kind.clone()),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Waiting(Waiter),
    Sending,
    Sleeping,
    Over,
}

/// One call, from its first look at the server to its answer or its failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallMachine {
    operation: Operation,
    hints: CallHints,
    deadline_ms: u64,
    /// At most this many attempts (a health check makes one).
    max_attempts: u32,
    attempt: u32,
    phase: Phase,
}

impl CallMachine {
    /// A client's request, started at `now_ms`: as many attempts as the policy allows
    /// within `timeout_ms`.
    pub fn call(operation: Operation, hints: CallHints, now_ms: u64, timeout_ms: u64) -> Self {
        CallMachine {
            operation,
            hints,
            deadline_ms: now_ms.saturating_add(timeout_ms),
            max_attempts: u32::MAX,
            attempt: 1,
            phase: Phase::Waiting(Waiter::default()),
        }
    }

    /// An operator's health check, started at `now_ms`: one attempt with a ping, waking
    /// a server that is down. Every outcome is news of the connection's health.
    pub fn check(now_ms: u64, timeout_ms: u64) -> Self {
        CallMachine {
            max_attempts: 1,
            ..CallMachine::call(Operation::Probe, CallHints::default(), now_ms, timeout_ms)
        }
    }

    /// The attempt under way (from 1).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the call gives up waiting, on its driver's clock.
    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }

    /// The call waits for a usable connection (its driver feeds it every status it sees).
    pub fn is_waiting(&self) -> bool {
        matches!(self.phase, Phase::Waiting(_))
    }

    /// The call has ended.
    pub fn is_over(&self) -> bool {
        self.phase == Phase::Over
    }

    /// Feed one input at `now_ms` (the driver's clock, as at [`CallMachine::call`]).
    /// `policy` and `server` judge a failed attempt. Inputs that do not fit the call's
    /// phase (an answer while it waits, a status after it ended) change nothing.
    pub fn on(
        &mut self,
        now_ms: u64,
        input: CallInput<'_>,
        policy: &dyn RecoveryPolicy,
        server: &ServerContext,
    ) -> CallStep {
        match (self.phase, input) {
            (Phase::Waiting(mut waiter), CallInput::Seen(sight)) => {
                let look = waiter.look(sight.status, sight.live, sight.attempts_finished);
                self.phase = Phase::Waiting(waiter);
                match look {
                    Look::Use => {
                        self.phase = Phase::Sending;
                        CallStep::next(CallNext::Send)
                    }
                    Look::Refuse => self.end(CallNext::Fail(Ending::Refused)),
                    Look::AttemptFailed => {
                        // The reconnection this call asked for failed: a failed attempt.
                        let failure = AttemptFailure {
                            kind: sight
                                .last_failure
                                .map_or(FailureKind::ConnectRefused, |failure| {
                                    failure.kind.clone()
                                }),
                            message: format!(
                                "reconnecting failed: {}",
                                sight
                                    .last_failure
                                    .map_or("the connection attempt failed", |failure| failure
                                        .message
                                        .as_str())
                            ),
                            reached: false,
                        };
                        self.failed(now_ms, failure, false, false, policy, server)
                    }
                    Look::WakeUp => CallStep::next(CallNext::Wake),
                    Look::Wait => CallStep::next(CallNext::Watch),
                }
            }
            (
                Phase::Sending,
                CallInput::Answered {
                    failure,
                    failures_counted,
                },
            ) => match failure {
                None => {
                    let mut step = self.end(CallNext::Succeeded);
                    step.evidence = evidence(self.operation, None, failures_counted);
                    step
                }
                Some(failure) => {
                    self.failed(now_ms, failure, true, failures_counted, policy, server)
                }
            },
            (Phase::Sleeping, CallInput::RetryDue) => {
                self.attempt += 1;
                self.phase = Phase::Waiting(Waiter::default());
                CallStep::next(CallNext::Watch)
            }
            (Phase::Waiting(_), CallInput::Replaced) => {
                self.phase = Phase::Waiting(Waiter::default());
                CallStep::next(CallNext::Watch)
            }
            (Phase::Waiting(_), CallInput::DeadlinePassed) => {
                self.end(CallNext::Fail(Ending::NotOnlineInTime))
            }
            _ => CallStep::next(CallNext::Watch),
        }
    }

    fn end(&mut self, next: CallNext) -> CallStep {
        self.phase = Phase::Over;
        CallStep::next(next)
    }

    /// A failed attempt: the policy's verdict, within the call's deadline and attempts.
    /// `sent`: the attempt went out on a connection (not a reconnection that failed), whose
    /// health it is news of.
    fn failed(
        &mut self,
        now_ms: u64,
        failure: AttemptFailure,
        sent: bool,
        failures_counted: bool,
        policy: &dyn RecoveryPolicy,
        server: &ServerContext,
    ) -> CallStep {
        let failed = FailedRequest {
            operation: self.operation,
            kind: failure.kind.clone(),
            message: failure.message.clone(),
            attempt: self.attempt,
            may_have_reached_server: failure.reached,
            idempotent: self.hints.idempotent,
            read_only: self.hints.read_only,
        };
        let verdict = policy.classify(server, &failed);
        let breaks = sent && breaks_connection(&failure.kind);
        // A JSON-RPC error comes from a live server; credentials refused make it
        // `requires_reauth`.
        let unusable = breaks || (sent && failure.kind.is_auth());
        let within = |delay_ms: u64| {
            now_ms.saturating_add(delay_ms) < self.deadline_ms && self.attempt < self.max_attempts
        };
        let mut replace = false;
        let (next, tell) = match verdict {
            RetryVerdict::RetryAfter { delay_ms } if within(delay_ms) => {
                self.phase = Phase::Sleeping;
                // The connection is gone: the supervisor replaces it while the call sleeps.
                replace = breaks;
                (CallNext::Sleep { delay_ms }, None)
            }
            RetryVerdict::RetryAfter { .. } => {
                self.phase = Phase::Over;
                let status = FailureStatus::Offline;
                let ending = Ending::GaveUp {
                    status,
                    past_deadline: true,
                };
                (CallNext::Fail(ending), unusable.then_some(status))
            }
            RetryVerdict::GiveUp { status } => {
                self.phase = Phase::Over;
                let ending = Ending::GaveUp {
                    status,
                    past_deadline: false,
                };
                (CallNext::Fail(ending), unusable.then_some(status))
            }
        };
        let evidence = if sent {
            evidence(self.operation, Some(&failure.kind), failures_counted)
        } else {
            None
        };
        CallStep {
            next,
            evidence,
            tell,
            replace,
            judged: Some((failure, verdict)),
        }
    }
}

/// Failures after which the connection itself is unusable. A timeout is not one: the
/// server may just be slow, and tearing down a stdio server for one slow call would be worse.
pub fn breaks_connection(kind: &FailureKind) -> bool {
    matches!(
        kind,
        FailureKind::ConnectRefused
            | FailureKind::Dns
            | FailureKind::ConnectionReset
            | FailureKind::ConnectionClosed
            | FailureKind::ProcessExited { .. }
            | FailureKind::SessionExpired
    )
}

/// Whether a finished attempt is news of the connection's health that the recovery
/// machine should hear (`Input::Served`, `Some(succeeded)`). Failures that break the
/// connection or refuse credentials reach the machine as a lost connection instead.
/// - A call's: a failure the connection survives that is not the server's own JSON-RPC
///   answer (a timeout, an HTTP 5xx, a protocol error), or a success while failures are
///   being counted.
/// - A health check's ping: every other outcome, an error answer included.
fn evidence(operation: Operation, failure: Option<&FailureKind>, counted: bool) -> Option<bool> {
    match failure {
        Some(kind) if breaks_connection(kind) || kind.is_auth() => None,
        _ if operation == Operation::Probe => Some(failure.is_none()),
        None => counted.then_some(true),
        Some(FailureKind::JsonRpc { .. }) => None,
        Some(_) => Some(false),
    }
}

/// What a call waiting for a usable connection does on seeing the server's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// Online with a live connection: send.
    Use,
    /// Only an operator can change this status: fail at once with its remedy.
    Refuse,
    /// The reconnection this call asked for failed.
    AttemptFailed,
    /// Ask the supervisor to try now, then keep watching.
    WakeUp,
    /// Keep watching the status until the call's deadline.
    Wait,
}

/// One waiting attempt's memory: whether it has woken the server, and how many connection
/// attempts had ended then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Waiter {
    woke_at: Option<u64>,
}

impl Waiter {
    /// An attempt that ends after the call woke the server, without the server coming
    /// online, is the call's attempt failing; counting attempts (rather than watching for
    /// `connecting` then `offline`) sees it however fast it failed.
    fn look(&mut self, status: &ServerStatus, live: bool, attempts_finished: u64) -> Look {
        if live && status.is_online() {
            return Look::Use;
        }
        if status.refuses_calls() {
            return Look::Refuse;
        }
        match self.woke_at {
            Some(woke_at) if attempts_finished > woke_at && !status.is_online() => {
                Look::AttemptFailed
            }
            Some(_) => Look::Wait,
            // offline / error / reconnecting: a call is how recovery is detected, so try now.
            None if !status.is_transitional() => {
                self.woke_at = Some(attempts_finished);
                Look::WakeUp
            }
            None => Look::Wait,
        }
    }
}

#[cfg(test)]
mod tests;
