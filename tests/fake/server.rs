//! The fake's `ServerHandler`: handshake, faults around `tools/call`, prompts, resources.

use std::{borrow::Cow, convert::Infallible, sync::atomic::Ordering, sync::Arc};

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams,
        CompleteResult, CompletionInfo, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
        Implementation, InitializeRequestParams, InitializeResult, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
        PingRequestMethod, Prompt, PromptArgument, PromptMessage, ProtocolVersion,
        ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Reference, Resource,
        ResourceContents, ResourceTemplate, Role, ServerCapabilities, ServerConfig,
        SubscribeRequestParams, UnsubscribeRequestParams,
    },
    service::RequestContext,
    ErrorData as McpError, RoleServer, ServerHandler,
};

// Deprecated for 2026-07-28 only; current in the revisions the fake speaks.
#[allow(deprecated)]
use rmcp::model::SetLevelRequestParams;

use crate::{
    catalog,
    state::{CallFate, Protocol, Shared},
    tasks, tools,
};

/// The newest handshake-era revision the fake speaks.
const NEWEST_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// A revision no client speaks (`--protocol future`).
fn future_protocol() -> ProtocolVersion {
    serde_json::from_value(serde_json::json!("2099-01-01")).expect("a protocol version string")
}

/// The MIME type of an MCP App's HTML (SEP-1865).
const APP_MIME_TYPE: &str = "text/html;profile=mcp-app";

/// The `_meta` of the app's resource, listed and read: what a gateway must pass through.
fn app_meta() -> rmcp::model::MetaObject {
    let mut meta = rmcp::model::MetaObject::new();
    meta.insert(
        "ui".into(),
        serde_json::json!({"prefersBorder": true, "csp": {"connectDomains": []}}),
    );
    meta
}

/// One MCP session's handler; all sessions of a process share `shared`.
pub struct FakeServer {
    shared: Arc<Shared>,
    /// Distinguishes sessions in the subscription registry.
    session: u64,
}

impl FakeServer {
    pub fn new(shared: Arc<Shared>) -> Self {
        let session = shared.next_session_number();
        Self { shared, session }
    }

    fn readme_uri(&self) -> String {
        format!("fake://{}/readme", self.shared.server_name)
    }

    fn items_prefix(&self) -> String {
        format!("fake://{}/items/", self.shared.server_name)
    }

    /// Whether `uri` is the `--app` view.
    fn is_app_view(&self, uri: &str) -> bool {
        self.shared.app_view_uri().as_deref() == Some(uri)
    }

    /// The text of a resource, or `None` if `uri` names none of ours.
    fn resource_text(&self, uri: &str) -> Option<String> {
        let server_name = &self.shared.server_name;
        if uri == self.readme_uri() {
            return Some(format!("readme of {server_name}"));
        }
        if self.is_app_view(uri) {
            return Some(format!(
                "<!doctype html><html><body><p>view of {server_name}</p></body></html>"
            ));
        }
        let id = uri.strip_prefix(&self.items_prefix())?;
        (!id.is_empty() && !id.contains('/')).then(|| format!("item {id} of {server_name}"))
    }

    /// A call the faults let through: `--delay-ms` first, then the tool itself.
    async fn answer_tool_call(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let delay = tokio::time::sleep(self.shared.faults.call_delay);
        tools::until_cancelled(&self.shared, context, delay).await?;
        tools::call(&self.shared, request, context).await
    }

    fn task_manager(&self) -> Result<&rmcp::task_manager::TaskManager, McpError> {
        self.shared
            .tasks
            .as_ref()
            .ok_or_else(|| McpError::internal_error("tasks are offered only with --tasks", None))
    }

    fn resource_not_found(&self, uri: &str) -> McpError {
        McpError::resource_not_found(
            format!("no resource {uri} on fake {}", self.shared.server_name),
            Some(serde_json::json!({ "uri": uri })),
        )
    }
}

/// The page of `items` that `request` asks for; its cursor is an offset we handed out earlier.
fn paginate<T>(
    shared: &Shared,
    items: Vec<T>,
    request: Option<&PaginatedRequestParams>,
) -> Result<(Vec<T>, Option<String>), McpError> {
    let cursor = request.and_then(|params| params.cursor.as_deref());
    let Some(page_size) = shared.page_size else {
        return Ok((items, None));
    };
    let start = match cursor {
        None => 0,
        Some(cursor) => cursor
            .parse::<usize>()
            .ok()
            .filter(|start| *start <= items.len())
            .ok_or_else(|| McpError::invalid_params(format!("invalid cursor `{cursor}`"), None))?,
    };
    let end = start.saturating_add(page_size.get()).min(items.len());
    let next_cursor = (end < items.len()).then(|| end.to_string());
    let page = items.into_iter().skip(start).take(end - start).collect();
    Ok((page, next_cursor))
}

impl ServerHandler for FakeServer {
    /// A client's roots changed: ask for them at once, outside any call, as servers that
    /// track roots do, and say what came back in a log message (`roots`).
    #[allow(deprecated)]
    async fn on_roots_list_changed(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        let peer = context.peer.clone();
        let server = self.shared.server_name.clone();
        tokio::spawn(async move {
            let said = match peer.list_roots().await {
                Ok(answer) => format!(
                    "roots after the change: {}",
                    serde_json::json!(answer.roots)
                ),
                Err(error) => format!("roots/list after the change failed: {error}"),
            };
            let notification = rmcp::model::LoggingMessageNotificationParam::new(
                rmcp::model::LoggingLevel::Info,
                serde_json::json!(said),
            )
            .with_logger(server);
            let _ = peer.notify_logging_message(notification).await;
        });
    }

    fn get_info(&self) -> ServerConfig {
        // Logging is deprecated for 2026-07-28 only; the fake stops at 2025-11-25.
        #[allow(deprecated)]
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_logging()
            .enable_completions()
            .build();
        let mut capabilities = capabilities;
        if self.shared.faults.silent_list_changes {
            if let Some(tools) = capabilities.tools.as_mut() {
                tools.list_changed = None;
            }
        }
        if self.shared.tasks.is_some() {
            capabilities.extensions.get_or_insert_default().insert(
                rmcp::model::TASKS_EXTENSION_ID.to_owned(),
                Default::default(),
            );
        }
        ServerConfig::new(capabilities)
            .with_protocol_version(match self.shared.protocol {
                Protocol::Modern => ProtocolVersion::V_2026_07_28,
                Protocol::Future => future_protocol(),
                Protocol::Handshake | Protocol::HandshakeStrict => NEWEST_PROTOCOL,
            })
            .with_server_info(Implementation::new(
                self.shared.server_name.clone(),
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions("Scripted fake MCP server for Wardgate's tests and demos.")
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        match self.shared.protocol {
            // 2026-07-28 is listed only so that rmcp hands `server/discover` to `discover`
            // below, which refuses it as a server that predates it would.
            Protocol::Handshake => {
                Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
            }
            Protocol::HandshakeStrict => {
                Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST_PROTOCOL))
            }
            Protocol::Modern => Cow::Owned(vec![ProtocolVersion::V_2026_07_28]),
            Protocol::Future => Cow::Owned(vec![future_protocol()]),
        }
    }

    /// 2026-07-28 clients listen for changes; the fake's own list changes go out in-band
    /// on the request that made them, so the stream stays quiet until it is cancelled.
    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    /// A listen stream gets the resource updates its accepted filter names (`touch`).
    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), McpError> {
        let id = self.shared.listening(context.sink().clone());
        context.cancelled().await;
        self.shared.stopped_listening(id);
        Ok(())
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, McpError> {
        if self.shared.protocol == Protocol::Handshake {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "Method not found: server/discover",
                None,
            ));
        }
        let _ = context;
        Ok(rmcp::model::DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        if self.shared.faults.hang_on_initialize {
            self.shared
                .say("is not answering initialize (--hang-on-initialize)");
            return std::future::pending().await;
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn ping(&self, _context: RequestContext<RoleServer>) -> Result<(), McpError> {
        if self.shared.faults.no_ping {
            return Err(McpError::method_not_found::<PingRequestMethod>());
        }
        Ok(())
    }

    #[allow(deprecated)] // logging/setLevel is current in the revisions the fake speaks
    async fn set_level(
        &self,
        _request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        // Accepted and ignored: the `log` tool always sends its message.
        Ok(())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let shared = &self.shared;
        shared.lists_received.fetch_add(1, Ordering::SeqCst);
        if let Some(file) = &shared.faults.hang_lists_file {
            shared.lists_waiting.fetch_add(1, Ordering::SeqCst);
            while file.exists() {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            shared.lists_waiting.fetch_sub(1, Ordering::SeqCst);
        }
        let failing = self.shared.faults.fail_lists_file.as_ref();
        if failing.is_some_and(|file| file.exists()) {
            return Err(McpError::internal_error(
                "tools/list is failing (--fail-lists-file)",
                None,
            ));
        }
        let all_tools = catalog::list(&self.shared);
        let (tools, next_cursor) = paginate(&self.shared, all_tools, request.as_ref())?;
        Ok(ListToolsResult {
            next_cursor,
            ..ListToolsResult::with_all_items(tools)
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let shared = &self.shared;
        if request.name == "sample" && shared.protocol == Protocol::Modern {
            return tools::sample_by_input(&request, &context);
        }
        if let Some(manager) = &shared.tasks {
            if tasks::is_task_tool(&request.name) {
                return tasks::call(manager, request, &context).await;
            }
        }
        let result = match shared.begin_tool_call() {
            CallFate::Answer => self.answer_tool_call(request, &context).await,
            CallFate::Crash => {
                shared.say(format!(
                    "crashing on tools/call {} (--crash-after or --crash-once)",
                    request.name
                ));
                std::process::exit(3);
            }
            CallFate::Hang => {
                shared.say(format!(
                    "not answering tools/call {} (--hang-after)",
                    request.name
                ));
                let never = std::future::pending::<Infallible>();
                let Err(cancelled) = tools::until_cancelled(shared, &context, never).await;
                Err(cancelled)
            }
        };
        shared.finish_tool_call();
        result.map(CallToolResponse::from)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let greet = Prompt::new(
            "greet",
            Some("A greeting from this server"),
            Some(vec![PromptArgument::new("name")
                .with_description("Who to greet")
                .with_required(true)]),
        );
        let (prompts, next_cursor) = paginate(&self.shared, vec![greet], request.as_ref())?;
        Ok(ListPromptsResult {
            next_cursor,
            ..ListPromptsResult::with_all_items(prompts)
        })
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if request.name != "greet" {
            return Err(McpError::invalid_params(
                format!("unknown prompt `{}`", request.name),
                None,
            ));
        }
        let name = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get("name"))
            .and_then(|name| name.as_str())
            .ok_or_else(|| {
                McpError::invalid_params(
                    "prompt `greet`: argument `name` (string) is required",
                    None,
                )
            })?;
        let text = format!("Hello, {name} from {}", self.shared.server_name);
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)]).into())
    }

    /// `greet`'s `name` from a few names, and an item's `id` from its numbers, each the
    /// ones that start with what was typed, with the server's name appended so a test can
    /// tell who answered.
    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let candidates: &[&str] = match (&request.r#ref, request.argument.name.as_str()) {
            (Reference::Prompt(prompt), "name") if prompt.name == "greet" => {
                &["Ada", "Alan", "Grace"]
            }
            (Reference::Resource(template), "id")
                if template.uri == format!("{}{{id}}", self.items_prefix()) =>
            {
                &["1", "7", "12"]
            }
            _ => {
                return Err(McpError::invalid_params(
                    format!("nothing to complete for {:?}", request.r#ref),
                    None,
                ))
            }
        };
        let values = candidates
            .iter()
            .filter(|value| value.starts_with(&request.argument.value))
            .map(|value| format!("{value}@{}", self.shared.server_name))
            .collect();
        Ok(CompleteResult::new(
            CompletionInfo::with_all_values(values)
                .map_err(|error| McpError::internal_error(error, None))?,
        ))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let readme = Resource::new(self.readme_uri(), "readme").with_mime_type("text/plain");
        let view = self.shared.app_view_uri().map(|uri| {
            Resource::new(uri, "view")
                .with_mime_type(APP_MIME_TYPE)
                .with_meta(app_meta())
        });
        let all_resources: Vec<Resource> = std::iter::once(readme).chain(view).collect();
        let (resources, next_cursor) = paginate(&self.shared, all_resources, request.as_ref())?;
        Ok(ListResourcesResult {
            next_cursor,
            ..ListResourcesResult::with_all_items(resources)
        })
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let items = ResourceTemplate::new(format!("{}{{id}}", self.items_prefix()), "item")
            .with_mime_type("text/plain");
        let (templates, next_cursor) = paginate(&self.shared, vec![items], request.as_ref())?;
        Ok(ListResourceTemplatesResult {
            next_cursor,
            ..ListResourceTemplatesResult::with_all_items(templates)
        })
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let text = self
            .resource_text(&request.uri)
            .ok_or_else(|| self.resource_not_found(&request.uri))?;
        let contents = if self.is_app_view(&request.uri) {
            ResourceContents::text(text, request.uri)
                .with_mime_type(APP_MIME_TYPE)
                .with_meta(app_meta())
        } else {
            ResourceContents::text(text, request.uri)
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    #[allow(deprecated)] // resources/subscribe is current in the revisions the fake speaks
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if self.resource_text(&request.uri).is_none() {
            return Err(self.resource_not_found(&request.uri));
        }
        self.shared
            .subscribe(self.session, &request.uri, context.peer);
        Ok(())
    }

    #[allow(deprecated)] // resources/unsubscribe is current in the revisions the fake speaks
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.shared.unsubscribe(self.session, &request.uri);
        Ok(())
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        let manager = self.task_manager()?;
        Ok(rmcp::model::GetTaskResult::new(
            manager.get_task(&request.task_id)?,
        ))
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.task_manager()?
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.task_manager()?.cancel_task(&request.task_id)
    }
}
