//! Routing one client request to its server: wait for a usable connection, forward with
//! timeouts, progress and cancellation, classify failures and retry as the policy says.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ClientRequest, ServerResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use tokio::time::Instant;
use tracing::Instrument;
use wardgate_policy::{FailureKind, FailureStatus, Operation};

use wardgate_recovery::call::{
    AttemptFailure, CallInput, CallMachine, CallNext, CallStep, Ending, Sight,
};

use crate::failure::UpstreamError;
use crate::gateway::Gateway;
use crate::metrics::Outcome;
use crate::secrets::mask;
use crate::sessions::SessionId;
use crate::slot::{millis, Live, Slot, SlotEvent};
use crate::status::ServerStatus;

mod send;

use send::{send, Sent};

mod telemetry;

pub use wardgate_recovery::call::CallHints;

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

/// The gateway's error about `slot`'s server, with its state in `data` ([`status_data`]).
fn server_error(slot: &Slot, status: &ServerStatus, message: String) -> McpError {
    McpError::new(
        rmcp::model::ErrorCode(SERVER_UNAVAILABLE),
        message,
        Some(status_data(slot, status)),
    )
}

/// The `data` of the gateway's errors about a server, a stable schema (docs/errors.md):
/// `server`, `status`, `statusSince` (RFC 3339, when the status last changed), `reason`
/// (why, in the server's own words where it said any), `attempt` (the reconnect or
/// restart attempt, while there is one), `nextRetryMs` (until the next attempt, while one
/// is scheduled), `lastError` and `remedy`. Every text is masked (`secrets::mask`).
pub(crate) fn status_data(slot: &Slot, status: &ServerStatus) -> serde_json::Value {
    use serde_json::Value;
    let recovery = slot.recovery();
    let view = &recovery.view;
    let now_ms = recovery.millis(Instant::now());
    let online = status.is_online();
    let mut data = serde_json::Map::new();
    data.insert("server".into(), Value::from(slot.name.as_str()));
    data.insert("status".into(), Value::from(status.name()));
    let since = crate::info::wall_clock(now_ms.saturating_sub(view.status_since_ms));
    data.insert("statusSince".into(), Value::from(since));
    if let Some(reason) = status.reason() {
        data.insert("reason".into(), Value::from(mask(reason).into_owned()));
    }
    let attempt = match status {
        ServerStatus::Reconnecting { attempt, .. } | ServerStatus::Restarting { attempt } => {
            Some(*attempt)
        }
        _ => view.reconnect_attempt.filter(|_| !online),
    };
    if let Some(attempt) = attempt {
        data.insert("attempt".into(), Value::from(attempt));
    }
    if let Some(at) = view.next_retry_at_ms.filter(|at| !online && *at > now_ms) {
        data.insert("nextRetryMs".into(), Value::from(at - now_ms));
    }
    if let Some(error) = &view.last_error {
        data.insert("lastError".into(), Value::from(mask(error).into_owned()));
    }
    let remedy = if online {
        "the failure was this call's; try again, or check the server's log".to_owned()
    } else {
        status.remedy(&slot.name)
    };
    data.insert("remedy".into(), Value::from(remedy));
    Value::Object(data)
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
    let span = tracing::Span::current();
    span.record("wardgate.server", slot.name.as_str());
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
    span.record("wardgate.server.status", slot.status().name());
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
        // A call made as a task of the server's own (2025-11-25).
        ClientRequest::CustomRequest(custom) if custom.method == "tools/call" => {
            crate::telemetry::custom_tool_name(custom)
                .unwrap_or("other")
                .to_owned()
        }
        ClientRequest::GetPromptRequest(_) => "prompts/get".into(),
        ClientRequest::ReadResourceRequest(_) => "resources/read".into(),
        ClientRequest::SubscribeRequest(_) => "resources/subscribe".into(),
        ClientRequest::UnsubscribeRequest(_) => "resources/unsubscribe".into(),
        _ => "other".into(),
    }
}

/// Attempts at `request`, as the call's machine (`wardgate_recovery::call`) says within the
/// request timeout: each waits for a usable connection (waking a down server) and sends the
/// request on it; a failed attempt, the call's own or the reconnection it asked for, is
/// retried or given up as the policy says. Without a request, the attempts end as soon as
/// a connection is usable (`until_usable`), with nothing sent.
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
    let clock = || millis(started.elapsed());
    let mut call = CallMachine::call(operation, hints, 0, millis(timeout));
    // A request is journaled as a call of its server (a wait for a name not yet known is
    // not: it sends nothing).
    let number = request.map(|_| slot.start_call());
    // A config change may replace the server's slot while the call waits: it moves on.
    let mut replacement: Option<Arc<Slot>> = None;
    loop {
        let slot = replacement.as_deref().unwrap_or(slot);
        let journal = |call: &CallMachine, step: &CallStep| {
            if let Some(number) = number {
                slot.journal_call(number, call, step);
            }
        };
        let watched = watch(slot, &mut call, started, timeout, &context.ct, &journal).await;
        let (step, sent) = match watched {
            Watched::Usable(live) => {
                let Some(request) = request else {
                    return Ok(None);
                };
                let sent_at = Instant::now();
                let attempt = call.attempt();
                tracing::Span::current().record("wardgate.attempts", i64::from(attempt));
                let traced = telemetry::Attempt::begin(&live, &slot.name, request, attempt);
                let outcome = send(
                    &live,
                    session,
                    request.clone(),
                    timeout,
                    context,
                    &traced.span,
                )
                .instrument(traced.span.clone())
                .await;
                traced.finish(gateway.metrics(), &outcome);
                let failure = match &outcome {
                    Ok(_) => None,
                    Err(Sent::Cancelled) => return Err(cancelled()),
                    Err(Sent::Failed(failure)) => Some(AttemptFailure {
                        kind: failure.kind.clone(),
                        message: failure.message.clone(),
                        reached: failure.may_have_reached_server,
                    }),
                };
                let answered = CallInput::Answered {
                    failure,
                    failures_counted: slot.health_failures_counted(),
                };
                let step = call.on(clock(), answered, &*slot.policy, &slot.context);
                journal(&call, &step);
                let failure = match outcome {
                    Ok(result) => {
                        evidence(slot, live.generation, &step, None, sent_at);
                        return Ok(Some(result));
                    }
                    Err(Sent::Failed(failure)) => failure,
                    Err(Sent::Cancelled) => return Err(cancelled()),
                };
                evidence(slot, live.generation, &step, Some(&failure), sent_at);
                (step, Some((live.generation, failure)))
            }
            Watched::Ended(step) => (step, None),
            // A per-client instance is never replaced by name: only its own client may
            // use it, and the caller asks again for its next.
            Watched::Retired => {
                match gateway.slot(&slot.name).filter(|_| slot.instance.is_none()) {
                    Some(next) if !next.is_retired() => {
                        call.on(clock(), CallInput::Replaced, &*next.policy, &next.context);
                        replacement = Some(next);
                        continue;
                    }
                    _ => {
                        let error =
                            unavailable(slot, &slot.status(), Some("removed from the config"));
                        return Err((error, Outcome::Unavailable));
                    }
                }
            }
            Watched::Fail(error, outcome) => return Err((error, outcome)),
        };
        // The attempt failed: the call's own (with the connection it went out on), or the
        // reconnection it asked for.
        let (generation, failure) = match sent {
            Some((generation, failure)) => (Some(generation), failure),
            None => match &step.judged {
                Some((failure, _)) => (
                    None,
                    UpstreamError::new(&slot.name, failure.kind.clone(), failure.message.clone())
                        .reached(false),
                ),
                None => {
                    let outcome = match step.next {
                        CallNext::Fail(Ending::NotOnlineInTime) => Outcome::Timeout,
                        _ => Outcome::Unavailable,
                    };
                    return Err((ended_unanswered(slot, step.next, timeout), outcome));
                }
            },
        };
        match step.next {
            CallNext::Sleep { delay_ms } => {
                if let (true, Some(generation)) = (step.replace, generation) {
                    // The connection is gone; the supervisor replaces it while we wait,
                    // without telling anyone else unless the replacement fails.
                    slot.send(SlotEvent::CallBroken {
                        generation,
                        error: failure.clone(),
                    });
                }
                let attempt = call.attempt();
                tracing::info!(server = %slot.name, attempt, "retrying in {delay_ms} ms after: {}", failure.message);
                tracing::info!(target: crate::telemetry::TARGET, attempt = i64::from(attempt), delay_ms = i64::try_from(delay_ms).unwrap_or(i64::MAX), failure = %mask(&failure.message), "wardgate.retry");
                gateway.metrics().retry(&slot.name);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(delay_ms)) => {}
                    _ = context.ct.cancelled() => return Err(cancelled()),
                }
                let due = call.on(clock(), CallInput::RetryDue, &*slot.policy, &slot.context);
                journal(&call, &due);
            }
            _ => {
                let outcome = outcome_of(&failure);
                let tell = step.tell.zip(generation);
                let error = give_up(slot, failure, tell, call.attempt(), &context.ct).await;
                return Err((error, outcome));
            }
        }
    }
}

/// Tell the supervisor what a finished attempt says about its connection's health, where
/// the call's machine says it says anything.
fn evidence(
    slot: &Slot,
    generation: u64,
    step: &CallStep,
    failure: Option<&UpstreamError>,
    sent_at: Instant,
) {
    if let Some(succeeded) = step.evidence {
        slot.send(SlotEvent::CallOutcome {
            generation,
            succeeded,
            latency_ms: millis(sent_at.elapsed()),
            error: failure.map(|failure| format!("a call: {}", failure.message)),
        });
    }
}

/// The error of a call that ended without an attempt to judge: refused at once, or not
/// online within its timeout.
fn ended_unanswered(slot: &Slot, next: CallNext, timeout: Duration) -> McpError {
    let status = slot.status();
    match next {
        CallNext::Fail(Ending::NotOnlineInTime) => {
            let detail = format!(
                "still not online after {}",
                humantime::format_duration(timeout)
            );
            unavailable(slot, &status, Some(&detail))
        }
        _ => unavailable(slot, &status, None),
    }
}

/// The error a client sees when the call gives up. `tell`: the status the failure leaves
/// the server in, and the connection it showed to be unusable; the supervisor hears of it
/// first and answers with the status its recovery machine stepped to, which the error
/// names.
async fn give_up(
    slot: &Slot,
    failure: UpstreamError,
    tell: Option<(FailureStatus, u64)>,
    attempts: u32,
    cancelled: &tokio_util::sync::CancellationToken,
) -> McpError {
    if let FailureKind::JsonRpc { code } = failure.kind {
        // The server is alive and answered: its own error goes to the client as it was sent.
        return match &failure.answer {
            Some(answer) => as_answered(answer, &slot.name),
            None => McpError::new(rmcp::model::ErrorCode(code), failure.message.clone(), None),
        };
    }
    let now = match tell {
        Some((status, generation)) => {
            let (reply, told) = tokio::sync::oneshot::channel();
            slot.send(SlotEvent::CallFailed {
                generation,
                error: failure.clone(),
                status,
                reply: Some(reply),
            });
            // Unanswered when the news is of an older connection (or the gateway stops):
            // the status then is already the newer one's.
            tokio::select! {
                told = told => told.unwrap_or_else(|_| slot.status()),
                _ = cancelled.cancelled() => slot.status(),
            }
        }
        None => slot.status(),
    };
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
pub const GATEWAY_DATA_KEY: &str = "wardgate";

/// The server's own request timeout, or the gateway's.
pub fn request_timeout(gateway: &Gateway, slot: &Slot) -> Duration {
    slot.config
        .request_timeout
        .unwrap_or(gateway.settings.request_timeout)
}

/// Wait, within the server's request timeout, until `slot`'s server can serve a call: it
/// comes online, or a reconnection this wakes succeeds. For names the catalogue does not
/// know yet. The attempts are those of a call (`attempts`): a failed reconnection is a
/// failed attempt, retried as the policy says, and a config change that replaces the
/// server moves the wait to the replacement.
pub async fn until_usable(
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

/// How waiting for a usable connection ended.
enum Watched {
    /// A live connection to send the attempt on.
    Usable(Arc<Live>),
    /// The call's machine ended the wait: the reconnection the call asked for failed (a
    /// failed attempt, judged), the status refuses calls, or the deadline passed.
    Ended(CallStep),
    /// The slot was retired by a config change (removed, or replaced by a new one).
    Retired,
    /// The call fails now with this error (shutting down, or cancelled by the client).
    Fail(McpError, Outcome),
}

/// Feed the call's machine every status the server passes through until it says to send
/// (on the live connection) or ends the wait; wake the server when it says so.
async fn watch(
    slot: &Slot,
    call: &mut CallMachine,
    started: Instant,
    timeout: Duration,
    cancelled: &tokio_util::sync::CancellationToken,
    journal: &impl Fn(&CallMachine, &CallStep),
) -> Watched {
    let mut status = slot.watch_status();
    let deadline = started + timeout;
    // The statuses this call saw, each once, as events on its span.
    let mut seen: Option<&'static str> = None;
    loop {
        let (current, attempts_finished) = slot.observe(&mut status);
        if seen != Some(current.name()) && (seen.is_some() || !current.is_online()) {
            crate::telemetry::status_event(&slot.name, current.name(), "seen by a call");
        }
        seen = Some(current.name());
        if slot.is_retired() {
            return Watched::Retired;
        }
        let live = slot.live().filter(|_| current.is_online());
        // Why the last connection attempt failed, for a call whose reconnection did.
        let last_failure = (!current.is_online())
            .then(|| slot.last_connect_failure())
            .flatten();
        let sight = Sight {
            status: &current,
            live: live.is_some(),
            attempts_finished,
            last_failure: last_failure.as_ref(),
        };
        let now_ms = millis(started.elapsed());
        let step = call.on(now_ms, CallInput::Seen(sight), &*slot.policy, &slot.context);
        journal(call, &step);
        match (step.next, live) {
            (CallNext::Send, Some(live)) => return Watched::Usable(live),
            (CallNext::Wake, _) => slot.wake(),
            (CallNext::Watch | CallNext::Send, _) => {}
            _ => return Watched::Ended(step),
        }
        tokio::select! {
            changed = status.changed() => if changed.is_err() {
                let error = unavailable(slot, &current, Some("the gateway is shutting down"));
                return Watched::Fail(error, Outcome::Unavailable);
            },
            _ = tokio::time::sleep_until(deadline) => {
                let now_ms = millis(started.elapsed());
                let step = call.on(now_ms, CallInput::DeadlinePassed, &*slot.policy, &slot.context);
                journal(call, &step);
                return Watched::Ended(step);
            }
            _ = cancelled.cancelled() => {
                let (error, outcome) = self::cancelled();
                return Watched::Fail(error, outcome);
            }
        }
    }
}
