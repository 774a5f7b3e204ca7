//! Connecting, losing a connection, reconnect backoff and crashes: the supervisor's side of the model.

use super::*;

impl Model<'_> {
    pub(super) fn connect(&mut self, why: &str) {
        // Any scheduled reconnect is superseded by this attempt.
        self.connect_token += 1;
        let failure = match &self.condition {
            Condition::Up | Condition::Slow => None,
            Condition::Down(kind) => Some(kind.clone()),
            Condition::AuthRejected(status) => Some(FailureKind::HttpStatus(*status)),
        };
        let Some(kind) = failure else {
            self.generation += 1;
            self.status = Status::Online { degraded: false };
            self.reconnect_attempt = 0;
            self.consecutive_failures = 0;
            self.consecutive_successes = 0;
            let generation = self.generation;
            if self.server.transport == TransportKind::Stdio {
                self.process_started_ms = Some(self.now_ms);
                if let Some((every_ms, _)) = self.crash_loop {
                    self.schedule(self.after(every_ms), Action::ProcessDies { generation });
                }
            }
            let plan = self.policy.probe_schedule(self.server, self.seed(1));
            self.probe_timeout_ms = plan.timeout_ms.max(1);
            let interval_ms = plan.interval_ms.max(MIN_PROBE_INTERVAL_MS);
            self.schedule(self.after(interval_ms), Action::Probe { generation });
            self.record(
                format!("{why}: connected"),
                format!("first probe in {}", format_delay(interval_ms)),
                Some(interval_ms),
            );
            return;
        };
        // The engine decides this status itself; the policy only picks the reconnect delay.
        let status = if kind.is_auth() {
            FailureStatus::RequiresReauth
        } else if kind.is_connection_class() {
            FailureStatus::Offline
        } else {
            FailureStatus::Error
        };
        self.status = Status::Failed(status);
        let (decision, delay_ms) = self.schedule_reconnect(status);
        self.record(
            format!("{why}: {}", describe_failure(&kind)),
            decision,
            delay_ms,
        );
    }

    /// The supervisor's `schedule_reconnect`: ask for the next delay, or park.
    pub(super) fn schedule_reconnect(&mut self, status: FailureStatus) -> (String, Option<u64>) {
        if status == FailureStatus::RequiresReauth {
            self.status = Status::Failed(status);
            return ("wait for an operator".into(), None);
        }
        self.reconnect_attempt += 1;
        let attempt = self.reconnect_attempt;
        match self
            .policy
            .reconnect_delay(self.server, attempt, self.seed(2))
        {
            ReconnectVerdict::RetryAfter { delay_ms } => {
                self.status = Status::Reconnecting { attempt };
                self.connect_token += 1;
                let (token, why) = (self.connect_token, format!("reconnect #{attempt}"));
                self.schedule(self.after(delay_ms), Action::Connect { token, why });
                (
                    format!("reconnect in {}", format_delay(delay_ms)),
                    Some(delay_ms),
                )
            }
            ReconnectVerdict::Stop => {
                self.status = Status::PermanentlyFailed;
                ("stop reconnecting → permanently_failed".into(), None)
            }
        }
    }

    pub(super) fn connection_lost(&mut self, status: FailureStatus, reason: &str) {
        self.generation += 1;
        self.process_started_ms = None;
        self.status = Status::Failed(status);
        let (decision, delay_ms) = self.schedule_reconnect(status);
        self.record(format!("connection lost ({reason})"), decision, delay_ms);
    }

    pub(super) fn crashed(&mut self, exit: ExitInfo) {
        let report = CrashReport {
            exit,
            uptime_ms: self.now_ms - self.process_started_ms.unwrap_or(self.now_ms),
            now_ms: self.now_ms,
            recent_crashes_ms: self.crashes_ms.clone(),
        };
        self.crashes_ms.push(self.now_ms);
        let now_ms = self.now_ms;
        self.crashes_ms.retain(|&at| now_ms - at < CRASH_MEMORY_MS);
        let crashes = self.crashes_ms.len() as u32;
        self.generation += 1;
        self.process_started_ms = None;
        match self.policy.crash(self.server, &report) {
            CrashVerdict::RestartAfter { delay_ms } => {
                self.status = Status::Restarting { attempt: crashes };
                self.connect_token += 1;
                let (token, why) = (self.connect_token, format!("restart #{crashes}"));
                self.schedule(self.after(delay_ms), Action::Connect { token, why });
                let decision = match delay_ms {
                    0 => "restart now".into(),
                    _ => format!("restart in {}", format_delay(delay_ms)),
                };
                self.record(format!("process {exit}"), decision, Some(delay_ms));
            }
            CrashVerdict::GiveUp => {
                self.status = Status::PermanentlyFailed;
                self.record(
                    format!("process {exit}"),
                    "give up → permanently_failed",
                    None,
                );
            }
        }
    }
}
