//! One health check on demand (the `health_check` command): probe a server's live connection
//! now, the way the supervisor's probes do, and say whether its credentials were accepted.

use std::time::Duration;

use rmcp::model::{ClientRequest, ErrorCode, ListToolsRequest, PingRequest};
use rmcp::service::PeerRequestOptions;
use serde::Serialize;
use tokio::time::Instant;

use crate::config::TransportConfig;
use crate::failure::UpstreamError;
use crate::slot::ActionError;
use crate::slot::{Slot, SlotEvent};
use wardgate_policy::FailureStatus;
use wardgate_recovery::calls;

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

/// Check `slot`'s server once now, and let the result count: on a live connection, MCP
/// `ping` (falling back to `tools/list` when the server does not implement ping; never a
/// second `initialize`), whose outcome the recovery machine hears like a probe's (a failure
/// counts toward `degraded`, a success clears it, refused credentials make the server
/// `requires_reauth`); on a server that is down, a connection attempt now. Fails when the
/// server's status is one only an operator can change, naming it and what to do.
pub(crate) async fn check(slot: &Slot, timeout: Duration) -> Result<HealthReport, ActionError> {
    let server = slot.name.as_str();
    let started = Instant::now();
    let has_credentials = match &slot.config.transport {
        TransportConfig::Stdio { env, .. } => !env.is_empty(),
        TransportConfig::StreamableHttp { headers, oauth, .. } => {
            !headers.is_empty() || oauth.is_some()
        }
        TransportConfig::Sse { headers, .. } => !headers.is_empty(),
    };
    // Only HTTP headers travel with the check; a stdio server's environment was read when
    // it started, and a ping proves nothing about it.
    let exercised =
        has_credentials && !matches!(slot.config.transport, TransportConfig::Stdio { .. });
    let live = match slot.live() {
        Some(live) if slot.status().is_online() => live,
        _ => return connect_now(slot, timeout, started, has_credentials).await,
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
    let mut method = "ping";
    let mut outcome = ask(ClientRequest::PingRequest(PingRequest::default())).await;
    if let Err(rmcp::ServiceError::McpError(error)) = &outcome {
        if error.code == ErrorCode::METHOD_NOT_FOUND {
            method = "tools/list";
            outcome = ask(ClientRequest::ListToolsRequest(ListToolsRequest::default())).await;
        }
    }
    let latency_ms = started.elapsed().as_millis() as u64;
    let failure = outcome
        .as_ref()
        .err()
        .map(|error| UpstreamError::from_service(server, error));
    let refused = failure
        .as_ref()
        .is_some_and(|failure| failure.kind.is_auth());
    match &failure {
        Some(failure) if refused || calls::breaks_connection(&failure.kind) => {
            slot.send(SlotEvent::CallFailed {
                generation: live.generation,
                error: failure.clone(),
                status: if refused {
                    FailureStatus::RequiresReauth
                } else {
                    FailureStatus::Offline
                },
            })
        }
        _ => slot.send(SlotEvent::CallOutcome {
            generation: live.generation,
            succeeded: failure.is_none(),
            latency_ms,
            error: failure
                .as_ref()
                .map(|failure| format!("health check: {}", failure.message)),
        }),
    }
    Ok(HealthReport {
        server: server.to_owned(),
        ok: failure.is_none(),
        latency_ms,
        method: method.to_owned(),
        has_credentials,
        credentials_validated: exercised.then_some(!refused && failure.is_none()),
        error: failure.map(|failure| failure.message),
    })
}

/// A check of a server that is down: a connection attempt now, and its outcome.
async fn connect_now(
    slot: &Slot,
    timeout: Duration,
    started: Instant,
    has_credentials: bool,
) -> Result<HealthReport, ActionError> {
    let server = slot.name.as_str();
    let mut watch = slot.watch_status();
    let (status, attempts) = slot.observe(&mut watch);
    if status.refuses_calls() {
        return Err(ActionError::Refused(format!(
            "server \"{server}\" is {status}, so there is nothing to check; {}",
            status.remedy(server)
        )));
    }
    slot.wake();
    let deadline = Instant::now() + timeout;
    let status = loop {
        let (status, finished) = slot.observe(&mut watch);
        if status.is_online() || finished > attempts || status.refuses_calls() {
            break status;
        }
        if tokio::time::timeout_at(deadline, watch.changed())
            .await
            .is_err()
        {
            break slot.status();
        }
    };
    let ok = status.is_online();
    Ok(HealthReport {
        server: server.to_owned(),
        ok,
        latency_ms: started.elapsed().as_millis() as u64,
        method: "connect".to_owned(),
        has_credentials,
        credentials_validated: None,
        error: (!ok).then(|| {
            let view = slot.recovery().view;
            format!(
                "a connection attempt failed: {}; the server is {status}",
                view.last_error
                    .unwrap_or_else(|| "no answer in time".to_owned())
            )
        }),
    })
}
