//! The router's pure rules for one call: waiting for a usable connection, and what follows
//! a failed attempt. The engine's router and the simulator both follow them.

use wardgate_policy::{FailedRequest, FailureKind, FailureStatus, RecoveryPolicy, RetryVerdict};

use crate::status::ServerStatus;

/// Failures after which the connection itself is unusable. A timeout is not one: the
/// server may just be slow, and tearing down a stdio server for one slow call would be worse.
pub fn breaks_connection(kind: &FailureKind) -> bool {
    matches!(
        kind,
        FailureKind::ConnectRefused
            | FailureKind::Dns
            | FailureKind::ConnectionReset
            | FailureKind::ConnectionClosed
            | FailureKind::ProcessExited { .. }
            | FailureKind::SessionExpired
    )
}

/// What a call does after one failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Try again in `delay_ms`; `tell` says the connection is unusable (the supervisor
    /// replaces it meanwhile, and the retry waits for the new one).
    Retry { delay_ms: u64, tell: bool },
    /// Fail the call. `tell`: the supervisor hears that the connection is unusable and
    /// leaves the server in `status`. `past_deadline`: the policy would have retried, but
    /// not within the call's deadline.
    GiveUp {
        status: FailureStatus,
        tell: bool,
        past_deadline: bool,
    },
}

/// Ask the policy about a failed attempt, and apply the call's deadline: a retry that
/// would start at or after `deadline_ms` is a give-up.
pub fn after_failure(
    policy: &dyn RecoveryPolicy,
    server: &wardgate_policy::ServerContext,
    failed: &FailedRequest,
    now_ms: u64,
    deadline_ms: u64,
) -> (RetryVerdict, AfterFailure) {
    let verdict = policy.classify(server, failed);
    let breaks = breaks_connection(&failed.kind);
    let after = match verdict {
        RetryVerdict::RetryAfter { delay_ms } if now_ms.saturating_add(delay_ms) < deadline_ms => {
            AfterFailure::Retry {
                delay_ms,
                tell: breaks,
            }
        }
        RetryVerdict::RetryAfter { .. } => AfterFailure::GiveUp {
            status: FailureStatus::Offline,
            tell: breaks || failed.kind.is_auth(),
            past_deadline: true,
        },
        RetryVerdict::GiveUp { status } => AfterFailure::GiveUp {
            status,
            // A JSON-RPC error comes from a live server; credentials refused make it
            // `requires_reauth`.
            tell: breaks || failed.kind.is_auth(),
            past_deadline: false,
        },
    };
    (verdict, after)
}

/// What a call waiting for a usable connection does on seeing the server's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// Online with a live connection: send.
    Use,
    /// Only an operator can change this status: fail at once with its remedy.
    Refuse,
    /// The reconnection this call asked for failed: a failed attempt of the call, which the
    /// policy may retry within the call's deadline (see [`after_failure`]).
    AttemptFailed,
    /// Ask the supervisor to try now (skipping a reconnect wait), then keep watching.
    WakeUp,
    /// Keep watching the status until the call's deadline.
    Wait,
}

/// One waiting call's memory: whether it has woken the server, and how many connection
/// attempts had ended then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waiter {
    woke_at: Option<u64>,
}

impl Waiter {
    /// Called with every status the call sees (`live`: a connection is there to use;
    /// `attempts_finished`: the machine's count of connection attempts that have ended).
    ///
    /// An attempt that ends after the call woke the server, without the server coming
    /// online, is the call's attempt failing; counting attempts (rather than watching for
    /// `connecting` then `offline`) sees it however fast it failed.
    pub fn look(&mut self, status: &ServerStatus, live: bool, attempts_finished: u64) -> Look {
        if live && status.is_online() {
            return Look::Use;
        }
        if status.refuses_calls() {
            return Look::Refuse;
        }
        match self.woke_at {
            Some(woke_at) if attempts_finished > woke_at && !status.is_online() => {
                Look::AttemptFailed
            }
            Some(_) => Look::Wait,
            // offline / error / reconnecting: a call is how recovery is detected, so try now.
            None if !status.is_transitional() => {
                self.woke_at = Some(attempts_finished);
                Look::WakeUp
            }
            None => Look::Wait,
        }
    }
}

/// Whether a finished call is news of the connection's health that the recovery machine
/// should hear ([`crate::Input::Served`], `Some(succeeded)`): a failure the connection
/// survives that is not the server's own JSON-RPC answer (a timeout, an HTTP 5xx, a protocol
/// error), or a success while failures are being counted. Failures that break the
/// connection or refuse credentials reach the machine as a lost connection instead.
pub fn health_evidence(failure: Option<&FailureKind>, failures_counted: bool) -> Option<bool> {
    match failure {
        None => failures_counted.then_some(true),
        Some(FailureKind::JsonRpc { .. }) => None,
        Some(kind) if breaks_connection(kind) || kind.is_auth() => None,
        Some(_) => Some(false),
    }
}
