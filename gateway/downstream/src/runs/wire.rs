//! The 2025-11-25 tasks surface on the wire, where rmcp's types cannot carry it: rmcp models
//! the tasks of 2026-07-28 (the `io.modelcontextprotocol/tasks` extension) only, so it drops
//! a `tools/call`'s `task` parameter, takes `tasks/get` and `tasks/cancel` for the
//! extension's, and has no place for the `tasks` capability or a tool's `execution`.
//!
//! - [`inbound`]: a handshake-era client's task requests get methods of the gateway's own
//!   ([`CALL`], [`GET`], [`CANCEL`]; `tasks/result` and `tasks/list` are rmcp's custom
//!   requests already), which reach the handler whole, as custom requests.
//! - [`outbound`]: a 2025-11-25 session's `initialize` result declares the `tasks`
//!   capability, and its tool lists say every tool may run as a task.
//!
//! Each transport calls these on a message's bytes ([`inbound_bytes`],
//! [`outbound_bytes`]) and parses only the few whose bytes could need it.

use serde_json::{json, Map, Value};

/// A `tools/call` with a `task` parameter, from a handshake-era client.
pub const CALL: &str = "wardgate/tasks/call";
/// `tasks/get` from a handshake-era client.
pub const GET: &str = "wardgate/tasks/get";
/// `tasks/cancel` from a handshake-era client.
pub const CANCEL: &str = "wardgate/tasks/cancel";
/// The one protocol revision that has these tasks.
pub const REVISION: &str = "2025-11-25";

/// The `_meta` key a 2026-07-28 request names its protocol version under: its `tasks/*` are
/// the extension's, and stay rmcp's.
const MODERN_KEY: &str = "io.modelcontextprotocol/protocolVersion";

fn is_modern(params: Option<&Value>) -> bool {
    params
        .and_then(|params| params.get("_meta"))
        .and_then(|meta| meta.get(MODERN_KEY))
        .is_some()
}

/// Give a handshake-era client's task request in `message` (one request, or a batch) its
/// gateway method. Whether anything changed.
pub fn inbound(message: &mut Value) -> bool {
    if let Value::Array(batch) = message {
        return batch
            .iter_mut()
            .fold(false, |changed, one| inbound(one) | changed);
    }
    let Some(object) = message.as_object_mut() else {
        return false;
    };
    if is_modern(object.get("params")) {
        return false;
    }
    let method = object.get("method").and_then(Value::as_str);
    let renamed = match method {
        Some("tools/call")
            if object
                .get("params")
                .and_then(|params| params.get("task"))
                .is_some_and(Value::is_object) =>
        {
            CALL
        }
        Some("tasks/get") => GET,
        Some("tasks/cancel") => CANCEL,
        _ => return false,
    };
    object.insert("method".into(), renamed.into());
    true
}

/// [`inbound`] on a message's bytes: the rewritten bytes, if any changed. Only bytes that
/// name a task are parsed.
pub fn inbound_bytes(bytes: &[u8]) -> Option<Vec<u8>> {
    if !contains(bytes, b"\"task") {
        return None;
    }
    let mut message: Value = serde_json::from_slice(bytes).ok()?;
    inbound(&mut message).then(|| serde_json::to_vec(&message).ok())?
}

/// The `tasks` capability of a gateway that runs `tools/call` as a task and lists and
/// cancels tasks.
fn capability() -> Value {
    json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } })
}

/// Declare tasks in a result for a 2025-11-25 session in `message` (an `initialize` result,
/// or a tool list). Whether anything changed.
pub fn outbound(message: &mut Value) -> bool {
    let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) else {
        return false;
    };
    if result.contains_key("serverInfo") {
        if result.get("protocolVersion").and_then(Value::as_str) != Some(REVISION) {
            return false;
        }
        let Some(capabilities) = result
            .get_mut("capabilities")
            .and_then(Value::as_object_mut)
        else {
            return false;
        };
        capabilities.insert("tasks".into(), capability());
        return true;
    }
    let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
        return false;
    };
    for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
        let execution = tool
            .entry("execution")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(execution) = execution.as_object_mut() {
            execution
                .entry("taskSupport")
                .or_insert_with(|| "optional".into());
        }
    }
    true
}

/// [`outbound`] on a message's bytes: the rewritten bytes, if any changed. Only results that
/// may be an `initialize` result or a tool list are parsed.
pub fn outbound_bytes(bytes: &[u8]) -> Option<Vec<u8>> {
    if !contains(bytes, b"\"serverInfo\"") && !contains(bytes, b"\"tools\"") {
        return None;
    }
    let mut message: Value = serde_json::from_slice(bytes).ok()?;
    outbound(&mut message).then(|| serde_json::to_vec(&message).ok())?
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handshake_era_task_request_gets_the_gateway_s_method_and_keeps_everything_else() {
        let mut call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "a__slow", "arguments": {"n": 1}, "task": {"ttl": 5000}}});
        assert!(inbound(&mut call));
        assert_eq!(call["method"], CALL);
        assert_eq!(call["params"]["task"]["ttl"], 5000);
        assert_eq!(call["params"]["arguments"]["n"], 1);
        for (method, renamed) in [("tasks/get", GET), ("tasks/cancel", CANCEL)] {
            let mut request = json!({"jsonrpc": "2.0", "id": 2, "method": method,
                "params": {"taskId": "a__x"}});
            assert!(inbound(&mut request));
            assert_eq!(request["method"], renamed);
        }
        let mut batch = json!([{"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": "x"}},
            {"jsonrpc": "2.0", "id": 4, "method": "tools/list"}]);
        assert!(inbound(&mut batch));
        assert_eq!(batch[0]["method"], GET);
        assert_eq!(batch[1]["method"], "tools/list");
    }

    #[test]
    fn other_requests_and_the_2026_extension_s_tasks_are_left_alone() {
        let untouched = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "task"}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t", "task": 5}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/result", "params": {"taskId": "x"}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": "x",
                "_meta": {MODERN_KEY: "2026-07-28"}}}),
            json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {}}}),
        ];
        for message in untouched {
            let mut rewritten = message.clone();
            assert!(!inbound(&mut rewritten), "{message}");
            assert_eq!(rewritten, message);
        }
        assert!(inbound_bytes(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).is_none());
        let bytes = inbound_bytes(
            br#"{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":"x"}}"#,
        )
        .unwrap();
        let rewritten: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(rewritten["method"], CANCEL);
    }

    #[test]
    fn a_2025_11_25_session_is_told_of_tasks_and_an_older_one_is_not() {
        let mut initialized = json!({"jsonrpc": "2.0", "id": 0, "result": {
            "protocolVersion": REVISION, "capabilities": {"tools": {}},
            "serverInfo": {"name": "wardgate", "version": "1"}}});
        assert!(outbound(&mut initialized));
        assert_eq!(
            initialized["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"],
            json!({})
        );
        let mut older = json!({"jsonrpc": "2.0", "id": 0, "result": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "serverInfo": {"name": "wardgate", "version": "1"}}});
        assert!(!outbound(&mut older));

        let mut listed = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [
            {"name": "a", "inputSchema": {"type": "object"}},
            {"name": "b", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}}]}});
        let bytes = outbound_bytes(listed.to_string().as_bytes()).unwrap();
        assert!(outbound(&mut listed));
        let rewritten: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(rewritten, listed);
        assert_eq!(
            listed["result"]["tools"][0]["execution"]["taskSupport"],
            "optional"
        );
        assert_eq!(
            listed["result"]["tools"][1]["execution"]["taskSupport"],
            "required"
        );
        assert!(outbound_bytes(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#).is_none());
    }
}
