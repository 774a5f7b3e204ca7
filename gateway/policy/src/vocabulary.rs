//! The words decisions are made of: failures, exits, probe outcomes and verdicts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How the gateway talks to an upstream server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    Stdio,
    StreamableHttp,
    Sse,
}

impl TransportKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Stdio => "stdio",
            TransportKind::StreamableHttp => "streamable-http",
            TransportKind::Sse => "sse",
        }
    }
}

/// What the gateway was doing when a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    Initialize,
    List,
    Call,
    Probe,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Initialize => "initialize",
            Operation::List => "list",
            Operation::Call => "call",
            Operation::Probe => "probe",
        }
    }
}

/// Where a request failed and what happened, as far as the engine can tell.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Nothing listens at the address (TCP RST on connect), or a process could not be spawned.
    ConnectRefused,
    /// No answer within the deadline.
    TimedOut,
    /// The host name did not resolve.
    Dns,
    /// The connection was reset or broke while the request was under way.
    ConnectionReset,
    /// The transport closed (EOF on stdio, stream ended) with no exit status known.
    ConnectionClosed,
    /// The server answered with an HTTP status that is not a success.
    HttpStatus(u16),
    /// The Streamable HTTP session is gone (HTTP 404 on a session request).
    SessionExpired,
    /// The server answered with a JSON-RPC error.
    JsonRpc { code: i32 },
    /// The stdio process exited.
    ProcessExited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// The server sent something that is not valid MCP.
    Protocol,
    /// Anything else.
    Other,
}

impl FailureKind {
    /// Failures that mean "the server is not reachable right now".
    pub fn is_connection_class(&self) -> bool {
        matches!(
            self,
            FailureKind::ConnectRefused
                | FailureKind::TimedOut
                | FailureKind::Dns
                | FailureKind::ConnectionReset
                | FailureKind::ConnectionClosed
                | FailureKind::ProcessExited { .. }
                | FailureKind::SessionExpired
        )
    }

    /// Failures that mean "the credentials are not accepted".
    pub fn is_auth(&self) -> bool {
        matches!(self, FailureKind::HttpStatus(401 | 403))
    }
}

/// One failed attempt of a request, as handed to [`crate::RecoveryPolicy::classify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedRequest {
    pub operation: Operation,
    pub kind: FailureKind,
    pub message: String,
    /// 1-based number of the attempt that just failed.
    pub attempt: u32,
    /// The request may have been received (and acted on) by the server.
    pub may_have_reached_server: bool,
    /// The tool declares `idempotentHint` (replaying it is harmless).
    pub idempotent: bool,
    /// The tool declares `readOnlyHint`.
    pub read_only: bool,
}

/// The server a decision is about, with the operator's per-server parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerContext {
    pub name: String,
    pub transport: TransportKind,
    /// Free-form `key = value` parameters from the config (`max_crashes = "5"`).
    pub params: BTreeMap<String, String>,
}

impl ServerContext {
    pub fn new(name: impl Into<String>, transport: TransportKind) -> Self {
        Self {
            name: name.into(),
            transport,
            params: BTreeMap::new(),
        }
    }

    /// A parameter parsed as `T`, if present and well-formed.
    pub fn param<T: std::str::FromStr>(&self, key: &str) -> Option<T> {
        self.params
            .get(key)
            .and_then(|value| value.trim().parse().ok())
    }
}

/// The status a server is left in when a request gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureStatus {
    Offline,
    Error,
    RequiresReauth,
}

impl FailureStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureStatus::Offline => "offline",
            FailureStatus::Error => "error",
            FailureStatus::RequiresReauth => "requires_reauth",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryVerdict {
    RetryAfter { delay_ms: u64 },
    GiveUp { status: FailureStatus },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReconnectVerdict {
    RetryAfter {
        delay_ms: u64,
    },
    /// Stop reconnecting: the server stays permanently failed until an operator reconnects it.
    Stop,
}

/// The outcome of one health probe plus the consecutive counts including it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    pub succeeded: bool,
    pub latency_ms: u64,
    pub consecutive_failures: u32,
    pub consecutive_successes: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthVerdict {
    Healthy,
    /// A warning only: the server keeps serving.
    Degraded,
    Unhealthy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeSchedule {
    pub interval_ms: u64,
    pub timeout_ms: u64,
}

/// How a stdio process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (_, Some(signal)) => write!(f, "killed by signal {signal}"),
            (Some(code), None) => write!(f, "exited with code {code}"),
            (None, None) => write!(f, "exited"),
        }
    }
}

/// A stdio crash, with the history the budget is judged on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashReport {
    pub exit: ExitInfo,
    pub uptime_ms: u64,
    /// Now, on the engine's clock, in milliseconds.
    pub now_ms: u64,
    /// Times of earlier crashes (oldest first, this one excluded), on the same clock.
    pub recent_crashes_ms: Vec<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrashVerdict {
    RestartAfter { delay_ms: u64 },
    GiveUp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description {
    pub name: String,
    pub version: String,
    pub intent: String,
}

/// A jitter factor in [-spread, +spread] derived from a seed, deterministic for replay.
pub fn jitter(seed: u64, spread: f64) -> f64 {
    // SplitMix64: cheap, well-distributed, and identical in every guest language.
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let unit = (z >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
    (unit * 2.0 - 1.0) * spread
}
