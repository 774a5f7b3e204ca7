//! The gateway as an MCP client of one upstream connection: relays what the server sends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::lock::lock;

use rmcp::model::*;
use rmcp::service::{
    InboundStreamOrigin, NotificationContext, OriginatingRequestId, RequestContext,
};
use rmcp::{ClientHandler, ErrorData as McpError, RoleClient, RoleServer};
use tokio::sync::mpsc;

use crate::catalogue::listed_uri;
use crate::catalogue::server_of;
use crate::sessions::{Audience, SessionId, Sessions};
use crate::upstream::settle::Turn;

mod calls;
use calls::{Calls, InFlight};

/// What an upstream connection tells its supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamSignal {
    /// The server announced a changed tool, prompt or resource list.
    ListChanged { generation: u64 },
}

/// Who a server-to-client request or a server's log message is for.
enum Recipient {
    /// The one client session it can be for, and its request it belongs to.
    Client {
        session: SessionId,
        downstream_request: RequestId,
        /// The gateway's task the call runs for, if any.
        run: Option<Arc<crate::runs::Run>>,
    },
    /// No client session has a call in flight on this connection.
    Nobody,
    /// Calls of this many client sessions are in flight, and nothing says which one asked.
    Ambiguous(usize),
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
    sessions: Arc<Sessions>,
    /// A per-client instance's sessions: what its server says outside a call is theirs.
    audience: Option<Arc<Audience>>,
    signals: mpsc::UnboundedSender<UpstreamSignal>,
    /// Upstream progress token (rmcp picks its own) → the downstream client's token.
    progress: Mutex<HashMap<ProgressToken, (rmcp::Peer<RoleServer>, ProgressToken)>>,
    calls: Mutex<Calls>,
    next_call_id: std::sync::atomic::AtomicU64,
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
            sessions,
            audience,
            signals,
            progress: Mutex::default(),
            calls: Mutex::default(),
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

    /// Who a message from the server is for. A Streamable HTTP server's request says which
    /// of our requests' streams it came on (`origin`): that request's client. Otherwise,
    /// nothing on the wire relates it to a call (stdio, legacy SSE, or the standalone GET
    /// stream), so it can only be for a client if every call in flight on this connection
    /// is that one client's; with calls of several clients in flight it is ambiguous, and
    /// the gateway never guesses (one client's prompt or roots must not reach another).
    /// A request to a client is always handled while its call waits, so only calls in
    /// flight count.
    fn recipient(&self, origin: Option<&InboundStreamOrigin>) -> Recipient {
        let calls = lock(&self.calls);
        let live: Vec<&InFlight> = calls
            .live
            .iter()
            .filter(|entry| self.sessions.contains(entry.session))
            .collect();
        if let Some(InboundStreamOrigin::OutboundRequest(upstream)) = origin {
            if let Some(entry) = live
                .iter()
                .find(|entry| entry.upstream_request.as_ref() == Some(upstream))
            {
                return Recipient::Client {
                    session: entry.session,
                    downstream_request: entry.downstream_request.clone(),
                    run: entry.run.clone(),
                };
            }
        }
        let mut sessions: Vec<SessionId> = live.iter().map(|entry| entry.session).collect();
        sessions.sort_unstable();
        sessions.dedup();
        match (sessions.len(), live.last()) {
            (0, _) | (_, None) => Recipient::Nobody,
            (1, Some(last)) => Recipient::Client {
                session: last.session,
                downstream_request: last.downstream_request.clone(),
                run: last.run.clone(),
            },
            (many, _) => Recipient::Ambiguous(many),
        }
    }

    /// The connection of a per-client instance's one handshake-era client, if it has
    /// exactly one: whom a request outside any call can be for.
    fn sole_client(&self) -> Option<rmcp::Peer<RoleServer>> {
        let audience = self.audience.as_ref()?.sessions();
        let mut peers = audience
            .iter()
            .filter_map(|session| self.sessions.peer(*session));
        let peer = peers.next()?;
        peers.next().is_none().then_some(peer)
    }

    /// The session a server's log message belongs to, if exactly one can be named.
    /// What the server said during a request of `session` (log messages, progress) has
    /// reached the client's outbox and was sent: its answer may follow.
    pub(crate) async fn delivered(&self, session: SessionId) {
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

    /// Send a request to the client session it is for, from a fresh task, tagged with the
    /// downstream request it belongs to (so it lands on that request's HTTP stream).
    /// Relay a server's request to the client whose call caused it. `gone` is the server
    /// request's own token: cancelled when the server cancels it or its connection ends
    /// (the server died, or is being reconnected), and then the client is told to stop too.
    async fn relay(
        &self,
        what: &str,
        request: ServerRequest,
        origin: Option<&InboundStreamOrigin>,
        gone: tokio_util::sync::CancellationToken,
    ) -> Result<ClientResult, McpError> {
        let mut recipient = self.recipient(origin);
        if let (Recipient::Ambiguous(_), Some(InboundStreamOrigin::OutboundRequest(_))) =
            (&recipient, origin)
        {
            // The request arrived on our request's stream a moment before the call noted
            // the id it was sent with: give it that moment.
            for _ in 0..50 {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                recipient = self.recipient(origin);
                if !matches!(recipient, Recipient::Ambiguous(_)) {
                    break;
                }
            }
        }
        let (peer, downstream_request, run) = match recipient {
            Recipient::Client {
                session,
                downstream_request,
                run,
            } => match self.sessions.peer(session) {
                // A run's request goes on the stream of its client's `tasks/result`, if one
                // waits (its call's own request was answered with the task).
                Some(peer) => {
                    let waiting = run.as_ref().and_then(|run| run.result_request(session));
                    (peer, Some(waiting.unwrap_or(downstream_request)), run)
                }
                None if self.sessions.is_modern(session) => {
                    return Err(McpError::invalid_request(
                        format!(
                            "wardgate: server \"{}\" asked for {what}, but the client whose call it is speaks MCP 2026-07-28, which has no server-to-client requests; the gateway does not bridge such requests between eras yet. Call from a client on 2025-11-25 (initialize) to use this tool",
                            self.server
                        ),
                        None,
                    ));
                }
                None => return Err(self.nobody_waiting(what)),
            },
            // A per-client instance asking outside any call (after its client's roots
            // changed): its one connected client is the one it can be for.
            Recipient::Nobody => match self.sole_client() {
                Some(peer) => (peer, None, None),
                None => return Err(self.nobody_waiting(what)),
            },
            Recipient::Ambiguous(sessions) => {
                return Err(McpError::invalid_request(
                    format!(
                        "wardgate: server \"{}\" asked for {what} while calls from {sessions} client sessions were in flight on its shared connection, and nothing on that connection says which call asked; wardgate refuses rather than send one client's request to another. Ask again when only one client is calling it, or give the server `instances = \"per-client\"` in the gateway's config so each client has a process of its own (a Streamable HTTP server that sends the request on the call's own response stream is always answered)",
                        self.server
                    ),
                    None,
                ));
            }
        };
        let mut request = request;
        // A run's request names its task, which reads `input_required` until it is answered
        // (2025-11-25: the receiver MUST include the related-task metadata).
        let _asking = match run {
            Some(run) => {
                request.get_meta_mut().insert(
                    crate::runs::RELATED_TASK.into(),
                    serde_json::json!({ "taskId": run.id }),
                );
                Some(run.asking())
            }
            None => {
                // A server's own task (one the gateway follows for a plain call) is no task
                // the client knows.
                request.get_meta_mut().remove(crate::runs::RELATED_TASK);
                None
            }
        };
        if let Some(downstream_request) = downstream_request {
            request
                .extensions_mut()
                .insert(OriginatingRequestId(downstream_request));
        }
        let server = self.server.clone();
        let relayed = tokio::spawn(async move {
            let handle = peer
                .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
                .await?;
            let id = handle.id.clone();
            tokio::select! {
                result = handle.await_response() => result,
                _ = gone.cancelled() => {
                    let reason = format!("server \"{server}\", which asked, cancelled the request or went away");
                    let cancel = CancelledNotificationParam::new(Some(id), Some(reason.clone()));
                    let _ = peer.notify_cancelled(cancel).await;
                    Err(rmcp::ServiceError::McpError(McpError::internal_error(
                        format!("wardgate: {reason}"),
                        None,
                    )))
                }
            }
        });
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

    fn nobody_waiting(&self, what: &str) -> McpError {
        McpError::internal_error(
            format!(
                "wardgate: no client session is waiting on server \"{}\" to answer its {what} request",
                self.server
            ),
            None,
        )
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
