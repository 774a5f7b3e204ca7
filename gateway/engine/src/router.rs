//! Routing one client request to its server: wait for a usable connection, forward with
//! timeouts, progress and cancellation, classify failures and retry as the policy says.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CancelledNotificationParam, ClientNotification, ClientRequest, ServerResult};
use rmcp::service::{PeerRequestOptions, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer};
use tokio::time::Instant;
use wardgate_policy::{FailedRequest, FailureKind, FailureStatus, Operation};

use wardgate_recovery::calls::{self, AfterFailure, Look, Waiter};

use crate::failure::UpstreamError;
use crate::gateway::Gateway;
use crate::metrics::Outcome;
use crate::sessions::SessionId;
use crate::slot::{millis, Live, Slot, SlotEvent};
use crate::status::ServerStatus;

/// What the policy needs to know about the thing being called.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallHints {
    pub idempotent: bool,
    pub read_only: bool,
}

/// JSON-RPC error code for "the server behind this name cannot serve now".
const SERVER_UNAVAILABLE: i32 = -32001;

pub fn unavailable(slot: &Slot, status: &ServerStatus, detail: Option<&str>) -> McpError {
    let mut message = format!("server \"{}\" is {}", slot.name, status);
    if let Some(detail) = detail {
        message.push_str(&format!(" ({detail})"));
    }
    message.push_str(&format!("; {}", status.remedy(&slot.name)));
    McpError::new(
        rmcp::model::ErrorCode(SERVER_UNAVAILABLE),
        message,
        Some(serde_json::json!({ "server": slot.name, "status": status.name() })),
    )
}

/// Forward `request` to `slot`'s server on behalf of a client session, and count it.
pub async fn forward(
    gateway: &Gateway,
    slot: &Slot,
    session: SessionId,
    operation: Operation,
    hints: CallHints,
    request: ClientRequest,
    context: &RequestContext<RoleServer>,
) -> Result<ServerResult, McpError> {
    let started = Instant::now();
    let label = metric_label(&request);
    let result = forward_counted(gateway, slot, session, operation, hints, request, context).await;
    let outcome = match &result {
        Ok(_) => Outcome::Ok,
        Err((_, outcome)) => *outcome,
    };
    gateway
        .metrics()
        .request(&slot.name, &label, outcome, started.elapsed());
    result.map_err(|(error, _)| error)
}

fn cancelled() -> (McpError, Outcome) {
    (
        McpError::new(
            rmcp::model::ErrorCode::INTERNAL_ERROR,
            "request cancelled by the client",
            None,
        ),
        Outcome::Cancelled,
    )
}

/// How a failure that made the router give up is counted.
fn outcome_of(failure: &UpstreamError) -> Outcome {
    match failure.kind {
        FailureKind::JsonRpc { .. } => Outcome::Error,
        FailureKind::TimedOut => Outcome::Timeout,
        _ => Outcome::Failed,
    }
}

/// The `tool` label: the tool's name for a call, the method otherwise.
fn metric_label(request: &ClientRequest) -> String {
    match request {
        ClientRequest::CallToolRequest(call) => call.params.name.to_string(),
        ClientRequest::GetPromptRequest(_) => "prompts/get".into(),
        ClientRequest::ReadResourceRequest(_) => "resources/read".into(),
        ClientRequest::SubscribeRequest(_) => "resources/subscribe".into(),
        ClientRequest::UnsubscribeRequest(_) => "resources/unsubscribe".into(),
        _ => "other".into(),
    }
}

async fn forward_counted(
    gateway: &Gateway,
    slot: &Slot,
    session: SessionId,
    operation: Operation,
    hints: CallHints,
    request: ClientRequest,
    context: &RequestContext<RoleServer>,
) -> Result<ServerResult, (McpError, Outcome)> {
    let timeout = request_timeout(gateway, slot);
    let started = Instant::now();
    let deadline = started + timeout;
    let mut attempt = 1u32;
    loop {
        let live = usable_connection(gateway, slot, deadline, &context.ct)
            .await
            .map_err(|error| {
                let outcome = if context.ct.is_cancelled() {
                    Outcome::Cancelled
                } else if Instant::now() >= deadline {
                    Outcome::Timeout
                } else {
                    Outcome::Unavailable
                };
                (error, outcome)
            })?;
        let failure = match send(&live, session, request.clone(), timeout, context).await {
            Ok(result) => return Ok(result),
            Err(Sent::Cancelled) => return Err(cancelled()),
            Err(Sent::Failed(failure)) => failure,
        };
        let failed = FailedRequest {
            operation,
            kind: failure.kind.clone(),
            message: failure.message.clone(),
            attempt,
            may_have_reached_server: failure.may_have_reached_server,
            idempotent: hints.idempotent,
            read_only: hints.read_only,
        };
        // The call's own clock: the deadline is `timeout` after it started.
        let now_ms = millis(started.elapsed());
        let deadline_ms = millis(timeout);
        let (_, after) =
            calls::after_failure(&*slot.policy, &slot.context, &failed, now_ms, deadline_ms);
        let delay = match after {
            AfterFailure::Retry { delay_ms, tell } => {
                if tell {
                    // The connection is gone; let the supervisor replace it while we wait.
                    slot.send(SlotEvent::CallFailed {
                        generation: live.generation,
                        error: failure.clone(),
                        status: FailureStatus::Offline,
                    });
                }
                Duration::from_millis(delay_ms)
            }
            AfterFailure::GiveUp { status, tell, .. } => {
                let outcome = outcome_of(&failure);
                return Err((give_up(slot, &live, failure, status, tell), outcome));
            }
        };
        tracing::info!(server = %slot.name, attempt, "retrying in {} ms after: {}", delay.as_millis(), failure.message);
        gateway.metrics().retry(&slot.name);
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = context.ct.cancelled() => return Err(cancelled()),
        }
        attempt += 1;
    }
}

/// The error a client sees when the call gives up; `tell`: the supervisor hears that the
/// connection is unusable.
fn give_up(
    slot: &Slot,
    live: &Live,
    failure: UpstreamError,
    status: FailureStatus,
    tell: bool,
) -> McpError {
    if let FailureKind::JsonRpc { code } = failure.kind {
        // The server is alive and answered: its own error goes to the client unchanged.
        return McpError::new(rmcp::model::ErrorCode(code), failure.message.clone(), None);
    }
    if tell {
        slot.send(SlotEvent::CallFailed {
            generation: live.generation,
            error: failure.clone(),
            status,
        });
    }
    let now = match status {
        FailureStatus::RequiresReauth => ServerStatus::RequiresReauth {
            reason: failure.message.clone(),
        },
        FailureStatus::Offline => ServerStatus::Offline {
            reason: failure.message.clone(),
        },
        FailureStatus::Error => ServerStatus::Error {
            reason: failure.message.clone(),
        },
    };
    let mut error = unavailable(slot, &now, None);
    error.message = format!(
        "server \"{}\": {}; {}",
        slot.name,
        failure.message,
        now.remedy(&slot.name)
    )
    .into();
    error
}

/// The server's own request timeout, or the gateway's.
fn request_timeout(gateway: &Gateway, slot: &Slot) -> Duration {
    slot.config
        .request_timeout
        .unwrap_or(gateway.settings.request_timeout)
}

/// Wait, within the server's request timeout, until `slot` can serve a call: it comes
/// online, or a reconnection this wakes succeeds. For names the catalogue does not know yet.
pub(crate) async fn until_usable(
    gateway: &Gateway,
    slot: &Slot,
    cancelled: &tokio_util::sync::CancellationToken,
) -> Result<(), McpError> {
    let deadline = Instant::now() + request_timeout(gateway, slot);
    usable_connection(gateway, slot, deadline, cancelled)
        .await
        .map(|_| ())
}

/// The slot's live connection, waiting (until `deadline`) for a transitional state to
/// settle or for a reconnection the call itself triggers.
async fn usable_connection(
    gateway: &Gateway,
    slot: &Slot,
    deadline: Instant,
    cancelled: &tokio_util::sync::CancellationToken,
) -> Result<Arc<Live>, McpError> {
    let mut status = slot.watch_status();
    let mut waiter = Waiter::default();
    loop {
        let current = status.borrow_and_update().clone();
        let live = slot.live().filter(|_| slot.status().is_online());
        match waiter.look(&current, live.is_some()) {
            Look::Use => {
                if let Some(live) = live {
                    return Ok(live);
                }
            }
            Look::Refuse => return Err(unavailable(slot, &current, None)),
            Look::AttemptFailed => {
                return Err(unavailable(
                    slot,
                    &current,
                    Some("a reconnection attempt just failed"),
                ))
            }
            // A call is how recovery is detected: try now.
            Look::WakeUp => slot.wake(),
            Look::Wait => {}
        }
        tokio::select! {
            changed = status.changed() => if changed.is_err() {
                return Err(unavailable(slot, &current, Some("the gateway is shutting down")));
            },
            _ = tokio::time::sleep_until(deadline) => {
                let last = slot.status();
                return Err(unavailable(slot, &last, Some(&format!(
                    "still not online after {}", humantime::format_duration(gateway.settings.request_timeout)))));
            }
            _ = cancelled.cancelled() => {
                return Err(McpError::new(rmcp::model::ErrorCode::INTERNAL_ERROR, "request cancelled by the client", None));
            }
        }
    }
}

enum Sent {
    Cancelled,
    Failed(UpstreamError),
}

async fn send(
    live: &Arc<Live>,
    session: SessionId,
    request: ClientRequest,
    timeout: Duration,
    context: &RequestContext<RoleServer>,
) -> Result<ServerResult, Sent> {
    let server = &live.links.server;
    let options = PeerRequestOptions::with_timeout(timeout).reset_timeout_on_progress();
    let in_flight = live.links.enter(session, context.id.clone());
    let handle = live.peer.send_request_with_option(request, options).await;
    let handle = match handle {
        Ok(handle) => handle,
        Err(error) => {
            let failure = UpstreamError::from_service(server, &error).reached(false);
            return Err(Sent::Failed(connection_failure(live, failure).await));
        }
    };
    let upstream_id = handle.id.clone();
    in_flight.sent_as(upstream_id.clone());
    let upstream_token = handle.progress_token.clone();
    let mapped = match context.meta.get_progress_token() {
        Some(token) => {
            live.links
                .map_progress(upstream_token.clone(), context.peer.clone(), token);
            true
        }
        None => false,
    };
    let outcome = tokio::select! {
        result = handle.await_response() => result.map_err(|error| {
            let failure = UpstreamError::from_service(server, &error);
            Sent::Failed(failure)
        }),
        _ = context.ct.cancelled() => {
            let cancel = CancelledNotificationParam::new(Some(upstream_id), Some("cancelled by the client".into()));
            let _ = live.peer.send_notification(ClientNotification::CancelledNotification(rmcp::model::Notification::new(cancel))).await;
            Err(Sent::Cancelled)
        }
    };
    if mapped {
        live.links.unmap_progress(&upstream_token);
    }
    match outcome {
        Err(Sent::Failed(failure)) => Err(Sent::Failed(connection_failure(live, failure).await)),
        other => other,
    }
}

/// A stdio connection that closed most likely closed because the process died: say how.
async fn connection_failure(live: &Live, failure: UpstreamError) -> UpstreamError {
    if failure.kind != FailureKind::ConnectionClosed {
        return failure;
    }
    if let Some(reason) = live.stream_fault.as_ref().and_then(|fault| fault.get()) {
        return UpstreamError::new(&live.links.server, FailureKind::Protocol, reason.clone())
            .reached(true);
    }
    let Some(exit) = &live.exit else {
        return failure;
    };
    let mut exit = exit.clone();
    // EOF on stdout usually comes a moment before the exit status can be reaped.
    let exited =
        tokio::time::timeout(Duration::from_millis(250), exit.wait_for(Option::is_some)).await;
    match exited {
        Ok(Ok(info)) => {
            UpstreamError::process_exited(&live.links.server, info.expect("waited for Some"))
        }
        _ => failure,
    }
}
