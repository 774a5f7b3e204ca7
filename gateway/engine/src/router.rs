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

/// JSON-RPC error code for "the server behind this name cannot serve now", with
/// `data.server` and `data.status`. In -32000..-32019, which MCP 2026-07-28 leaves to
/// implementations; no SDK defines -32010 (the TypeScript and Python SDKs use -32000 for a
/// closed connection and -32001 for their own request timeout, which a client could take
/// this answer for and retry).
pub const SERVER_UNAVAILABLE: i32 = -32010;

pub fn unavailable(slot: &Slot, status: &ServerStatus, detail: Option<&str>) -> McpError {
    let mut message = format!("server \"{}\" is {}", slot.name, status);
    if let Some(detail) = detail {
        message.push_str(&format!(" ({detail})"));
    }
    message.push_str(&format!("; {}", status.remedy(&slot.name)));
    server_error(slot, status, message)
}

/// The gateway's error about `slot`'s server, with its status in `data`.
fn server_error(slot: &Slot, status: &ServerStatus, message: String) -> McpError {
    McpError::new(
        rmcp::model::ErrorCode(SERVER_UNAVAILABLE),
        message,
        Some(match status.reason() {
            // Why, in the server's own words where it said any (its last stderr lines).
            Some(reason) => {
                serde_json::json!({ "server": slot.name, "status": status.name(), "reason": reason })
            }
            None => serde_json::json!({ "server": slot.name, "status": status.name() }),
        }),
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
    let result = match attempts(
        gateway,
        slot,
        session,
        operation,
        hints,
        Some(&request),
        context,
    )
    .await
    {
        Ok(Some(answer)) => Ok(answer),
        // `attempts` answers without a result only when it was given no request.
        Ok(None) => Err((
            McpError::internal_error("the request was not sent", None),
            Outcome::Unavailable,
        )),
        Err(refused) => Err(refused),
    };
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
    let error = McpError::new(
        rmcp::model::ErrorCode::INTERNAL_ERROR,
        "request cancelled by the client",
        None,
    );
    (error, Outcome::Cancelled)
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

/// Attempts at `request`, as the policy allows within the request timeout: each waits for a
/// usable connection (waking a down server) and sends the request on it; a failed attempt,
/// the call's own or the reconnection it asked for, is retried or given up as
/// `calls::after_failure` says. Without a request, the attempts end as soon as a connection
/// is usable (`until_usable`), with nothing sent.
async fn attempts(
    gateway: &Gateway,
    slot: &Slot,
    session: SessionId,
    operation: Operation,
    hints: CallHints,
    request: Option<&ClientRequest>,
    context: &RequestContext<RoleServer>,
) -> Result<Option<ServerResult>, (McpError, Outcome)> {
    let timeout = request_timeout(gateway, slot);
    let started = Instant::now();
    let deadline = started + timeout;
    let mut attempt = 1u32;
    // A config change may replace the server's slot while the call waits: it moves on.
    let mut replacement: Option<Arc<Slot>> = None;
    loop {
        let slot = replacement.as_deref().unwrap_or(slot);
        // A failed attempt: the call's own (with the connection it went out on), or the
        // reconnection it asked for.
        let (failure, generation) = match usable_connection(slot, deadline, timeout, &context.ct)
            .await
        {
            Ok(live) => {
                let Some(request) = request else {
                    return Ok(None);
                };
                let sent_at = Instant::now();
                match send(&live, session, request.clone(), timeout, context).await {
                    Ok(result) => {
                        evidence(slot, live.generation, None, sent_at);
                        return Ok(Some(result));
                    }
                    Err(Sent::Cancelled) => return Err(cancelled()),
                    Err(Sent::Failed(failure)) => {
                        evidence(slot, live.generation, Some(&failure), sent_at);
                        (failure, Some(live.generation))
                    }
                }
            }
            Err(Unusable::AttemptFailed(failure)) => (failure, None),
            Err(Unusable::Retired) => match gateway.slot(&slot.name) {
                Some(next) if !next.is_retired() => {
                    replacement = Some(next);
                    continue;
                }
                _ => {
                    let error = unavailable(slot, &slot.status(), Some("removed from the config"));
                    return Err((error, Outcome::Unavailable));
                }
            },
            Err(Unusable::Fail(error)) => {
                let outcome = if context.ct.is_cancelled() {
                    Outcome::Cancelled
                } else if Instant::now() >= deadline {
                    Outcome::Timeout
                } else {
                    Outcome::Unavailable
                };
                return Err((error, outcome));
            }
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
                if let (true, Some(generation)) = (tell, generation) {
                    // The connection is gone; let the supervisor replace it while we wait.
                    slot.send(SlotEvent::CallFailed {
                        generation,
                        error: failure.clone(),
                        status: FailureStatus::Offline,
                    });
                }
                Duration::from_millis(delay_ms)
            }
            AfterFailure::GiveUp { status, tell, .. } => {
                let outcome = outcome_of(&failure);
                let tell = if tell { generation } else { None };
                let error = give_up(slot, failure, status, tell, attempt).await;
                return Err((error, outcome));
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

/// Tell the supervisor what a finished call says about its connection's health, where it
/// says anything (`calls::health_evidence`).
fn evidence(slot: &Slot, generation: u64, failure: Option<&UpstreamError>, sent_at: Instant) {
    let kind = failure.map(|failure| &failure.kind);
    if let Some(succeeded) = calls::health_evidence(kind, slot.health_failures_counted()) {
        slot.send(SlotEvent::CallOutcome {
            generation,
            succeeded,
            latency_ms: millis(sent_at.elapsed()),
            error: failure.map(|failure| format!("a call: {}", failure.message)),
        });
    }
}

/// The error a client sees when the call gives up. `tell`: the generation of the
/// connection the failure showed to be unusable, which the supervisor hears of first, so
/// that the error can say the status the server is really in.
async fn give_up(
    slot: &Slot,
    failure: UpstreamError,
    status: FailureStatus,
    tell: Option<u64>,
    attempts: u32,
) -> McpError {
    if let FailureKind::JsonRpc { code } = failure.kind {
        // The server is alive and answered: its own error goes to the client as it was sent.
        return match &failure.answer {
            Some(answer) => as_answered(answer, &slot.name),
            None => McpError::new(rmcp::model::ErrorCode(code), failure.message.clone(), None),
        };
    }
    if let Some(generation) = tell {
        slot.send(SlotEvent::CallFailed {
            generation,
            error: failure.clone(),
            status,
        });
        let mut watch = slot.watch_status();
        let _ = tokio::time::timeout(STATUS_SETTLES, watch.wait_for(|status| !status.is_online()))
            .await;
    }
    let now = slot.status();
    let tries = if attempts > 1 {
        format!(" after {attempts} attempts")
    } else {
        String::new()
    };
    let state = if now.is_online() {
        format!(
            "the server is {now}: the failure was this call's; try again, or check the server's log"
        )
    } else {
        format!("the server is {now}; {}", now.remedy(&slot.name))
    };
    let message = format!(
        "server \"{}\": the call failed{tries}: {}; {state}",
        slot.name, failure.message
    );
    server_error(slot, &now, message)
}

/// A server's error answer as it sent it: its code, message and data, with the gateway's
/// context under its own key in `data` (`"wardgate": {"server": NAME}`) where `data` is an
/// object or absent; other data is left exactly as it was.
pub(crate) fn as_answered(answer: &McpError, server: &str) -> McpError {
    let context = serde_json::json!({ "server": server });
    let data = match answer.data.clone() {
        None => Some(serde_json::json!({ GATEWAY_DATA_KEY: context })),
        Some(serde_json::Value::Object(mut fields)) => {
            fields.entry(GATEWAY_DATA_KEY).or_insert(context);
            Some(serde_json::Value::Object(fields))
        }
        Some(other) => Some(other),
    };
    McpError::new(answer.code, answer.message.clone(), data)
}

/// The key of the gateway's own context in the `data` of a server's error answer.
pub(crate) const GATEWAY_DATA_KEY: &str = "wardgate";

/// How long an error waits for the supervisor to act on the failure it reports, so that it
/// names the status the failure left (the supervisor acts within milliseconds; a stdio
/// server's exit is awaited for 300 ms).
const STATUS_SETTLES: Duration = Duration::from_secs(1);

/// The server's own request timeout, or the gateway's.
pub(crate) fn request_timeout(gateway: &Gateway, slot: &Slot) -> Duration {
    slot.config
        .request_timeout
        .unwrap_or(gateway.settings.request_timeout)
}

/// Wait, within the server's request timeout, until `slot`'s server can serve a call: it
/// comes online, or a reconnection this wakes succeeds. For names the catalogue does not
/// know yet. The attempts are those of a call (`attempts`): a failed reconnection is a
/// failed attempt, retried as the policy says, and a config change that replaces the
/// server moves the wait to the replacement.
pub(crate) async fn until_usable(
    gateway: &Gateway,
    slot: &Slot,
    session: SessionId,
    context: &RequestContext<RoleServer>,
) -> Result<(), McpError> {
    attempts(
        gateway,
        slot,
        session,
        Operation::Call,
        CallHints::default(),
        None,
        context,
    )
    .await
    .map(|_| ())
    .map_err(|(error, _)| error)
}

/// Why waiting for a usable connection ended without one.
enum Unusable {
    /// The reconnection this call asked for failed: a failed attempt of the call, which
    /// the policy may retry.
    AttemptFailed(UpstreamError),
    /// The slot was retired by a config change (removed, or replaced by a new one).
    Retired,
    /// The call fails now with this error.
    Fail(McpError),
}

/// The slot's live connection, waiting (until `deadline`) for a transitional state to
/// settle or for a reconnection the call itself triggers (`calls::Waiter`).
async fn usable_connection(
    slot: &Slot,
    deadline: Instant,
    timeout: Duration,
    cancelled: &tokio_util::sync::CancellationToken,
) -> Result<Arc<Live>, Unusable> {
    let mut status = slot.watch_status();
    let mut waiter = Waiter::default();
    loop {
        let (current, attempts_finished) = slot.observe(&mut status);
        if slot.is_retired() {
            return Err(Unusable::Retired);
        }
        let live = slot.live().filter(|_| current.is_online());
        match waiter.look(&current, live.is_some(), attempts_finished) {
            Look::Use => {
                if let Some(live) = live {
                    return Ok(live);
                }
            }
            Look::Refuse => return Err(Unusable::Fail(unavailable(slot, &current, None))),
            Look::AttemptFailed => {
                let view = slot.recovery().view;
                let kind = view.last_failure.unwrap_or(FailureKind::ConnectRefused);
                let message = view
                    .last_error
                    .unwrap_or_else(|| "the connection attempt failed".to_owned());
                let failure =
                    UpstreamError::new(&slot.name, kind, format!("reconnecting failed: {message}"));
                return Err(Unusable::AttemptFailed(failure.reached(false)));
            }
            // A call is how recovery is detected: try now.
            Look::WakeUp => slot.wake(),
            Look::Wait => {}
        }
        tokio::select! {
            changed = status.changed() => if changed.is_err() {
                return Err(Unusable::Fail(unavailable(slot, &current, Some("the gateway is shutting down"))));
            },
            _ = tokio::time::sleep_until(deadline) => {
                let last = slot.status();
                return Err(Unusable::Fail(unavailable(slot, &last, Some(&format!(
                    "still not online after {}", humantime::format_duration(timeout))))));
            }
            _ = cancelled.cancelled() => {
                return Err(Unusable::Fail(McpError::new(rmcp::model::ErrorCode::INTERNAL_ERROR, "request cancelled by the client", None)));
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
    let options = PeerRequestOptions::with_timeout(timeout)
        .reset_timeout_on_progress()
        .with_meta(passed_on(context, speaks_modern(live)));
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
    // What the server said during the request goes out before its answer (and before its
    // progress token is forgotten).
    if !matches!(outcome, Err(Sent::Cancelled)) {
        live.links.delivered(session).await;
    }
    if mapped {
        live.links.unmap_progress(&upstream_token);
    }
    match outcome {
        Err(Sent::Failed(failure)) => Err(Sent::Failed(connection_failure(live, failure).await)),
        other => other,
    }
}

/// Whether the live connection speaks 2026-07-28, where a request carries its client's
/// capabilities.
fn speaks_modern(live: &Live) -> bool {
    live.peer
        .peer_info()
        .is_some_and(|info| !info.protocol_version.has_initialize())
}

/// What of a client request's `_meta` travels upstream with it: trace context (W3C
/// `traceparent`, `tracestate`, `baggage`), the log level a 2026-07-28 client asked for,
/// and, to a 2026-07-28 server (`modern`), the client's capabilities: a 2026-07-28
/// client's as it sent them with the request, a handshake-era client's as it declared them
/// in `initialize`, so the server asks only what the client can answer and refuses
/// (-32021) what needs more. The protocol version and client info are the gateway's own on
/// each connection (rmcp adds them), and progress tokens are mapped, not copied.
fn passed_on(context: &RequestContext<RoleServer>, modern: bool) -> rmcp::model::RequestMetaObject {
    let meta = &context.meta;
    let mut upstream = rmcp::model::RequestMetaObject::new();
    if modern {
        let capabilities = meta.client_capabilities().or_else(|| {
            context
                .peer
                .peer_info()
                .map(|info| info.capabilities.clone())
        });
        if let Some(capabilities) = capabilities {
            upstream.set_client_capabilities(capabilities);
        }
    }
    if let Some(value) = meta.get_traceparent() {
        upstream.set_traceparent(value);
    }
    if let Some(value) = meta.get_tracestate() {
        upstream.set_tracestate(value);
    }
    if let Some(value) = meta.get_baggage() {
        upstream.set_baggage(value);
    }
    if let Some(level) = meta.log_level() {
        upstream.set_log_level(level);
    }
    upstream
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
        Ok(Ok(end)) => end
            .as_ref()
            .expect("waited for Some")
            .error(&live.links.server),
        _ => failure,
    }
}
