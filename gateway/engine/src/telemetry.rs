//! OpenTelemetry's conventions for MCP, as the gateway follows them: a SERVER span for each
//! request a client sends, a CLIENT span for each attempt at a request upstream, the W3C
//! trace context taken from the client (`params._meta`, else the HTTP headers) and passed
//! on upstream, and the `mcp.*.operation.duration` histograms.
//!
//! Spans are `tracing` spans with target [`TARGET`]: the binary's OpenTelemetry layer
//! exports them when telemetry is configured, and no other layer enables that target, so
//! without telemetry a span is never created and each helper here costs one load of the
//! flag [`on`] reads. Numbers are recorded as `i64` (tracing-opentelemetry exports other
//! integers as text). Span fields follow tracing-opentelemetry's names (`otel.name`,
//! `otel.kind`, `otel.status_code`), and every attribute a span may get is declared when it
//! is made (fields cannot be added later). Policy decisions, retries and status changes are
//! events on the span that saw them (`decision`, `retry`, [`status_event`]).

mod context;
pub(crate) mod otlp;

use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{ClientRequest, ErrorCode, RequestMetaObject};
use tracing::field::Empty;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use context::{extract, sampled};
pub use context::{forward_baggage, in_call, pass_on, sample_root, sample_with, trace_headers};
pub use otlp::{otlp_metrics, record_session, Operation, BUCKETS};

/// The target of every span and event made for OpenTelemetry.
pub const TARGET: &str = "wardgate::telemetry";

/// Set by the binary once the layer that exports [`TARGET`]'s spans is installed.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Said by the binary once its OpenTelemetry layer, which enables [`TARGET`], is installed.
pub fn exporting_spans() {
    EXPORTING.store(true, Ordering::Relaxed);
}

/// Whether spans and events for OpenTelemetry are made at all; work that only they need is
/// done when this says so. A flag, not `tracing::enabled!`: beside the stderr log's own
/// filter the callsite's interest is "sometimes", so `enabled!` asked every layer's filter
/// at every call (0.5 % of the gateway's CPU with telemetry on).
pub fn on() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Whether the current span is one OpenTelemetry exports (a call's): an event made now
/// lands on it. Another layer's span (rmcp's, at a verbose log level) does not count. A
/// span of [`TARGET`] exists only when its trace is sampled and exported, so its target
/// says so, without looking its OpenTelemetry context up.
pub fn in_traced_span() -> bool {
    Span::current()
        .metadata()
        .is_some_and(|metadata| metadata.target() == TARGET)
}

/// What a request is, in the conventions' words.
#[derive(Debug, Clone, Default)]
pub struct Described {
    /// `mcp.method.name`: one of the methods the gateway knows, else `_OTHER` (a client
    /// chooses the text, so it never becomes a label as it is).
    pub method: &'static str,
    /// `gen_ai.tool.name`, `gen_ai.prompt.name`, `mcp.resource.uri` (masked).
    pub tool: Option<String>,
    pub prompt: Option<String>,
    pub uri: Option<String>,
}

/// The methods a span or a metric may name.
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/list",
    "tasks/cancel",
    "tasks/result",
    "tasks/update",
    "wardgate/tasks/call",
    "wardgate/tasks/get",
    "wardgate/tasks/cancel",
];

/// `method` as a span or metric may name it.
pub fn known_method(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|known| **known == method)
        .copied()
        .unwrap_or("_OTHER")
}

/// A protocol version as a label may say it: one rmcp knows, else `_OTHER` (a 2026-07-28
/// client names its version in every request, so the text is the client's).
pub fn known_version(version: &str) -> &str {
    if rmcp::model::ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .any(|known| known.as_str() == version)
    {
        version
    } else {
        "_OTHER"
    }
}

/// The tool a `tools/call` sent as a custom request (a task of the server's own, 2025-11-25)
/// names.
pub fn custom_tool_name(custom: &rmcp::model::CustomRequest) -> Option<&str> {
    custom.params.as_ref()?.get("name")?.as_str()
}

/// The conventions' view of a client request.
pub fn describe(request: &ClientRequest) -> Described {
    let mut described = Described {
        method: known_method(request.method()),
        ..Described::default()
    };
    match request {
        ClientRequest::CallToolRequest(call) => described.tool = Some(call.params.name.to_string()),
        ClientRequest::CustomRequest(custom) if custom.method == "tools/call" => {
            described.tool = custom_tool_name(custom).map(str::to_owned)
        }
        ClientRequest::GetPromptRequest(get) => described.prompt = Some(get.params.name.clone()),
        // A URI is a span's only (masking it is work a metric does not need).
        ClientRequest::ReadResourceRequest(read) if on() => {
            described.uri = Some(masked(&read.params.uri))
        }
        ClientRequest::SubscribeRequest(subscribe) if on() => {
            described.uri = Some(masked(&subscribe.params.uri))
        }
        ClientRequest::UnsubscribeRequest(unsubscribe) if on() => {
            described.uri = Some(masked(&unsubscribe.params.uri))
        }
        _ => {}
    }
    described
}

/// `text` with every secret the config made masked (a resource URI may hold one).
pub fn masked(text: &str) -> String {
    wardgate_config::secrets::mask(text).into_owned()
}

impl Described {
    /// The span's name: `{mcp.method.name} {target}`, the target being the tool or prompt.
    fn span_name(&self) -> String {
        match self.tool.as_deref().or(self.prompt.as_deref()) {
            Some(target) => format!("{} {target}", self.method),
            None => self.method.to_owned(),
        }
    }
}

/// How a peer is reached, as `network.transport` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// stdio.
    Pipe,
    /// HTTP (Streamable HTTP or HTTP+SSE).
    Tcp,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Pipe => "pipe",
            Transport::Tcp => "tcp",
        }
    }
}

/// The SERVER span of one client request: its parent is the trace context the client sent
/// (`_meta` first, then the HTTP headers), or none, which starts a trace.
/// `protocol_version` and `session` (a handshake-era session's id) are recorded with it.
pub fn server_span(
    described: &Described,
    id: &dyn std::fmt::Display,
    transport: Transport,
    meta: &RequestMetaObject,
    headers: Option<&http::HeaderMap>,
    protocol_version: Option<&str>,
    session: Option<&str>,
) -> Span {
    if !on() {
        return Span::none();
    }
    let parent = extract(meta, headers);
    if !sampled(&parent) {
        // Not recorded: no span at all (the client's own context still goes upstream).
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "mcp.server",
        otel.name = described.span_name().as_str(),
        otel.kind = "server",
        otel.status_code = Empty,
        otel.status_description = Empty,
        mcp.method.name = described.method,
        gen_ai.tool.name = described.tool.as_deref(),
        gen_ai.prompt.name = described.prompt.as_deref(),
        gen_ai.operation.name = described.tool.as_ref().map(|_| "execute_tool"),
        mcp.resource.uri = described.uri.as_deref(),
        jsonrpc.request.id = %id,
        mcp.session.id = session,
        mcp.protocol.version = protocol_version,
        network.transport = transport.as_str(),
        network.protocol.name = headers.map(|_| "http"),
        "error.type" = Empty,
        rpc.response.status_code = Empty,
        wardgate.server = Empty,
        wardgate.server.status = Empty,
        wardgate.attempts = Empty,
    );
    // A span not yet entered takes its parent; nothing else can fail here.
    let _ = span.set_parent(parent);
    span
}

/// The CLIENT span of one attempt at a request upstream.
pub fn client_span(
    described: &Described,
    server: &str,
    transport: Transport,
    protocol_version: Option<&str>,
    attempt: u32,
) -> Span {
    // Under a request's span only: an unsampled request has none, and its attempts none.
    if !on() || !in_traced_span() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "mcp.client",
        otel.name = described.span_name().as_str(),
        otel.kind = "client",
        otel.status_code = Empty,
        otel.status_description = Empty,
        mcp.method.name = described.method,
        gen_ai.tool.name = described.tool.as_deref(),
        gen_ai.prompt.name = described.prompt.as_deref(),
        gen_ai.operation.name = described.tool.as_ref().map(|_| "execute_tool"),
        mcp.resource.uri = described.uri.as_deref(),
        jsonrpc.request.id = Empty,
        mcp.protocol.version = protocol_version,
        network.transport = transport.as_str(),
        "error.type" = Empty,
        rpc.response.status_code = Empty,
        wardgate.server = server,
        wardgate.attempt = i64::from(attempt),
    )
}

/// A span for work the current request leaves running after its answer (a 2025-11-25
/// task's call): in the request's trace, under its span, without holding that span open.
pub fn detached(name: &'static str) -> Span {
    if !on() || !in_traced_span() {
        return Span::none();
    }
    let current = Span::current();
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "wardgate.detached",
        otel.name = name,
        otel.kind = "internal",
        wardgate.server = Empty,
        wardgate.server.status = Empty,
        wardgate.attempts = Empty,
    );
    let _ = span.set_parent(current.context());
    span
}

/// The trace id of the span a decision or a failure happened in, for the status page's
/// link; `None` without telemetry.
pub fn current_trace_id() -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    let span = Span::current();
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}

/// How a request ended, as a span's `error.type` and a metric's label say it.
#[derive(Debug, Clone)]
pub enum Ending {
    Ok,
    /// A tool's result with `isError` (`tool_error`).
    ToolError,
    /// A JSON-RPC error with its code and message.
    Error {
        code: i32,
        message: String,
    },
    /// No answer: timeout, cancelled, a broken connection (`error.type` as given).
    Failed {
        kind: &'static str,
        message: String,
    },
}

impl Ending {
    /// `error.type`, or `None` for success.
    pub fn error_type(&self) -> Option<String> {
        match self {
            Ending::Ok => None,
            Ending::ToolError => Some("tool_error".to_owned()),
            Ending::Error { code, .. } => Some(code.to_string()),
            Ending::Failed { kind, .. } => Some((*kind).to_owned()),
        }
    }

    /// `error.type` as a metric's label: a JSON-RPC code only in the range JSON-RPC and
    /// MCP reserve (-32768 to -32000), else `_OTHER`, so a server's own codes cannot make
    /// series without end.
    pub fn metric_error_type(&self) -> Option<String> {
        match self {
            Ending::Error { code, .. } if !(-32768..=-32000).contains(code) => {
                Some("_OTHER".to_owned())
            }
            _ => self.error_type(),
        }
    }

    pub fn from_error(error: &rmcp::ErrorData) -> Ending {
        Ending::Error {
            code: error.code.0,
            message: error.message.to_string(),
        }
    }

    /// Whether a server span with this ending is an error: the conventions count a
    /// client's own mistakes (parse, invalid request, unknown method or params, unknown
    /// resource) as the client's, not the server's.
    fn server_fault(&self) -> bool {
        match self {
            Ending::Error { code, .. } => ![
                ErrorCode::PARSE_ERROR.0,
                ErrorCode::INVALID_REQUEST.0,
                ErrorCode::METHOD_NOT_FOUND.0,
                ErrorCode::INVALID_PARAMS.0,
                ErrorCode::RESOURCE_NOT_FOUND.0,
            ]
            .contains(code),
            Ending::Ok | Ending::ToolError => false,
            Ending::Failed { .. } => true,
        }
    }
}

/// Records how a span's request ended: `error.type`, the JSON-RPC code, and the status.
pub fn end(span: &Span, ending: &Ending, server_side: bool) {
    if span.is_disabled() {
        return;
    }
    if let Some(error_type) = ending.error_type() {
        span.record("error.type", error_type.as_str());
    }
    let message = match ending {
        Ending::Error { code, message } => {
            span.record("rpc.response.status_code", code.to_string().as_str());
            Some(message)
        }
        Ending::Failed { message, .. } => Some(message),
        Ending::Ok | Ending::ToolError => None,
    };
    let error = match ending {
        Ending::Ok => false,
        Ending::ToolError => true,
        _ => !server_side || ending.server_fault(),
    };
    if error {
        span.record("otel.status_code", "error");
        if let Some(message) = message {
            span.record("otel.status_description", masked(message).as_str());
        }
    }
}

/// A status change or reconnection of `server`, as an event on the span of the call that
/// saw it, or in a span of its own when no call is in flight.
pub fn status_event(server: &str, status: &str, what: &str) {
    let Some(own) = where_to_record(server, || {
        format!("server {} {status}", crate::catalogue::server_of(server))
    }) else {
        return;
    };
    let _entered = own.as_ref().map(Span::enter);
    tracing::info!(target: TARGET, server, status, detail = what, "wardgate.server.status");
}

/// Where an event about `server` is recorded: `None` when it is not (telemetry off, or
/// not sampled); `Some(None)` on the span of the call it happened in; `Some(Some(span))`
/// in a short INTERNAL span of its own, named `name()`, when no request is under way (a
/// supervisor's status change or decision).
pub fn where_to_record(server: &str, name: impl FnOnce() -> String) -> Option<Option<Span>> {
    if !on() {
        return None;
    }
    if in_traced_span() {
        return Some(None);
    }
    if !sample_root() {
        return None;
    }
    Some(Some(tracing::info_span!(
        target: TARGET,
        "wardgate.internal",
        otel.name = name(),
        otel.kind = "internal",
        wardgate.server = server,
    )))
}
