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
use wardgate_engine::router::{self, GATEWAY_DATA_KEY};
use wardgate_engine::sessions::SessionId;
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
        let generation = slot.live().map(|live| live.generation);
        let process_bound = slot.transport() == TransportKind::Stdio;
        // Without a deadline, the run's own `ttl` bounds it (it cancels `context.ct`).
        let far = tokio::time::Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        let deadline = deadline.unwrap_or(far);
        let stopped = || async {
            tokio::select! {
                _ = context.ct.cancelled() => Stop::Cancelled,
                _ = tokio::time::sleep_until(deadline) => Stop::PastDeadline,
            }
        };
        loop {
            let polled = tokio::select! {
                polled = self.forward_read_only(slot, session, task_request("tasks/get", &task), context) => polled,
                stop = stopped() => return Err(self.cancel_server_task(slot, &task, stop.why()).await),
            };
            let restarted = process_bound && slot.live().map(|live| live.generation) != generation;
            let status = match polled {
                Ok(answer) => serde_json::to_value(&answer).unwrap_or(Value::Null),
                Err(_) if restarted => {
                    return Err(task_error(
                        server,
                        &task,
                        "lost the task it ran for this call: its process ended (the gateway \
                         restarts it, but a new process does not know the old one's tasks). \
                         Call the tool again"
                            .to_owned(),
                    ))
                }
                Err(error) => {
                    // The task may still run there: it is not left to run for nothing.
                    let _ = self.cancel_server_task(slot, &task, "").await;
                    return Err(error);
                }
            };
            task.poll = poll_interval(&status);
            let said = status.get("status").and_then(Value::as_str);
            match said {
                Some("completed" | "failed" | "input_required") => {
                    // Blocks until the task ends; what the server asks the client meanwhile
                    // comes on its stream.
                    let asked = tokio::select! {
                        asked = self.task_result(slot, session, context, &task) => asked,
                        stop = stopped() => return Err(self.cancel_server_task(slot, &task, stop.why()).await),
                    };
                    match asked {
                        Ok(ServerResult::CallToolResult(result)) => return Ok(result),
                        Ok(ServerResult::CustomResult(result)) => {
                            return serde_json::from_value(result.0)
                                .map_err(|_| unexpected("tasks/result"))
                        }
                        Ok(_) => return Err(unexpected("tasks/result")),
                        Err(error) if said != Some("input_required") => return Err(error),
                        // The connection broke while the client was being asked: the next
                        // poll says what became of the task.
                        Err(_) => {}
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
                    let _ = self.cancel_server_task(slot, &task, "").await;
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
                stop = stopped() => return Err(self.cancel_server_task(slot, &task, stop.why()).await),
            }
        }
    }

    /// `tasks/result` for `task`, which answers only once the task has ended: sent on the
    /// live connection as it is, with no timeout of its own and no retries (waiting is not
    /// a failure of the server's). It is noted as this call's, so what the server asks
    /// meanwhile reaches this call's client, tied to its run.
    async fn task_result(
        &self,
        slot: &Slot,
        session: SessionId,
        context: &RequestContext<RoleServer>,
        task: &ServerTask,
    ) -> Result<ServerResult, McpError> {
        let Some(live) = slot.live() else {
            return Err(task_error(
                &slot.name,
                task,
                "is not connected, so its task's result cannot be asked for".to_owned(),
            ));
        };
        let run = context
            .extensions
            .get::<wardgate_engine::runs::ForRun>()
            .map(|run| run.0.clone());
        let in_flight = live.links.enter(session, context.id.clone(), run);
        let options = rmcp::service::PeerRequestOptions::no_options();
        let handle = live
            .peer
            .send_request_with_option(task_request("tasks/result", task), options)
            .await
            .map_err(|error| {
                task_error(
                    &slot.name,
                    task,
                    format!("could not be asked for its task's result: {error}"),
                )
            })?;
        in_flight.sent_as(handle.id.clone());
        handle.await_response().await.map_err(|error| match error {
            rmcp::ServiceError::McpError(error) => error,
            other => task_error(
                &slot.name,
                task,
                format!("did not answer for its task's result: {other}"),
            ),
        })
    }

    /// Cancel `task` at its server (best effort, within the server's request timeout); the
    /// call's error, saying `why`.
    async fn cancel_server_task(&self, slot: &Slot, task: &ServerTask, why: &str) -> McpError {
        if let Some(live) = slot.live() {
            let timeout = router::request_timeout(&self.gateway, slot);
            let options = rmcp::service::PeerRequestOptions::with_timeout(timeout);
            let cancel = task_request("tasks/cancel", task);
            if let Ok(handle) = live.peer.send_request_with_option(cancel, options).await {
                let _ = handle.await_response().await;
            }
        }
        task_error(
            &slot.name,
            task,
            format!("was told to cancel the task it ran for this call: {why}"),
        )
    }
}
