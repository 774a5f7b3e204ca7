//! The tasks of 2025-11-25 for handshake-era clients, run by the gateway
//! (`wardgate_engine::runs`): a `tools/call` with `params.task` is answered at once with a
//! `CreateTaskResult`, and the call is made in the background as any call is; `tasks/get`,
//! `tasks/result`, `tasks/list` and `tasks/cancel` answer from the run, for the client that
//! started it only, and `notifications/tasks/status` tells it when the run ends. What the
//! run's server asks the client on the way (elicitation, sampling, roots) names the task,
//! which reads `input_required` meanwhile, and goes on the stream of a waiting
//! `tasks/result` (`wardgate_engine::runs::Run::asking`). The requests reach the handler as
//! custom requests ([`wire`]).

pub(crate) mod follow;
mod lines;
pub(crate) mod wire;

pub(crate) use lines::lines;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CustomNotification, CustomRequest, CustomResult,
    ErrorCode, JsonObject, ServerNotification,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{json, Value};

use super::{access::Access, admin_tools, discover, page, sessionless, unexpected, SessionHandler};
use wardgate_engine::config::ToolDiscovery;
use wardgate_engine::runs::{self, ForRun, Full, Outcome, Run, Snapshot, Status, RELATED_TASK};
use wardgate_engine::tasks::Listing;

/// A run's state as 2025-11-25's `Task`.
fn task(snapshot: &Snapshot) -> JsonObject {
    let (status, message) = match &snapshot.status {
        Status::Working => ("working", None),
        Status::InputRequired => (
            "input_required",
            Some(
                "the server waits on this client to answer its requests (elicitation, \
                 sampling or roots); call tasks/result to receive them"
                    .to_owned(),
            ),
        ),
        Status::Cancelled => ("cancelled", Some("cancelled by its client".to_owned())),
        Status::Ended(outcome) => match &**outcome {
            Outcome::Answered(result)
                if result.get("isError").and_then(Value::as_bool) == Some(true) =>
            {
                (
                    "failed",
                    Some("the tool answered with an error (isError)".to_owned()),
                )
            }
            Outcome::Answered(_) => ("completed", None),
            Outcome::Failed(error) => ("failed", Some(error.message.to_string())),
        },
    };
    let mut task = JsonObject::new();
    task.insert("taskId".into(), snapshot.id.clone().into());
    task.insert("status".into(), status.into());
    if let Some(message) = message {
        task.insert("statusMessage".into(), message.into());
    }
    task.insert("createdAt".into(), snapshot.created_at.clone().into());
    task.insert(
        "lastUpdatedAt".into(),
        snapshot.last_updated_at.clone().into(),
    );
    task.insert("ttl".into(), snapshot.ttl_ms.into());
    task.insert(
        "pollInterval".into(),
        (runs::POLL_INTERVAL.as_millis() as u64).into(),
    );
    task
}

fn params(request: &CustomRequest) -> &Value {
    static NONE: Value = Value::Null;
    request.params.as_ref().unwrap_or(&NONE)
}

fn task_id(request: &CustomRequest) -> Result<&str, McpError> {
    params(request)
        .get("taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::invalid_params("taskId (a string) is required", None))
}

fn custom(value: impl Into<Value>) -> Result<CustomResult, McpError> {
    Ok(CustomResult::new(value.into()))
}

/// How long a run waits for its client to take a status change before going on.
const STATUS_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Tell the client its run's status (`notifications/tasks/status`). The client may have
/// gone; its task is still there to ask for.
async fn tell_status(peer: &rmcp::Peer<RoleServer>, snapshot: &Snapshot) {
    let status = CustomNotification::new(
        "notifications/tasks/status",
        Some(Value::Object(task(snapshot))),
    );
    let _ = peer
        .send_notification(ServerNotification::CustomNotification(status))
        .await;
}

/// Ends its run as failed when dropped before the run ended: the task that made its call
/// was lost.
struct EndsRun(Arc<Run>);

impl Drop for EndsRun {
    fn drop(&mut self) {
        self.0.end(Outcome::Failed(McpError::internal_error(
            "the gateway lost this task's call; call the tool again",
            None,
        )));
    }
}

impl SessionHandler {
    /// Answer a handshake-era client's task request; `None` if `request` is none.
    pub(super) async fn handshake_task(
        &self,
        request: &CustomRequest,
        context: &RequestContext<RoleServer>,
    ) -> Option<Result<CustomResult, McpError>> {
        // A 2026-07-28 client's tasks are the extension's, which has neither of the two
        // 2025-11-25 methods rmcp does not know.
        if sessionless(context) {
            return None;
        }
        Some(match request.method.as_str() {
            wire::CALL => self.call_as_task(request, context).await,
            wire::GET => self
                .run_of(request, context)
                .and_then(|run| custom(task(&run.snapshot()))),
            wire::CANCEL => self.cancel_run(request, context),
            "tasks/result" => self.run_result(request, context).await,
            "tasks/list" => self.list_runs(request, context),
            _ => return None,
        })
    }

    fn run_of(
        &self,
        request: &CustomRequest,
        context: &RequestContext<RoleServer>,
    ) -> Result<Arc<Run>, McpError> {
        let id = task_id(request)?;
        self.gateway
            .runs
            .find(id, &self.task_owner(context))
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!("unknown task \"{id}\": no task of this client has that id"),
                    None,
                )
            })
    }

    /// Start a run of the `tools/call` in `request` and answer with its task.
    async fn call_as_task(
        &self,
        request: &CustomRequest,
        context: &RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let raw = params(request);
        let call: CallToolRequestParams = serde_json::from_value(raw.clone()).map_err(|error| {
            McpError::invalid_params(format!("invalid tools/call parameters: {error}"), None)
        })?;
        let ttl = raw
            .get("task")
            .and_then(|task| task.get("ttl"))
            .and_then(Value::as_u64);
        let server = self.server_of_tool(&call.name, context).await?;
        let listing = match &server {
            Some(slot) => self.listing(slot, context),
            // One of the gateway's own tools: no prefix.
            None => Listing {
                server: "wardgate",
                prefix: "",
                separator: &self.gateway.settings.separator,
                owner: self.task_owner(context),
            },
        };
        let run = self.gateway.runs.start(listing, ttl).map_err(|full| {
            let (holds, limit) = match full {
                Full::Gateway => ("the gateway runs", runs::MAX_RUNS),
                Full::Client => ("this client runs", runs::MAX_RUNS_PER_CLIENT),
            };
            McpError::invalid_request(
                format!(
                    "{holds} {limit} tasks already, none of them finished; wait for some \
                         to end, or cancel some (tasks/cancel)"
                ),
                None,
            )
        })?;
        if context.extensions.get::<::http::request::Parts>().is_some() {
            run.by_http();
        }
        let created = task(&run.snapshot());
        self.spawn_run(run, call, context);
        custom(json!({ "task": created }))
    }

    /// The server a tool of this client's goes to (`None`: one of the gateway's own), or
    /// the error `tools/call` would answer for it.
    async fn server_of_tool(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<Arc<wardgate_engine::gateway::Slot>>, McpError> {
        let access = Access::of(context, &self.gateway);
        // A task is made at once: a tool in the namespace of a configured server that is
        // not usable yet is its server's, and the call waits for it in the background.
        let catalogue = self.gateway.catalogue();
        let known = catalogue
            .tool(name)
            .map(|route| route.server.clone())
            .or_else(|| {
                catalogue
                    .server_of_prefixed(name, &self.gateway.settings.separator)
                    .map(str::to_owned)
            });
        drop(catalogue);
        let route = match known {
            Some(server) => Some(server),
            None => {
                self.route(name, context, |catalogue, name| {
                    catalogue.tool(name).map(|route| route.server.clone())
                })
                .await?
            }
        };
        match route {
            Some(server) if access.routed(&server, name) => Ok(Some(self.slot(&server)?)),
            Some(_) => Err(access.refusal("tool", name)),
            None => {
                let own = admin_tools::tools(&self.gateway)
                    .iter()
                    .any(|tool| tool.name == name && access.everything())
                    || (access.discovery == ToolDiscovery::Search
                        && matches!(name, discover::DISCOVER_TOOLS | discover::CALL_TOOL));
                if own {
                    Ok(None)
                } else {
                    Err(self.unknown_tool(name))
                }
            }
        }
    }

    /// Make `run`'s call in the background, as this client, until it ends or is cancelled;
    /// then tell the client.
    fn spawn_run(
        &self,
        run: Arc<Run>,
        call: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) {
        let runner = self.detached();
        let mut context = context.clone();
        context.ct = run.cancel.clone();
        // What the server asks on the way is the run's.
        context.extensions.insert(ForRun(run.clone()));
        let peer = context.peer.clone();
        // The run's upstream attempts belong to the trace of the request that started it.
        let span = wardgate_engine::telemetry::detached("wardgate.task.run");
        let run_task = async move {
            // Whatever becomes of this task (a panic in the call), the run ends.
            let _ends = EndsRun(run.clone());
            let mut changes = run.changes();
            let call = runner.call_tool_for_run(call, context);
            tokio::pin!(call);
            let mut expired = false;
            let answered = loop {
                tokio::select! {
                    answered = &mut call => break answered,
                    // Past its ttl the run is cancelled, which ends the call (the server is
                    // told).
                    _ = tokio::time::sleep_until(run.expires()), if !expired => {
                        expired = true;
                        run.cancel();
                    }
                    // The client is told when the run waits on it, and when it goes on; a
                    // client too slow to take it in a second misses it (tasks/get has it)
                    // rather than hold up its run.
                    Ok(()) = changes.changed() => {
                        let snapshot = run.snapshot();
                        if !snapshot.status.is_terminal() {
                            let told = tell_status(&peer, &snapshot);
                            let _ = tokio::time::timeout(STATUS_WAIT, told).await;
                        }
                    }
                }
            };
            let outcome = match answered {
                Ok(result) => Outcome::Answered(result),
                Err(error) => Outcome::Failed(error),
            };
            runner.gateway.runs.end(&run, outcome);
            let _ = tokio::time::timeout(STATUS_WAIT, tell_status(&peer, &run.snapshot())).await;
        };
        tokio::spawn(wardgate_engine::telemetry::in_call(
            tracing::Instrument::instrument(run_task, span),
        ));
    }

    async fn call_tool_for_run(
        &self,
        call: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<JsonObject, McpError> {
        // Cancelling the run cancels `context.ct`: the router then tells the server and ends
        // the call (the call must not be dropped before it has).
        let answered = rmcp::ServerHandler::call_tool(self, call, context).await?;
        let CallToolResponse::Complete(mut result) = answered else {
            return Err(unexpected("tools/call"));
        };
        // The client speaks 2025-11-25, which has no `resultType`.
        result.result_type = None;
        match serde_json::to_value(result) {
            Ok(Value::Object(result)) => Ok(result),
            _ => Err(unexpected("tools/call")),
        }
    }

    /// `tasks/result`: the call's result or error, once the run has ended.
    async fn run_result(
        &self,
        request: &CustomRequest,
        context: &RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let run = self.run_of(request, context)?;
        // What the run's server asks this client from now on comes on this request's stream.
        let _waiting = run.awaiting_result(self.session, context.id.clone());
        let ended = tokio::select! {
            ended = run.ended() => ended,
            _ = context.ct.cancelled() => {
                return Err(McpError::invalid_request("tasks/result was cancelled", None));
            }
        };
        let related = json!({ "taskId": run.id });
        match &ended.status {
            Status::Ended(outcome) => match &**outcome {
                Outcome::Answered(result) => {
                    let mut result = result.clone();
                    let meta = result
                        .entry("_meta")
                        .or_insert_with(|| Value::Object(JsonObject::new()));
                    if let Some(meta) = meta.as_object_mut() {
                        meta.insert(RELATED_TASK.into(), related);
                    }
                    custom(result)
                }
                // Exactly the call's error: its code, message and data.
                Outcome::Failed(error) => Err(error.clone()),
            },
            _ => Err(McpError::new(
                ErrorCode::INVALID_REQUEST,
                format!(
                    "task \"{}\" was cancelled before its call ended; it has no result",
                    run.id
                ),
                Some(json!({ RELATED_TASK: related })),
            )),
        }
    }

    fn cancel_run(
        &self,
        request: &CustomRequest,
        context: &RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let run = self.run_of(request, context)?;
        if !run.cancel() {
            return Err(McpError::invalid_params(
                format!(
                    "task \"{}\" has already ended; a finished task cannot be cancelled",
                    run.id
                ),
                None,
            ));
        }
        custom(task(&run.snapshot()))
    }

    fn list_runs(
        &self,
        request: &CustomRequest,
        context: &RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let cursor = params(request).get("cursor").and_then(Value::as_str);
        let runs = self.gateway.runs.list(&self.task_owner(context));
        let (runs, next) = page(&runs, cursor)?;
        let tasks: Vec<Value> = runs
            .iter()
            .map(|run| Value::Object(task(&run.snapshot())))
            .collect();
        let mut result = json!({ "tasks": tasks });
        if let Some(next) = next {
            result["nextCursor"] = next.into();
        }
        custom(result)
    }
}
