//! `Counted`: a `RecoveryPolicy` that counts each decision it passes on, for `/metrics`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use wardgate_policy::{
    CrashReport, CrashVerdict, Description, FailedRequest, HealthVerdict, ProbeOutcome,
    ProbeSchedule, ReconnectVerdict, RecoveryPolicy, RetryVerdict, ServerContext,
};

use super::book::Entry;

/// The decisions counted, in the order of `Entry::decisions`.
pub const DECISIONS: [&str; 5] = [
    "classify",
    "reconnect_delay",
    "health",
    "probe_schedule",
    "crash",
];

pub struct Counted {
    entry: Arc<Entry>,
    inner: Arc<dyn RecoveryPolicy>,
}

impl Counted {
    pub fn new(entry: Arc<Entry>, inner: Arc<dyn RecoveryPolicy>) -> Counted {
        Counted { entry, inner }
    }

    fn count(&self, decision: usize) {
        self.entry.decisions[decision].fetch_add(1, Ordering::Relaxed);
    }
}

impl RecoveryPolicy for Counted {
    fn describe(&self) -> Description {
        self.inner.describe()
    }

    fn classify(&self, server: &ServerContext, failure: &FailedRequest) -> RetryVerdict {
        self.count(0);
        self.inner.classify(server, failure)
    }

    fn reconnect_delay(
        &self,
        server: &ServerContext,
        attempt: u32,
        jitter_seed: u64,
    ) -> ReconnectVerdict {
        self.count(1);
        self.inner.reconnect_delay(server, attempt, jitter_seed)
    }

    fn health(&self, server: &ServerContext, probe: &ProbeOutcome) -> HealthVerdict {
        self.count(2);
        self.inner.health(server, probe)
    }

    fn probe_schedule(&self, server: &ServerContext, jitter_seed: u64) -> ProbeSchedule {
        self.count(3);
        self.inner.probe_schedule(server, jitter_seed)
    }

    fn crash(&self, server: &ServerContext, crash: &CrashReport) -> CrashVerdict {
        self.count(4);
        self.inner.crash(server, crash)
    }
}
