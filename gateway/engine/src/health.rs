//! One health check on demand (the `health_check` command): a call with a ping, driven by
//! the same call machine as every client request, and whether the server's credentials
//! were accepted.

use std::time::Duration;

use rmcp::model::{ClientRequest, ErrorCode, ListToolsRequest, PingRequest};
use rmcp::service::PeerRequestOptions;
use serde::Serialize;
use tokio::time::Instant;

use crate::config::TransportConfig;
use crate::failure::UpstreamError;
use crate::slot::{millis, ActionError, Slot, SlotEvent};
use wardgate_recovery::call::{AttemptFailure, CallInput, CallMachine, CallNext, Ending, Sight};

/// How often a server's credentials are checked unless its `credential_check_interval_ms`
/// parameter says otherwise: hourly, as a fleet backend's cron job would.
pub const CREDENTIAL_CHECK_INTERVAL: Duration = Duration::from_secs(3600);

/// The shortest interval a `credential_check_interval_ms` may ask for.
const SHORTEST_CREDENTIAL_CHECK: Duration = Duration::from_secs(1);

/// How often to check `slot`'s credentials while it serves (`None`: never; it has no
/// credentials a check can exercise, or `credential_check_interval_ms = "0"`).
pub(crate) fn credential_check_interval(slot: &Slot) -> Option<Duration> {
    if !slot.has_checkable_credentials() {
        return None;
    }
    match slot.context.param::<u64>("credential_check_interval_ms") {
        Some(0) => None,
        Some(ms) => Some(Duration::from_millis(ms).max(SHORTEST_CREDENTIAL_CHECK)),
        None => Some(CREDENTIAL_CHECK_INTERVAL),
    }
}

/// What one on-demand probe found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthReport {
    pub server: String,
    pub ok: bool,
    pub latency_ms: u64,
    /// `ping`, `tools/list` for a server that does not implement ping, or `connect` for a
    /// server that was down.
    pub method: String,
    /// The server is configured with credentials (secret env variables or headers, or an
    /// OAuth sign-in).
    pub has_credentials: bool,
    /// The check was an authenticated request and the server accepted it (`None`: no
    /// credentials travelled with it: none are configured, they are a stdio server's
    /// environment, which a check cannot exercise, or the check was a connection attempt).
    pub credentials_validated: Option<bool>,
    /// Why the probe failed.
    pub error: Option<String>,
}

/// Check `slot`'s server once now, and let the result count. The check is a call of one
/// attempt (`wardgate_recovery::call::CallMachine::check`) whose request is MCP `ping`
/// (falling back to `tools/list` when the server does not implement ping; never a second
/// `initialize`): on a server that is down it wakes a connection attempt first, as any call
/// does, and a failed attempt is the check's failure. Its outcome reaches the recovery
/// machine as a call's does (a failure counts toward `degraded`, a success clears it,
/// refused credentials make the server `requires_reauth`). Fails when the server's status
/// is one only an operator can change, naming it and what to do.
pub(crate) async fn check(slot: &Slot, timeout: Duration) -> Result<HealthReport, ActionError> {
    let server = slot.name.as_str();
    let started = Instant::now();
    // Only HTTP headers (or an OAuth token) travel with the check; a stdio server's
    // environment was read when it started, and a ping proves nothing about it.
    let exercised = slot.has_checkable_credentials();
    let has_credentials = exercised
        || matches!(&slot.config.transport, TransportConfig::Stdio { env, .. } if !env.is_empty());
    let mut check = CallMachine::check(0, millis(timeout));
    let report = |method: &str, error: Option<String>, credentials_validated| HealthReport {
        server: server.to_owned(),
        ok: error.is_none(),
        latency_ms: millis(started.elapsed()),
        method: method.to_owned(),
        has_credentials,
        credentials_validated,
        error,
    };
    // Wait for a usable connection, as a call does; `woke`: the check asked for a
    // connection attempt, which is what it reports.
    let mut woke = false;
    let mut watch = slot.watch_status();
    let deadline = started + timeout;
    let live = loop {
        let (status, attempts_finished) = slot.observe(&mut watch);
        let live = slot.live().filter(|_| status.is_online());
        let last_failure = (!status.is_online())
            .then(|| slot.last_connect_failure())
            .flatten();
        let sight = Sight {
            status: &status,
            live: live.is_some(),
            attempts_finished,
            last_failure: last_failure.as_ref(),
        };
        let now_ms = millis(started.elapsed());
        let step = check.on(now_ms, CallInput::Seen(sight), &*slot.policy, &slot.context);
        match (step.next, live) {
            (CallNext::Send, Some(live)) => break live,
            (CallNext::Wake, _) => {
                woke = true;
                slot.wake();
            }
            (CallNext::Watch | CallNext::Send, _) => {}
            (CallNext::Fail(Ending::Refused), _) => {
                return Err(ActionError::Refused(format!(
                    "server \"{server}\" is {status}, so there is nothing to check; {}",
                    status.remedy(server)
                )))
            }
            // The connection attempt it asked for failed.
            _ => {
                let why = last_failure
                    .map_or_else(|| "no answer in time".to_owned(), |failure| failure.message);
                let error = format!("a connection attempt failed: {why}; the server is {status}");
                return Ok(report("connect", Some(error), None));
            }
        }
        tokio::select! {
            changed = watch.changed() => if changed.is_err() {
                let error = format!("the gateway is shutting down; the server is {status}");
                return Ok(report("connect", Some(error), None));
            },
            _ = tokio::time::sleep_until(deadline) => {
                let error = format!("a connection attempt failed: no answer in time; the server is {}", slot.status());
                return Ok(report("connect", Some(error), None));
            }
        }
    };
    let ask = |request: ClientRequest| {
        let peer = live.peer.clone();
        async move {
            peer.send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
                .await?
                .await_response()
                .await
                .map(|_| ())
        }
    };
    let sent_at = Instant::now();
    let mut method = if woke { "connect" } else { "ping" };
    let mut outcome = ask(ClientRequest::PingRequest(PingRequest::default())).await;
    if let Err(rmcp::ServiceError::McpError(error)) = &outcome {
        if error.code == ErrorCode::METHOD_NOT_FOUND {
            if !woke {
                method = "tools/list";
            }
            outcome = ask(ClientRequest::ListToolsRequest(ListToolsRequest::default())).await;
        }
    }
    let latency_ms = millis(sent_at.elapsed());
    let failure = outcome
        .as_ref()
        .err()
        .map(|error| UpstreamError::from_service(server, error));
    let answered = CallInput::Answered {
        failure: failure.as_ref().map(|failure| AttemptFailure {
            kind: failure.kind.clone(),
            message: failure.message.clone(),
            reached: failure.may_have_reached_server,
        }),
        failures_counted: slot.health_failures_counted(),
    };
    let step = check.on(
        millis(started.elapsed()),
        answered,
        &*slot.policy,
        &slot.context,
    );
    if let Some(succeeded) = step.evidence {
        slot.send(SlotEvent::CallOutcome {
            generation: live.generation,
            succeeded,
            latency_ms,
            error: failure
                .as_ref()
                .map(|failure| format!("health check: {}", failure.message)),
        });
    }
    if let (Some(status), Some(failure)) = (step.tell, &failure) {
        slot.send(SlotEvent::CallFailed {
            generation: live.generation,
            error: failure.clone(),
            status,
            reply: None,
        });
    }
    let refused = failure
        .as_ref()
        .is_some_and(|failure| failure.kind.is_auth());
    let validated = exercised.then_some(!refused && failure.is_none());
    if exercised {
        // Refused is a verdict on the credentials; another failure tells nothing of them.
        let accepted = (refused || failure.is_none()).then_some(!refused);
        slot.note_credential_check(accepted);
    }
    Ok(report(
        method,
        failure.map(|failure| failure.message),
        validated,
    ))
}
