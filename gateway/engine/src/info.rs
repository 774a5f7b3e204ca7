//! What operators read about each server: status, process, recovery counters, catalogue sizes.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::config::BUILTIN_POLICY;
use crate::gateway::{Gateway, Slot};
use crate::status::ServerStatus;

/// What a supervisor knows beyond the status, kept on the slot for readers.
#[derive(Debug, Clone, Default)]
pub(crate) struct SlotStats {
    /// The stdio server's process id while it serves.
    pub pid: Option<u32>,
    /// When the live connection went online.
    pub connected_at: Option<Instant>,
    /// Failed connection attempts since the last success, or failed health probes in a row
    /// while serving.
    pub consecutive_failures: u32,
    /// The reconnect attempt scheduled, while one is.
    pub reconnect_attempt: Option<u32>,
    /// When the next connection attempt (reconnect or restart after a crash) is due.
    pub next_retry_at: Option<Instant>,
    /// Crashes the supervisor remembers (the last hour; the policy judges the budget).
    pub crashes_in_window: u32,
    pub last_error: Option<String>,
}

/// One server at a glance (`GET /servers`, `wardgate servers`, `wardgate__list_servers`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerInfo {
    pub name: String,
    /// `provisioning`, `connecting`, `discovering_tools`, `online`, `restarting`,
    /// `reconnecting`, `offline`, `error`, `requires_reauth`, `permanently_failed`, `disabled`.
    pub status: String,
    pub reason: Option<String>,
    /// Online, but health probes are failing.
    pub degraded: bool,
    /// The live connection's generation number.
    pub generation: Option<u64>,
    /// `stdio`, `streamable-http` or `sse`.
    pub transport: String,
    pub pid: Option<u32>,
    /// How long the live connection has been online.
    pub uptime_ms: Option<u64>,
    pub consecutive_failures: u32,
    pub reconnect_attempt: Option<u32>,
    pub next_retry_in_ms: Option<u64>,
    pub crashes_in_window: u32,
    pub last_error: Option<String>,
    /// Sizes of the last good snapshot (kept while the server is down).
    pub tools: usize,
    pub prompts: usize,
    pub resources: usize,
    /// The bound policy's name (`builtin` for the native one).
    pub policy: String,
    pub enabled: bool,
}

/// One server with its tools (`GET /servers/NAME`). Serialized as the `ServerInfo` fields
/// with `tools` holding the list instead of the count (one key, never two).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerDetail {
    pub info: ServerInfo,
    pub tools: Vec<ToolInfo>,
}

impl Serialize for ServerDetail {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut fields = match serde_json::to_value(&self.info) {
            Ok(serde_json::Value::Object(fields)) => fields,
            _ => serde_json::Map::new(),
        };
        let tools = serde_json::to_value(&self.tools).map_err(serde::ser::Error::custom)?;
        fields.insert("tools".to_owned(), tools);
        fields.serialize(serializer)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolInfo {
    /// The name clients call it by.
    pub name: String,
    /// The name the server gave it.
    pub original_name: String,
    pub description: Option<String>,
}

impl Gateway {
    /// Every configured server, sorted by name.
    pub fn servers(&self) -> Vec<ServerInfo> {
        self.slots()
            .iter()
            .map(|slot| self.server_info(slot))
            .collect()
    }

    /// One server and its tools; `None` when no server has that name.
    pub fn server(&self, name: &str) -> Option<ServerDetail> {
        let slot = self.slot(name)?;
        let snapshot = slot.snapshot();
        let tools = self
            .catalogue()
            .tools_of(name)
            .into_iter()
            .map(|(exposed, original)| ToolInfo {
                description: snapshot
                    .tools
                    .iter()
                    .find(|tool| tool.name == original)
                    .and_then(|tool| tool.description.as_ref().map(|d| d.to_string())),
                name: exposed,
                original_name: original,
            })
            .collect();
        Some(ServerDetail {
            info: self.server_info(&slot),
            tools,
        })
    }

    fn server_info(&self, slot: &Slot) -> ServerInfo {
        let status = slot.status();
        let stats = slot.stats();
        let snapshot = slot.snapshot();
        let now = Instant::now();
        let online = status.is_online();
        ServerInfo {
            name: slot.name.clone(),
            status: status.name().to_owned(),
            reason: status.reason().map(str::to_owned),
            degraded: matches!(status, ServerStatus::Online { degraded: true }),
            generation: slot.live().map(|live| live.generation),
            transport: slot.transport().as_str().to_owned(),
            pid: stats.pid.filter(|_| slot.live().is_some()),
            uptime_ms: stats
                .connected_at
                .filter(|_| online)
                .map(|at| millis(now.saturating_duration_since(at))),
            consecutive_failures: stats.consecutive_failures,
            reconnect_attempt: stats.reconnect_attempt.filter(|_| !online),
            next_retry_in_ms: stats
                .next_retry_at
                .filter(|at| !online && *at > now)
                .map(|at| millis(at - now)),
            crashes_in_window: stats.crashes_in_window,
            last_error: stats.last_error,
            tools: snapshot.tools.len(),
            prompts: snapshot.prompts.len(),
            resources: snapshot.resources.len() + snapshot.templates.len(),
            policy: slot
                .config
                .effective_policy(&self.config().gateway)
                .unwrap_or(BUILTIN_POLICY)
                .to_owned(),
            enabled: !matches!(status, ServerStatus::Disabled),
        }
    }
}

fn millis(duration: Duration) -> u64 {
    duration.as_millis().min(u64::MAX as u128) as u64
}
