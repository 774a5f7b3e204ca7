//! Which of a server's tools it runs as tasks of its own (2025-11-25's
//! `execution.taskSupport`, under its `tasks.requests.tools.call` capability), which rmcp's
//! model drops: read off the bytes of its `initialize` result and tool lists as each
//! transport receives them.
//!
//! - stdio: `stdio::ServerOutput`, line by line;
//! - Streamable HTTP: `unreadable::Readable`, event by event, and a JSON body by
//!   [`http::Listing`], which makes a `tools/list` POST itself;
//! - legacy SSE: `sse::events`, event by event.
//!
//! Only a message whose bytes name `inputSchema` (every tool list does) or `serverInfo`
//! (every `initialize` result does) is parsed. A connection's lists are learned afresh with
//! the connection (it lives in its `Links`). The revision says a client MUST NOT call a
//! tool as a task unless the server declared the capability; where the gateway could not
//! read the `initialize` result (a JSON body over Streamable HTTP, which rmcp reads
//! itself), it goes by the tools' `taskSupport` alone.

pub mod http;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{LazyLock, Mutex};

use memchr::memmem::Finder;
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
    /// Whether any tool was ever listed as running as a task: without one, a call's lookup
    /// takes no lock.
    any: AtomicBool,
    /// What the `initialize` result said of `tasks.requests.tools.call`: 0 until it was
    /// read, then [`DECLARED`] or [`ABSENT`].
    capability: AtomicU8,
}

const DECLARED: u8 = 1;
const ABSENT: u8 = 2;

/// The most tools one connection's answers are kept for: past it (a server that renames
/// its tools without end), what was kept is let go and learned again from the lists that
/// follow.
const MAX_TOOLS: usize = 10_000;

/// What every tool list's bytes hold, and every `initialize` result's.
const LIST_MARKER: &[u8] = b"\"inputSchema\"";
const INITIALIZE_MARKER: &[u8] = b"\"serverInfo\"";

impl ToolTasks {
    /// Learn from one message's bytes (or a batch's): nothing is parsed unless they could be
    /// a tool list.
    pub fn learn(&self, message: &[u8]) {
        // Built once: each upstream message of every connection is searched.
        static LIST: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(LIST_MARKER));
        static INITIALIZE: LazyLock<Finder<'static>> =
            LazyLock::new(|| Finder::new(INITIALIZE_MARKER));
        if LIST.find(message).is_none() && INITIALIZE.find(message).is_none() {
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
        let Some(result) = message.get("result") else {
            return;
        };
        if result.get("serverInfo").is_some() && result.get("protocolVersion").is_some() {
            let declared = result
                .pointer("/capabilities/tasks/requests/tools/call")
                .is_some_and(Value::is_object);
            let capability = if declared { DECLARED } else { ABSENT };
            self.capability.store(capability, Ordering::Relaxed);
        }
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
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
            if known.len() >= MAX_TOOLS && !known.contains_key(name) {
                known.clear();
            }
            if support != TaskSupport::Forbidden {
                self.any.store(true, Ordering::Relaxed);
            }
            known.insert(name.to_owned(), support);
        }
    }

    /// What the server said of `tool`.
    pub fn of(&self, tool: &str) -> TaskSupport {
        if !self.any.load(Ordering::Relaxed) || self.capability.load(Ordering::Relaxed) == ABSENT {
            return TaskSupport::Forbidden;
        }
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
        tasks.learn(
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"tools"}]}}"#,
        );
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

        // Under an `initialize` result without the capability, no tool runs as a task.
        tasks.learn(
            br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25",
                "capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}"#,
        );
        assert_eq!(tasks.of("b"), TaskSupport::Forbidden);
        tasks.learn(
            br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25",
                "capabilities":{"tasks":{"requests":{"tools":{"call":{}}}}},
                "serverInfo":{"name":"s","version":"1"}}}"#,
        );
        assert_eq!(tasks.of("b"), TaskSupport::Optional);
    }
}
