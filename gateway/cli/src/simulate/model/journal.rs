//! The timeline being written: one entry per event, quiet successes folded into one line.

use super::{Entry, Model};
use crate::simulate::format_time;

/// Successes folded into one line, so a healthy stretch does not bury the failures.
#[derive(Default)]
pub(super) struct Quiet {
    since_ms: u64,
    until_ms: u64,
    /// Indices of the calls that succeeded.
    calls: Vec<usize>,
    probes: u32,
    /// The status while they succeeded; the line may be written after it changed.
    status: String,
}

impl Model<'_> {
    pub(super) fn record(
        &mut self,
        event: impl Into<String>,
        decision: impl Into<String>,
        delay_ms: Option<u64>,
    ) {
        self.flush_quiet();
        self.entries.push(Entry {
            at_ms: self.now_ms,
            event: event.into(),
            decision: decision.into(),
            delay_ms,
            status: self.status.text(),
        });
    }

    pub(super) fn flush_quiet(&mut self) {
        let quiet = std::mem::take(&mut self.quiet);
        let mut parts = Vec::new();
        let (first, last) = (quiet.calls.iter().min(), quiet.calls.iter().max());
        match (quiet.calls.len(), first, last) {
            (0, ..) => {}
            (1, Some(call), _) => parts.push(format!("tool call #{} ok", call + 1)),
            (n, Some(first), Some(last)) => {
                parts.push(format!("{n} tool calls ok (#{}–#{})", first + 1, last + 1))
            }
            _ => {}
        }
        match quiet.probes {
            0 => {}
            1 => parts.push("probe ok".into()),
            n => parts.push(format!("{n} probes ok")),
        }
        if quiet.until_ms > quiet.since_ms {
            parts.push(format!("until {}", format_time(quiet.until_ms)));
        }
        if !parts.is_empty() {
            self.entries.push(Entry {
                at_ms: quiet.since_ms,
                event: parts.join(", "),
                decision: String::new(),
                delay_ms: None,
                status: quiet.status,
            });
        }
    }

    pub(super) fn quiet_call_ok(&mut self, call: usize) {
        self.quiet_now();
        self.quiet.calls.push(call);
    }

    pub(super) fn quiet_probe_ok(&mut self) {
        self.quiet_now();
        self.quiet.probes += 1;
    }

    fn quiet_now(&mut self) {
        if self.quiet.calls.is_empty() && self.quiet.probes == 0 {
            self.quiet.since_ms = self.now_ms;
        }
        self.quiet.until_ms = self.now_ms;
        self.quiet.status = self.status.text();
    }
}
