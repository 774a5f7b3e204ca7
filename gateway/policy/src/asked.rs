//! One decision as data: the question with every input it was asked with ([`Asked`]) and
//! the verdict it got ([`Answer`]). The decision log records both, so that a decision can be
//! asked again of another policy: of a shadow module beside the live one, and of a module
//! `policy simulate --replay` is given.

use serde::{Deserialize, Serialize};

use crate::{
    CrashReport, CrashVerdict, FailedRequest, HealthVerdict, ProbeOutcome, ProbeSchedule, Question,
    ReconnectVerdict, RecoveryPolicy, RetryVerdict, ServerContext,
};

/// A question with all of its inputs but the server's context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "question", rename_all = "kebab-case")]
pub enum Asked {
    Classify { failure: FailedRequest },
    ReconnectDelay { attempt: u32, jitter_seed: u64 },
    Health { probe: ProbeOutcome },
    ProbeSchedule { jitter_seed: u64 },
    Crash { crash: CrashReport },
}

/// The verdict of one question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", content = "of", rename_all = "kebab-case")]
pub enum Answer {
    Retry(RetryVerdict),
    Reconnect(ReconnectVerdict),
    Health(HealthVerdict),
    Schedule(ProbeSchedule),
    Crash(CrashVerdict),
}

impl Asked {
    pub fn question(&self) -> Question {
        match self {
            Asked::Classify { .. } => Question::Classify,
            Asked::ReconnectDelay { .. } => Question::ReconnectDelay,
            Asked::Health { .. } => Question::Health,
            Asked::ProbeSchedule { .. } => Question::ProbeSchedule,
            Asked::Crash { .. } => Question::Crash,
        }
    }

    /// Asks `policy` this question about `server`.
    pub fn ask(&self, policy: &dyn RecoveryPolicy, server: &ServerContext) -> Answer {
        match self {
            Asked::Classify { failure } => Answer::Retry(policy.classify(server, failure)),
            Asked::ReconnectDelay {
                attempt,
                jitter_seed,
            } => Answer::Reconnect(policy.reconnect_delay(server, *attempt, *jitter_seed)),
            Asked::Health { probe } => Answer::Health(policy.health(server, probe)),
            Asked::ProbeSchedule { jitter_seed } => {
                Answer::Schedule(policy.probe_schedule(server, *jitter_seed))
            }
            Asked::Crash { crash } => Answer::Crash(policy.crash(server, crash)),
        }
    }
}

impl Answer {
    /// What the verdict does, without its numbers: `retry`, `give up (offline)`,
    /// `reconnect`, `stop`, `healthy`, `probe`, `restart`, `give up`. Two answers of one
    /// kind differ only in a delay or an interval.
    pub fn kind(&self) -> String {
        match self {
            Answer::Retry(RetryVerdict::RetryAfter { .. }) => "retry".to_owned(),
            Answer::Retry(RetryVerdict::GiveUp { status }) => {
                format!("give up ({})", status.as_str())
            }
            Answer::Reconnect(ReconnectVerdict::RetryAfter { .. }) => "reconnect".to_owned(),
            Answer::Reconnect(ReconnectVerdict::Stop) => "stop".to_owned(),
            Answer::Health(HealthVerdict::Healthy) => "healthy".to_owned(),
            Answer::Health(HealthVerdict::Degraded) => "degraded".to_owned(),
            Answer::Health(HealthVerdict::Unhealthy) => "unhealthy".to_owned(),
            Answer::Schedule(_) => "probe".to_owned(),
            Answer::Crash(CrashVerdict::RestartAfter { .. }) => "restart".to_owned(),
            Answer::Crash(CrashVerdict::GiveUp) => "give up".to_owned(),
        }
    }

    /// The delay or interval the verdict waits, if it has one (ms).
    pub fn delay_ms(&self) -> Option<u64> {
        match *self {
            Answer::Retry(RetryVerdict::RetryAfter { delay_ms })
            | Answer::Reconnect(ReconnectVerdict::RetryAfter { delay_ms })
            | Answer::Crash(CrashVerdict::RestartAfter { delay_ms }) => Some(delay_ms),
            Answer::Schedule(schedule) => Some(schedule.interval_ms),
            _ => None,
        }
    }
}

macro_rules! from_verdict {
    ($($verdict:ty => $variant:ident),*) => {$(
        impl From<$verdict> for Answer {
            fn from(verdict: $verdict) -> Answer {
                Answer::$variant(verdict)
            }
        }
    )*};
}

from_verdict!(
    RetryVerdict => Retry,
    ReconnectVerdict => Reconnect,
    HealthVerdict => Health,
    ProbeSchedule => Schedule,
    CrashVerdict => Crash
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Builtin, ExitInfo, FailureKind, Operation, TransportKind};

    #[test]
    fn a_recorded_question_reads_back_and_gets_the_same_answer() {
        let server = ServerContext::new("local", TransportKind::Stdio);
        let asked = [
            Asked::Classify {
                failure: FailedRequest {
                    operation: Operation::Call,
                    kind: FailureKind::HttpStatus(503),
                    message: "unavailable".to_owned(),
                    attempt: 1,
                    may_have_reached_server: true,
                    idempotent: false,
                    read_only: true,
                },
            },
            Asked::ReconnectDelay {
                attempt: 3,
                jitter_seed: u64::MAX,
            },
            Asked::Crash {
                crash: CrashReport {
                    exit: ExitInfo {
                        code: None,
                        signal: Some(9),
                    },
                    uptime_ms: 20_000,
                    now_ms: 61_000,
                    recent_crashes_ms: vec![1_000, 31_000],
                },
            },
        ];
        let policy = Builtin::default();
        for asked in asked {
            let text = serde_json::to_string(&asked).unwrap();
            let back: Asked = serde_json::from_str(&text).unwrap();
            assert_eq!(back, asked, "{text}");
            let answer = asked.ask(&policy, &server);
            let text = serde_json::to_string(&answer).unwrap();
            assert_eq!(serde_json::from_str::<Answer>(&text).unwrap(), answer);
            assert_eq!(back.ask(&policy, &server), answer);
        }
    }
}
