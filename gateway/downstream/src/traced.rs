//! Every request a client sends, as OpenTelemetry's MCP conventions see it: a SERVER span
//! whose parent is the client's trace context, how the request ended, and the
//! `mcp.server.operation.duration` and `mcp.server.session.duration` histograms.
//!
//! rmcp dispatches a request to a `ServerHandler` method through its blanket `Service` impl,
//! and its HTTP service takes only a `ServerHandler`; so [`Traced`] is the `ServerHandler`
//! every transport serves: each method passes its request to [`SessionHandler`]'s inside
//! the request's span. Every method `SessionHandler` implements is passed on here (the
//! others keep rmcp's defaults on both); `tidy` checks the two lists agree.

use std::future::Future;
use std::sync::OnceLock;

use rmcp::model::*;
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::time::Instant;
use tracing::Instrument;
use wardgate_engine::telemetry::{self, Described, Ending, Operation, Transport};

use crate::SessionHandler;

/// A client's session handler with its requests traced and measured.
pub struct Traced {
    handler: SessionHandler,
    /// Set when the client's `initialize` was answered: a handshake-era session, whose
    /// length is measured when it ends (a 2026-07-28 client has no session).
    session: OnceLock<SessionStart>,
}

struct SessionStart {
    at: Instant,
    version: Option<String>,
    transport: Transport,
}

impl Traced {
    pub fn new(handler: SessionHandler) -> Traced {
        Traced {
            handler,
            session: OnceLock::new(),
        }
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        if let Some(start) = self.session.get() {
            let took = start.at.elapsed();
            self.handler.gateway.metrics().mcp_session(
                start.version.as_deref(),
                start.transport,
                took,
            );
            telemetry::record_session(start.version.as_deref(), start.transport, took);
        }
    }
}

impl Traced {
    /// Runs `handle` (the handler's method) in the SERVER span of the request `context`
    /// carries, then records how it ended and how long it took. `tool_error`: whether an
    /// answer is a tool's `isError` result.
    async fn traced<T, F, Fut>(
        &self,
        described: Described,
        context: RequestContext<RoleServer>,
        tool_error: fn(&T) -> bool,
        handle: F,
    ) -> Result<T, McpError>
    where
        F: FnOnce(RequestContext<RoleServer>) -> Fut,
        Fut: Future<Output = Result<T, McpError>>,
    {
        let parts = context.extensions.get::<http::request::Parts>();
        let transport = match parts {
            Some(_) => Transport::Tcp,
            None => Transport::Pipe,
        };
        let version = context
            .protocol_version()
            .map(|version| version.to_string());
        // A session id is a handshake-era session's (2026-07-28 has none); a span's only.
        let session = parts
            .filter(|_| telemetry::on())
            .and_then(|parts| parts.headers.get("mcp-session-id"))
            .and_then(|value| value.to_str().ok())
            .filter(|_| !crate::sessionless(&context));
        let span = telemetry::server_span(
            &described,
            &context.id,
            transport,
            &context.meta,
            parts.map(|parts| &parts.headers),
            version.as_deref(),
            session,
        );
        let started = Instant::now();
        let result = telemetry::in_call(handle(context).instrument(span.clone())).await;
        let ending = match &result {
            Ok(answer) if tool_error(answer) => Ending::ToolError,
            Ok(_) => Ending::Ok,
            Err(error) => Ending::from_error(error),
        };
        telemetry::end(&span, &ending, true);
        // A name is a label only when the gateway serves it: a client may send any.
        let catalogue = self.handler.gateway.catalogue();
        let operation = Operation {
            method: described.method,
            tool: described
                .tool
                .as_deref()
                .filter(|name| catalogue.tool(name).is_some()),
            prompt: described
                .prompt
                .as_deref()
                .filter(|name| catalogue.prompt(name).is_some()),
            error_type: ending.metric_error_type(),
            transport,
            protocol_version: version.as_deref().map(telemetry::known_version),
            server: None,
        };
        let took = started.elapsed();
        self.handler.gateway.metrics().mcp_server(&operation, took);
        result
    }
}

fn never<T>(_: &T) -> bool {
    false
}

fn method(method: &'static str) -> Described {
    Described {
        method,
        ..Described::default()
    }
}

fn on_resource(method: &'static str, uri: &str) -> Described {
    Described {
        method,
        // A span's only (masking it is work a metric does not need).
        uri: telemetry::on().then(|| telemetry::masked(uri)),
        ..Described::default()
    }
}

#[expect(
    deprecated,
    reason = "logging and resources/subscribe are current in the protocol versions the gateway speaks"
)]
impl ServerHandler for Traced {
    fn get_info(&self) -> ServerConfig {
        self.handler.get_info()
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        self.handler.supported_protocol_versions()
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        self.traced(method("completion/complete"), context, never, |context| {
            self.handler.complete(request, context)
        })
        .await
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let transport = match context.extensions.get::<http::request::Parts>() {
            Some(_) => Transport::Tcp,
            None => Transport::Pipe,
        };
        let started = Instant::now();
        let result = self
            .traced(method("initialize"), context, never, |context| {
                self.handler.initialize(request, context)
            })
            .await;
        if let Ok(answer) = &result {
            let _ = self.session.set(SessionStart {
                at: started,
                version: Some(answer.protocol_version.to_string()),
                transport,
            });
        }
        result
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.traced(method("logging/setLevel"), context, never, |context| {
            self.handler.set_level(request, context)
        })
        .await
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.traced(method("tools/list"), context, never, |context| {
            self.handler.list_tools(request, context)
        })
        .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let described = Described {
            method: "tools/call",
            tool: Some(request.name.to_string()),
            ..Described::default()
        };
        let tool_error = |answer: &CallToolResponse| matches!(answer, CallToolResponse::Complete(result) if result.is_error == Some(true));
        self.traced(described, context, tool_error, |context| {
            self.handler.call_tool(request, context)
        })
        .await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.traced(method("tasks/get"), context, never, |context| {
            self.handler.get_task(request, context)
        })
        .await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.traced(method("tasks/update"), context, never, |context| {
            self.handler.update_task(request, context)
        })
        .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.traced(method("tasks/cancel"), context, never, |context| {
            self.handler.cancel_task(request, context)
        })
        .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.traced(method("prompts/list"), context, never, |context| {
            self.handler.list_prompts(request, context)
        })
        .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let described = Described {
            method: "prompts/get",
            prompt: Some(request.name.clone()),
            ..Described::default()
        };
        self.traced(described, context, never, |context| {
            self.handler.get_prompt(request, context)
        })
        .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.traced(method("resources/list"), context, never, |context| {
            self.handler.list_resources(request, context)
        })
        .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.traced(
            method("resources/templates/list"),
            context,
            never,
            |context| self.handler.list_resource_templates(request, context),
        )
        .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let described = on_resource("resources/read", &request.uri);
        self.traced(described, context, never, |context| {
            self.handler.read_resource(request, context)
        })
        .await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let described = on_resource("resources/subscribe", &request.uri);
        self.traced(described, context, never, |context| {
            self.handler.subscribe(request, context)
        })
        .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let described = on_resource("resources/unsubscribe", &request.uri);
        self.traced(described, context, never, |context| {
            self.handler.unsubscribe(request, context)
        })
        .await
    }

    async fn ping(&self, context: RequestContext<RoleServer>) -> Result<(), McpError> {
        self.traced(method("ping"), context, never, |context| {
            self.handler.ping(context)
        })
        .await
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        self.traced(method("server/discover"), context, never, |context| {
            self.handler.discover(context)
        })
        .await
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.handler.accepted_subscription_filter(requested)
    }

    /// A listen stream lasts as long as the client keeps it: no span of its own.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        self.handler.listen(context).await
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let described = method(telemetry::known_method(&request.method));
        self.traced(described, context, never, |context| {
            self.handler.on_custom_request(request, context)
        })
        .await
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.handler.on_roots_list_changed(context).await
    }
}
