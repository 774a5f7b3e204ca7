//! A server's own tasks of 2025-11-25, followed to their end for a call of the gateway's.
//! rmcp's model has no place for that revision's `tasks` capability or a tool's
//! `execution`; the transports read each tool's `taskSupport` off the bytes of the
//! server's tool lists (`wardgate_engine::upstream::tool_tasks`), and [`task_support`]
//! says what the server said of a tool:
//!
//! - **A run of the gateway's** (a client's `tools/call` as a task) of a tool the server
//!   may run as a task calls it with the `task` parameter ([`call_request`]), and the
//!   server answers with its task ([`created`]). Any other tool is called as any call, and
//!   its answer ends the run.
//! - **A call of a tool the server runs only as a task** (`taskSupport: "required"`) is
//!   made as a task whatever the client asked, and followed within the server's request
//!   timeout (`SessionHandler::call_tool_as_named`).
//!
//! Following ([`SessionHandler::follow`]) polls the server's `tasks/get` at its
//! `pollInterval`, each poll a call of its own with the server's request timeout and
//! recovery; asks `tasks/result` once the task has ended or waits on the client, on the
//! live connection with no timeout, as it blocks until the task ends (what the server asks
//! meanwhile comes on that request's stream, tied to the gateway's run by
//! `upstream::handler`); and cancels the server's task (`tasks/cancel`) when the call is
//! cancelled, runs past its deadline or cannot be followed. So a task may run past the
//! server's request timeout: a run is bounded by its `ttl`, a plain call by the request
//! timeout. A stdio server's task ends with its process: a poll once the process has
//! ended fails, naming the server.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, CustomRequest,
    ProtocolVersion, ServerResult,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{json, Value};

use crate::{unexpected, SessionHandler};
use wardgate_engine::gateway::Slot;
use wardgate_engine::router::GATEWAY_DATA_KEY;
use wardgate_engine::sessions::SessionId;
use wardgate_engine::slot::Live;
use wardgate_engine::upstream::tool_tasks::TaskSupport;
use wardgate_policy::TransportKind;

/// How often a server's task is polled when it names no `pollInterval`, and the bounds put
/// on one it names.
const DEFAULT_POLL: Duration = Duration::from_millis(500);
const MIN_POLL: Duration = Duration::from_millis(100);
const MAX_POLL: Duration = Duration::from_secs(5);

/// What `slot`'s server said of running `tool` (its own name) as a task: forbidden unless
/// the server speaks the revision that has these tasks and listed the tool so.
pub(crate) fn task_support(slot: &Slot, tool: &str) -> TaskSupport {
    let Some(live) = slot.live() else {
        return TaskSupport::Forbidden;
    };
    match live.links.tool_tasks.of(tool) {
        TaskSupport::Forbidden => TaskSupport::Forbidden,
        support => {
            let speaks = live
                .peer
                .peer_info()
                .is_some_and(|info| info.protocol_version == ProtocolVersion::V_2025_11_25);
            if speaks {
                support
            } else {
                TaskSupport::Forbidden
            }
        }
    }
}

/// The upstream `tools/call` for `params`; with `task_ttl`, augmented as a task kept that
/// long (as a custom request: rmcp's parameters have no `task`).
pub(crate) fn call_request(params: CallToolRequestParams, task_ttl: Option<u64>) -> ClientRequest {
    let Some(ttl) = task_ttl else {
        return ClientRequest::CallToolRequest(CallToolRequest::new(params));
    };
    let mut value = serde_json::to_value(&params).unwrap_or_else(|_| json!({}));
    if let Some(object) = value.as_object_mut() {
        object.insert("task".into(), json!({ "ttl": ttl }));
    }
    ClientRequest::CustomRequest(CustomRequest::new("tools/call", Some(value)))
}

/// A task a server created for a call.
pub(crate) struct ServerTask {
    id: String,
    poll: Duration,
}

/// The server's own task, if `answer` is one (2025-11-25's `CreateTaskResult`, which rmcp
/// reads as a custom result).
pub(crate) fn created(answer: &ServerResult) -> Option<ServerTask> {
    let ServerResult::CustomResult(result) = answer else {
        return None;
    };
    let task = result.0.get("task")?;
    Some(ServerTask {
        id: task.get("taskId")?.as_str()?.to_owned(),
        poll: poll_interval(task),
    })
}

fn poll_interval(task: &Value) -> Duration {
    task.get("pollInterval")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_POLL, Duration::from_millis)
        .clamp(MIN_POLL, MAX_POLL)
}

fn task_request(method: &'static str, task: &ServerTask) -> ClientRequest {
    ClientRequest::CustomRequest(CustomRequest::new(
        method,
        Some(json!({ "taskId": task.id })),
    ))
}

/// The gateway's error for a followed task that did not end with a result.
fn task_error(server: &str, task: &ServerTask, what: String) -> McpError {
    McpError::internal_error(
        format!("server \"{server}\" {what}"),
        Some(json!({ GATEWAY_DATA_KEY: { "server": server, "serverTask": task.id } })),
    )
}

/// How a wait on the server ended early.
enum Stop {
    Cancelled,
    PastDeadline,
}

impl Stop {
    fn why(&self) -> &'static str {
        match self {
            Stop::Cancelled => "the call was cancelled",
            Stop::PastDeadline => "it ran past the request timeout",
        }
    }
}

/// What asking for a task's result came to.
enum Asked {
    /// The server's answer: the result, or its error (boxed: it is large, and rare).
    Answered(Box<Result<ServerResult, McpError>>),
    /// The connection broke first: the next poll says what became of the task.
    Broken,
}

/// How long a server is given to take a `tasks/cancel` or `notifications/cancelled` the
/// gateway sends after the call it was for has ended.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// A `tasks/result` in flight on `peer`: when dropped before its answer (the call was
/// cancelled or ran out of time), the server is told (`notifications/cancelled`), and its
/// call stays noted on the connection until it has been, so a question the server sends
/// meanwhile is not taken for another call's.
struct ResultWait {
    peer: rmcp::Peer<rmcp::RoleClient>,
    id: rmcp::model::RequestId,
    in_flight: Option<wardgate_engine::upstream::InFlightGuard>,
    answered: bool,
}

impl Drop for ResultWait {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let (peer, id, in_flight) = (self.peer.clone(), self.id.clone(), self.in_flight.take());
        tokio::spawn(async move {
            let cancel = rmcp::model::CancelledNotificationParam::new(
                Some(id),
                Some("the call that waited for this task's result has ended".into()),
            );
            let _ = tokio::time::timeout(CANCEL_WAIT, peer.notify_cancelled(cancel)).await;
            drop(in_flight);
        });
    }
}

impl SessionHandler {
    /// Follow `task`, which `slot`'s server created for a call of `context`'s, to its end:
    /// its result, or the error that ended it. Past `deadline` (if any), or when the call is
    /// cancelled, or when following fails, the task is cancelled at the server.
    pub(crate) async fn follow(
        &self,
        slot: &Slot,
        session: SessionId,
        context: &RequestContext<RoleServer>,
        mut task: ServerTask,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<CallToolResult, McpError> {
        let server = slot.name.as_str();
        let live = slot.live();
        let generation = live.as_ref().map(|live| live.generation);
        // What the server asks, naming its task, is the run's.
        let run = context
            .extensions
            .get::<wardgate_engine::runs::ForRun>()
            .map(|run| run.0.clone());
        let _following = live
            .zip(run)
            .map(|(live, run)| live.links.following(&task.id, run));
        // A stdio server's tasks end with its process; a new process may have a task of
        // the same id that is not this one.
        let process_bound = slot.transport() == TransportKind::Stdio;
        let lost = || process_bound && slot.live().map(|live| live.generation) != generation;
        let lost_error = |task: &ServerTask| {
            task_error(
                server,
                task,
                "lost the task it ran for this call: its process ended (the gateway restarts \
                 it, but a new process does not know the old one's tasks). Call the tool again"
                    .to_owned(),
            )
        };
        // Without a deadline, the run's own `ttl` bounds it (it cancels `context.ct`).
        let stopped = || async {
            let past_deadline = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = context.ct.cancelled() => Stop::Cancelled,
                _ = past_deadline => Stop::PastDeadline,
            }
        };
        loop {
            let polled = tokio::select! {
                polled = self.forward_read_only(slot, session, task_request("tasks/get", &task), context) => polled,
                stop = stopped() => return Err(cancel_server_task(slot, &task, stop.why(), generation)),
            };
            if lost() {
                return Err(lost_error(&task));
            }
            let status = match polled {
                Ok(answer) => serde_json::to_value(&answer).unwrap_or(Value::Null),
                Err(error) => {
                    // The task may still run there: it is not left to run for nothing.
                    let _ = cancel_server_task(slot, &task, "", generation);
                    return Err(error);
                }
            };
            task.poll = poll_interval(&status);
            match status.get("status").and_then(Value::as_str) {
                Some("completed" | "failed" | "input_required") => {
                    // Blocks until the task ends; what the server asks the client meanwhile
                    // comes on its stream.
                    let asked = tokio::select! {
                        asked = self.task_result(slot, session, context, &task, generation) => asked,
                        stop = stopped() => return Err(cancel_server_task(slot, &task, stop.why(), generation)),
                    };
                    match asked {
                        Asked::Answered(answered) => {
                            return match *answered {
                                Ok(ServerResult::CallToolResult(result)) => {
                                    Ok(without_server_task(result))
                                }
                                Ok(ServerResult::CustomResult(result)) => {
                                    serde_json::from_value(result.0)
                                        .map(without_server_task)
                                        .map_err(|_| unexpected("tasks/result"))
                                }
                                Ok(_) => Err(unexpected("tasks/result")),
                                Err(error) => Err(error),
                            }
                        }
                        Asked::Broken if lost() => return Err(lost_error(&task)),
                        Asked::Broken => {}
                    }
                }
                Some("cancelled") => {
                    return Err(task_error(
                        server,
                        &task,
                        "cancelled the task it ran for this call".to_owned(),
                    ))
                }
                Some("working") => {}
                other => {
                    let _ = cancel_server_task(slot, &task, "", generation);
                    return Err(task_error(
                        server,
                        &task,
                        format!(
                            "answered tasks/get with a status the gateway does not know ({})",
                            other.unwrap_or("none")
                        ),
                    ));
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(task.poll) => {}
                stop = stopped() => return Err(cancel_server_task(slot, &task, stop.why(), generation)),
            }
        }
    }

    /// `tasks/result` for `task`, which answers only once the task has ended: sent on the
    /// connection of `generation` as it is, with no timeout of its own and no retries
    /// (waiting is not a failure of the server's). It is noted as this call's, so what the
    /// server asks meanwhile reaches this call's client, tied to its run, and what the
    /// server said before its answer goes out first.
    async fn task_result(
        &self,
        slot: &Slot,
        session: SessionId,
        context: &RequestContext<RoleServer>,
        task: &ServerTask,
        generation: Option<u64>,
    ) -> Asked {
        let Some(live) = slot
            .live()
            .filter(|live| Some(live.generation) == generation)
        else {
            return Asked::Broken;
        };
        let run = context
            .extensions
            .get::<wardgate_engine::runs::ForRun>()
            .map(|run| run.0.clone());
        let in_flight = live.links.enter(session, context.id.clone(), run);
        let options = rmcp::service::PeerRequestOptions::no_options();
        let Ok(handle) = live
            .peer
            .send_request_with_option(task_request("tasks/result", task), options)
            .await
        else {
            return Asked::Broken;
        };
        in_flight.sent_as(handle.id.clone());
        let mut wait = ResultWait {
            peer: live.peer.clone(),
            id: handle.id.clone(),
            in_flight: Some(in_flight),
            answered: false,
        };
        let answered = handle.await_response().await;
        wait.answered = true;
        match answered {
            Ok(result) => {
                live.links.delivered(session).await;
                Asked::Answered(Box::new(Ok(result)))
            }
            Err(rmcp::ServiceError::McpError(error)) => Asked::Answered(Box::new(Err(error))),
            Err(_) => Asked::Broken,
        }
    }
}

/// `result` without the `related-task` key the server put in it: the server's task is no
/// task the client knows (a run's result is given its own when asked for).
fn without_server_task(mut result: CallToolResult) -> CallToolResult {
    if let Some(meta) = result.meta.as_mut() {
        meta.remove(wardgate_engine::runs::RELATED_TASK);
        if meta.is_empty() {
            result.meta = None;
        }
    }
    result
}

/// Cancel `task` at `live`'s server, from a task of its own (the call ends at once).
fn cancel_at(live: Arc<Live>, task: &ServerTask) {
    let cancel = task_request("tasks/cancel", task);
    tokio::spawn(async move {
        let options = rmcp::service::PeerRequestOptions::with_timeout(CANCEL_WAIT);
        if let Ok(handle) = live.peer.send_request_with_option(cancel, options).await {
            let _ = handle.await_response().await;
        }
    });
}

/// Cancel a task `slot`'s server made for a call that did not ask for one.
pub(crate) fn cancel_unasked(slot: &Slot, task: &ServerTask) {
    if let Some(live) = slot.live() {
        cancel_at(live, task);
    }
}

/// Cancel `task` at its server, if it is still the process that made it (of `generation`);
/// the call's error, saying `why`.
fn cancel_server_task(
    slot: &Slot,
    task: &ServerTask,
    why: &str,
    generation: Option<u64>,
) -> McpError {
    if let Some(live) = slot
        .live()
        .filter(|live| Some(live.generation) == generation)
    {
        cancel_at(live, task);
    }
    task_error(
        &slot.name,
        task,
        format!("was told to cancel the task it ran for this call: {why}"),
    )
}
