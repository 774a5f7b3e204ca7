//! `Counted`: a `RecoveryPolicy` that counts each decision it passes on, for `/metrics`,
//! records it in the decision log, for `/decisions`, and hands it to the policy's shadow, if
//! it has one, to be asked again off this thread.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use wardgate_policy::{
    Answer, Asked, CrashReport, CrashVerdict, Description, FailedRequest, HealthVerdict,
    ProbeOutcome, ProbeSchedule, Question, ReconnectVerdict, RecoveryPolicy, RetryVerdict,
    ServerContext,
};

use super::decisions::{DecisionLog, Verdict};
use super::shadow::ShadowSlot;

/// How many times one policy answered each question, by [`Question::index`].
pub type Tally = [std::sync::atomic::AtomicU64; Question::ALL.len()];

pub struct Counted {
    /// The policy's name, as the decision log shows it.
    name: Arc<str>,
    tally: Arc<Tally>,
    inner: Arc<dyn RecoveryPolicy>,
    log: Arc<DecisionLog>,
    shadow: Arc<ShadowSlot>,
    /// The policy-wide parameters the module decides with, recorded with each decision.
    params: Arc<BTreeMap<String, String>>,
}

impl Counted {
    pub fn new(
        name: Arc<str>,
        tally: Arc<Tally>,
        inner: Arc<dyn RecoveryPolicy>,
        log: Arc<DecisionLog>,
        shadow: Arc<ShadowSlot>,
        params: Arc<BTreeMap<String, String>>,
    ) -> Counted {
        Counted {
            name,
            tally,
            inner,
            log,
            shadow,
            params,
        }
    }

    fn decide<V: Verdict + Copy + Into<Answer>>(
        &self,
        server: &ServerContext,
        asked: Asked,
        decide: impl FnOnce(&dyn RecoveryPolicy) -> V,
    ) -> V {
        self.tally[asked.question().index()].fetch_add(1, Ordering::Relaxed);
        let (answer, decision) = self
            .log
            .decide(&self.name, server, &self.params, &asked, || {
                decide(&*self.inner)
            });
        self.shadow.after(decision, server, asked, answer.into());
        answer
    }
}

impl RecoveryPolicy for Counted {
    fn describe(&self) -> Description {
        self.inner.describe()
    }

    fn classify(&self, server: &ServerContext, failure: &FailedRequest) -> RetryVerdict {
        let asked = Asked::Classify {
            failure: failure.clone(),
        };
        self.decide(server, asked, |policy| policy.classify(server, failure))
    }

    fn reconnect_delay(
        &self,
        server: &ServerContext,
        attempt: u32,
        jitter_seed: u64,
    ) -> ReconnectVerdict {
        let asked = Asked::ReconnectDelay {
            attempt,
            jitter_seed,
        };
        self.decide(server, asked, |policy| {
            policy.reconnect_delay(server, attempt, jitter_seed)
        })
    }

    fn health(&self, server: &ServerContext, probe: &ProbeOutcome) -> HealthVerdict {
        self.decide(server, Asked::Health { probe: *probe }, |policy| {
            policy.health(server, probe)
        })
    }

    fn probe_schedule(&self, server: &ServerContext, jitter_seed: u64) -> ProbeSchedule {
        self.decide(server, Asked::ProbeSchedule { jitter_seed }, |policy| {
            policy.probe_schedule(server, jitter_seed)
        })
    }

    fn crash(&self, server: &ServerContext, crash: &CrashReport) -> CrashVerdict {
        let asked = Asked::Crash {
            crash: crash.clone(),
        };
        self.decide(server, asked, |policy| policy.crash(server, crash))
    }
}
