//! Gateway events: what operators and clients are told happened, as one closed enum.

use serde::Serialize;

/// Something worth telling: logged, sent to clients as `notifications/message` (logger
/// `wardgate`), and published to subscribers (the admin API).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum GatewayEvent {
    StatusChanged {
        server: String,
        from: String,
        to: String,
        reason: String,
    },
    /// Reconnection attempt `attempt` is due in `next_delay_ms`; `reason` says why the
    /// attempt before it failed (absent after a lost connection, which `status_changed` said).
    Reconnecting {
        server: String,
        attempt: u32,
        next_delay_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Online again after an outage, a crash, or an operator's reconnect or restart.
    Reconnected {
        server: String,
        /// Scheduled reconnection attempts it took (0: the first attempt succeeded).
        attempts: u32,
        /// What the server declared it can do on this connection.
        capabilities: serde_json::Value,
    },
    HealthDegraded {
        server: String,
        consecutive_failures: u32,
        /// The last probe's, call's or check's failure.
        last_error: Option<String>,
    },
    HealthRestored {
        server: String,
    },
    PermanentlyFailed {
        server: String,
        crashes: u32,
        reason: String,
    },
    ToolsChanged {
        tools: usize,
        prompts: usize,
        resources: usize,
    },
    /// A policy module was loaded or swapped in.
    PolicyLoaded {
        policy: String,
        path: String,
        module: String,
        version: String,
    },
    /// A policy module was refused; the previous one (or the builtin) keeps deciding.
    PolicyRejected {
        policy: String,
        path: String,
        reason: String,
    },
    /// A policy module failed a decision; the builtin answered it.
    PolicyFaulted {
        policy: String,
        decision: String,
        fault: String,
    },
    /// A changed config file was applied: these servers started, stopped or restarted.
    ConfigApplied {
        path: String,
        added: Vec<String>,
        removed: Vec<String>,
        modified: Vec<String>,
        /// `[gateway]` settings that changed but need a gateway restart.
        not_applied: Vec<String>,
    },
    /// A config file was refused; the gateway keeps serving the config it had.
    ConfigRejected {
        path: String,
        reason: String,
    },
    /// An operator command changed state (see `commands::CommandRecord`).
    Command {
        /// `cmd-N`; named apart from the number an event log gives each event.
        #[serde(rename = "command_id")]
        id: String,
        correlation_id: String,
        command: String,
        server: Option<String>,
        state: String,
        attempts: u32,
        error: Option<String>,
    },
}

impl GatewayEvent {
    /// Events that call for attention are warnings; the rest are information.
    pub fn is_warning(&self) -> bool {
        match self {
            GatewayEvent::StatusChanged { to, .. } => {
                matches!(
                    to.as_str(),
                    "offline" | "error" | "requires_reauth" | "permanently_failed"
                )
            }
            GatewayEvent::Command { state, .. } => state == "failed" || state == "expired",
            GatewayEvent::HealthDegraded { .. }
            | GatewayEvent::PermanentlyFailed { .. }
            | GatewayEvent::PolicyRejected { .. }
            | GatewayEvent::PolicyFaulted { .. }
            | GatewayEvent::ConfigRejected { .. } => true,
            _ => false,
        }
    }
}
