//! Relaying what a server asks (sampling, elicitation, roots) to the client whose call it is
//! for: who that is ([`Recipient`], found from the stream the request came on, the task it
//! names, or the calls in flight), and the request sent on, tied to a run of the
//! gateway's where it is one's.

use std::sync::Arc;

use rmcp::model::*;
use rmcp::service::{InboundStreamOrigin, OriginatingRequestId};
use rmcp::{ErrorData as McpError, RoleServer};

use super::{InFlight, Links};
use crate::lock::lock;
use crate::sessions::SessionId;

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

/// A server task followed for a run, known to its connection while this lives.
pub struct Following {
    links: Arc<Links>,
    server_task: String,
}

impl Drop for Following {
    fn drop(&mut self) {
        lock(&self.links.followed).remove(&self.server_task);
    }
}

impl Links {
    /// Note that the server's task `server_task` is followed for `run`, until the guard is
    /// dropped.
    pub fn following(self: &Arc<Self>, server_task: &str, run: Arc<crate::runs::Run>) -> Following {
        lock(&self.followed).insert(server_task.to_owned(), run);
        Following {
            links: self.clone(),
            server_task: server_task.to_owned(),
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
    /// A request that names a server task the gateway follows (`related`) is that task's
    /// run's, whatever else is in flight.
    fn recipient(&self, origin: Option<&InboundStreamOrigin>, related: Option<&str>) -> Recipient {
        let followed = related.and_then(|task| lock(&self.followed).get(task).cloned());
        let calls = lock(&self.calls);
        let live: Vec<&InFlight> = calls
            .live
            .iter()
            .filter(|entry| self.sessions.contains(entry.session))
            .collect();
        if let Some(run) = followed {
            if let Some(entry) = live.iter().rev().find(|entry| {
                entry
                    .run
                    .as_ref()
                    .is_some_and(|theirs| Arc::ptr_eq(theirs, &run))
            }) {
                return Recipient::Client {
                    session: entry.session,
                    downstream_request: entry.downstream_request.clone(),
                    run: entry.run.clone(),
                };
            }
        }
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

    /// Send a request to the client session it is for, from a fresh task, tagged with the
    /// downstream request it belongs to (so it lands on that request's HTTP stream).
    /// Relay a server's request to the client whose call caused it. `gone` is the server
    /// request's own token: cancelled when the server cancels it or its connection ends
    /// (the server died, or is being reconnected), and then the client is told to stop too.
    pub(super) async fn relay(
        &self,
        what: &str,
        request: ServerRequest,
        origin: Option<&InboundStreamOrigin>,
        gone: tokio_util::sync::CancellationToken,
    ) -> Result<ClientResult, McpError> {
        let related = request
            .get_meta()
            .get(crate::runs::RELATED_TASK)
            .and_then(|related| related.get("taskId"))
            .and_then(|task| task.as_str())
            .map(str::to_owned);
        let related = related.as_deref();
        let mut recipient = self.recipient(origin, related);
        if let (Recipient::Ambiguous(_), Some(InboundStreamOrigin::OutboundRequest(_))) =
            (&recipient, origin)
        {
            // The request arrived on our request's stream a moment before the call noted
            // the id it was sent with: give it that moment.
            for _ in 0..50 {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                recipient = self.recipient(origin, related);
                if !matches!(recipient, Recipient::Ambiguous(_)) {
                    break;
                }
            }
        }
        let (peer, session, downstream_request, run) = match recipient {
            Recipient::Client {
                session,
                downstream_request,
                run,
            } => match self.sessions.peer(session) {
                Some(peer) => (peer, Some(session), Some(downstream_request), run),
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
                Some(peer) => (peer, None, None, None),
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
        let mut downstream_request = downstream_request;
        let _asking = match run {
            Some(run) => {
                request.get_meta_mut().insert(
                    crate::runs::RELATED_TASK.into(),
                    serde_json::json!({ "taskId": run.id }),
                );
                let asking = run.asking();
                // A run's request goes on the stream of its client's `tasks/result` (its
                // call's own request was answered with the task).
                if let Some(session) = session {
                    if let Some(waiting) = run.result_stream(session).await {
                        downstream_request = Some(waiting);
                    }
                }
                Some(asking)
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
