//! Which tools the fake offers: built-ins with their JSON schemas, `tool_N`, `show_view`, tools added later.

use std::sync::Arc;

use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::{json, Value};

use crate::state::Shared;

/// The `--app` tool whose MCP App is the resource `Shared::app_view_uri`.
const APP_TOOL: &str = "show_view";

/// Every tool the server offers right now: built-ins, `tool_0..`, `show_view` with `--app`,
/// then those added by `add_tool`.
pub fn list(shared: &Shared) -> Vec<Tool> {
    if let Some(fixture) = &shared.fixture_tools {
        return fixture.clone();
    }
    let mut tools = builtin_tools();
    tools.extend((0..shared.extra_tools).map(|index| echo_like(format!("tool_{index}"))));
    tools.extend(shared.app_view_uri().map(|uri| app_tool(&uri)));
    if shared.faults.hang_lists_file.is_some() {
        tools.push(Tool::new(
            "lists",
            "How many tools/list requests this process has received, and how many wait for --hang-lists-file to go, as {\"received\": N, \"waiting\": M}.",
            schema(json!({}), &[]),
        ));
    }
    if shared.deep_answer.is_some() {
        tools.push(Tool::new(
            "deep",
            "Answers with a result nested `depth` levels deep, which no client with a \
             recursion limit reads (over stdio, and never answers otherwise until cancelled).",
            schema(json!({"depth": count()}), &[]),
        ));
    }
    if shared.tasks.is_some() {
        tools.extend(crate::tasks::tools());
    }
    tools.extend(shared.dynamic_tools().into_iter().map(echo_like));
    tools
}

/// `show_view`: echo-like, and pointing at its UI by both keys MCP Apps hosts read, the
/// current `ui.resourceUri` and the deprecated `ui/resourceUri`.
fn app_tool(view_uri: &str) -> Tool {
    let mut meta = MetaObject::new();
    meta.insert("ui".into(), json!({"resourceUri": view_uri}));
    meta.insert("ui/resourceUri".into(), json!(view_uri));
    Tool::new(
        APP_TOOL,
        "Shows this server's MCP App; returns `text`, or the tool's name if `text` is absent.",
        schema(json!({"text": {"type": "string"}}), &[]),
    )
    .with_meta(meta)
}

fn builtin_tools() -> Vec<Tool> {
    let no_arguments = schema(json!({}), &[]);
    vec![
        Tool::new("echo", "Returns `text` unchanged.", string_schema("text"))
            .annotate(ToolAnnotations::new().read_only(true).idempotent(true)),
        Tool::new(
            "add",
            "Adds two numbers; the sum is in the text and in structuredContent.sum.",
            schema(
                json!({"a": {"type": "number"}, "b": {"type": "number"}}),
                &["a", "b"],
            ),
        )
        .with_raw_output_schema(schema(json!({"sum": {"type": "number"}}), &["sum"])),
        Tool::new(
            "fail",
            "Returns an error result (isError) carrying `message`.",
            string_schema("message"),
        ),
        Tool::new(
            "slow",
            "Sleeps `ms` ms; with a progressToken, sends `steps` (default 5) progress updates.",
            schema(json!({"ms": count(), "steps": count()}), &["ms"]),
        ),
        Tool::new(
            "cancelled_count",
            "How many requests the client has cancelled so far.",
            no_arguments.clone(),
        ),
        Tool::new(
            "sample",
            "Asks the client to sample (sampling/createMessage) an answer to `prompt`.",
            string_schema("prompt"),
        ),
        Tool::new(
            "elicit",
            "Asks the client to elicit an answer to `message`; returns the action and content.",
            string_schema("message"),
        ),
        Tool::new(
            "roots",
            "Asks the client for its roots.",
            no_arguments.clone(),
        ),
        Tool::new("pid", "This server's process id.", no_arguments.clone()),
        Tool::new(
            "meta",
            "The request's `_meta` as this server received it, as JSON text (over HTTP, with \
             the POST's `traceparent` header as `http_traceparent`), and its JSON-RPC id as \
             `request_id`.",
            no_arguments.clone(),
        )
        .annotate(ToolAnnotations::new().read_only(true).idempotent(true)),
        Tool::new(
            "add_tool",
            "Adds an echo-like tool called `name` and sends tools/list_changed.",
            string_schema("name"),
        ),
        Tool::new(
            "log",
            "Sends `message` as a logging notification at `level` (default info), `repeat` times (default 1).",
            schema(
                json!({"message": {"type": "string"}, "level": {"type": "string", "enum": [
                    "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"
                ]}, "repeat": {"type": "integer", "minimum": 1}}),
                &["message"],
            ),
        ),
        Tool::new(
            "crash",
            "Exits the process at once with `code` (default 3), without answering.",
            schema(json!({"code": {"type": "integer"}}), &[]),
        ),
        Tool::new("hang", "Never answers, until cancelled.", no_arguments),
        Tool::new(
            "big",
            "Returns a text of `bytes` 'x' characters.",
            schema(json!({"bytes": count()}), &["bytes"]),
        ),
        Tool::new(
            "flaky",
            "Fails its first `fails` calls with `key` with JSON-RPC error `code`, then succeeds; \
             says how many times it failed.",
            schema(
                json!({"key": {"type": "string"}, "fails": count(), "code": {"type": "integer"}}),
                &["key", "fails", "code"],
            ),
        )
        .annotate(ToolAnnotations::new().idempotent(true)),
        Tool::new(
            "touch",
            "Sends resources/updated for `uri` to the sessions subscribed to it.",
            string_schema("uri"),
        ),
    ]
}

/// `tool_N` and dynamic tools: return `text`, or their own name without it.
pub fn echo_like(name: String) -> Tool {
    Tool::new(
        name,
        "Echo-like: returns `text`, or the tool's name if `text` is absent.",
        schema(json!({"text": {"type": "string"}}), &[]),
    )
}

/// The schema of a non-negative integer argument.
fn count() -> Value {
    json!({"type": "integer", "minimum": 0})
}

fn string_schema(field: &str) -> Arc<JsonObject> {
    let mut properties = JsonObject::new();
    properties.insert(field.to_owned(), json!({"type": "string"}));
    schema(Value::Object(properties), &[field])
}

fn schema(properties: Value, required: &[&str]) -> Arc<JsonObject> {
    let mut schema = JsonObject::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), properties);
    if !required.is_empty() {
        schema.insert("required".into(), json!(required));
    }
    Arc::new(schema)
}

/// Whether `name` is one of the `tool_N` or dynamic tools, which all behave like `echo`.
pub fn is_echo_like(shared: &Shared, name: &str) -> bool {
    let is_extra = name
        .strip_prefix("tool_")
        .and_then(|index| index.parse::<usize>().ok())
        .is_some_and(|index| index < shared.extra_tools && name == format!("tool_{index}"));
    let is_app = shared.app && name == APP_TOOL;
    is_extra || is_app || shared.dynamic_tools().iter().any(|tool| tool == name)
}
