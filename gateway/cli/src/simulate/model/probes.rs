//! Health probes of a live connection: counters, the probe plan and the health verdict.

use super::*;

impl Model<'_> {
    pub(super) fn probe(&mut self, generation: u64) {
        // A probe that times out reports at its deadline; any other outcome at once.
        let latency_ms = match self.condition {
            Condition::Slow => self.probe_timeout_ms,
            _ => 0,
        };
        self.schedule(
            self.after(latency_ms),
            Action::ProbeDone {
                generation,
                latency_ms,
            },
        );
    }

    pub(super) fn probe_done(&mut self, generation: u64, latency_ms: u64) {
        let (succeeded, what) = match &self.condition {
            Condition::Up => (true, "probe ok".to_string()),
            Condition::Slow => (
                false,
                format!("probe timed out after {}", format_delay(latency_ms)),
            ),
            Condition::Down(kind) => (false, format!("probe failed: {}", describe_failure(kind))),
            Condition::AuthRejected(status) => (false, format!("probe failed: HTTP {status}")),
        };
        if succeeded {
            self.consecutive_successes += 1;
            self.consecutive_failures = 0;
        } else {
            self.consecutive_failures += 1;
            self.consecutive_successes = 0;
        }
        let probe = ProbeOutcome {
            succeeded,
            latency_ms,
            consecutive_failures: self.consecutive_failures,
            consecutive_successes: self.consecutive_successes,
        };
        let plan = self.policy.probe_schedule(self.server, self.seed(3));
        self.probe_timeout_ms = plan.timeout_ms.max(1);
        let interval_ms = plan.interval_ms.max(MIN_PROBE_INTERVAL_MS);
        self.schedule(self.after(interval_ms), Action::Probe { generation });
        let next = format!("next probe in {}", format_delay(interval_ms));
        let degraded = matches!(self.status, Status::Online { degraded: true });
        match self.policy.health(self.server, &probe) {
            HealthVerdict::Healthy if degraded => {
                self.status = Status::Online { degraded: false };
                self.record(what, format!("healthy again; {next}"), Some(interval_ms));
            }
            HealthVerdict::Healthy if succeeded => {
                self.quiet_probe_ok();
            }
            HealthVerdict::Healthy => {
                self.record(what, format!("healthy; {next}"), Some(interval_ms))
            }
            HealthVerdict::Degraded => {
                self.status = Status::Online { degraded: true };
                let verdict = if degraded {
                    "still degraded"
                } else {
                    "degraded"
                };
                self.record(what, format!("{verdict}; {next}"), Some(interval_ms));
            }
            HealthVerdict::Unhealthy => {
                self.record(what, "unhealthy → drop the connection", None);
                self.connection_lost(FailureStatus::Offline, "judged unhealthy");
            }
        }
    }
}
