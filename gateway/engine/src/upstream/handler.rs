//! The gateway as an MCP client of one upstream connection: relays what the server sends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::*;
use rmcp::service::{NotificationContext, OriginatingRequestId, RequestContext};
use rmcp::{ClientHandler, ErrorData as McpError, RoleClient, RoleServer};
use tokio::sync::mpsc;

use crate::catalogue::namespace_uri;
use crate::sessions::{SessionId, Sessions};

/// What an upstream connection tells its supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamSignal {
    /// The server announced a changed tool, prompt or resource list.
    ListChanged { generation: u64 },
}

/// A downstream request in flight on this connection: where server-to-client requests
/// made while it runs are sent.
#[derive(Debug, Clone)]
struct InFlight {
    call_id: u64,
    session: SessionId,
    downstream_request: RequestId,
}

/// State shared by a connection's handler and the calls running over it.
pub struct Links {
    pub server: String,
    pub generation: u64,
    sessions: Arc<Sessions>,
    signals: mpsc::UnboundedSender<UpstreamSignal>,
    /// Upstream progress token (rmcp picks its own) → the downstream client's token.
    progress: Mutex<HashMap<ProgressToken, (rmcp::Peer<RoleServer>, ProgressToken)>>,
    in_flight: Mutex<Vec<InFlight>>,
    next_call_id: std::sync::atomic::AtomicU64,
}

impl Links {
    pub fn new(
        server: &str,
        generation: u64,
        sessions: Arc<Sessions>,
        signals: mpsc::UnboundedSender<UpstreamSignal>,
    ) -> Arc<Links> {
        Arc::new(Links {
            server: server.to_owned(),
            generation,
            sessions,
            signals,
            progress: Mutex::default(),
            in_flight: Mutex::default(),
            next_call_id: Default::default(),
        })
    }

    /// Route progress for `upstream_token` to `peer` under the client's own token.
    pub fn map_progress(
        &self,
        upstream_token: ProgressToken,
        peer: rmcp::Peer<RoleServer>,
        token: ProgressToken,
    ) {
        lock(&self.progress).insert(upstream_token, (peer, token));
    }

    pub fn unmap_progress(&self, upstream_token: &ProgressToken) {
        lock(&self.progress).remove(upstream_token);
    }

    /// Note a downstream request running on this connection; the guard forgets it.
    pub fn enter(
        self: &Arc<Self>,
        session: SessionId,
        downstream_request: RequestId,
    ) -> InFlightGuard {
        let call_id = self
            .next_call_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.in_flight).push(InFlight {
            call_id,
            session,
            downstream_request,
        });
        InFlightGuard {
            links: self.clone(),
            call_id,
        }
    }

    /// The client session a server-to-client request belongs to: the most recent request
    /// in flight on this connection whose session is still connected. stdio and SSE carry
    /// no association on the wire, so this is the best evidence there is.
    fn originating(&self) -> Option<(rmcp::Peer<RoleServer>, RequestId)> {
        let in_flight = lock(&self.in_flight).clone();
        in_flight.iter().rev().find_map(|entry| {
            self.sessions
                .peer(entry.session)
                .map(|peer| (peer, entry.downstream_request.clone()))
        })
    }

    /// Send a request to the originating client session from a fresh task, tagged with
    /// the downstream request it belongs to (so it lands on that request's HTTP stream).
    async fn relay(&self, what: &str, request: ServerRequest) -> Result<ClientResult, McpError> {
        let Some((peer, downstream_request)) = self.originating() else {
            return Err(McpError::internal_error(
                format!("wardgate: no client session is waiting on server \"{}\" to answer its {what} request", self.server),
                None,
            ));
        };
        let mut request = request;
        request
            .extensions_mut()
            .insert(OriginatingRequestId(downstream_request));
        let relayed = tokio::spawn(async move { peer.send_request(request).await });
        match relayed.await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(rmcp::ServiceError::McpError(error))) => Err(error),
            Ok(Err(error)) => Err(McpError::internal_error(
                format!("wardgate: relaying {what} to the client failed: {error}"),
                None,
            )),
            Err(error) => Err(McpError::internal_error(
                format!("wardgate: relaying {what} failed: {error}"),
                None,
            )),
        }
    }
}

pub struct InFlightGuard {
    links: Arc<Links>,
    call_id: u64,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        lock(&self.links.in_flight).retain(|entry| entry.call_id != self.call_id);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// rmcp's client handler for one upstream connection.
#[derive(Clone)]
pub struct UpstreamHandler {
    pub links: Arc<Links>,
}

fn client_config() -> ClientConfig {
    let mut capabilities = ClientCapabilities::default();
    // The gateway relays these to whichever client made the call; whether that client
    // supports them is only known per request, so a refusal comes back as an error then.
    capabilities.sampling = Some(Default::default());
    let mut roots = RootsCapabilities::default();
    roots.list_changed = Some(true);
    capabilities.roots = Some(roots);
    capabilities.elicitation = Some(Default::default());
    ClientConfig::new(
        capabilities,
        Implementation::new("wardgate", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(ProtocolVersion::V_2025_11_25)
}

#[allow(deprecated)]
impl ClientHandler for UpstreamHandler {
    fn get_info(&self) -> ClientConfig {
        client_config()
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        match self.links.relay("sampling", request).await? {
            ClientResult::CreateMessageResult(result) => Ok(*result),
            _ => Err(McpError::internal_error(
                "the client answered sampling with the wrong result type",
                None,
            )),
        }
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match self.links.relay("elicitation", request).await? {
            ClientResult::ElicitResult(result) => Ok(result),
            _ => Err(McpError::internal_error(
                "the client answered elicitation with the wrong result type",
                None,
            )),
        }
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, McpError> {
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        match self.links.relay("roots", request).await {
            Ok(ClientResult::ListRootsResult(result)) => Ok(result),
            Ok(_) => Err(McpError::internal_error(
                "the client answered roots/list with the wrong result type",
                None,
            )),
            // Outside any call there is no client to ask: no roots is the honest answer.
            Err(_) => Ok(ListRootsResult::default()),
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let target = lock(&self.links.progress)
            .get(&params.progress_token)
            .cloned();
        if let Some((peer, token)) = target {
            let mut params = params;
            params.progress_token = token;
            if let Err(error) = peer.notify_progress(params).await {
                tracing::debug!(server = %self.links.server, "could not forward progress: {error}");
            }
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let logger = match &params.logger {
            Some(logger) => format!("{}/{logger}", self.links.server),
            None => self.links.server.clone(),
        };
        tracing::debug!(target: "wardgate::upstream::log", server = %self.links.server, level = ?params.level, "{}", params.data);
        self.links.sessions.log(params.level, &logger, params.data);
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.links
            .sessions
            .resource_updated(&namespace_uri(&self.links.server, &params.uri));
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.signal_list_changed();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.signal_list_changed();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.signal_list_changed();
    }
}

impl UpstreamHandler {
    fn signal_list_changed(&self) {
        // May arrive during initialize, before the supervisor has registered the
        // connection: the signal waits in the channel until it does.
        let _ = self.links.signals.send(UpstreamSignal::ListChanged {
            generation: self.links.generation,
        });
    }
}
