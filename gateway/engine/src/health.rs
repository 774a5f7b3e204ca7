//! One health check on demand (the `health_check` command): probe a server's live connection
//! now, the way the supervisor's probes do, and say whether its credentials were accepted.

use std::time::Duration;

use rmcp::model::{ClientRequest, ErrorCode, ListToolsRequest, PingRequest};
use rmcp::service::PeerRequestOptions;
use serde::Serialize;
use tokio::time::Instant;

use crate::config::TransportConfig;
use crate::gateway::ActionError;
use crate::slot::Slot;

/// What one on-demand probe found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthReport {
    pub server: String,
    pub ok: bool,
    pub latency_ms: u64,
    /// `ping`, or `tools/list` for a server that does not implement ping.
    pub method: String,
    /// The server is configured with credentials (secret env variables or headers).
    pub has_credentials: bool,
    /// The probe was an authenticated request and the server accepted it (`None`: the
    /// server has no credentials to validate).
    pub credentials_validated: Option<bool>,
    /// Why the probe failed.
    pub error: Option<String>,
}

/// Probe `slot`'s server once now: MCP `ping`, falling back to `tools/list` when the server
/// does not implement ping (never a second `initialize`). Fails when the server has no
/// live connection, naming its status and what to do.
pub(crate) async fn check(slot: &Slot, timeout: Duration) -> Result<HealthReport, ActionError> {
    let server = slot.name.as_str();
    {
        let live = match slot.live() {
            Some(live) if slot.status().is_online() => live,
            _ => {
                let status = slot.status();
                return Err(ActionError::Refused(format!(
                    "server \"{server}\" is {status}, so there is no connection to check; {}",
                    status.remedy(server)
                )));
            }
        };
        let has_credentials = match &slot.config.transport {
            TransportConfig::Stdio { env, .. } => !env.is_empty(),
            TransportConfig::StreamableHttp { headers, .. }
            | TransportConfig::Sse { headers, .. } => !headers.is_empty(),
        };
        let started = Instant::now();
        let ask = |request: ClientRequest| {
            let peer = live.peer.clone();
            async move {
                peer.send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
                    .await?
                    .await_response()
                    .await
                    .map(|_| ())
            }
        };
        let mut method = "ping";
        let mut outcome = ask(ClientRequest::PingRequest(PingRequest::default())).await;
        if let Err(rmcp::ServiceError::McpError(error)) = &outcome {
            if error.code == ErrorCode::METHOD_NOT_FOUND {
                method = "tools/list";
                outcome = ask(ClientRequest::ListToolsRequest(ListToolsRequest::default())).await;
            }
        }
        let ok = outcome.is_ok();
        Ok(HealthReport {
            server: server.to_owned(),
            ok,
            latency_ms: started.elapsed().as_millis() as u64,
            method: method.to_owned(),
            has_credentials,
            credentials_validated: has_credentials.then_some(ok),
            error: outcome.err().map(|error| error.to_string()),
        })
    }
}
