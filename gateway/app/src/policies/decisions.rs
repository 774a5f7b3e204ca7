//! The decision log: every recovery decision of a serving gateway (which server, which
//! question, its inputs, the verdict, the module that answered it and how long it took), in
//! a bounded [`Feed`] the admin API serves as `GET /decisions` and `/decisions/stream`.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use wardgate_engine::Gateway;
use wardgate_policy::answer::AnsweredBy;
use wardgate_policy::{
    Answer, Asked, CrashVerdict, HealthVerdict, ProbeSchedule, ReconnectVerdict, RetryVerdict,
    ServerContext, TransportKind,
};
use wardgate_recovery::simulate::{describe_failure, format_delay};

use crate::feed::{Feed, Item};

/// Decisions kept for late readers: a flapping server's story over several minutes, at a
/// few hundred bytes each.
pub const KEPT: usize = 1024;

/// The bytes of a failure's message a decision record keeps.
pub const MESSAGE_KEPT: usize = 1024;

/// One decision as operators read it.
#[derive(Debug, Clone, Serialize)]
pub struct Decided {
    pub server: String,
    /// The policy the server is bound to.
    pub policy: String,
    /// The question, as the WIT world names it: `classify`, `reconnect-delay`, `health`,
    /// `probe-schedule`, `crash`.
    pub decision: &'static str,
    pub inputs: Map<String, Value>,
    pub verdict: Value,
    /// The verdict in words: "reconnect in 400 ms".
    pub summary: String,
    /// The module that answered, or that faulted: name, version and content hash prefix.
    pub module: Option<String>,
    /// `module`, `builtin`, or `fallback` (the module faulted; the built-in policy answered).
    pub answered_by: &'static str,
    pub fault: Option<String>,
    pub duration_us: u64,
    /// The trace of the call or recovery the decision was made in, when telemetry is on
    /// (the status page links it to the operator's trace viewer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The question and answer as data, for `policy simulate --replay`.
    pub replay: Replay,
}

impl Item for Decided {
    fn kind(&self) -> String {
        "decision".to_owned()
    }

    /// A server whose calls keep failing asks `classify` at every attempt: its decisions
    /// make room among themselves, and the other servers' stay.
    fn group(&self) -> Option<&str> {
        Some(&self.server)
    }
}

/// Where decisions are recorded; the status of a server when asked comes from the gateway
/// once it runs.
pub struct DecisionLog {
    feed: Feed<Decided>,
    gateway: OnceLock<Weak<Gateway>>,
}

impl DecisionLog {
    pub fn new() -> Arc<DecisionLog> {
        Arc::new(DecisionLog {
            feed: Feed::new("decisions", KEPT),
            gateway: OnceLock::new(),
        })
    }

    /// From now on, decisions carry the status of their server when asked.
    pub fn attach(&self, gateway: &Arc<Gateway>) {
        let _ = self.gateway.set(Arc::downgrade(gateway));
    }

    pub fn feed(&self) -> &Feed<Decided> {
        &self.feed
    }

    fn status_of(&self, server: &str) -> Option<String> {
        let gateway = self.gateway.get()?.upgrade()?;
        Some(gateway.any_slot(server)?.status().name().to_owned())
    }
}

/// A verdict as the log records it: as data, and in words ("reconnect in 400 ms").
pub trait Verdict {
    fn recorded(&self) -> (Value, String);
}

/// The inputs of a question as people read them (the status page's decision timeline).
pub(super) fn inputs(asked: &Asked) -> Map<String, Value> {
    let value = match asked {
        Asked::Classify { failure } => json!({
            "operation": failure.operation.as_str(),
            "failure": describe_failure(&failure.kind),
            "attempt": failure.attempt,
            "may_have_reached_server": failure.may_have_reached_server,
            "idempotent": failure.idempotent,
            "read_only": failure.read_only,
        }),
        Asked::ReconnectDelay { attempt, .. } => json!({ "attempt": attempt }),
        Asked::Health { probe } => json!({
            "succeeded": probe.succeeded,
            "latency_ms": probe.latency_ms,
            "consecutive_failures": probe.consecutive_failures,
            "consecutive_successes": probe.consecutive_successes,
        }),
        Asked::ProbeSchedule { .. } => json!({}),
        Asked::Crash { crash } => json!({
            "exit": crash.exit.to_string(),
            "uptime_ms": crash.uptime_ms,
            "crashes_in_window": crash.recent_crashes_ms.len() + 1,
        }),
    };
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Everything a decision was asked with and answered, as data: what `policy simulate
/// --replay` asks a module again, from an exported log. `params` are the ones the module
/// decided with: the policy's, overridden by the server's. Texts that may hold a secret (a
/// failure's message, a parameter) are masked, and a failure's message is cut to
/// [`MESSAGE_KEPT`] bytes (it is a server's own text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replay {
    pub transport: TransportKind,
    pub params: BTreeMap<String, String>,
    pub asked: Asked,
    pub answer: Answer,
}

impl Replay {
    pub(super) fn new(
        server: &ServerContext,
        policy_params: &BTreeMap<String, String>,
        asked: &Asked,
        answer: Answer,
    ) -> Replay {
        let mask = |text: &str| wardgate_engine::secrets::mask(text).into_owned();
        let mut asked = asked.clone();
        if let Asked::Classify { failure } = &mut asked {
            let mut end = failure.message.len().min(MESSAGE_KEPT);
            while !failure.message.is_char_boundary(end) {
                end -= 1;
            }
            failure.message = mask(&failure.message[..end]);
        }
        let mut params: BTreeMap<String, String> = policy_params.clone();
        params.extend(server.params.clone());
        for value in params.values_mut() {
            *value = mask(value);
        }
        Replay {
            transport: server.transport,
            params,
            asked,
            answer,
        }
    }

    /// The server's context as the decision saw it.
    pub fn server(&self, name: &str) -> ServerContext {
        ServerContext {
            name: name.to_owned(),
            transport: self.transport,
            params: self.params.clone(),
        }
    }
}

impl Verdict for Answer {
    fn recorded(&self) -> (Value, String) {
        match self {
            Answer::Retry(verdict) => verdict.recorded(),
            Answer::Reconnect(verdict) => verdict.recorded(),
            Answer::Health(verdict) => verdict.recorded(),
            Answer::Schedule(verdict) => verdict.recorded(),
            Answer::Crash(verdict) => verdict.recorded(),
        }
    }
}

impl Verdict for RetryVerdict {
    fn recorded(&self) -> (Value, String) {
        match *self {
            RetryVerdict::RetryAfter { delay_ms } => (
                json!({ "retry_after_ms": delay_ms }),
                format!("retry after {}", format_delay(delay_ms)),
            ),
            RetryVerdict::GiveUp { status } => (
                json!({ "give_up": status.as_str() }),
                format!("give up ({})", status.as_str()),
            ),
        }
    }
}

impl Verdict for ReconnectVerdict {
    fn recorded(&self) -> (Value, String) {
        match *self {
            ReconnectVerdict::RetryAfter { delay_ms } => (
                json!({ "retry_after_ms": delay_ms }),
                format!("reconnect in {}", format_delay(delay_ms)),
            ),
            ReconnectVerdict::Stop => (
                json!({ "stop": true }),
                "stop reconnecting (permanently failed)".to_owned(),
            ),
        }
    }
}

impl Verdict for HealthVerdict {
    fn recorded(&self) -> (Value, String) {
        let word = match self {
            HealthVerdict::Healthy => "healthy",
            HealthVerdict::Degraded => "degraded",
            HealthVerdict::Unhealthy => "unhealthy",
        };
        (json!({ "health": word }), word.to_owned())
    }
}

impl Verdict for ProbeSchedule {
    fn recorded(&self) -> (Value, String) {
        (
            json!({ "interval_ms": self.interval_ms, "timeout_ms": self.timeout_ms }),
            format!(
                "probe every {}, timeout {}",
                format_delay(self.interval_ms),
                format_delay(self.timeout_ms)
            ),
        )
    }
}

impl Verdict for CrashVerdict {
    fn recorded(&self) -> (Value, String) {
        match *self {
            CrashVerdict::RestartAfter { delay_ms } => (
                json!({ "restart_after_ms": delay_ms }),
                format!("restart in {}", format_delay(delay_ms)),
            ),
            CrashVerdict::GiveUp => (
                json!({ "give_up": true }),
                "give up (permanently failed)".to_owned(),
            ),
        }
    }
}

impl DecisionLog {
    /// Asks `decide` the question `asked` about `server` for `policy`, records the decision,
    /// and returns the answer and the decision's number in the log.
    pub fn decide<V: Verdict + Copy + Into<Answer>>(
        &self,
        policy: &str,
        server: &ServerContext,
        policy_params: &BTreeMap<String, String>,
        asked: &Asked,
        decide: impl FnOnce() -> V,
    ) -> (V, u64) {
        let started = Instant::now();
        let (answer, answered_by) = wardgate_policy::answer::observe(decide);
        let duration_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let mut shown = inputs(asked);
        if let Some(status) = self.status_of(&server.name) {
            shown.insert("status".to_owned(), Value::String(status));
        }
        let (verdict, summary) = answer.recorded();
        let (module, answered_by, fault) = match answered_by {
            AnsweredBy::Module { version } => (Some(version), "module", None),
            AnsweredBy::Fallback { version, fault } => (
                Some(version),
                "fallback",
                Some(wardgate_engine::secrets::mask(&fault).into_owned()),
            ),
            AnsweredBy::Builtin => (None, "builtin", None),
        };
        let mut decided = Decided {
            server: server.name.clone(),
            policy: policy.to_owned(),
            decision: asked.question().wit_name(),
            inputs: shown,
            verdict,
            summary,
            module,
            answered_by,
            fault,
            duration_us,
            trace_id: None,
            replay: Replay::new(server, policy_params, asked, answer.into()),
        };
        decided.trace_id = trace(&decided);
        let id = self.feed.record(decided);
        (answer, id)
    }
}

/// The decision as an event on the span it was made in (a call's), or in a span of its own
/// (a supervisor's decision, made outside any request): question, inputs, verdict, module
/// and version, who answered, and how long it took; every text masked. The trace it is in,
/// if any (for the status page's link).
fn trace(decided: &Decided) -> Option<String> {
    use wardgate_engine::secrets::mask;
    use wardgate_engine::telemetry::{current_trace_id, where_to_record, TARGET};
    let own = where_to_record(&decided.server, || {
        format!("server {} {}", decided.server, decided.decision)
    })?;
    let _entered = own.as_ref().map(tracing::Span::enter);
    let inputs = Value::Object(decided.inputs.clone()).to_string();
    tracing::info!(
        target: TARGET,
        server = %decided.server,
        policy = %decided.policy,
        question = decided.decision,
        inputs = %mask(&inputs),
        verdict = %mask(&decided.verdict.to_string()),
        summary = %mask(&decided.summary),
        module = decided.module.as_deref().unwrap_or("builtin"),
        answered_by = decided.answered_by,
        fault = decided.fault.as_deref().map(|fault| mask(fault).into_owned()),
        duration_us = i64::try_from(decided.duration_us).unwrap_or(i64::MAX),
        "wardgate.policy.decision"
    );
    current_trace_id()
}
