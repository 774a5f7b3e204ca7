//! `Counted`: a `RecoveryPolicy` that counts each decision it passes on, for `/metrics`, and
//! records it in the decision log, for `/decisions`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use wardgate_policy::{
    CrashReport, CrashVerdict, Description, FailedRequest, HealthVerdict, ProbeOutcome,
    ProbeSchedule, Question, ReconnectVerdict, RecoveryPolicy, RetryVerdict, ServerContext,
};

use super::decisions::{Asked, DecisionLog, Verdict};

/// How many times one policy answered each question, by [`Question::index`].
pub type Tally = [std::sync::atomic::AtomicU64; Question::ALL.len()];

pub struct Counted {
    /// The policy's name, as the decision log shows it.
    name: Arc<str>,
    tally: Arc<Tally>,
    inner: Arc<dyn RecoveryPolicy>,
    log: Arc<DecisionLog>,
}

impl Counted {
    pub fn new(
        name: Arc<str>,
        tally: Arc<Tally>,
        inner: Arc<dyn RecoveryPolicy>,
        log: Arc<DecisionLog>,
    ) -> Counted {
        Counted {
            name,
            tally,
            inner,
            log,
        }
    }

    fn decide<V: Verdict>(
        &self,
        server: &ServerContext,
        question: Asked<'_>,
        decide: impl FnOnce(&dyn RecoveryPolicy) -> V,
    ) -> V {
        self.tally[question.question().index()].fetch_add(1, Ordering::Relaxed);
        self.log
            .decide(&self.name, server, question, || decide(&*self.inner))
    }
}

impl RecoveryPolicy for Counted {
    fn describe(&self) -> Description {
        self.inner.describe()
    }

    fn classify(&self, server: &ServerContext, failure: &FailedRequest) -> RetryVerdict {
        self.decide(server, Asked::Classify(failure), |policy| {
            policy.classify(server, failure)
        })
    }

    fn reconnect_delay(
        &self,
        server: &ServerContext,
        attempt: u32,
        jitter_seed: u64,
    ) -> ReconnectVerdict {
        self.decide(server, Asked::ReconnectDelay { attempt }, |policy| {
            policy.reconnect_delay(server, attempt, jitter_seed)
        })
    }

    fn health(&self, server: &ServerContext, probe: &ProbeOutcome) -> HealthVerdict {
        self.decide(server, Asked::Health(probe), |policy| {
            policy.health(server, probe)
        })
    }

    fn probe_schedule(&self, server: &ServerContext, jitter_seed: u64) -> ProbeSchedule {
        self.decide(server, Asked::ProbeSchedule, |policy| {
            policy.probe_schedule(server, jitter_seed)
        })
    }

    fn crash(&self, server: &ServerContext, crash: &CrashReport) -> CrashVerdict {
        self.decide(server, Asked::Crash(crash), |policy| {
            policy.crash(server, crash)
        })
    }
}
