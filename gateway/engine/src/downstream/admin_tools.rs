//! Opt-in MCP tools for agents (`[gateway] expose_admin_tools = true`):
//! `wardgate__list_servers` and `wardgate__reconnect_server` (with the configured separator).
//!
//! They are answered by the gateway itself and listed after the servers' tools; a server's
//! tool with the same name (a server called `wardgate`) is shadowed by them.

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use serde_json::{json, Value};

use crate::gateway::Gateway;

const LIST_SERVERS: &str = "list_servers";
const RECONNECT_SERVER: &str = "reconnect_server";

fn name(gateway: &Gateway, tool: &str) -> String {
    format!("wardgate{}{tool}", gateway.settings.separator)
}

/// The admin tools, when the config asks for them.
pub(crate) fn tools(gateway: &Gateway) -> Vec<Tool> {
    if !gateway.settings.expose_admin_tools {
        return Vec::new();
    }
    let object = |value: Value| Arc::new(value.as_object().cloned().unwrap_or_default());
    let mut list = Tool::new(
        name(gateway, LIST_SERVERS),
        "List every server behind this Wardgate gateway with its status (online, reconnecting, \
         offline, requires_reauth, permanently_failed, disabled, ...), last error, recovery \
         counters and tool counts.",
        object(json!({ "type": "object", "properties": {} })),
    );
    list.annotations = Some(rmcp::model::ToolAnnotations::new().read_only(true));
    let reconnect = Tool::new(
        name(gateway, RECONNECT_SERVER),
        "Force the gateway to reconnect one server now (resets its backoff and crash budget); \
         returns whether the server came back online.",
        object(json!({
            "type": "object",
            "properties": { "server": { "type": "string", "description": "the server's name, as list_servers shows it" } },
            "required": ["server"],
        })),
    );
    vec![list, reconnect]
}

/// Answer `request` if it names an admin tool; `None` lets it go to a server.
pub(crate) async fn call(
    gateway: &Gateway,
    request: &CallToolRequestParams,
) -> Option<CallToolResult> {
    if !gateway.settings.expose_admin_tools {
        return None;
    }
    if request.name == name(gateway, LIST_SERVERS) {
        let servers = serde_json::to_value(gateway.servers()).unwrap_or_default();
        return Some(CallToolResult::structured(json!({ "servers": servers })));
    }
    if request.name != name(gateway, RECONNECT_SERVER) {
        return None;
    }
    let server = request
        .arguments
        .as_ref()
        .and_then(|arguments| arguments.get("server"))
        .and_then(Value::as_str);
    let Some(server) = server else {
        return Some(CallToolResult::structured_error(json!({
            "error": "missing argument \"server\"; pass the server's name as list_servers shows it",
        })));
    };
    Some(match gateway.reconnect(server).await {
        Ok(()) => {
            let status = wait_settled(gateway, server).await;
            CallToolResult::structured(json!({
                "server": server,
                "reconnected": status == "online",
                "status": status,
            }))
        }
        Err(error) => CallToolResult::structured_error(json!({
            "server": server,
            "error": error.to_string(),
        })),
    })
}

/// The server's status once the reconnection has settled (online or failed), or after 10 s.
async fn wait_settled(gateway: &Gateway, server: &str) -> String {
    let Some(slot) = gateway.slot(server) else {
        return "removed".into();
    };
    let mut status = slot.watch_status();
    let settled = status.wait_for(|status| !status.is_transitional());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), settled).await;
    slot.status().name().to_owned()
}
