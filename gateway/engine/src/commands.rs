//! Operator commands on a prioritized queue: one path for the admin API, the MCP admin tools,
//! the config watcher, SIGHUP and (later) a fleet controller.
//!
//! A command goes pending → acknowledged (taken off the queue) → executing → completed |
//! failed, or expired when it is not started within the TTL. A failure the target calls
//! retryable is tried again with exponential backoff (base, 2×base, 4×base) up to
//! `max_retries` times; a permanent one (unknown server, invalid config) fails at once.
//!
//! Execution: one executor task runs high, normal and low commands one at a time, highest
//! priority first and FIFO within a priority. An `immediate` command never waits behind a
//! running one: it starts at once, beside it, in a task of its own. That keeps the promise
//! that immediate goes first without letting a long configure hold it up.

mod queue;
#[cfg(test)]
mod tests;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use queue::{CommandQueue, QueueSettings, Routed};

/// What a command asks for. Serialized with its kind under `type`, snake_case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Command {
    /// Re-read the config file and apply the difference.
    Configure,
    /// Start a stopped (disabled or killed) server.
    Spawn {
        server: String,
    },
    /// Stop a server's process and keep it stopped until spawned or enabled.
    Kill {
        server: String,
    },
    Restart {
        server: String,
    },
    Reconnect {
        server: String,
    },
    Enable {
        server: String,
    },
    Disable {
        server: String,
    },
    /// Probe the server now (connectivity, and credentials where it has them).
    HealthCheck {
        server: String,
    },
    /// Reload every policy module from its file.
    ReloadPolicies,
    /// Bind `path` (a module file on the gateway's machine) as policy `policy`'s shadow, or
    /// with no path unbind it.
    ShadowPolicy {
        policy: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
    },
    /// Make policy `policy`'s shadow its live module.
    PromoteShadow {
        policy: String,
    },
    /// Swap policy `policy`'s previous module back in.
    RollbackPolicy {
        policy: String,
    },
}

impl Command {
    /// The `type` name, as serialized.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Configure => "configure",
            Command::Spawn { .. } => "spawn",
            Command::Kill { .. } => "kill",
            Command::Restart { .. } => "restart",
            Command::Reconnect { .. } => "reconnect",
            Command::Enable { .. } => "enable",
            Command::Disable { .. } => "disable",
            Command::HealthCheck { .. } => "health_check",
            Command::ReloadPolicies => "reload_policies",
            Command::ShadowPolicy { .. } => "shadow_policy",
            Command::PromoteShadow { .. } => "promote_shadow",
            Command::RollbackPolicy { .. } => "rollback_policy",
        }
    }

    /// The server a command is about, if any.
    pub fn server(&self) -> Option<&str> {
        match self {
            Command::Spawn { server }
            | Command::Kill { server }
            | Command::Restart { server }
            | Command::Reconnect { server }
            | Command::Enable { server }
            | Command::Disable { server }
            | Command::HealthCheck { server } => Some(server),
            Command::Configure
            | Command::ReloadPolicies
            | Command::ShadowPolicy { .. }
            | Command::PromoteShadow { .. }
            | Command::RollbackPolicy { .. } => None,
        }
    }
}

/// Higher runs first: immediate > high > normal > low.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    Low,
    #[default]
    Normal,
    High,
    Immediate,
}

/// Where a command is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandState {
    Pending,
    Acknowledged,
    Executing,
    Completed,
    Failed,
    Expired,
}

impl CommandState {
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            CommandState::Completed | CommandState::Failed | CommandState::Expired
        )
    }

    /// The state named `text` (as [`CommandState::as_str`] writes it), if any.
    pub fn parse(text: &str) -> Option<CommandState> {
        [
            CommandState::Pending,
            CommandState::Acknowledged,
            CommandState::Executing,
            CommandState::Completed,
            CommandState::Failed,
            CommandState::Expired,
        ]
        .into_iter()
        .find(|state| state.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CommandState::Pending => "pending",
            CommandState::Acknowledged => "acknowledged",
            CommandState::Executing => "executing",
            CommandState::Completed => "completed",
            CommandState::Failed => "failed",
            CommandState::Expired => "expired",
        }
    }
}

/// What a submitter sends (`POST /commands`): the command's fields flattened beside
/// `priority` and `correlation_id`, e.g. `{"type":"restart","server":"github","priority":"high"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRequest {
    #[serde(flatten)]
    pub command: Command,
    #[serde(default)]
    pub priority: Priority,
    /// Ties the command to whatever asked for it; generated when not given.
    #[serde(default)]
    pub correlation_id: Option<String>,
}

impl CommandRequest {
    pub fn new(command: Command, priority: Priority) -> CommandRequest {
        CommandRequest {
            command,
            priority,
            correlation_id: None,
        }
    }
}

/// One command as the queue reports it. Timestamps are RFC 3339 (UTC, milliseconds).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandRecord {
    /// `cmd-N`, unique for the life of the queue.
    pub id: String,
    pub correlation_id: String,
    pub command: Command,
    pub priority: Priority,
    pub state: CommandState,
    /// Executions started so far (the first one included).
    pub attempts: u32,
    pub created_at: String,
    pub acknowledged_at: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// When a failed attempt will be tried again.
    pub next_attempt_at: Option<String>,
    pub result: Option<Value>,
    /// The last failure's message (kept while a retry is pending).
    pub error: Option<String>,
}

/// Why one execution failed, and whether trying again could help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandError {
    pub message: String,
    /// False for failures no retry can fix (unknown server, invalid config).
    pub retryable: bool,
}

impl CommandError {
    /// A failure that may pass on a later try (a reconnect that failed, a busy server).
    pub fn transient(message: impl Into<String>) -> CommandError {
        CommandError {
            message: message.into(),
            retryable: true,
        }
    }

    /// A failure that no retry can fix.
    pub fn permanent(message: impl Into<String>) -> CommandError {
        CommandError {
            message: message.into(),
            retryable: false,
        }
    }
}

/// What carries commands out (the binary's `Control`; tests script one). A boxed future
/// keeps the trait usable as `dyn CommandTarget`.
pub trait CommandTarget: Send + Sync + 'static {
    fn execute<'a>(&'a self, command: &'a Command) -> BoxFuture<'a, Result<Value, CommandError>>;

    /// Told of every state change (after it happened); the binary turns them into events.
    fn observe(&self, _record: &CommandRecord) {}
}
