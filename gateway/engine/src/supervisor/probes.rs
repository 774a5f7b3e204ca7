//! Health probes on one live connection, the mechanism only: MCP `ping`, or `tools/list`
//! for a server without ping. The recovery machine decides when to probe and what an
//! outcome means.

use std::time::Duration;

use rmcp::{Peer, RoleClient};
use tokio::time::Instant;
use wardgate_recovery::Next;

use crate::failure::UpstreamError;
use crate::slot::millis;

/// What one probe found; `failure` keeps its kind (refused credentials are no health
/// question).
pub(super) struct Probe {
    pub(super) succeeded: bool,
    pub(super) latency_ms: u64,
    pub(super) failure: Option<UpstreamError>,
}

/// The mechanism of health probes on one live connection: MCP `ping`, or `tools/list` for
/// servers without ping. The machine decides when and what the outcome means.
pub(super) struct Prober {
    pub(super) next_at: Instant,
    timeout: Duration,
    use_list: bool,
}

impl Prober {
    pub(super) fn new(ready: Next) -> Prober {
        let mut prober = Prober {
            next_at: Instant::now(),
            timeout: Duration::from_secs(1),
            use_list: false,
        };
        match ready {
            Next::Serve {
                probe_in_ms,
                probe_timeout_ms,
            } => prober.plan(probe_in_ms, probe_timeout_ms),
            // The machine always plans a probe when a connection comes online; if it did
            // not, probe rarely rather than never.
            _ => prober.plan(60_000, 5_000),
        }
        prober
    }

    pub(super) fn plan(&mut self, probe_in_ms: u64, timeout_ms: u64) {
        self.next_at = Instant::now() + Duration::from_millis(probe_in_ms);
        self.timeout = Duration::from_millis(timeout_ms);
    }

    /// Probe once: whether it succeeded, how long it took, and why it failed.
    pub(super) async fn probe(&mut self, server: &str, peer: &Peer<RoleClient>) -> Probe {
        let started = Instant::now();
        let mut outcome = self.ask(peer).await;
        if let Err(rmcp::ServiceError::McpError(error)) = &outcome {
            if error.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND && !self.use_list {
                // The server does not implement ping: tools/list proves as much.
                self.use_list = true;
                outcome = self.ask(peer).await;
            }
        }
        let latency_ms = millis(started.elapsed());
        Probe {
            succeeded: outcome.is_ok(),
            latency_ms,
            failure: outcome
                .err()
                .map(|error| UpstreamError::from_service(server, &error)),
        }
    }

    async fn ask(&self, peer: &Peer<RoleClient>) -> Result<(), rmcp::ServiceError> {
        let request = if self.use_list {
            rmcp::model::ClientRequest::ListToolsRequest(rmcp::model::ListToolsRequest::default())
        } else {
            rmcp::model::ClientRequest::PingRequest(rmcp::model::PingRequest::default())
        };
        let options = rmcp::service::PeerRequestOptions::with_timeout(self.timeout);
        peer.send_request_with_option(request, options)
            .await?
            .await_response()
            .await
            .map(|_| ())
    }
}
