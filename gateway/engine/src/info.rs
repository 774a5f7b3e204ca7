//! What operators read about each server: status, process, recovery counters, catalogue sizes.

use serde::Serialize;
use tokio::time::Instant;

use crate::catalogue::Catalogue;
use crate::config::TransportConfig;
use crate::slot::Slot;
use crate::status::{ServerStatus, StatusName};
use crate::upstream::oauth::TokenFile;

/// One server at a glance (`GET /servers`, `wardgate servers`, `wardgate__list_servers`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerInfo {
    pub name: String,
    /// `provisioning`, `connecting`, `discovering_tools`, `online`, `restarting`,
    /// `reconnecting`, `offline`, `error`, `requires_reauth`, `permanently_failed`, `disabled`.
    #[serde(serialize_with = "status_name")]
    pub status: StatusName,
    pub reason: Option<String>,
    /// When the status last changed (RFC 3339, milliseconds, UTC); a new attempt of the
    /// same status (`reconnecting` #1 to #2) is no change.
    pub status_since: String,
    /// Online, but health probes are failing.
    pub degraded: bool,
    /// The live connection's generation number.
    pub generation: Option<u64>,
    /// The protocol revision negotiated on the live connection (`2026-07-28` by
    /// `server/discover`, or a handshake-era one by `initialize`).
    pub protocol_version: Option<String>,
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
    /// When the last error happened (RFC 3339, milliseconds, UTC).
    pub last_error_at: Option<String>,
    /// Sizes of the last good snapshot (kept while the server is down).
    pub tools: usize,
    pub prompts: usize,
    pub resources: usize,
    /// The bound policy's name (`builtin` for the native one).
    pub policy: String,
    pub enabled: bool,
    /// When the server's credentials were last checked (a periodic credential check or an
    /// operator's health check; RFC 3339), and whether they were accepted (`None`: the check
    /// failed otherwise). Absent for a server without credentials a check can exercise.
    pub last_credential_check_at: Option<String>,
    pub credentials_accepted: Option<bool>,
    /// For a server that signs in with OAuth (`[servers.NAME.oauth]`): whether it is signed
    /// in, whether it waits for a sign-in, and the command that does it. `None` for others.
    pub sign_in: Option<SignIn>,
    /// For a server with an instance per client, how many run now; `None` for a server
    /// with one process (or connection) for every client.
    pub instances: Option<usize>,
}

/// One instance as `GET /servers/NAME`, `wardgate servers NAME` and the status page show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceInfo {
    /// Its status and history, as a server's (`name` is `SERVER#N`).
    #[serde(flatten)]
    pub info: ServerInfo,
    /// Whose it is: `session N`, or `client NAME` (an authenticated client's name, never
    /// its token or subject).
    pub owner: String,
    /// How long it has run, and how long since a request last used it (0 while one does).
    pub age_ms: u64,
    pub idle_ms: u64,
}

/// A server's OAuth sign-in, as `GET /servers` and the status page show it. Never a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignIn {
    /// Tokens are stored for the server's URL.
    pub signed_in: bool,
    /// Only a sign-in brings the server back: no tokens are stored, or its authorization
    /// server refused them (the server is `requires_reauth`).
    pub needed: bool,
    /// The command that signs it in (`wardgate --config FILE auth login NAME`).
    pub command: String,
}

/// One server with its tools (`GET /servers/NAME`). Serialized as the `ServerInfo` fields
/// with `tools` holding the list instead of the count (one key, never two).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerDetail {
    pub info: ServerInfo,
    pub tools: Vec<ToolInfo>,
    /// A server with an instance per client: each one (serialized as `instances`, in place
    /// of the count).
    pub instances: Option<Vec<InstanceInfo>>,
}

impl Serialize for ServerDetail {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut fields = match serde_json::to_value(&self.info) {
            Ok(serde_json::Value::Object(fields)) => fields,
            _ => serde_json::Map::new(),
        };
        let tools = serde_json::to_value(&self.tools).map_err(serde::ser::Error::custom)?;
        fields.insert("tools".to_owned(), tools);
        if let Some(instances) = &self.instances {
            let instances = serde_json::to_value(instances).map_err(serde::ser::Error::custom)?;
            fields.insert("instances".to_owned(), instances);
        }
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

/// One server at a glance, as its slot shows it now.
pub(crate) fn server_info(slot: &Slot, policy: &str) -> ServerInfo {
    let status = slot.status();
    let recovery = slot.recovery();
    let view = &recovery.view;
    let snapshot = slot.snapshot();
    let now_ms = recovery.millis(Instant::now());
    let online = status.is_online();
    let live = slot.live();
    let credential_check = slot.credential_check();
    ServerInfo {
        name: slot.name.clone(),
        status: status.kind(),
        reason: status.reason().map(str::to_owned),
        status_since: wall_clock(now_ms.saturating_sub(view.status_since_ms)),
        degraded: matches!(status, ServerStatus::Online { degraded: true }),
        generation: live.as_ref().map(|live| live.generation),
        protocol_version: live.as_ref().and_then(|live| {
            live.peer
                .peer_info()
                .map(|info| info.protocol_version.as_str().to_owned())
        }),
        transport: slot.transport().as_str().to_owned(),
        pid: recovery.pid.filter(|_| live.is_some()),
        uptime_ms: view
            .online_since_ms
            .filter(|_| online)
            .map(|since| now_ms.saturating_sub(since)),
        consecutive_failures: view.consecutive_failures,
        reconnect_attempt: view.reconnect_attempt.filter(|_| !online),
        next_retry_in_ms: view
            .next_retry_at_ms
            .filter(|at| !online && *at > now_ms)
            .map(|at| at - now_ms),
        crashes_in_window: view.crashes_in_window,
        last_error: view.last_error.clone(),
        last_error_at: view
            .last_error_at_ms
            .map(|at| wall_clock(now_ms.saturating_sub(at))),
        tools: snapshot.tools.len(),
        prompts: snapshot.prompts.len(),
        resources: snapshot.resources.len() + snapshot.templates.len(),
        policy: policy.to_owned(),
        enabled: !matches!(status, ServerStatus::Disabled),
        last_credential_check_at: credential_check
            .map(|check| humantime::format_rfc3339_millis(check.at).to_string()),
        credentials_accepted: credential_check.and_then(|check| check.accepted),
        sign_in: sign_in(slot, &status),
        instances: None,
    }
}

/// The sign-in of an OAuth server: one read of its token file.
fn sign_in(slot: &Slot, status: &ServerStatus) -> Option<SignIn> {
    let TransportConfig::StreamableHttp {
        url,
        oauth: Some(client),
        ..
    } = &slot.config.transport
    else {
        return None;
    };
    // The client credentials and enterprise-managed grants sign in by themselves: no one
    // needs to.
    if client.machine() {
        return None;
    }
    let signed_in = TokenFile::new(&slot.name, url).read().is_some();
    Some(SignIn {
        signed_in,
        needed: !signed_in || matches!(status, ServerStatus::RequiresReauth { .. }),
        command: client.login.clone(),
    })
}

/// The wall-clock time `ago_ms` milliseconds ago, as RFC 3339.
/// A status as its name.
fn status_name<S: serde::Serializer>(
    status: &StatusName,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(status.as_str())
}

pub(crate) fn wall_clock(ago_ms: u64) -> String {
    let at = std::time::SystemTime::now()
        .checked_sub(std::time::Duration::from_millis(ago_ms))
        .unwrap_or(std::time::UNIX_EPOCH);
    humantime::format_rfc3339_millis(at).to_string()
}

/// One server and its tools, as the catalogue names them.
pub(crate) fn server_detail(slot: &Slot, policy: &str, catalogue: &Catalogue) -> ServerDetail {
    let snapshot = slot.snapshot();
    let tools = catalogue
        .tools_of(&slot.name)
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
    ServerDetail {
        info: server_info(slot, policy),
        tools,
        instances: None,
    }
}
