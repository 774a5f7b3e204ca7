//! The tasks extension (`io.modelcontextprotocol/tasks`) relayed: a server's
//! `CreateTaskResult` listed under a gateway id, and `tasks/get`, `tasks/update` and
//! `tasks/cancel` routed to the server that owns the task, for the client that created it
//! only (`wardgate_engine::tasks`). rmcp refuses `tasks/*` with -32021 to a request that did not
//! declare the extension, before it reaches these.

use std::sync::Arc;

use rmcp::model::{
    CancelTaskParams, CancelTaskRequest, ClientRequest, CreateTaskResult, DetailedTask, ErrorCode,
    GetTaskParams, GetTaskRequest, GetTaskResult, JsonObject, ServerResult, Task, TaskPayload,
    TaskStatus, UpdateTaskParams, UpdateTaskRequest,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

use super::{http, sessionless, unexpected, SessionHandler};
use wardgate_engine::config::TransportConfig;
use wardgate_engine::gateway::Slot;
use wardgate_engine::router::{self, CallHints};
use wardgate_engine::tasks::{Entry, Listing, Origin, Owner};
use wardgate_policy::Operation;

/// What a relayed task request found: the task's entry and its server.
struct Found {
    listed: String,
    entry: Entry,
    slot: Arc<Slot>,
}

/// How a task request goes to the server.
enum Relay {
    Get,
    Update(UpdateTaskParams),
    Cancel,
}

/// A lost task's status: `failed`, with the gateway's error (-32010, naming the server)
/// inlined.
fn failed_status(entry: &Entry, listed: &str) -> Option<DetailedTask> {
    let (why, at) = entry.lost()?;
    let mut task = Task::new(listed, TaskStatus::Failed, entry.created_at(), at);
    task.status_message = Some(why.to_owned());
    let mut error = JsonObject::new();
    error.insert("code".into(), router::SERVER_UNAVAILABLE.into());
    error.insert("message".into(), why.into());
    error.insert(
        "data".into(),
        serde_json::json!({ router::GATEWAY_DATA_KEY: { "server": entry.server, "reason": "task lost" } }),
    );
    Some(DetailedTask::new(task, TaskPayload::Failed { error }))
}

impl SessionHandler {
    /// Who may see the tasks this request creates: an authenticated client by its
    /// identity, else a handshake-era session, else any anonymous sessionless request.
    pub(super) fn task_owner(&self, context: &RequestContext<RoleServer>) -> Owner {
        let identity = context
            .extensions
            .get::<::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<http::Identity>());
        match identity {
            Some(identity) if identity.authenticated => Owner::Client(identity.key.clone()),
            _ if !sessionless(context) => Owner::Session(self.session),
            _ => Owner::Anyone,
        }
    }

    /// Where a task of `slot`'s server, for this request's client, is listed.
    pub(super) fn listing<'a>(
        &'a self,
        slot: &'a Slot,
        context: &RequestContext<RoleServer>,
    ) -> Listing<'a> {
        Listing {
            server: &slot.name,
            prefix: &slot.config.prefix,
            separator: &self.gateway.settings.separator,
            owner: self.task_owner(context),
        }
    }

    /// A task `slot`'s server created for this request, as the client is told of it.
    pub(super) fn task_created(
        &self,
        slot: &Slot,
        context: &RequestContext<RoleServer>,
        mut created: CreateTaskResult,
    ) -> CreateTaskResult {
        let generation = slot.live().map_or(0, |live| live.generation);
        let process = matches!(slot.config.transport, TransportConfig::Stdio { .. });
        let origin = Origin {
            listing: self.listing(slot, context),
            generation,
            process,
        };
        created.task.task_id = self.gateway.tasks.created(origin, &created.task);
        created
    }

    fn find_task(
        &self,
        listed: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Found, McpError> {
        let unknown = || {
            McpError::invalid_params(
                format!("unknown task \"{listed}\": no task of this client has that id"),
                None,
            )
        };
        let entry = self
            .gateway
            .tasks
            .find(listed, &self.task_owner(context))
            .ok_or_else(unknown)?;
        let slot = self.gateway.any_slot(&entry.server).ok_or_else(unknown)?;
        Ok(Found {
            listed: listed.to_owned(),
            entry,
            slot,
        })
    }

    /// The task's status if it is known lost: marked so before, or created on a process of
    /// ours that has exited since (its server restarted or stopped).
    fn lost_task(&self, found: &Found) -> Option<DetailedTask> {
        let Found {
            listed,
            entry,
            slot,
        } = found;
        if let Some(failed) = failed_status(entry, listed) {
            return Some(failed);
        }
        let same_process = slot
            .live()
            .is_some_and(|live| live.generation == entry.generation);
        if !entry.process || same_process {
            return None;
        }
        let why = format!(
            "server \"{}\" restarted or stopped while task \"{listed}\" ran: its process \
             exited and the task went with it (the server is now {}); call the tool again",
            slot.name,
            slot.status()
        );
        self.lose_task(found, why)
    }

    fn lose_task(&self, found: &Found, why: String) -> Option<DetailedTask> {
        tracing::warn!(server = %found.slot.name, task = %found.listed, "{why}");
        self.gateway
            .tasks
            .lose(&found.listed, why)
            .and_then(|entry| failed_status(&entry, &found.listed))
    }

    /// The server no longer knows the task (it answered -32602 for its id).
    fn forgotten_task(&self, found: &Found) -> Option<DetailedTask> {
        let why = format!(
            "server \"{}\" no longer knows task \"{}\" (it may have restarted since the \
             task was created); call the tool again",
            found.slot.name, found.listed
        );
        self.lose_task(found, why)
    }

    async fn relay_task(
        &self,
        found: &Found,
        relay: Relay,
        context: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, McpError> {
        let id = found.entry.id.clone();
        let (request, hints) = match relay {
            Relay::Get => (
                ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(id))),
                CallHints {
                    idempotent: true,
                    read_only: true,
                },
            ),
            Relay::Update(mut params) => {
                params.task_id = id;
                params.meta = None;
                (
                    ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(params)),
                    CallHints::default(),
                )
            }
            Relay::Cancel => (
                ClientRequest::CancelTaskRequest(CancelTaskRequest::new(CancelTaskParams::new(id))),
                CallHints {
                    idempotent: true,
                    read_only: false,
                },
            ),
        };
        let call_session = self.call_session(context);
        router::forward(
            &self.gateway,
            &found.slot,
            call_session.id,
            Operation::Call,
            hints,
            request,
            context,
        )
        .await
    }

    pub(super) async fn get_task_relayed(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let found = self.find_task(&request.task_id, &context)?;
        if let Some(failed) = self.lost_task(&found) {
            return Ok(GetTaskResult::new(failed));
        }
        match self.relay_task(&found, Relay::Get, &context).await {
            Ok(ServerResult::GetTaskResult(mut result)) => {
                result.task.task.task_id = found.listed.clone();
                self.gateway
                    .tasks
                    .seen(&found.listed, result.task.task.ttl_ms);
                Ok(result)
            }
            Ok(_) => Err(unexpected("tasks/get")),
            Err(error) if error.code == ErrorCode::INVALID_PARAMS => self
                .forgotten_task(&found)
                .map(GetTaskResult::new)
                .ok_or(error),
            Err(error) => Err(error),
        }
    }

    /// `tasks/update` and `tasks/cancel`: acknowledged for a lost task, whose status says
    /// why on the next `tasks/get`.
    async fn ack_task(
        &self,
        task_id: &str,
        relay: impl FnOnce() -> Relay,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let found = self.find_task(task_id, &context)?;
        if self.lost_task(&found).is_some() {
            return Ok(());
        }
        match self.relay_task(&found, relay(), &context).await {
            Ok(_) => Ok(()),
            Err(error) if error.code == ErrorCode::INVALID_PARAMS => {
                self.forgotten_task(&found);
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    pub(super) async fn update_task_relayed(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let task_id = request.task_id.clone();
        self.ack_task(&task_id, || Relay::Update(request), context)
            .await
    }

    pub(super) async fn cancel_task_relayed(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.ack_task(&request.task_id, || Relay::Cancel, context)
            .await
    }

    /// Whether any server offers tasks, or may once discovered.
    pub(super) fn offers_tasks(&self) -> bool {
        self.any_server_may_offer(|snapshot| snapshot.tasks)
    }
}
