//! The gateway as an MCP server: one handler per client session, over stdio or Streamable
//! HTTP. The engine (`wardgate_engine`) is the gateway itself, its servers, their recovery
//! and the routes to them; this crate is what clients talk to, and nothing in the engine
//! depends on it.
//!
//! Why this file is long: rmcp's `ServerHandler` is one trait impl, so every MCP method
//! the gateway answers is here; what the methods share is in submodules (`access`,
//! `routing`, `subscriptions`, `input`, `tasks`, `admin_tools`, `discover`, `http`).

// stdout is MCP's in stdio mode: a print here would corrupt the protocol. Logs go
// through `tracing`, to stderr.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod access;
use access::Access;
mod admin_tools;
mod discover;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod idle;
mod input;
mod routing;
mod runs;
pub mod sessions;
mod subscriptions;
mod tasks;
mod traced;

pub use traced::Traced;

use std::sync::Arc;

use rmcp::model::*;
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use wardgate_policy::Operation;

use wardgate_engine::commands::CommandQueue;
use wardgate_engine::config::ToolDiscovery;
use wardgate_engine::gateway::{Caller, Gateway, Routed, Slot};
use wardgate_engine::log_text::Untrusted;
use wardgate_engine::router::{self, CallHints};
use wardgate_engine::sessions::SessionId;
use wardgate_engine::upstream::tool_tasks::TaskSupport;

/// JSON-RPC error code of a request outside the client's grant (`[gateway.auth]`), in the
/// -32000..-32019 range 2026-07-28 leaves to implementations; `data.client` names the client.
pub const NOT_PERMITTED: i32 = -32011;

/// How many entries one page of a downstream list holds.
pub const PAGE_SIZE: usize = 500;

/// The protocol versions the gateway speaks to clients: the handshake era (2025-06-18 and
/// 2025-11-25, `initialize` and a session) and 2026-07-28 (`server/discover`, protocol
/// metadata on every request, `subscriptions/listen`, no server-to-client requests).
pub fn supported_versions() -> &'static [ProtocolVersion] {
    ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28)
}

/// How long a 2026-07-28 client may keep a list before asking again (`ttlMs`). The lists
/// change when servers come and go; a client that must know at once listens for
/// list_changed with `subscriptions/listen`.
const LIST_TTL_MS: u64 = 10_000;

/// How long a subscription to a 2026-07-28 server waits for its listen stream to take it.
const LISTEN_ACKNOWLEDGED: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether a request came without a session: a 2026-07-28 client (or one that negotiated
/// with `server/discover`) sends its protocol version in every request's `_meta`.
fn sessionless(context: &RequestContext<RoleServer>) -> bool {
    context.meta.protocol_version().is_some()
}

/// The session a forwarded request counts for: the handler's own for a client that began
/// with `initialize`; for a sessionless request, a session of its own for as long as it
/// runs, which receives the server's log messages during it at the level its `_meta`
/// asked for (none if it asked for none) and marks it as one that takes no
/// server-to-client requests.
struct CallSession<'a> {
    id: SessionId,
    sessions: Option<&'a wardgate_engine::sessions::Sessions>,
}

impl Drop for CallSession<'_> {
    fn drop(&mut self) {
        if let Some(sessions) = self.sessions {
            sessions.unregister(self.id);
        }
    }
}

/// One client session.
pub struct SessionHandler {
    gateway: Arc<Gateway>,
    /// The operator command queue, which the admin tools submit to.
    commands: Arc<CommandQueue>,
    session: SessionId,
    /// Whether this handler is its session's: the one that ends it when dropped (not a
    /// [`detached`](Self::detached) one, which runs a task for it).
    owns_session: bool,
}

impl SessionHandler {
    pub fn new(gateway: Arc<Gateway>, commands: Arc<CommandQueue>) -> Self {
        let session = gateway.sessions.allocate_id();
        Self {
            gateway,
            commands,
            session,
            owns_session: true,
        }
    }

    /// A handler for the same session that does not end it: one that runs a task for the
    /// session's client after the request that started it has been answered.
    fn detached(&self) -> Self {
        Self {
            gateway: self.gateway.clone(),
            commands: self.commands.clone(),
            session: self.session,
            owns_session: false,
        }
    }

    fn call_session(&self, context: &RequestContext<RoleServer>) -> CallSession<'_> {
        if !sessionless(context) {
            return CallSession {
                id: self.session,
                sessions: None,
            };
        }
        let sessions = &self.gateway.sessions;
        let id = sessions.allocate_id();
        sessions.register_request(id, context.peer.clone(), context.meta.log_level());
        CallSession {
            id,
            sessions: Some(sessions),
        }
    }

    /// Sends `params` (as `request` makes it) until the server answers for good. A
    /// 2026-07-28 server may answer with questions instead (`InputRequiredResult`): they go
    /// to a 2026-07-28 client as they are, and a handshake-era client is asked them here,
    /// the server then being sent `params` again with the answers (`downstream/input`).
    async fn until_answered<P: input::Askable>(
        &self,
        context: &RequestContext<RoleServer>,
        slot: &Slot,
        session: SessionId,
        hints: Option<CallHints>,
        mut params: P,
        request: impl Fn(P) -> ClientRequest,
    ) -> Result<ServerResult, McpError> {
        for _round in 0..=input::MAX_ROUNDS {
            let forwarded = request(params.clone());
            // A call, retried as its hints allow; without hints a read, retried freely.
            let answered = match hints {
                Some(hints) => {
                    router::forward(
                        &self.gateway,
                        slot,
                        session,
                        Operation::Call,
                        hints,
                        forwarded,
                        context,
                    )
                    .await?
                }
                None => {
                    self.forward_read_only(slot, session, forwarded, context)
                        .await?
                }
            };
            let asked = match answered {
                // A 2026-07-28 client answers the questions itself and sends its request again.
                ServerResult::InputRequiredResult(asked) if !sessionless(context) => asked,
                result => return Ok(result),
            };
            let timeout = router::request_timeout(&self.gateway, slot);
            let run = context.extensions.get::<wardgate_engine::runs::ForRun>();
            let run = run.map(|run| (&run.0, session));
            let responses = input::fulfil(&context.peer, &slot.name, &asked, timeout, run).await?;
            params.with_answers(responses, asked.request_state);
        }
        Err(input::too_many_rounds(&slot.name))
    }

    fn slot(&self, server: &str) -> Result<Arc<Slot>, McpError> {
        self.gateway.slot(server).ok_or_else(|| {
            McpError::invalid_params(format!("no server named \"{server}\" is configured"), None)
        })
    }

    /// Who this request's client is, as an instance's owner is made of.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Caller {
        let identity = context
            .extensions
            .get::<::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<http::Identity>())
            .filter(|identity| identity.authenticated)
            .map(|identity| (identity.key.clone(), identity.name.clone()));
        Caller {
            session: (!sessionless(context)).then_some(self.session),
            identity,
        }
    }

    /// [`SessionHandler::routed`] without starting an instance: `None` when the client's
    /// instance is not running.
    fn running(
        &self,
        server: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<Routed>, McpError> {
        let slot = self.slot(server)?;
        Ok(self.gateway.running_for(slot, &self.caller(context)))
    }

    /// Where this request to `server` goes: its slot, or for a server with an instance
    /// per client this client's instance (`engine/gateway/instances`).
    fn routed(
        &self,
        server: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Routed, McpError> {
        let slot = self.slot(server)?;
        self.gateway.route(slot, &self.caller(context)).map_err(|refused| {
            McpError::new(
                rmcp::model::ErrorCode(router::SERVER_UNAVAILABLE),
                refused.message,
                Some(serde_json::json!({
                    router::GATEWAY_DATA_KEY: { "server": refused.server, "reason": "no instance" }
                })),
            )
        })
    }
}

impl Drop for SessionHandler {
    fn drop(&mut self) {
        if self.owns_session {
            self.gateway.sessions.unregister(self.session);
            // An anonymous session's tasks can never be asked for again.
            let owner = wardgate_engine::tasks::Owner::Session(self.session);
            self.gateway.runs.forget(&owner);
            // So do its instances of servers with an instance per client.
            self.gateway.session_ended(self.session);
        }
    }
}

/// Serve one client over this process's stdin/stdout until it disconnects or `stop` fires.
/// `commands` is the operator command queue (the admin tools submit to it).
pub async fn serve_stdio(gateway: Arc<Gateway>, commands: Arc<CommandQueue>) -> Result<(), String> {
    let handler = Traced::new(SessionHandler::new(gateway.clone(), commands));
    // The client's lines pass through `runs`' rewrites: the tasks of 2025-11-25 are more
    // than rmcp's types carry.
    let service = match stdio_pipes() {
        Some((read, write)) => handler.serve(runs::lines(read, write)).await,
        None => {
            let (read, write) = rmcp::transport::stdio();
            handler.serve(runs::lines(read, write)).await
        }
    }
    .map_err(|error| format!("the client's initialize failed: {error}"))?;
    let stop = gateway.shutdown_token();
    let cancel = service.cancellation_token();
    tokio::select! {
        quit = service.waiting() => {
            tracing::info!("the client disconnected ({quit:?})");
        }
        _ = stop.cancelled() => cancel.cancel(),
    }
    Ok(())
}

/// This process's stdin and stdout as non-blocking pipes, when they are pipes (as MCP
/// clients launch servers). tokio's `stdin()`/`stdout()` hand every read and write to a
/// blocking thread, which costs a thread hop per message on the hot path; pipes can be
/// driven by epoll directly. Anything else (a terminal, a file) uses tokio's stdio.
fn stdio_pipes() -> Option<(
    tokio::net::unix::pipe::Receiver,
    tokio::net::unix::pipe::Sender,
)> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let stdin = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned().ok()?);
    let stdout = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned().ok()?);
    // Both or neither: converting one end switches it to non-blocking mode.
    let is_pipe = |file: &std::fs::File| {
        file.metadata()
            .map(|m| m.file_type().is_fifo())
            .unwrap_or(false)
    };
    if !is_pipe(&stdin) || !is_pipe(&stdout) {
        return None;
    }
    let receiver = tokio::net::unix::pipe::Receiver::from_file(stdin).ok()?;
    let sender = tokio::net::unix::pipe::Sender::from_file(stdout).ok()?;
    Some((receiver, sender))
}

/// One page of the items a client's grant lets it see: all of them (`everything`, no
/// copy of the list to filter) or those `granted` keeps.
fn page_granted<T: Clone>(
    items: &[T],
    everything: bool,
    granted: impl Fn(&T) -> bool,
    cursor: Option<&str>,
) -> Result<(Vec<T>, Option<String>), McpError> {
    if everything {
        return page(items, cursor);
    }
    let allowed: Vec<T> = items.iter().filter(|item| granted(item)).cloned().collect();
    page(&allowed, cursor)
}

fn page<T: Clone>(items: &[T], cursor: Option<&str>) -> Result<(Vec<T>, Option<String>), McpError> {
    let start = match cursor {
        None => 0,
        Some(cursor) => cursor
            .parse::<usize>()
            .ok()
            .filter(|&start| start <= items.len())
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!("invalid cursor {cursor:?}; start again without a cursor"),
                    None,
                )
            })?,
    };
    let end = (start + PAGE_SIZE).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    Ok((items[start..end].to_vec(), next))
}

fn cursor(request: &Option<PaginatedRequestParams>) -> Option<&str> {
    request.as_ref().and_then(|params| params.cursor.as_deref())
}

fn unexpected(what: &str) -> McpError {
    McpError::internal_error(
        format!("the server answered {what} with an unexpected result type"),
        None,
    )
}

#[expect(
    deprecated,
    reason = "logging/setLevel, resources/subscribe and sampling are current in the protocol versions the gateway speaks (SEP-2577)"
)]
impl ServerHandler for SessionHandler {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        if self.offers_completions() {
            capabilities.completions = Some(Default::default());
        }
        if self.offers_tasks() {
            capabilities
                .extensions
                .get_or_insert_default()
                .insert(TASKS_EXTENSION_ID.to_owned(), Default::default());
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("wardgate", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
            .with_instructions(self.instructions(None))
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(supported_versions())
    }

    /// `completion/complete`, routed to the owner of the prompt or resource template with
    /// its own name or URI; an owner that offers no completions has none to give.
    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let access = Access::of(&context, &self.gateway);
        let (server, reference) = match &request.r#ref {
            Reference::Prompt(prompt) => {
                let route = self
                    .route(&prompt.name, &context, |catalogue, name| {
                        catalogue.prompt(name).cloned()
                    })
                    .await?
                    .ok_or_else(|| {
                        McpError::invalid_params(
                            format!(
                                "unknown prompt \"{}\"; call prompts/list for the names",
                                prompt.name
                            ),
                            None,
                        )
                    })?;
                if !access.routed(&route.server, &prompt.name) {
                    return Err(access.refusal("prompt", &prompt.name));
                }
                let mut reference = prompt.clone();
                reference.name = route.name;
                (route.server, Reference::Prompt(reference))
            }
            Reference::Resource(template) => {
                if !access.resource(&template.uri) {
                    return Err(access.refusal("resource", &template.uri));
                }
                let (server, original) = self.resource_route(&template.uri)?;
                (server, Reference::Resource(ResourceTemplateReference::new(original)))
            }
            _ => {
                return Err(McpError::invalid_params(
                    "completion/complete: the gateway routes references to prompts (ref/prompt) and resource templates (ref/resource) only",
                    None,
                ))
            }
        };
        // Whether the server completes, its configured slot says (a client's instance
        // may not have started yet).
        if !self.slot(&server)?.snapshot().completions {
            return Ok(CompleteResult::default());
        }
        let slot = &self.routed(&server, &context)?;
        let mut upstream = request.clone();
        upstream.r#ref = reference;
        let call_session = self.call_session(&context);
        let forwarded = ClientRequest::CompleteRequest(CompleteRequest::new(upstream));
        let answer = self
            .forward_read_only(slot, call_session.id, forwarded, &context)
            .await?;
        match answer {
            ServerResult::CompleteResult(mut result) => {
                result.result_type = Some(ResultType::COMPLETE);
                Ok(result)
            }
            _ => Err(unexpected("completion/complete")),
        }
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let grant = Access::of(&context, &self.gateway).grant;
        self.gateway
            .sessions
            .register(self.session, context.peer.clone(), grant.clone());
        tracing::info!(
            session = self.session,
            client = %Untrusted(&request.client_info.name),
            version = %Untrusted(request.protocol_version.as_str()),
            "client connected"
        );
        let mut result = self.negotiate_initialize(&request)?;
        if let Some(grant) = &grant {
            // Only the servers the client may use are named to it.
            result.instructions = Some(self.instructions(Some(grant)));
        }
        Ok(result)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.gateway
            .sessions
            .set_log_level(self.session, request.level);
        Ok(())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.gateway.startup_settled().await;
        let catalogue = self.gateway.catalogue();
        let access = Access::of(&context, &self.gateway);
        let admin = if access.everything() {
            admin_tools::tools(&self.gateway)
        } else {
            Vec::new()
        };
        let (tools, next) = if access.discovery == ToolDiscovery::Search {
            // Two tools instead of every tool: search, and call by name.
            let offered: Vec<Tool> = discover::tools().into_iter().chain(admin).collect();
            page(&offered, cursor(&request))?
        } else if admin.is_empty() && access.everything() {
            page(&catalogue.tools, cursor(&request))?
        } else {
            let all: Vec<Tool> = catalogue
                .tools
                .iter()
                .filter(|tool| {
                    access.item(
                        catalogue
                            .tool(&tool.name)
                            .map(|route| route.server.as_str()),
                        &tool.name,
                    )
                })
                .cloned()
                .chain(admin)
                .collect();
            page(&all, cursor(&request))?
        };
        let mut result = ListToolsResult::with_all_items(tools).with_ttl_ms(LIST_TTL_MS);
        result.next_cursor = next;
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let access = Access::of(&context, &self.gateway);
        if access.discovery == ToolDiscovery::Search {
            match &*request.name {
                discover::DISCOVER_TOOLS => {
                    self.gateway.startup_settled().await;
                    let catalogue = self.gateway.catalogue();
                    let found = discover::discover(
                        &catalogue,
                        request.arguments.as_ref(),
                        |tool, server| access.routed(server, &tool.name),
                    )?;
                    return Ok(CallToolResponse::Complete(found));
                }
                discover::CALL_TOOL => {
                    let inner = discover::unwrap_call(&request)?;
                    return self.call_tool_as_named(inner, context, access).await;
                }
                _ => {}
            }
        }
        self.call_tool_as_named(request, context, access).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.get_task_relayed(request, context).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.update_task_relayed(request, context).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.cancel_task_relayed(request, context).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.gateway.startup_settled().await;
        let catalogue = self.gateway.catalogue();
        let access = Access::of(&context, &self.gateway);
        let (prompts, next) = page_granted(
            &catalogue.prompts,
            access.everything(),
            |prompt| {
                access.item(
                    catalogue
                        .prompt(&prompt.name)
                        .map(|route| route.server.as_str()),
                    &prompt.name,
                )
            },
            cursor(&request),
        )?;
        let mut result = ListPromptsResult::with_all_items(prompts).with_ttl_ms(LIST_TTL_MS);
        result.next_cursor = next;
        Ok(result)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let access = Access::of(&context, &self.gateway);
        let known = self
            .gateway
            .catalogue()
            .prompt(&request.name)
            .map(|route| route.server.clone());
        if !access.item(known.as_deref(), &request.name) {
            return Err(access.refusal("prompt", &request.name));
        }
        let route = self
            .route(&request.name, &context, |catalogue, name| {
                catalogue.prompt(name).cloned()
            })
            .await?;
        let Some(route) = route else {
            return Err(McpError::invalid_params(
                format!(
                    "unknown prompt \"{}\"; call prompts/list for the names",
                    request.name
                ),
                None,
            ));
        };
        if !access.routed(&route.server, &request.name) {
            return Err(access.refusal("prompt", &request.name));
        }
        let slot = &self.routed(&route.server, &context)?;
        let mut upstream = request.clone();
        upstream.name = route.name.clone();
        let call_session = self.call_session(&context);
        let answer = self
            .until_answered(
                &context,
                slot,
                call_session.id,
                Some(CallHints::default()),
                upstream,
                |params| ClientRequest::GetPromptRequest(GetPromptRequest::new(params)),
            )
            .await?;
        match answer {
            ServerResult::GetPromptResult(mut result) => {
                result.result_type = Some(ResultType::COMPLETE);
                Ok(GetPromptResponse::Complete(result))
            }
            ServerResult::InputRequiredResult(asked) => Ok(GetPromptResponse::InputRequired(asked)),
            _ => Err(unexpected("prompts/get")),
        }
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.gateway.startup_settled().await;
        let catalogue = self.gateway.catalogue();
        let access = Access::of(&context, &self.gateway);
        let (resources, next) = page_granted(
            &catalogue.resources,
            access.everything(),
            |resource| access.resource(&resource.uri),
            cursor(&request),
        )?;
        let mut result = ListResourcesResult::with_all_items(resources).with_ttl_ms(LIST_TTL_MS);
        result.next_cursor = next;
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.gateway.startup_settled().await;
        let catalogue = self.gateway.catalogue();
        let access = Access::of(&context, &self.gateway);
        let (templates, next) = page_granted(
            &catalogue.templates,
            access.everything(),
            |template| access.resource(&template.uri_template),
            cursor(&request),
        )?;
        let mut result =
            ListResourceTemplatesResult::with_all_items(templates).with_ttl_ms(LIST_TTL_MS);
        result.next_cursor = next;
        Ok(result)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let access = Access::of(&context, &self.gateway);
        if !access.resource(&request.uri) {
            return Err(access.refusal("resource", &request.uri));
        }
        let (server, original) = self.resource_route(&request.uri)?;
        let slot = &self.routed(&server, &context)?;
        let mut upstream = request.clone();
        upstream.uri = original.to_owned();
        let call_session = self.call_session(&context);
        let answer = self
            .until_answered(&context, slot, call_session.id, None, upstream, |params| {
                ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params))
            })
            .await?;
        match answer {
            ServerResult::ReadResourceResult(mut result) => {
                result.result_type = Some(ResultType::COMPLETE);
                // Contents carry URIs too; give them back in the namespace the client used.
                for contents in &mut result.contents {
                    match contents {
                        ResourceContents::TextResourceContents { uri, .. }
                        | ResourceContents::BlobResourceContents { uri, .. } => {
                            *uri = wardgate_engine::catalogue::listed_uri(&slot.config.prefix, uri);
                        }
                        _ => {}
                    }
                }
                Ok(ReadResourceResponse::Complete(result))
            }
            ServerResult::InputRequiredResult(asked) => {
                Ok(ReadResourceResponse::InputRequired(asked))
            }
            _ => Err(unexpected("resources/read")),
        }
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscribe_upstream(self.session, &request.uri, &context)
            .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.unsubscribe_upstream(self.session, &request.uri, &context)
            .await
    }

    /// `subscriptions/listen` (2026-07-28): list changes as requested, and updates of the
    /// resources named that are gateway URIs of configured servers.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = requested.clone();
        accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
            uris.iter()
                .filter(|uri| {
                    self.resource_route(uri)
                        .is_ok_and(|(server, _)| self.gateway.slot(&server).is_some())
                })
                .cloned()
                .collect()
        });
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let sessions = &self.gateway.sessions;
        let id = sessions.allocate_id();
        let grant = Access::of(context.request_context(), &self.gateway).grant;
        sessions.register_listen(id, context.sink().clone(), grant);
        let _registered = CallSession {
            id,
            sessions: Some(sessions),
        };
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let request = context.request_context();
        for uri in &uris {
            if let Err(error) = self.subscribe_upstream(id, uri, request).await {
                // The acknowledgement is sent: the stream serves the rest, and says why
                // this one is quiet in the log.
                tracing::warn!(
                    session = id,
                    "subscriptions/listen: {}: {}",
                    Untrusted(uri),
                    error.message
                );
            }
        }
        context.cancelled().await;
        // The stream is over; its upstream subscriptions end with it (a fresh context: the
        // stream's own is cancelled).
        let closing = RequestContext::new(request.id.clone(), request.peer.clone());
        for uri in &uris {
            let _ = self.unsubscribe_upstream(id, uri, &closing).await;
        }
        // It no longer hears any instance.
        self.gateway.session_ended(id);
        Ok(())
    }

    /// The 2025-11-25 task requests rmcp does not know (`runs`); others are unknown methods.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        match self.handshake_task(&request, &context).await {
            Some(answered) => answered,
            None => Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            )),
        }
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        // The servers' shared connections, and this client's own instances.
        for slot in self
            .gateway
            .slots()
            .into_iter()
            .chain(self.gateway.instances_of(self.session))
        {
            if let Some(live) = slot.live() {
                let notification =
                    ClientNotification::RootsListChangedNotification(Default::default());
                let _ = live.peer.send_notification(notification).await;
            }
        }
    }
}

impl SessionHandler {
    /// A `tools/call` of the tool its name names: an admin tool, or a server's, routed
    /// and forwarded as the client's grant allows (a `call_tool` of search mode, unwrapped,
    /// comes here too).
    async fn call_tool_as_named(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        access: Access,
    ) -> Result<CallToolResponse, McpError> {
        if access.everything() {
            if let Some(result) =
                admin_tools::call(&self.gateway, &self.commands, self.session, &request).await
            {
                return Ok(CallToolResponse::Complete(result));
            }
        } else {
            let known = self
                .gateway
                .catalogue()
                .tool(&request.name)
                .map(|route| route.server.clone());
            if !access.item(known.as_deref(), &request.name) {
                return Err(access.refusal("tool", &request.name));
            }
        }
        let route = self
            .route(&request.name, &context, |catalogue, name| {
                catalogue.tool(name).cloned()
            })
            .await?;
        let Some(route) = route else {
            return Err(self.unknown_tool(&request.name));
        };
        if !access.routed(&route.server, &request.name) {
            return Err(access.refusal("tool", &request.name));
        }
        let slot = &self.routed(&route.server, &context)?;
        let hints = CallHints {
            idempotent: route.idempotent,
            read_only: route.read_only,
        };
        let mut upstream = request;
        upstream.name = route.name.clone().into();
        let call_session = self.call_session(&context);
        // A server of 2025-11-25 runs as tasks of its own the tools it says it does
        // (`runs::follow`): a run of the gateway's calls such a tool as a task, and so does
        // any call of one the server runs only as a task, followed within the request
        // timeout.
        let (task_ttl, deadline) = match runs::follow::task_support(slot, &route.name) {
            TaskSupport::Forbidden => (None, None),
            support => match context.extensions.get::<wardgate_engine::runs::ForRun>() {
                Some(run) => (Some(run.0.snapshot().ttl_ms), None),
                None if support == TaskSupport::Required => {
                    let timeout = router::request_timeout(&self.gateway, slot);
                    let ttl = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
                    (Some(ttl), Some(tokio::time::Instant::now() + timeout))
                }
                None => (None, None),
            },
        };
        let answer = self
            .until_answered(
                &context,
                slot,
                call_session.id,
                Some(hints),
                upstream,
                |params| runs::follow::call_request(params, task_ttl),
            )
            .await?;
        if let Some(task) = runs::follow::created(&answer) {
            // Only a call made as a task is followed: a task the server made unasked is
            // cancelled there, and the call answered as a server that answered wrongly.
            if task_ttl.is_none() {
                runs::follow::cancel_unasked(slot, &task);
                return Err(unexpected("tools/call"));
            }
            let mut result = self
                .follow(slot, call_session.id, &context, task, deadline)
                .await?;
            result.result_type = Some(ResultType::COMPLETE);
            return Ok(CallToolResponse::Complete(result));
        }
        match answer {
            ServerResult::CallToolResult(mut result) => {
                // A handshake-era server sends no `resultType`; 2026-07-28 clients need it
                // (rmcp strips it again for handshake-era clients).
                result.result_type = Some(ResultType::COMPLETE);
                Ok(CallToolResponse::Complete(result))
            }
            ServerResult::InputRequiredResult(asked) => Ok(CallToolResponse::InputRequired(asked)),
            ServerResult::CreateTaskResult(created) => Ok(CallToolResponse::Task(
                self.task_created(slot, &context, created),
            )),
            _ => Err(unexpected("tools/call")),
        }
    }
}
