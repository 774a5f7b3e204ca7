//! Opt-in MCP tools for agents (`[gateway] expose_admin_tools = true`):
//! `wardgate__list_servers` and `wardgate__reconnect_server` (with the configured separator).
//!
//! They are answered by the gateway itself and listed after the servers' tools; a server's
//! tool with the same name (a server called `wardgate`) is shadowed by them. A reconnect is
//! an operator command like any other: submitted to the command queue at priority high
//! (correlation id `mcp-session-N`), and answered when the command has finished, as the
//! admin API's `POST /servers/NAME/reconnect` is.

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use serde_json::{json, Value};

use wardgate_engine::commands::{
    Command, CommandQueue, CommandRecord, CommandRequest, CommandState, Priority,
};
use wardgate_engine::gateway::Gateway;
use wardgate_engine::sessions::SessionId;

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
        "Force the gateway to reconnect one server now (resets its backoff and crash budget), \
         as an operator command on the gateway's command queue; returns whether the server \
         came back online.",
        object(json!({
            "type": "object",
            "properties": { "server": { "type": "string", "description": "the server's name, as list_servers shows it" } },
            "required": ["server"],
        })),
    );
    vec![list, reconnect]
}

/// Answer `request` if it names an admin tool; `None` lets it go to a server. `commands` is
/// the gateway's command queue; `session` is the client session asking.
pub(crate) async fn call(
    gateway: &Gateway,
    commands: &Arc<CommandQueue>,
    session: SessionId,
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
    let submitted = commands
        .submit_operator(CommandRequest {
            command: Command::Reconnect {
                server: server.to_owned(),
            },
            priority: Priority::High,
            correlation_id: Some(format!("mcp-session-{session}")),
        })
        .await
        .record;
    let finished = commands.wait(&submitted.id).await;
    Some(answer(gateway, server, &submitted.id, finished))
}

/// The reconnect's answer, from how its command ended: completed means the server is online
/// again; failed or expired carries the command's error (and the server's status now).
fn answer(
    gateway: &Gateway,
    server: &str,
    id: &str,
    finished: Option<CommandRecord>,
) -> CallToolResult {
    let Some(record) = finished else {
        return CallToolResult::structured_error(json!({
            "server": server,
            "reconnected": false,
            "command": id,
            "error": format!("the gateway no longer keeps command {id}; see `wardgate servers {server}` for the server's status"),
        }));
    };
    if record.state == CommandState::Completed {
        let status = record
            .result
            .as_ref()
            .and_then(|result| result.get("status"))
            .and_then(Value::as_str)
            .unwrap_or("online");
        return CallToolResult::structured(json!({
            "server": server,
            "reconnected": true,
            "status": status,
            "command": record.id,
        }));
    }
    let error = if record.state.is_finished() {
        record
            .error
            .unwrap_or_else(|| format!("the reconnect {}", record.state.as_str()))
    } else {
        // The queue stopped before the command finished: the gateway is shutting down.
        "the gateway is shutting down; the reconnect did not finish".to_owned()
    };
    let mut answer = json!({
        "server": server,
        "reconnected": false,
        "command": record.id,
        "error": error,
    });
    if let Some(slot) = gateway.slot(server) {
        answer["status"] = json!(slot.status().name());
    }
    CallToolResult::structured_error(answer)
}
