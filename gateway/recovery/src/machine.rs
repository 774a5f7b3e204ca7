//! The recovery machine: one server's state, the inputs that move it, and the steps it returns.
//!
//! Why this file is long: the machine is one state enum and one transition function; its
//! unit tests, one per rule, follow it.

use wardgate_policy::{
    CrashReport, CrashVerdict, ExitInfo, FailureKind, FailureStatus, HealthVerdict, ProbeOutcome,
    Question, ReconnectVerdict, RecoveryPolicy, ServerContext,
};

use crate::lifecycle::{transition, LifecycleEvent as E};
use crate::status::ServerStatus;

/// Policies see the crashes of the last hour only; older history cannot matter to any sane budget.
pub const CRASH_MEMORY_MS: u64 = 3_600_000;
/// Floors on a policy's probe plan: a probe every 10 ms at most, a timeout of at least 1 ms.
pub const MIN_PROBE_INTERVAL_MS: u64 = 10;
const MIN_PROBE_TIMEOUT_MS: u64 = 1;

/// A failure as the machine needs it: what kind, and the words for operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

impl Failure {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
        }
    }
}

/// What an operator asks of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorAction {
    Reconnect,
    Restart,
    Enable,
    Disable,
}

impl OperatorAction {
    pub fn as_str(self) -> &'static str {
        match self {
            OperatorAction::Reconnect => "reconnect",
            OperatorAction::Restart => "restart",
            OperatorAction::Enable => "enable",
            OperatorAction::Disable => "disable",
        }
    }
}

/// Something that happened to the server, as its driver saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The driver starts: the first connection attempt, or the disabled state.
    Start,
    /// The connection attempt under way has initialized; discovery follows.
    Initialized,
    /// The connection attempt succeeded: the server serves, its tools are known.
    Ready,
    /// The connection attempt under way failed (a process that died before serving says
    /// so with [`FailureKind::ProcessExited`]: that is a crash).
    ConnectFailed(Failure),
    /// The live connection is unusable: a call's failure, a closed transport. `status` is
    /// what it leaves the server in (a call's policy verdict, or `offline`).
    Lost {
        failure: Failure,
        status: FailureStatus,
    },
    /// A call that will retry found the live connection unusable: replace it without telling
    /// clients. The status changes (once) only if the replacement fails past its first
    /// attempt; a blip a call rides through is invisible to everyone else.
    Broken { failure: Failure },
    /// The live connection's process exited; `reason` is what it said last, with its exit
    /// status (`None`: it said nothing, and the exit status alone is the reason).
    Exited {
        exit: ExitInfo,
        reason: Option<String>,
    },
    /// The wait a step asked for is over.
    RetryDue,
    /// A call wants the server now: skip the rest of a reconnect wait.
    WakeUp,
    /// A health probe of the live connection finished.
    Probed { succeeded: bool, latency_ms: u64 },
    /// A call (one that failed without a JSON-RPC error, or succeeded after failures), or
    /// an on-demand health check, finished on the live connection: evidence of health like
    /// a probe's, judged by the policy the same way, without moving the probe schedule.
    Served { succeeded: bool, latency_ms: u64 },
    /// An operator acted.
    Operator(OperatorAction),
}

/// What the driver does after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Start a connection attempt (closing a live connection first, if there is one).
    Connect,
    /// Serve the live connection; probe it in `probe_in_ms`, giving the probe `probe_timeout_ms`.
    Serve {
        probe_in_ms: u64,
        probe_timeout_ms: u64,
    },
    /// Close any live connection and wait `delay_ms`, then feed [`Input::RetryDue`].
    Wait { delay_ms: u64 },
    /// Close any live connection; only an operator action moves the server on.
    Park,
    /// Close any live connection; only [`OperatorAction::Enable`] moves the server on.
    Disabled,
    /// Carry on with what was under way: the input changed nothing the driver does.
    Continue,
}

/// Something to tell clients and operators, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announcement {
    Status {
        from: ServerStatus,
        to: ServerStatus,
        reason: String,
    },
    /// The live connection closed (an operator's action: `intentional`).
    Disconnected {
        intentional: bool,
        reason: String,
    },
    Reconnecting {
        attempt: u32,
        next_delay_ms: u64,
    },
    /// Back online after `attempts` scheduled reconnection attempts.
    Reconnected {
        attempts: u32,
    },
    PermanentlyFailed {
        crashes: u32,
        reason: String,
    },
    HealthDegraded {
        consecutive_failures: u32,
        last_error: Option<String>,
    },
    HealthRestored,
}

/// What the policy was asked in a step, and what it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// `reconnect_delay` for attempt `attempt`.
    Reconnect {
        attempt: u32,
        verdict: ReconnectVerdict,
    },
    /// `crash`, for the `crashes`-th crash in the window.
    Crash {
        report: CrashReport,
        crashes: u32,
        verdict: CrashVerdict,
    },
    /// `probe_schedule` when a connection starts serving.
    FirstProbe { interval_ms: u64, timeout_ms: u64 },
    /// `health` after a probe (and `probe_schedule` for the next one), or after a call or
    /// check (`next_probe_ms: None`: the probe schedule is unchanged).
    Health {
        outcome: ProbeOutcome,
        verdict: HealthVerdict,
        next_probe_ms: Option<u64>,
    },
    /// Credentials were refused: no policy is asked, an operator must act.
    AwaitOperator,
}

impl Decision {
    /// The questions this decision put to the policy, in the order it asked them.
    pub fn questions(&self) -> &'static [Question] {
        match self {
            Decision::Reconnect { .. } => &[Question::ReconnectDelay],
            Decision::Crash { .. } => &[Question::Crash],
            Decision::FirstProbe { .. } => &[Question::ProbeSchedule],
            Decision::Health {
                next_probe_ms: Some(_),
                ..
            } => &[Question::Health, Question::ProbeSchedule],
            Decision::Health {
                next_probe_ms: None,
                ..
            } => &[Question::Health],
            Decision::AwaitOperator => &[],
        }
    }
}

/// What followed one input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub next: Next,
    pub announcements: Vec<Announcement>,
    /// What the policy was asked, in order (a probe judged unhealthy is followed by the
    /// reconnect delay, say).
    pub decisions: Vec<Decision>,
    /// For an operator action: whether it was done, or why not.
    pub reply: Option<Result<(), String>>,
    /// One more failed attempt of a reconnection that keeps failing: its announcements are
    /// for operators and logs, not for every client (they hear attempts 1-3, then 4, 8, 16...).
    pub quiet: bool,
}

impl Step {
    fn new() -> Step {
        Step {
            next: Next::Continue,
            announcements: Vec::new(),
            decisions: Vec::new(),
            reply: None,
            quiet: false,
        }
    }

    /// The live connection must close (the driver may be serving one).
    pub fn ends_connection(&self) -> bool {
        !matches!(self.next, Next::Serve { .. } | Next::Continue)
    }

    /// The connection closes because an operator asked: politely (stdin closed, grace, signals).
    pub fn intentional(&self) -> bool {
        self.announcements.iter().any(|announcement| {
            matches!(
                announcement,
                Announcement::Disconnected {
                    intentional: true,
                    ..
                }
            )
        })
    }
}

/// One input and what followed, as a driver's journal keeps it: the gateway keeps the last
/// few per server for operators, the simulator keeps a whole run, and the two can be
/// compared record by record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub at_ms: u64,
    pub input: Input,
    /// The status after the step.
    pub status: ServerStatus,
    pub next: Next,
    pub decisions: Vec<Decision>,
}

impl Record {
    pub fn new(at_ms: u64, input: Input, status: &ServerStatus, step: &Step) -> Record {
        Record {
            at_ms,
            input,
            status: status.clone(),
            next: step.next,
            decisions: step.decisions.clone(),
        }
    }
}

/// The recovery bookkeeping operators read, all in one place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// Failed connection attempts since the last success, or failed health probes in a
    /// row while serving.
    pub consecutive_failures: u32,
    /// The reconnect attempt scheduled, while one is.
    pub reconnect_attempt: Option<u32>,
    /// When the next connection attempt (reconnect, or restart after a crash) is due.
    pub next_retry_at_ms: Option<u64>,
    /// Crashes remembered (the last hour; the policy judges the budget).
    pub crashes_in_window: u32,
    pub last_error: Option<String>,
    /// When it happened.
    pub last_error_at_ms: Option<u64>,
    /// What kind of failure that was.
    pub last_failure: Option<FailureKind>,
    /// When the live connection started serving.
    pub online_since_ms: Option<u64>,
    /// Connection attempts that have ended (succeeded or failed): a call that woke the server
    /// knows its attempt failed when this moves on and the server is not online.
    pub attempts_finished: u64,
    /// When the status last changed its name (`reconnecting #1` to `#2` is no change).
    pub status_since_ms: u64,
    /// The server went to `error` for failing calls or probes, and no call has succeeded
    /// since: its reconnect backoff is kept, and a call's success is news.
    pub probation: bool,
}

impl View {
    /// Whether the machine is counting failed calls and probes (some have been seen, the
    /// server is degraded, or it is on probation): then a call's success is news to it too.
    pub fn failures_counted(&self, status: &ServerStatus) -> bool {
        self.consecutive_failures > 0
            || self.probation
            || matches!(status, ServerStatus::Online { degraded: true })
    }
}

/// Health-probe counters of one live connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Probes {
    failures: u32,
    successes: u32,
}

/// When the next scheduled connection attempt is due, and which reconnect attempt it is
/// (`None`: a restart after a crash).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Schedule {
    until_ms: u64,
    reconnect_attempt: Option<u32>,
}

/// Where the server is; each variant holds only what is valid in it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Before [`Input::Start`].
    Idle,
    /// A connection attempt is under way. `woken`: a call asked for it during this
    /// scheduled wait, so its failure leaves the schedule as it was (the backoff neither
    /// advances nor restarts: steady traffic must not push it to the cap, nor hold it back).
    Connecting {
        woken: Option<Schedule>,
    },
    Serving {
        since_ms: u64,
        probes: Probes,
    },
    /// Waiting until `until_ms` to reconnect (or restart after a crash).
    Waiting(Schedule),
    /// A connection replaced without telling clients ([`Input::Broken`]): the status stays
    /// as it was. `second`: the first attempt failed, and a failure now is told.
    Replacing {
        second: bool,
    },
    /// The quiet replacement's first attempt failed: waiting, still without telling clients,
    /// for a call to wake it or the policy's first reconnect delay to pass.
    QuietWait(Schedule),
    /// `requires_reauth` or `permanently_failed`: an operator must act.
    Parked,
    Disabled,
}

/// One server's recovery state.
#[derive(Debug, Clone)]
pub struct Machine {
    server: ServerContext,
    enabled: bool,
    seed: u64,
    decisions: u64,
    status: ServerStatus,
    state: State,
    /// Scheduled reconnection attempts since the server last served.
    reconnect_attempt: u32,
    /// When recent crashes happened (the last [`CRASH_MEMORY_MS`]).
    crashes_ms: Vec<u64>,
    consecutive_failures: u32,
    last_error: Option<String>,
    /// When `last_error` happened, on the machine's clock.
    last_error_at_ms: Option<u64>,
    last_failure: Option<FailureKind>,
    attempts_finished: u64,
    /// A connection has served before: coming online again is a reconnection.
    served_before: bool,
    /// When the status last changed its name (`reconnecting #1` to `#2` is no change).
    status_since_ms: u64,
    /// Went to `error` for failing calls or probes and no call has succeeded since: the
    /// reconnect backoff is kept across a successful reconnection, so a server that answers
    /// `initialize` but fails every call comes back ever more slowly, not every second.
    probation: bool,
}

/// The jitter seed of the `n`-th decision at `now_ms`: reproducible for a given base `seed`.
/// The machine passes `now_ms = 0`: its `n`-th decision draws the same jitter whenever it
/// is made, so a replay whose clock differs by a millisecond still decides alike.
pub fn jitter_seed(seed: u64, now_ms: u64, n: u64) -> u64 {
    let mut z = seed ^ now_ms.rotate_left(24) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Machine {
    /// A server that starts `enabled` (or disabled); `seed` makes every jitter reproducible.
    pub fn new(server: ServerContext, enabled: bool, seed: u64) -> Machine {
        Machine {
            server,
            enabled,
            seed,
            decisions: 0,
            status: if enabled {
                ServerStatus::Provisioning
            } else {
                ServerStatus::Disabled
            },
            state: State::Idle,
            reconnect_attempt: 0,
            crashes_ms: Vec::new(),
            consecutive_failures: 0,
            last_error: None,
            last_error_at_ms: None,
            last_failure: None,
            attempts_finished: 0,
            served_before: false,
            status_since_ms: 0,
            probation: false,
        }
    }

    pub fn server(&self) -> &ServerContext {
        &self.server
    }

    pub fn status(&self) -> &ServerStatus {
        &self.status
    }

    /// What operators read: counters, the next retry, the last error.
    pub fn view(&self) -> View {
        let (reconnect_attempt, next_retry_at_ms) = match &self.state {
            State::Waiting(schedule) | State::QuietWait(schedule) => {
                (schedule.reconnect_attempt, Some(schedule.until_ms))
            }
            _ => (None, None),
        };
        View {
            consecutive_failures: match &self.state {
                State::Serving { probes, .. } => probes.failures,
                _ => self.consecutive_failures,
            },
            reconnect_attempt,
            next_retry_at_ms,
            crashes_in_window: self.crashes_ms.len() as u32,
            last_error: self.last_error.clone(),
            last_error_at_ms: self.last_error_at_ms,
            last_failure: self.last_failure.clone(),
            attempts_finished: self.attempts_finished,
            status_since_ms: self.status_since_ms,
            probation: self.probation,
            online_since_ms: match &self.state {
                State::Serving { since_ms, .. } => Some(*since_ms),
                _ => None,
            },
        }
    }

    /// The error of the call or probe whose failure the driver is about to feed
    /// ([`Input::Served`] or [`Input::Probed`]): operators read it as the last error. Kept
    /// out of the input so that journals compare what decided, not how a failure was worded.
    pub fn note_failure(&mut self, now_ms: u64, message: String) {
        self.last_error = Some(message);
        self.last_error_at_ms = Some(now_ms);
    }

    /// Feed one input at `now_ms` (milliseconds on the driver's clock) and get what follows.
    pub fn on(&mut self, now_ms: u64, input: Input, policy: &dyn RecoveryPolicy) -> Step {
        let mut run = Run {
            machine: self,
            now_ms,
            policy,
            step: Step::new(),
        };
        run.input(input);
        run.step
    }
}

/// One call of [`Machine::on`] under way.
struct Run<'a> {
    machine: &'a mut Machine,
    now_ms: u64,
    policy: &'a dyn RecoveryPolicy,
    step: Step,
}

impl Run<'_> {
    fn input(&mut self, input: Input) {
        if let Input::Operator(action) = input {
            return self.operator(action);
        }
        match (self.machine.state.clone(), input) {
            (State::Idle, Input::Start) => {
                if self.machine.enabled {
                    self.connect(None, "connecting");
                } else {
                    self.machine.state = State::Disabled;
                    self.step.next = Next::Disabled;
                }
            }
            (State::Connecting { .. }, Input::Initialized) => {
                self.apply(E::Initialized, "initialized; discovering tools");
            }
            (State::Connecting { .. }, Input::Ready) => self.ready(true),
            (State::Connecting { woken }, Input::ConnectFailed(failure)) => {
                self.connect_failed(failure, woken)
            }
            (
                State::Serving { probes, .. },
                Input::Probed {
                    succeeded,
                    latency_ms,
                },
            ) => self.probed(probes, succeeded, latency_ms, true),
            (
                State::Serving { probes, .. },
                Input::Served {
                    succeeded,
                    latency_ms,
                },
            ) => self.probed(probes, succeeded, latency_ms, false),
            (State::Serving { .. }, Input::Lost { failure, status }) => {
                self.disconnected(false, &failure.message);
                self.lost(failure, status);
            }
            (State::Serving { since_ms, .. }, Input::Exited { exit, reason }) => {
                let reason = reason.unwrap_or_else(|| format!("the process {exit}"));
                self.disconnected(false, &reason);
                let uptime_ms = self.now_ms.saturating_sub(since_ms);
                self.crashed(exit, uptime_ms, Some(reason));
            }
            (State::Serving { .. }, Input::Broken { failure }) => {
                self.failed_with(failure.message, failure.kind);
                self.replace(false);
            }
            // The status stays: clients see the server as it was.
            (State::Replacing { .. }, Input::Initialized) => {}
            (State::Replacing { .. }, Input::Ready) => self.ready(false),
            (State::Replacing { second, .. }, Input::ConnectFailed(failure)) => {
                self.replacement_failed(failure, second)
            }
            (State::QuietWait(_), Input::RetryDue) => self.replace(true),
            (State::QuietWait(_), Input::WakeUp) => self.replace(true),
            (State::Waiting(schedule), Input::RetryDue) => {
                self.connect(None, "connecting");
                self.step.quiet = schedule.reconnect_attempt.is_some_and(quiet_attempt);
            }
            (State::Waiting(schedule), Input::WakeUp) => {
                self.connect(Some(schedule), "a call asked for the server");
                // The call that asked hears how its attempt went; everyone else knows it is down.
                self.step.quiet = true;
            }
            // Anything else is news of an older connection, or of an attempt already
            // replaced: it changes nothing.
            _ => {}
        }
    }

    fn seed(&mut self) -> u64 {
        self.machine.decisions += 1;
        jitter_seed(self.machine.seed, 0, self.machine.decisions)
    }

    /// Feed the lifecycle; a refused transition changes nothing.
    fn apply(&mut self, event: E, reason: &str) {
        let Ok(next) = transition(&self.machine.status, &event) else {
            return;
        };
        let previous = std::mem::replace(&mut self.machine.status, next.clone());
        if previous.name() != next.name() {
            self.machine.status_since_ms = self.now_ms;
        }
        if previous != next {
            self.step.announcements.push(Announcement::Status {
                from: previous,
                to: next,
                reason: reason.to_owned(),
            });
        }
    }

    fn announce(&mut self, announcement: Announcement) {
        self.step.announcements.push(announcement);
    }

    fn disconnected(&mut self, intentional: bool, reason: &str) {
        self.announce(Announcement::Disconnected {
            intentional,
            reason: reason.to_owned(),
        });
    }

    fn connect(&mut self, woken: Option<Schedule>, reason: &str) {
        self.machine.state = State::Connecting { woken };
        self.apply(E::Connect, reason);
        self.step.next = Next::Connect;
    }

    /// A quiet replacement's attempt: the status stays as it was.
    fn replace(&mut self, second: bool) {
        self.machine.state = State::Replacing { second };
        self.step.next = Next::Connect;
        self.step.quiet = true;
    }

    /// A quiet replacement's attempt failed. The first time, for a failure a retry may
    /// mend (the server refused or was unreachable), it waits quietly as the policy's first
    /// reconnect delay says; otherwise the connection is lost, and told, from here.
    fn replacement_failed(&mut self, failure: Failure, second: bool) {
        let status = connect_failure_status(&failure.kind);
        self.machine.consecutive_failures += 1;
        self.machine.attempts_finished += 1;
        if second || status != FailureStatus::Offline {
            self.disconnected(false, &failure.message);
            return self.lost(failure, status);
        }
        self.failed_with(failure.message.clone(), failure.kind.clone());
        let (attempt, verdict) = self.next_reconnect();
        match verdict {
            ReconnectVerdict::RetryAfter { delay_ms } => {
                self.machine.state = State::QuietWait(Schedule {
                    until_ms: self.now_ms.saturating_add(delay_ms),
                    reconnect_attempt: Some(attempt),
                });
                self.step.next = Next::Wait { delay_ms };
                self.step.quiet = true;
            }
            ReconnectVerdict::Stop => {
                self.disconnected(false, &failure.message);
                self.apply(
                    E::ConnectionLost {
                        status,
                        reason: failure.message.clone(),
                    },
                    &failure.message,
                );
                self.stop_reconnecting(attempt, &failure.message);
            }
        }
    }

    /// The connection attempt succeeded. `told`: clients knew the server was down (not a
    /// quiet replacement), so coming back is announced.
    fn ready(&mut self, told: bool) {
        let machine = &mut *self.machine;
        machine.consecutive_failures = 0;
        machine.attempts_finished += 1;
        // On probation the backoff is kept until a call succeeds.
        let attempts = if machine.probation {
            machine.reconnect_attempt
        } else {
            std::mem::take(&mut machine.reconnect_attempt)
        };
        let again = std::mem::replace(&mut machine.served_before, true);
        machine.state = State::Serving {
            since_ms: self.now_ms,
            probes: Probes::default(),
        };
        if again && told {
            // After an outage, a crash, or an operator's reconnect or restart.
            self.announce(Announcement::Reconnected { attempts });
        }
        self.apply(E::Ready, "online");
        let seed = self.seed();
        let plan = self.policy.probe_schedule(&self.machine.server, seed);
        let (interval_ms, timeout_ms) = probe_plan(plan.interval_ms, plan.timeout_ms);
        self.step.decisions.push(Decision::FirstProbe {
            interval_ms,
            timeout_ms,
        });
        self.step.next = Next::Serve {
            probe_in_ms: interval_ms,
            probe_timeout_ms: timeout_ms,
        };
    }

    fn connect_failed(&mut self, failure: Failure, woken: Option<Schedule>) {
        self.machine.consecutive_failures += 1;
        self.machine.attempts_finished += 1;
        self.failed_with(failure.message.clone(), failure.kind.clone());
        if let FailureKind::ProcessExited { code, signal } = failure.kind {
            // A process that dies before it serves is a crash like any other.
            return self.crashed(ExitInfo { code, signal }, 0, Some(failure.message));
        }
        if failure.kind
            == (FailureKind::JsonRpc {
                code: UNSUPPORTED_PROTOCOL_VERSION,
            })
        {
            // No revision in common: a fact of both programs, which no retry changes. Like
            // refused credentials, it waits for an operator (after an upgrade).
            self.machine.state = State::Parked;
            self.apply(
                E::Incompatible {
                    reason: failure.message.clone(),
                },
                &failure.message,
            );
            self.announce(Announcement::PermanentlyFailed {
                crashes: self.machine.crashes_ms.len() as u32,
                reason: failure.message,
            });
            self.step.decisions.push(Decision::AwaitOperator);
            self.step.next = Next::Park;
            return;
        }
        let status = connect_failure_status(&failure.kind);
        self.apply(
            E::ConnectFailed {
                status,
                reason: failure.message.clone(),
            },
            &failure.message,
        );
        match woken {
            // A call's attempt failed before the scheduled one was due: back to that schedule.
            Some(schedule)
                if schedule.until_ms > self.now_ms && status != FailureStatus::RequiresReauth =>
            {
                let delay_ms = schedule.until_ms - self.now_ms;
                let attempt = schedule
                    .reconnect_attempt
                    .unwrap_or(self.machine.reconnect_attempt);
                self.machine.state = State::Waiting(schedule);
                self.apply(
                    E::ReconnectScheduled { attempt, delay_ms },
                    &format!("reconnecting in {delay_ms} ms"),
                );
                self.step.next = Next::Wait { delay_ms };
                // The call that asked hears of it; everyone else already knows it is down.
                self.step.quiet = true;
            }
            _ => self.schedule_reconnect(status, &failure.message),
        }
    }

    /// The last error, what kind it was, and when: now.
    fn failed_with(&mut self, message: String, kind: FailureKind) {
        self.machine.last_error = Some(message);
        self.machine.last_error_at_ms = Some(self.now_ms);
        self.machine.last_failure = Some(kind);
    }

    fn lost(&mut self, failure: Failure, status: FailureStatus) {
        self.failed_with(failure.message.clone(), failure.kind.clone());
        self.apply(
            E::ConnectionLost {
                status,
                reason: failure.message.clone(),
            },
            &failure.message,
        );
        self.schedule_reconnect(status, &failure.message);
    }

    fn schedule_reconnect(&mut self, status: FailureStatus, reason: &str) {
        if status == FailureStatus::RequiresReauth {
            self.machine.state = State::Parked;
            self.step.decisions.push(Decision::AwaitOperator);
            self.step.next = Next::Park;
            return;
        }
        let (attempt, verdict) = self.next_reconnect();
        match verdict {
            ReconnectVerdict::RetryAfter { delay_ms } => {
                // A reconnection that keeps failing: clients hear attempts 1-3, then 4, 8, 16...
                self.step.quiet = quiet_attempt(attempt);
                self.machine.state = State::Waiting(Schedule {
                    until_ms: self.now_ms.saturating_add(delay_ms),
                    reconnect_attempt: Some(attempt),
                });
                self.apply(
                    E::ReconnectScheduled { attempt, delay_ms },
                    &format!("reconnecting in {delay_ms} ms"),
                );
                self.announce(Announcement::Reconnecting {
                    attempt,
                    next_delay_ms: delay_ms,
                });
                self.step.next = Next::Wait { delay_ms };
            }
            ReconnectVerdict::Stop => self.stop_reconnecting(attempt, reason),
        }
    }

    /// The next reconnect attempt, and the policy's verdict on it (recorded).
    fn next_reconnect(&mut self) -> (u32, ReconnectVerdict) {
        self.machine.reconnect_attempt += 1;
        let attempt = self.machine.reconnect_attempt;
        let seed = self.seed();
        let verdict = self
            .policy
            .reconnect_delay(&self.machine.server, attempt, seed);
        self.step
            .decisions
            .push(Decision::Reconnect { attempt, verdict });
        (attempt, verdict)
    }

    /// The policy stopped reconnecting after `attempts`: only an operator moves it on.
    fn stop_reconnecting(&mut self, attempts: u32, reason: &str) {
        self.machine.state = State::Parked;
        self.apply(
            E::ReconnectStopped {
                attempts,
                reason: reason.to_owned(),
            },
            "the policy stopped reconnecting",
        );
        self.announce(Announcement::PermanentlyFailed {
            crashes: self.machine.crashes_ms.len() as u32,
            reason: reason.to_owned(),
        });
        self.step.next = Next::Park;
    }

    fn crashed(&mut self, exit: ExitInfo, uptime_ms: u64, detail: Option<String>) {
        let now_ms = self.now_ms;
        let report = CrashReport {
            exit,
            uptime_ms,
            now_ms,
            recent_crashes_ms: self.machine.crashes_ms.clone(),
        };
        self.machine.crashes_ms.push(now_ms);
        self.machine
            .crashes_ms
            .retain(|at| now_ms.saturating_sub(*at) < CRASH_MEMORY_MS);
        let crashes = self.machine.crashes_ms.len() as u32;
        let reason = detail.unwrap_or_else(|| format!("the process {exit}"));
        self.failed_with(
            reason.clone(),
            FailureKind::ProcessExited {
                code: exit.code,
                signal: exit.signal,
            },
        );
        let verdict = self.policy.crash(&self.machine.server, &report);
        self.step.decisions.push(Decision::Crash {
            report,
            crashes,
            verdict,
        });
        match verdict {
            CrashVerdict::RestartAfter { delay_ms } => {
                self.machine.state = State::Waiting(Schedule {
                    until_ms: now_ms.saturating_add(delay_ms),
                    reconnect_attempt: None,
                });
                self.apply(
                    E::Crashed { exit, crashes },
                    &format!("{reason}; restarting in {delay_ms} ms"),
                );
                self.step.next = Next::Wait { delay_ms };
            }
            CrashVerdict::GiveUp => {
                self.machine.state = State::Parked;
                self.apply(
                    E::CrashBudgetSpent {
                        exit,
                        crashes,
                        reason: reason.clone(),
                    },
                    &reason,
                );
                self.announce(Announcement::PermanentlyFailed { crashes, reason });
                self.step.next = Next::Park;
            }
        }
    }

    /// A probe (`planned`: it was the probe schedule's) or a call's or check's outcome.
    fn probed(&mut self, mut probes: Probes, succeeded: bool, latency_ms: u64, planned: bool) {
        if succeeded {
            probes.successes += 1;
            probes.failures = 0;
            // A call's success ends probation; a probe's does not (a server whose tools
            // fail may answer pings).
            if !planned && std::mem::take(&mut self.machine.probation) {
                self.machine.reconnect_attempt = 0;
            }
        } else {
            probes.failures += 1;
            probes.successes = 0;
        }
        if let State::Serving { probes: kept, .. } = &mut self.machine.state {
            *kept = probes;
        }
        let outcome = ProbeOutcome {
            succeeded,
            latency_ms,
            consecutive_failures: probes.failures,
            consecutive_successes: probes.successes,
        };
        let next_probe_ms = if planned {
            let seed = self.seed();
            let plan = self.policy.probe_schedule(&self.machine.server, seed);
            let (interval_ms, timeout_ms) = probe_plan(plan.interval_ms, plan.timeout_ms);
            self.step.next = Next::Serve {
                probe_in_ms: interval_ms,
                probe_timeout_ms: timeout_ms,
            };
            Some(interval_ms)
        } else {
            None
        };
        let verdict = self.policy.health(&self.machine.server, &outcome);
        self.step.decisions.push(Decision::Health {
            outcome,
            verdict,
            next_probe_ms,
        });
        let degraded = matches!(self.machine.status, ServerStatus::Online { degraded: true });
        match verdict {
            HealthVerdict::Healthy if degraded => {
                self.apply(E::Health { degraded: false }, "a probe or call succeeded");
                self.announce(Announcement::HealthRestored);
            }
            HealthVerdict::Degraded if !degraded => {
                let reason = format!("{} consecutive probes or calls failed", probes.failures);
                self.apply(E::Health { degraded: true }, &reason);
                self.announce(Announcement::HealthDegraded {
                    consecutive_failures: probes.failures,
                    last_error: self.machine.last_error.clone(),
                });
            }
            HealthVerdict::Unhealthy => {
                // The server answers but fails: `error`, its tools hidden, the connection
                // dropped and made again on the reconnect schedule; the first success ends it.
                // The last error stays the failure's own (`Machine::note_failure`).
                let reason = format!("{} calls or probes in a row failed", probes.failures);
                self.machine.probation = true;
                self.disconnected(false, &reason);
                self.apply(
                    E::ConnectionLost {
                        status: FailureStatus::Error,
                        reason: reason.clone(),
                    },
                    &reason,
                );
                self.schedule_reconnect(FailureStatus::Error, &reason);
            }
            _ => {}
        }
    }

    fn operator(&mut self, action: OperatorAction) {
        let name = self.machine.server.name.clone();
        let serving = matches!(self.machine.state, State::Serving { .. });
        let answer = match (&self.machine.state, action) {
            (State::Disabled, OperatorAction::Enable) => {
                self.reset();
                self.machine.last_error = None;
                self.machine.last_error_at_ms = None;
                self.apply(E::Enable, "enabled by an operator");
                self.connect(None, "connecting");
                Ok(())
            }
            (State::Disabled, OperatorAction::Disable) => Ok(()),
            (State::Disabled, _) => Err(format!(
                "server \"{name}\" is disabled; enable it first (wardgate enable {name})"
            )),
            (_, OperatorAction::Enable) => Err(format!("server \"{name}\" is already enabled")),
            (_, OperatorAction::Disable) => {
                // In any state: clients hear once that the server is gone on purpose.
                self.disconnected(true, "disabled by an operator");
                self.machine.state = State::Disabled;
                self.apply(E::Disable, "disabled by an operator");
                self.step.next = Next::Disabled;
                Ok(())
            }
            (_, OperatorAction::Reconnect | OperatorAction::Restart) => {
                if serving {
                    self.disconnected(true, &format!("operator {}", action.as_str()));
                }
                self.reset();
                if action == OperatorAction::Restart {
                    self.apply(E::Restart, "restart requested by an operator");
                }
                // The status says so before the operator hears "done": no caller may see
                // the old connection's "online" after the action returned.
                self.connect(
                    None,
                    &format!("{} requested by an operator", action.as_str()),
                );
                Ok(())
            }
        };
        self.step.reply = Some(answer);
    }

    /// An operator's fresh start: backoff and crash budget forgotten.
    fn reset(&mut self) {
        self.machine.reconnect_attempt = 0;
        self.machine.probation = false;
        self.machine.crashes_ms.clear();
        self.machine.consecutive_failures = 0;
    }
}

/// The status a failed connection attempt leaves: the engine decides it; the policy only
/// picks the reconnect delay.
/// The JSON-RPC code MCP 2026-07-28 gives "unsupported protocol version"; at connection
/// time, the server and the gateway have no revision in common.
pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;

fn connect_failure_status(kind: &FailureKind) -> FailureStatus {
    if kind.is_auth() {
        FailureStatus::RequiresReauth
    } else if kind.is_connection_class() {
        FailureStatus::Offline
    } else {
        FailureStatus::Error
    }
}

/// Reconnect attempts whose steps clients do not hear of: all but 1-3, 4, 8, 16, ...
fn quiet_attempt(attempt: u32) -> bool {
    attempt > 3 && !attempt.is_power_of_two()
}

fn probe_plan(interval_ms: u64, timeout_ms: u64) -> (u64, u64) {
    (
        interval_ms.max(MIN_PROBE_INTERVAL_MS),
        timeout_ms.max(MIN_PROBE_TIMEOUT_MS),
    )
}

#[cfg(test)]
mod tests;
