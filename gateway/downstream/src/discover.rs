//! Tool discovery by search (`tool_discovery = "search"`): instead of every tool of every
//! server, `tools/list` offers two tools. `discover_tools` finds tools by words and server
//! and describes them (their input schemas on demand); `call_tool` calls one by name,
//! through the same path as a direct call (grants, routing, retries, events). What a client
//! pays in context no longer grows with the number of servers.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, JsonObject, Tool};
use rmcp::ErrorData as McpError;
use serde::Deserialize;
use serde_json::{json, Value};

use wardgate_engine::catalogue::Catalogue;

/// The search tool's name.
pub const DISCOVER_TOOLS: &str = "discover_tools";
/// The call tool's name.
pub const CALL_TOOL: &str = "call_tool";
/// Tools a search returns unless it asks for a number.
const DEFAULT_LIMIT: usize = 20;
/// The most tools one search returns.
const MAX_LIMIT: usize = 100;

/// The two tools a client in search mode is offered.
pub(super) fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            DISCOVER_TOOLS,
            "Finds tools of the MCP servers behind this gateway. Search by words (matched \
             against tool names and descriptions; tools matching more words come first) \
             and/or by server; ask for exact names to get their input schemas. Then call a \
             tool with call_tool.",
            schema(json!({
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "Words to look for in tool names and descriptions. Empty: every tool."
                    },
                    "server": {
                        "type": "string",
                        "description": "Only tools of this server."
                    },
                    "names": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Exact tool names to describe, with their input schemas."
                    },
                    "include_schemas": {
                        "type": "boolean",
                        "description": "Return each tool's input schema too (default: only with names)."
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_LIMIT,
                        "description": "At most this many tools (default 20)."
                    }
                },
                "additionalProperties": false
            })),
        )
        .annotate(
            rmcp::model::ToolAnnotations::new()
                .read_only(true)
                .idempotent(true),
        ),
        Tool::new(
            CALL_TOOL,
            "Calls a tool found with discover_tools, by its name, with its arguments: the \
             same as calling that tool directly.",
            schema(json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The tool's name, as discover_tools gives it."},
                    "arguments": {"type": "object", "description": "The tool's arguments, as its input schema says."}
                },
                "required": ["name"],
                "additionalProperties": false
            })),
        ),
    ]
}

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(object) => Arc::new(object),
        _ => unreachable!("the schemas above are objects"),
    }
}

/// What `discover_tools` is asked.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Search {
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    server: Option<String>,
    #[serde(default)]
    names: Option<Vec<String>>,
    #[serde(default)]
    include_schemas: Option<bool>,
    #[serde(default)]
    limit: Option<usize>,
}

/// `discover_tools`: the tools of `catalogue` that `visible` keeps, as `arguments` asks.
pub(super) fn discover(
    catalogue: &Catalogue,
    arguments: Option<&JsonObject>,
    visible: impl Fn(&Tool, &str) -> bool,
) -> Result<CallToolResult, McpError> {
    let search: Search = serde_json::from_value(Value::Object(
        arguments.cloned().unwrap_or_default(),
    ))
    .map_err(|error| {
        McpError::invalid_params(
            format!(
                "{DISCOVER_TOOLS}: {error}; give query, server, names, include_schemas or limit"
            ),
            None,
        )
    })?;
    let limit = search.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let words = words(search.query.as_deref().unwrap_or(""));
    let mut found: Vec<(usize, &Tool, &str)> = catalogue
        .tools
        .iter()
        .filter_map(|tool| {
            let server = catalogue.tool(&tool.name)?.server.as_str();
            if !visible(tool, server) {
                return None;
            }
            if search
                .server
                .as_deref()
                .is_some_and(|wanted| wanted != server)
            {
                return None;
            }
            if let Some(names) = &search.names {
                return names
                    .iter()
                    .any(|name| *name == tool.name)
                    .then_some((0, tool, server));
            }
            let score = score(tool, &words);
            (words.is_empty() || score > 0).then_some((score, tool, server))
        })
        .collect();
    // Best first, then by name: the same search always lists the same way.
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let total = found.len();
    let schemas = search.include_schemas.unwrap_or(search.names.is_some());
    let listed: Vec<Value> = found
        .iter()
        .take(limit)
        .map(|(_, tool, server)| describe(tool, server, schemas))
        .collect();
    let answer = json!({
        "tools": listed,
        "total": total,
        "truncated": total > limit,
        "hint": if total > limit {
            "more tools match: narrow the query or the server, or raise the limit"
        } else if total == 0 {
            "no tool matches: try other words, or no query to see every tool"
        } else {
            "call a tool with call_tool {\"name\": ..., \"arguments\": {...}}; ask discover_tools with names for its input schema"
        },
    });
    let mut result = CallToolResult::success(vec![ContentBlock::text(answer.to_string())]);
    result.structured_content = Some(answer);
    Ok(result)
}

/// One tool as a search returns it.
fn describe(tool: &Tool, server: &str, schema: bool) -> Value {
    let mut described = json!({
        "name": tool.name,
        "server": server,
        "description": tool.description.as_deref().unwrap_or(""),
    });
    if let Some(title) = &tool.title {
        described["title"] = json!(title);
    }
    if schema {
        described["inputSchema"] = Value::Object((*tool.input_schema).clone());
    }
    if let Some(annotations) = &tool.annotations {
        if let Ok(annotations) = serde_json::to_value(annotations) {
            described["annotations"] = annotations;
        }
    }
    described
}

/// The lowercase words of a query (letters and digits; `_`, `-` and the rest split words).
fn words(query: &str) -> Vec<String> {
    let mut words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect();
    words.sort();
    words.dedup();
    words
}

/// How well `tool` matches `words`: each word found in the name counts 2, in the
/// description (or title) 1.
fn score(tool: &Tool, words: &[String]) -> usize {
    let name = tool.name.to_lowercase();
    let text = format!(
        "{} {}",
        tool.title.as_deref().unwrap_or(""),
        tool.description.as_deref().unwrap_or("")
    )
    .to_lowercase();
    words
        .iter()
        .map(|word| {
            if name.contains(word.as_str()) {
                2
            } else if text.contains(word.as_str()) {
                1
            } else {
                0
            }
        })
        .sum()
}

/// What `call_tool` is asked: the call to make instead, with the original request's
/// `_meta` (its progress token) and task.
pub(super) fn unwrap_call(
    request: &CallToolRequestParams,
) -> Result<CallToolRequestParams, McpError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Call {
        name: String,
        #[serde(default)]
        arguments: Option<JsonObject>,
    }
    let call: Call = serde_json::from_value(Value::Object(
        request.arguments.clone().unwrap_or_default(),
    ))
    .map_err(|error| {
        McpError::invalid_params(
            format!("{CALL_TOOL}: {error}; give the tool's name and its arguments, as {{\"name\": \"server__tool\", \"arguments\": {{...}}}}"),
            None,
        )
    })?;
    // The call it names goes the way of every tools/call, which never takes a name for
    // one of these two tools: a server's own tool listed as `call_tool` or
    // `discover_tools` (an unprefixed server's) is reached this way, and nothing recurses.
    let mut inner = request.clone();
    inner.name = Cow::Owned(call.name);
    inner.arguments = call.arguments;
    Ok(inner)
}

#[cfg(test)]
mod tests;
