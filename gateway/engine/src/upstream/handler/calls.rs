//! The calls of one upstream connection: those in flight, and those answered a moment ago,
//! which still own the server's log messages.

use std::collections::{HashMap, VecDeque};

use rmcp::model::RequestId;

use crate::sessions::SessionId;

/// A downstream request in flight on this connection: where server-to-client requests
/// made while it runs are sent.
#[derive(Debug, Clone)]
pub(super) struct InFlight {
    pub call_id: u64,
    pub session: SessionId,
    pub downstream_request: RequestId,
    /// The id the request was sent upstream with, once sent.
    pub upstream_request: Option<RequestId>,
    /// The gateway's task the call runs for, if it is one's (2025-11-25).
    pub run: Option<std::sync::Arc<crate::runs::Run>>,
}

/// The calls of one connection: those in flight (as many as run at once) and those
/// answered within `LOG_GRACE`, which still own the server's log messages. The answered
/// ones are as many as finish in a second, thousands under load, so they are kept in the
/// order they finished with a count per session: noting a call, finishing one and naming
/// a log message's owner never walk them (walking them made every call pay for all the
/// calls of the last second).
#[derive(Debug, Default)]
pub(super) struct Calls {
    /// In the order they began.
    pub live: Vec<InFlight>,
    /// When each answered call finished, and whose it was; oldest first.
    pub finished: VecDeque<(tokio::time::Instant, SessionId)>,
    /// How many of `finished` each session has.
    pub finished_per_session: HashMap<SessionId, usize>,
}

impl Calls {
    pub fn finish(&mut self, call_id: u64) {
        let now = tokio::time::Instant::now();
        if let Some(index) = self.live.iter().position(|entry| entry.call_id == call_id) {
            let entry = self.live.remove(index);
            self.finished.push_back((now, entry.session));
            *self.finished_per_session.entry(entry.session).or_default() += 1;
        }
        self.forget_old(now);
    }

    /// Drop the answered calls that finished `LOG_GRACE` or longer before `now`.
    pub fn forget_old(&mut self, now: tokio::time::Instant) {
        while let Some(&(at, session)) = self.finished.front() {
            if now.duration_since(at) < LOG_GRACE {
                break;
            }
            self.finished.pop_front();
            if let Some(count) = self.finished_per_session.get_mut(&session) {
                *count -= 1;
                if *count == 0 {
                    self.finished_per_session.remove(&session);
                }
            }
        }
    }
}

/// How long a finished call still owns the server's log messages. rmcp runs each incoming
/// notification's handler in a task of its own, so a log the server sent before its answer
/// can be handled after the call has finished; without this it would belong to no one and
/// its own client would miss it.
pub(super) const LOG_GRACE: std::time::Duration = std::time::Duration::from_secs(1);
