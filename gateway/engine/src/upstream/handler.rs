//! The gateway as an MCP client of one upstream connection: relays what the server sends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::lock::lock;

use rmcp::model::*;
use rmcp::service::{InboundStreamOrigin, NotificationContext, RequestContext};
use rmcp::{ClientHandler, ErrorData as McpError, RoleClient, RoleServer};
use tokio::sync::mpsc;

use crate::catalogue::listed_uri;
use crate::catalogue::server_of;
use crate::sessions::{Audience, SessionId, Sessions};
use crate::upstream::settle::Turn;

mod calls;
mod relay;
use calls::{Calls, InFlight};
pub use relay::Following;

/// What an upstream connection tells its supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamSignal {
    /// The server announced a changed tool, prompt or resource list.
    ListChanged { generation: u64 },
}

/// State shared by a connection's handler and the calls running over it.
pub struct Links {
    pub server: String,
    /// The server's prefix (`catalogue::Naming`): what its resource URIs are listed under.
    pub prefix: String,
    pub generation: u64,
    /// What the server's earlier connections taught about opening the next one.
    pub learned: Arc<super::Learned>,
    /// A request's log messages and progress, relayed before its answer.
    pub settle: Arc<super::settle::Settle>,
    /// Which of the server's tools it runs as tasks of its own (2025-11-25).
    pub tool_tasks: Arc<super::tool_tasks::ToolTasks>,
    /// A stdio server's stdin and its answers, for calls sent directly.
    pub direct: std::sync::OnceLock<super::direct::Direct>,
    sessions: Arc<Sessions>,
    /// A per-client instance's sessions: what its server says outside a call is theirs.
    audience: Option<Arc<Audience>>,
    signals: mpsc::UnboundedSender<UpstreamSignal>,
    /// Upstream progress token (rmcp picks its own) → the downstream client's token.
    progress: Mutex<HashMap<ProgressToken, (rmcp::Peer<RoleServer>, ProgressToken)>>,
    calls: Mutex<Calls>,
    next_call_id: std::sync::atomic::AtomicU64,
    /// The server's own tasks (2025-11-25) the gateway follows for its runs, by the
    /// server's task id: a question that names one is that run's.
    followed: Mutex<HashMap<String, Arc<crate::runs::Run>>>,
}

impl Links {
    /// The server announced a changed tool, prompt or resource list (during initialize
    /// too, before the supervisor registered the connection: the signal waits in the
    /// channel until it does).
    pub fn list_changed(&self) {
        let _ = self.signals.send(UpstreamSignal::ListChanged {
            generation: self.generation,
        });
    }

    /// The server's resource `uri` changed: its subscribers hear it under its listed URI.
    pub fn resource_updated(&self, uri: &str) {
        self.sessions
            .resource_updated_to(&listed_uri(&self.prefix, uri), self.audience.as_deref());
    }
}

impl Links {
    pub fn new(
        server: &str,
        prefix: &str,
        generation: u64,
        learned: Arc<super::Learned>,
        sessions: Arc<Sessions>,
        audience: Option<Arc<Audience>>,
        signals: mpsc::UnboundedSender<UpstreamSignal>,
    ) -> Arc<Links> {
        Arc::new(Links {
            server: server.to_owned(),
            prefix: prefix.to_owned(),
            generation,
            learned,
            settle: Default::default(),
            tool_tasks: Default::default(),
            direct: Default::default(),
            sessions,
            audience,
            signals,
            progress: Mutex::default(),
            calls: Mutex::default(),
            next_call_id: Default::default(),
            followed: Mutex::default(),
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

    /// Note a downstream request running on this connection (for the gateway's task `run`,
    /// if it is one's); the guard forgets it.
    pub fn enter(
        self: &Arc<Self>,
        session: SessionId,
        downstream_request: RequestId,
        run: Option<Arc<crate::runs::Run>>,
    ) -> InFlightGuard {
        let call_id = self
            .next_call_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.calls).live.push(InFlight {
            call_id,
            session,
            downstream_request,
            upstream_request: None,
            run,
        });
        InFlightGuard {
            links: self.clone(),
            call_id,
        }
    }

    /// The session a server's log message belongs to, if exactly one can be named.
    /// What the server said during a request of `session` (log messages, progress) has
    /// reached the client's outbox and was sent: its answer may follow.
    pub async fn delivered(&self, session: SessionId) {
        self.settle.settled().await;
        self.sessions.flushed(session).await;
    }

    /// Log messages may be handled after their call's answer (rmcp runs each notification
    /// in a task of its own), so calls answered within `LOG_GRACE` count too.
    pub(crate) fn log_owner(&self) -> Option<SessionId> {
        let mut calls = lock(&self.calls);
        calls.forget_old(tokio::time::Instant::now());
        let mut owners = calls
            .live
            .iter()
            .map(|entry| entry.session)
            .chain(calls.finished_per_session.keys().copied())
            .filter(|session| self.sessions.contains(*session));
        let first = owners.next()?;
        owners.all(|session| session == first).then_some(first)
    }
}

pub struct InFlightGuard {
    links: Arc<Links>,
    call_id: u64,
}

impl InFlightGuard {
    /// The request went upstream with this id: server requests on its stream are its client's.
    pub fn sent_as(&self, upstream_request: RequestId) {
        if let Some(entry) = lock(&self.links.calls)
            .live
            .iter_mut()
            .find(|entry| entry.call_id == self.call_id)
        {
            entry.upstream_request = Some(upstream_request);
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        lock(&self.links.calls).finish(self.call_id);
    }
}

/// rmcp's client handler for one upstream connection.
#[derive(Clone)]
pub struct UpstreamHandler {
    pub links: Arc<Links>,
}

pub(crate) fn client_config() -> ClientConfig {
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

#[expect(
    deprecated,
    reason = "sampling, roots and logging are current in the protocol versions the gateway speaks (SEP-2577)"
)]
impl ClientHandler for UpstreamHandler {
    fn get_info(&self) -> ClientConfig {
        client_config()
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        let origin = context.extensions.get::<InboundStreamOrigin>();
        match self
            .links
            .relay("sampling", request, origin, context.ct.clone())
            .await?
        {
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
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        let origin = context.extensions.get::<InboundStreamOrigin>();
        match self
            .links
            .relay("elicitation", request, origin, context.ct.clone())
            .await?
        {
            ClientResult::ElicitResult(result) => Ok(result),
            _ => Err(McpError::internal_error(
                "the client answered elicitation with the wrong result type",
                None,
            )),
        }
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, McpError> {
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        let origin = context.extensions.get::<InboundStreamOrigin>();
        match self
            .links
            .relay("roots", request, origin, context.ct.clone())
            .await
        {
            Ok(ClientResult::ListRootsResult(result)) => Ok(result),
            Ok(_) => Err(McpError::internal_error(
                "the client answered roots/list with the wrong result type",
                None,
            )),
            // Outside any call there is no client to ask, and with several clients calling
            // there is none to pick: no roots is the honest answer, never another's.
            Err(_) => Ok(ListRootsResult::default()),
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        self.links
            .settle
            .my_turn(context.extensions.get::<Turn>())
            .await;
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
        self.links.settle.handled();
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        self.links
            .settle
            .my_turn(context.extensions.get::<Turn>())
            .await;
        // A client hears its instance as the server it configured.
        let server = server_of(&self.links.server);
        let logger = match &params.logger {
            Some(logger) => format!("{server}/{logger}"),
            None => server.to_owned(),
        };
        tracing::debug!(target: "wardgate::upstream::log", server = %self.links.server, level = ?params.level, "{}", crate::log_text::Untrusted(&params.data.to_string()));
        let owner = self.links.log_owner();
        self.links.sessions.log_from_server(
            server,
            owner,
            self.links.audience.as_deref(),
            params.level,
            &logger,
            params.data,
        );
        self.links.settle.handled();
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.links.resource_updated(&params.uri);
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
        self.links.list_changed();
    }
}

#[cfg(test)]
mod tests {
    use super::calls::LOG_GRACE;
    use super::*;

    fn call(call_id: u64, session: SessionId) -> InFlight {
        InFlight {
            call_id,
            session,
            downstream_request: RequestId::Number(call_id as i64),
            upstream_request: None,
            run: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn answered_calls_are_remembered_per_session_for_the_grace_only() {
        let mut calls = Calls::default();
        for id in 0..3 {
            calls.live.push(call(id, 7));
        }
        calls.live.push(call(3, 8));
        calls.finish(0);
        calls.finish(3);
        assert_eq!(
            calls.live.iter().map(|c| c.call_id).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(calls.finished_per_session, HashMap::from([(7, 1), (8, 1)]));
        tokio::time::advance(LOG_GRACE / 2).await;
        calls.finish(1);
        calls.finish(99); // not in flight: nothing changes
        assert_eq!(calls.finished_per_session, HashMap::from([(7, 2), (8, 1)]));
        // The first two are past the grace; the third is not yet.
        tokio::time::advance(LOG_GRACE / 2).await;
        calls.forget_old(tokio::time::Instant::now());
        assert_eq!(calls.finished_per_session, HashMap::from([(7, 1)]));
        tokio::time::advance(LOG_GRACE).await;
        calls.forget_old(tokio::time::Instant::now());
        assert!(calls.finished.is_empty() && calls.finished_per_session.is_empty());
        assert_eq!(calls.live.len(), 1);
    }
}
