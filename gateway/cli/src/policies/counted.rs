//! `Counted`: a `RecoveryPolicy` that counts each decision it passes on, for `/metrics`, and
//! records it in the decision log, for `/decisions`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use wardgate_policy::{
    CrashReport, CrashVerdict, Description, FailedRequest, HealthVerdict, ProbeOutcome,
    ProbeSchedule, ReconnectVerdict, RecoveryPolicy, RetryVerdict, ServerContext,
};

use super::decisions::{DecisionLog, Question, Verdict};

/// The decisions counted, in the order of a [`Tally`].
pub const DECISIONS: [&str; 5] = [
    "classify",
    "reconnect_delay",
    "health",
    "probe_schedule",
    "crash",
];

/// How many decisions of each kind ([`DECISIONS`]) one policy made.
pub type Tally = [std::sync::atomic::AtomicU64; DECISIONS.len()];

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
        counter: usize,
        server: &ServerContext,
        question: Question<'_>,
        decide: impl FnOnce(&dyn RecoveryPolicy) -> V,
    ) -> V {
        self.tally[counter].fetch_add(1, Ordering::Relaxed);
        self.log
            .decide(&self.name, server, question, || decide(&*self.inner))
    }
}

impl RecoveryPolicy for Counted {
    fn describe(&self) -> Description {
        self.inner.describe()
    }

    fn classify(&self, server: &ServerContext, failure: &FailedRequest) -> RetryVerdict {
        self.decide(0, server, Question::Classify(failure), |policy| {
            policy.classify(server, failure)
        })
    }

    fn reconnect_delay(
        &self,
        server: &ServerContext,
        attempt: u32,
        jitter_seed: u64,
    ) -> ReconnectVerdict {
        self.decide(1, server, Question::ReconnectDelay { attempt }, |policy| {
            policy.reconnect_delay(server, attempt, jitter_seed)
        })
    }

    fn health(&self, server: &ServerContext, probe: &ProbeOutcome) -> HealthVerdict {
        self.decide(2, server, Question::Health(probe), |policy| {
            policy.health(server, probe)
        })
    }

    fn probe_schedule(&self, server: &ServerContext, jitter_seed: u64) -> ProbeSchedule {
        self.decide(3, server, Question::ProbeSchedule, |policy| {
            policy.probe_schedule(server, jitter_seed)
        })
    }

    fn crash(&self, server: &ServerContext, crash: &CrashReport) -> CrashVerdict {
        self.decide(4, server, Question::Crash(crash), |policy| {
            policy.crash(server, crash)
        })
    }
}
