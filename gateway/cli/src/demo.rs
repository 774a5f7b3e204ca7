//! The built-in demo servers (`wardgate demo-server NAME`, hidden): real stdio MCP servers in
//! this binary, so a gateway started with no config serves something at once, and one of
//! them can be told to crash to show recovery.

use std::borrow::Cow;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};
use wardgate_config::{Config, ConfigError};

/// The config the gateway serves when it finds none: the quickstart's, whose servers are
/// this binary's demo servers (`${WARDGATE_EXE}` is the running binary, set by `main`).
pub const CONFIG: &str = include_str!("../../../examples/quickstart.toml");

/// What the built-in config is called wherever a config's source is shown.
pub const SOURCE: &str = "(built-in demo)";

/// The built-in demo config, parsed like any file.
pub fn config() -> Result<Config, ConfigError> {
    Config::parse(Path::new(SOURCE), CONFIG, &|name| std::env::var(name).ok())
}

/// The demo servers by name.
pub const NAMES: [&str; 2] = ["notes", "math"];

/// Serve demo server `name` over stdio until the client closes stdin.
pub async fn serve(name: &str) -> anyhow::Result<()> {
    let server = match name {
        "notes" => Demo::Notes(Mutex::default()),
        "math" => Demo::Math,
        other => anyhow::bail!(
            "there is no demo server {other:?}; the demo servers are {}",
            NAMES.join(", ")
        ),
    };
    let running = server
        .serve((tokio::io::stdin(), tokio::io::stdout()))
        .await?;
    running.waiting().await?;
    Ok(())
}

enum Demo {
    /// `echo`, `remember`, `recall`: notes kept for the life of the process.
    Notes(Mutex<Vec<String>>),
    /// `add`, `multiply`, and `crash`, which ends the process so recovery can be seen.
    Math,
}

impl Demo {
    fn name(&self) -> &'static str {
        match self {
            Demo::Notes(_) => "notes",
            Demo::Math => "math",
        }
    }

    fn tools(&self) -> Vec<Tool> {
        let read_only = || ToolAnnotations::new().read_only(true).idempotent(true);
        match self {
            Demo::Notes(_) => vec![
                Tool::new(
                    "echo",
                    "Returns `text` unchanged.",
                    schema(json!({"text": {"type": "string"}}), &["text"]),
                )
                .annotate(read_only()),
                Tool::new(
                    "remember",
                    "Keeps `note` for as long as this server process lives.",
                    schema(json!({"note": {"type": "string"}}), &["note"]),
                ),
                Tool::new(
                    "recall",
                    "Lists the notes kept so far, oldest first.",
                    schema(json!({}), &[]),
                )
                .annotate(read_only()),
            ],
            Demo::Math => {
                let pair = || {
                    schema(
                        json!({"a": {"type": "number"}, "b": {"type": "number"}}),
                        &["a", "b"],
                    )
                };
                vec![
                    Tool::new("add", "Adds `a` and `b`.", pair()).annotate(read_only()),
                    Tool::new("multiply", "Multiplies `a` by `b`.", pair()).annotate(read_only()),
                    Tool::new(
                        "crash",
                        "Ends this server's process at once (exit code 3), to show the gateway restarting it; the call fails with the server's last words.",
                        schema(json!({}), &[]),
                    ),
                ]
            }
        }
    }

    fn call(&self, request: &CallToolRequestParams) -> Result<CallToolResult, McpError> {
        let arguments = request.arguments.clone().unwrap_or_default();
        let text = |text: String| Ok(CallToolResult::success(vec![ContentBlock::text(text)]));
        match (self, request.name.as_ref()) {
            (Demo::Notes(_), "echo") => text(string(&arguments, "text")?),
            (Demo::Notes(notes), "remember") => {
                let note = string(&arguments, "note")?;
                let mut notes = wardgate_policy::lock::lock(notes);
                notes.push(note);
                text(format!("remembered; {} note(s) kept", notes.len()))
            }
            (Demo::Notes(notes), "recall") => {
                let notes = wardgate_policy::lock::lock(notes);
                text(if notes.is_empty() {
                    "no notes yet; add one with remember".to_owned()
                } else {
                    notes.join("\n")
                })
            }
            (Demo::Math, "add") => {
                let sum = number(&arguments, "a")? + number(&arguments, "b")?;
                text(sum.to_string())
            }
            (Demo::Math, "multiply") => {
                let product = number(&arguments, "a")? * number(&arguments, "b")?;
                text(product.to_string())
            }
            (Demo::Math, "crash") => {
                // Said on stderr, as a failing server says why: the gateway shows it.
                eprintln!("math: crashing on request (the demo's crash tool)");
                std::process::exit(3);
            }
            (_, other) => Err(McpError::invalid_params(
                format!("demo server {} has no tool {other:?}", self.name()),
                None,
            )),
        }
    }
}

impl ServerHandler for Demo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                format!("wardgate-demo-{}", self.name()),
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions("A demo server built into wardgate.")
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [rmcp::model::ProtocolVersion]> {
        Cow::Borrowed(rmcp::model::ProtocolVersion::known_up_to(
            &rmcp::model::ProtocolVersion::V_2026_07_28,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(&request).map(CallToolResponse::from)
    }
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

fn string(arguments: &JsonObject, key: &str) -> Result<String, McpError> {
    arguments
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| McpError::invalid_params(format!("`{key}` (a string) is required"), None))
}

fn number(arguments: &JsonObject, key: &str) -> Result<f64, McpError> {
    arguments
        .get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| McpError::invalid_params(format!("`{key}` (a number) is required"), None))
}
