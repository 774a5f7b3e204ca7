//! Which of a server's tools it runs as tasks of its own (2025-11-25's
//! `execution.taskSupport`), which rmcp's model drops: read off the bytes of its tool lists
//! as each transport receives them.
//!
//! - stdio: `stdio::ServerOutput`, line by line;
//! - Streamable HTTP: `unreadable::Readable`, event by event, and a JSON body by
//!   [`http::Listing`], which makes a `tools/list` POST itself;
//! - legacy SSE: `sse::events`, event by event.
//!
//! Only a message whose bytes name `inputSchema` (every tool list does) is parsed. A
//! connection's list is learned afresh with the connection (it lives in its `Links`).

pub mod http;

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

use crate::lock::lock;

/// What a tool's `execution.taskSupport` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSupport {
    /// `"forbidden"`, absent, or a tool not (yet) listed: never called as a task.
    Forbidden,
    /// It may be called as a task.
    Optional,
    /// It must be: a plain call is refused.
    Required,
}

/// The task support of one connection's tools, by the server's own names.
#[derive(Debug, Default)]
pub struct ToolTasks {
    tools: Mutex<HashMap<String, TaskSupport>>,
}

/// What every tool list's bytes hold.
const MARKER: &[u8] = b"\"inputSchema\"";

impl ToolTasks {
    /// Learn from one message's bytes (or a batch's): nothing is parsed unless they could be
    /// a tool list.
    pub fn learn(&self, message: &[u8]) {
        if memchr::memmem::find(message, MARKER).is_none() {
            return;
        }
        let Ok(value) = serde_json::from_slice::<Value>(message) else {
            return;
        };
        match &value {
            Value::Array(batch) => batch.iter().for_each(|one| self.learn_one(one)),
            one => self.learn_one(one),
        }
    }

    fn learn_one(&self, message: &Value) {
        let Some(tools) = message
            .get("result")
            .and_then(|result| result.get("tools"))
            .and_then(Value::as_array)
        else {
            return;
        };
        let mut known = lock(&self.tools);
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let support = match tool
                .get("execution")
                .and_then(|execution| execution.get("taskSupport"))
                .and_then(Value::as_str)
            {
                Some("required") => TaskSupport::Required,
                Some("optional") => TaskSupport::Optional,
                _ => TaskSupport::Forbidden,
            };
            known.insert(name.to_owned(), support);
        }
    }

    /// What the server said of `tool`.
    pub fn of(&self, tool: &str) -> TaskSupport {
        lock(&self.tools)
            .get(tool)
            .copied()
            .unwrap_or(TaskSupport::Forbidden)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_list_s_task_support_is_learned_and_other_messages_are_not_parsed() {
        let tasks = ToolTasks::default();
        tasks.learn(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"tools"}]}}"#);
        tasks.learn(
            br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[
                {"name":"a","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}},
                {"name":"b","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"}},
                {"name":"c","inputSchema":{"type":"object"},"execution":{"taskSupport":"forbidden"}},
                {"name":"d","inputSchema":{"type":"object"}}]}}"#,
        );
        assert_eq!(tasks.of("a"), TaskSupport::Required);
        assert_eq!(tasks.of("b"), TaskSupport::Optional);
        assert_eq!(tasks.of("c"), TaskSupport::Forbidden);
        assert_eq!(tasks.of("d"), TaskSupport::Forbidden);
        assert_eq!(tasks.of("unlisted"), TaskSupport::Forbidden);
        // A later list says otherwise: it wins.
        tasks.learn(
            br#"[{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"a","inputSchema":{}}]}}]"#,
        );
        assert_eq!(tasks.of("a"), TaskSupport::Forbidden);
        assert_eq!(tasks.of("b"), TaskSupport::Optional);
    }
}
