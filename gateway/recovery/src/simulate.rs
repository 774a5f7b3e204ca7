//! `wardgate policy simulate`: drives the recovery [`Machine`](crate::Machine) through a
//! scripted world on simulated time.
//!
//! A [`Script`] says what happens to one server and when (it goes down, turns slow,
//! crashes, tool calls arrive); [`run`] plays it against a policy and returns the
//! [`Timeline`] of events, decisions and statuses. The decisions are the machine's, the
//! same the gateway's supervisor makes: this module only plays the world around it
//! (connections, probes and calls succeed or fail as the script says, at once). Nothing
//! sleeps and nothing is random: the clock is a number and jitter seeds are derived from
//! `--seed`, so a run is reproducible and two policies can be compared step by step.

mod scenario;
mod world;

use wardgate_policy::{
    ExitInfo, FailureKind, Question, RecoveryPolicy, ServerContext, TransportKind,
};

pub use scenario::{builtin_scenario, NAMES as SCENARIOS};
pub use world::{status_text, REQUEST_TIMEOUT_MS};

pub use crate::call::CallHints;

/// Something that happens to the simulated server, or to the gateway around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorldEvent {
    /// The server answers normally again (ends an outage, slowness, auth failure or crash loop).
    Up,
    /// Connections, calls and probes fail with `kind`.
    Down { kind: FailureKind },
    /// Connections succeed, but calls and probes time out.
    Slow,
    /// Connections and calls are rejected with this HTTP status (401 or 403).
    AuthRejected { status: u16 },
    /// The running process dies now (for an HTTP server: its connection closes).
    Crash { exit: ExitInfo },
    /// Every process started from now on dies `every_ms` after it starts.
    CrashLoop { every_ms: u64, exit: ExitInfo },
    /// A tool call arrives; with `fails_with`, its first attempt fails that way whatever
    /// the server's state (`reached`: the request may have reached the server).
    Call {
        hints: CallHints,
        fails_with: Option<(FailureKind, bool)>,
    },
    /// An operator runs `wardgate reconnect`: backoff and crash budget reset, connect now.
    OperatorReconnect,
}

/// One event of a script, at a time in milliseconds from the start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Happening {
    pub at_ms: u64,
    pub event: WorldEvent,
}

/// What happens to one server, and when: a built-in scenario or a replayed trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    pub name: String,
    /// One line for the reader: what the world does.
    pub summary: String,
    pub transport: TransportKind,
    /// In time order.
    pub events: Vec<Happening>,
    /// The simulation stops here.
    pub end_ms: u64,
}

/// One line of a timeline: what happened, what the policy decided, the status after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub at_ms: u64,
    pub event: String,
    /// Empty when no decision was asked of the policy.
    pub decision: String,
    /// The delay the decision chose, if it chose one.
    pub delay_ms: Option<u64>,
    /// The questions put to the policy for this line, in the order they were asked (the
    /// gateway's decision log and metrics name them the same way).
    pub asked: Vec<Question>,
    pub status: String,
}

/// Everything a run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    pub entries: Vec<Entry>,
    /// The run hit its step limit (a policy reconnecting with no delay forever, say).
    pub truncated: bool,
}

/// Plays `script` against `policy` for `server`; `seed` makes the jitter reproducible.
pub fn run(
    policy: &dyn RecoveryPolicy,
    server: &ServerContext,
    script: &Script,
    seed: u64,
) -> Timeline {
    world::World::new(policy, server, seed).run(script).0
}

/// [`run`], and its journals: what a replay through the gateway must reproduce.
pub fn run_journaled(
    policy: &dyn RecoveryPolicy,
    server: &ServerContext,
    script: &Script,
    seed: u64,
) -> (Timeline, Journals) {
    world::World::new(policy, server, seed).run(script)
}

/// What a simulation did, as the gateway journals it.
#[derive(Debug, Clone, Default)]
pub struct Journals {
    /// Every input the recovery machine was fed, with what followed.
    pub machine: Vec<crate::Record>,
    /// Every step of every call's machine that did something.
    pub calls: Vec<crate::call::CallRecord>,
}

/// The delay before each reconnect attempt, `None` where the policy stops: `(attempt, delay_ms)`.
pub type BackoffCurve = Vec<(u32, Option<u64>)>;

/// Attempts shown on the backoff chart, unless the policy stops earlier.
pub const BACKOFF_ATTEMPTS: u32 = 12;

/// The reconnect delay for attempts 1..=`attempts` (`None`: the policy stops there; the
/// curve ends at the first stop). Attempt `n` is seeded by its number
/// (`jitter_seed(seed, 0, n)`), not as the machine seeds its `n`-th jittered decision, so
/// with a jittered policy a delay here can differ from the one the timeline shows.
pub fn backoff_curve(
    policy: &dyn RecoveryPolicy,
    server: &ServerContext,
    seed: u64,
    attempts: u32,
) -> BackoffCurve {
    let mut curve = Vec::new();
    for attempt in 1..=attempts {
        let verdict =
            policy.reconnect_delay(server, attempt, crate::jitter_seed(seed, 0, attempt.into()));
        match verdict {
            wardgate_policy::ReconnectVerdict::RetryAfter { delay_ms } => {
                curve.push((attempt, Some(delay_ms)))
            }
            wardgate_policy::ReconnectVerdict::Stop => {
                curve.push((attempt, None));
                break;
            }
        }
    }
    curve
}

/// `t=+1.02s`: a simulated time as the timeline shows it.
pub fn format_time(at_ms: u64) -> String {
    format!("t=+{}.{:02}s", at_ms / 1000, (at_ms % 1000) / 10)
}

/// `500 ms`, `2.04 s`, `3 min 5 s`: a delay as a decision states it.
pub fn format_delay(delay_ms: u64) -> String {
    match delay_ms {
        0..=999 => format!("{delay_ms} ms"),
        1_000..=59_999 if delay_ms.is_multiple_of(1000) => format!("{} s", delay_ms / 1000),
        1_000..=59_999 => format!("{}.{:02} s", delay_ms / 1000, (delay_ms % 1000) / 10),
        _ => {
            let seconds = (delay_ms + 500) / 1000;
            match (seconds / 60, seconds % 60) {
                (minutes, 0) => format!("{minutes} min"),
                (minutes, seconds) => format!("{minutes} min {seconds} s"),
            }
        }
    }
}

/// How a failure reads in a timeline: "connection refused", "HTTP 401 Unauthorized".
pub fn describe_failure(kind: &FailureKind) -> String {
    match kind {
        FailureKind::ConnectRefused => "connection refused".into(),
        FailureKind::TimedOut => "timed out".into(),
        FailureKind::Dns => "host name did not resolve".into(),
        FailureKind::ConnectionReset => "connection reset".into(),
        FailureKind::ConnectionClosed => "connection closed".into(),
        FailureKind::HttpStatus(status) => {
            // As the gateway says it (`failure.rs`), for the statuses recovery meets.
            let reason = match status {
                401 => " Unauthorized",
                403 => " Forbidden",
                404 => " Not Found",
                429 => " Too Many Requests",
                500 => " Internal Server Error",
                502 => " Bad Gateway",
                503 => " Service Unavailable",
                504 => " Gateway Timeout",
                _ => "",
            };
            format!("HTTP {status}{reason}")
        }
        FailureKind::SessionExpired => "session expired (HTTP 404)".into(),
        FailureKind::JsonRpc { code } => format!("JSON-RPC error {code}"),
        FailureKind::ProcessExited { code, signal } => format!(
            "process {}",
            ExitInfo {
                code: *code,
                signal: *signal
            }
        ),
        FailureKind::Protocol => "protocol error".into(),
        FailureKind::Other => "other failure".into(),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod format_tests {
    use super::*;

    #[test]
    fn times_and_delays_read_as_the_timeline_shows_them() {
        assert_eq!(format_time(1_020), "t=+1.02s");
        assert_eq!(format_time(600_000), "t=+600.00s");
        assert_eq!(format_delay(500), "500 ms");
        assert_eq!(format_delay(2_040), "2.04 s");
        assert_eq!(format_delay(20_000), "20 s");
        assert_eq!(format_delay(180_000), "3 min");
        assert_eq!(format_delay(125_400), "2 min 5 s");
    }
}
