//! Tool calls: waiting for a connection, the router's retry loop and its request deadline.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CallState {
    Waiting { attempt: u32 },
    Busy,
    Done,
}

pub(super) struct Call {
    pub(super) hints: CallHints,
    pub(super) fails_with: Option<(FailureKind, bool)>,
    pub(super) deadline_ms: u64,
    pub(super) state: CallState,
}

/// Failures after which the router reports the connection unusable even while retrying.
fn breaks_connection(kind: &FailureKind) -> bool {
    kind.is_connection_class() && *kind != FailureKind::TimedOut
}

impl Model<'_> {
    pub(super) fn call_attempt(&mut self, call: usize, attempt: u32) {
        let number = call + 1;
        let status = self.status;
        match status {
            _ if status.refuses_calls() => {
                self.calls[call].state = CallState::Done;
                let event = format!(
                    "tool call #{number} fails at once: server is {}",
                    status.text()
                );
                self.record(event, "", None);
            }
            Status::Online { .. } => self.send(call, attempt),
            // On the way up: the router waits for it to settle.
            Status::Connecting | Status::Restarting { .. } => {
                self.calls[call].state = CallState::Waiting { attempt };
            }
            Status::Reconnecting { .. } | Status::Failed(_) | Status::PermanentlyFailed => {
                // A call is how recovery is detected: the router wakes the supervisor.
                self.calls[call].state = CallState::Waiting { attempt };
                self.connect(&format!("tool call #{number} wakes the reconnect"));
            }
        }
    }

    fn send(&mut self, call: usize, attempt: u32) {
        self.calls[call].state = CallState::Busy;
        let forced = if attempt == 1 {
            self.calls[call].fails_with.clone()
        } else {
            None
        };
        let outcome = forced.or_else(|| match &self.condition {
            Condition::Up => None,
            Condition::Down(kind) => {
                let reached = !matches!(kind, FailureKind::ConnectRefused | FailureKind::Dns);
                Some((kind.clone(), reached))
            }
            Condition::Slow => Some((FailureKind::TimedOut, true)),
            Condition::AuthRejected(status) => Some((FailureKind::HttpStatus(*status), true)),
        });
        let generation = self.generation;
        match outcome {
            None => {
                self.calls[call].state = CallState::Done;
                self.quiet_call_ok(call);
            }
            // A timeout is known only when the per-request timeout runs out.
            Some((FailureKind::TimedOut, _)) => self.schedule(
                self.after(REQUEST_TIMEOUT_MS),
                Action::CallTimedOut {
                    call,
                    attempt,
                    generation,
                },
            ),
            Some((kind, reached)) => self.call_failed(call, attempt, kind, reached, generation),
        }
    }

    /// The router's retry loop: classify, then retry, or give up and tell the supervisor.
    pub(super) fn call_failed(
        &mut self,
        call: usize,
        attempt: u32,
        kind: FailureKind,
        reached: bool,
        generation: u64,
    ) {
        let hints = self.calls[call].hints;
        let failure = FailedRequest {
            operation: Operation::Call,
            kind: kind.clone(),
            message: describe_failure(&kind),
            attempt,
            may_have_reached_server: reached,
            idempotent: hints.idempotent,
            read_only: hints.read_only,
        };
        let event = format!(
            "tool call #{} (attempt {attempt}): {}",
            call + 1,
            describe_failure(&kind)
        );
        let give_up_status = match self.policy.classify(self.server, &failure) {
            RetryVerdict::RetryAfter { delay_ms }
                if self.after(delay_ms) < self.calls[call].deadline_ms =>
            {
                self.record(
                    event,
                    format!("retry in {}", format_delay(delay_ms)),
                    Some(delay_ms),
                );
                self.schedule(
                    self.after(delay_ms),
                    Action::CallAttempt {
                        call,
                        attempt: attempt + 1,
                    },
                );
                if breaks_connection(&kind) && self.live(generation) {
                    self.tell_supervisor(&kind, FailureStatus::Offline);
                }
                return;
            }
            RetryVerdict::RetryAfter { delay_ms } => {
                let decision = format!(
                    "retry in {} passes the deadline → give up",
                    format_delay(delay_ms)
                );
                self.record(event, decision, Some(delay_ms));
                FailureStatus::Offline
            }
            RetryVerdict::GiveUp { status } => {
                self.record(event, format!("give up → {}", status.as_str()), None);
                status
            }
        };
        self.calls[call].state = CallState::Done;
        // A JSON-RPC error comes from a live server: it changes no status.
        let tells_supervisor = kind.is_connection_class() || kind.is_auth();
        if tells_supervisor && self.live(generation) {
            self.tell_supervisor(&kind, give_up_status);
        }
    }

    /// The supervisor hears that the connection is unusable; for a stdio server whose
    /// process exited, that exit is the real news and counts as a crash.
    fn tell_supervisor(&mut self, kind: &FailureKind, status: FailureStatus) {
        match (self.server.transport, kind) {
            (TransportKind::Stdio, FailureKind::ProcessExited { code, signal }) => {
                self.crashed(ExitInfo {
                    code: *code,
                    signal: *signal,
                })
            }
            _ => self.connection_lost(status, &describe_failure(kind)),
        }
    }

    /// Calls waiting for a usable connection proceed once online, or fail once an operator is needed.
    pub(super) fn settle_waiting_calls(&mut self) {
        for call in 0..self.calls.len() {
            let CallState::Waiting { attempt } = self.calls[call].state else {
                continue;
            };
            if matches!(self.status, Status::Online { .. }) {
                self.send(call, attempt);
            } else if self.status.refuses_calls() {
                self.calls[call].state = CallState::Done;
                let event = format!(
                    "tool call #{} fails: server is {}",
                    call + 1,
                    self.status.text()
                );
                self.record(event, "", None);
            }
        }
    }
}
