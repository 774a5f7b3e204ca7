//! Resource subscriptions on the upstream side: the first client subscribing to a URI
//! subscribes upstream (a handshake-era server by `resources/subscribe`, a 2026-07-28 one
//! on the gateway's listen stream), the last one leaving unsubscribes.

use rmcp::model::*;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

use super::{Access, SessionHandler, LISTEN_ACKNOWLEDGED};
use wardgate_engine::gateway::Slot;
use wardgate_engine::log_text::Untrusted;
use wardgate_engine::sessions::SessionId;

#[expect(
    deprecated,
    reason = "resources/subscribe is how handshake-era upstreams are subscribed to (SEP-2577)"
)]
impl SessionHandler {
    /// Subscribe `session` to `uri`; the first subscriber subscribes upstream.
    pub(super) async fn subscribe_upstream(
        &self,
        session: SessionId,
        uri: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let access = Access::of(context, &self.gateway);
        if !access.resource(uri) {
            return Err(access.refusal("resource", uri));
        }
        let (server, original) = self.resource_route(uri)?;
        let slot = &self.routed(&server, context)?;
        if let Some(of) = &slot.instance {
            // A 2026-07-28 listen stream has a session of its own: it hears the updates.
            of.audience.add(session);
        }
        // The first subscriber subscribes upstream; for a client's own instance, the first
        // of the sessions it serves.
        let first = self.gateway.sessions.subscribe(session, uri);
        let first = match slot.instance {
            Some(_) => !slot.wants_updates(&original),
            None => first,
        };
        if !first {
            return Ok(());
        }
        slot.want_updates(&original);
        // A 2026-07-28 server is asked on the connection's listen stream, which follows
        // the slot's subscriptions; a handshake-era one by `resources/subscribe`.
        if slot.listens() {
            return self.listened(slot, session, uri, &original).await;
        }
        let upstream = SubscribeRequestParams::new(original.clone());
        let forwarded = ClientRequest::SubscribeRequest(SubscribeRequest::new(upstream));
        if let Err(error) = self
            .forward_read_only(slot, session, forwarded, context)
            .await
        {
            // The server was down, and came back speaking 2026-07-28: it is listened to.
            if slot.listens() {
                return self.listened(slot, session, uri, &original).await;
            }
            slot.drop_updates(&original);
            self.gateway.sessions.unsubscribe(session, uri);
            return Err(error);
        }
        Ok(())
    }

    /// The subscription to a 2026-07-28 server's `original` is in place once its listen
    /// stream was acknowledged for it; if that does not come, the subscription is undone
    /// and the client hears why.
    pub(super) async fn listened(
        &self,
        slot: &Slot,
        session: SessionId,
        uri: &str,
        original: &str,
    ) -> Result<(), McpError> {
        if slot.until_listened(original, LISTEN_ACKNOWLEDGED).await {
            return Ok(());
        }
        slot.drop_updates(original);
        self.gateway.sessions.unsubscribe(session, uri);
        Err(McpError::internal_error(
            format!(
                "server \"{}\" speaks MCP 2026-07-28, and its subscriptions/listen stream did not take {} within {}: it may not offer resource subscriptions",
                slot.name,
                Untrusted(original),
                humantime::format_duration(LISTEN_ACKNOWLEDGED)
            ),
            None,
        ))
    }

    /// Unsubscribe `session` from `uri`; the last subscriber unsubscribes upstream.
    pub(super) async fn unsubscribe_upstream(
        &self,
        session: SessionId,
        uri: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let (server, original) = self.resource_route(uri)?;
        let last = self.gateway.sessions.unsubscribe(session, uri);
        // An instance that has ended has nothing to undo: none is started for it.
        let Some(slot) = &self.running(&server, context)? else {
            return Ok(());
        };
        // For a client's own instance, the last of the sessions it serves.
        let last = match &slot.instance {
            Some(of) => !self
                .gateway
                .sessions
                .any_subscribed(&of.audience.sessions(), uri),
            None => last,
        };
        if !last {
            return Ok(());
        }
        slot.drop_updates(&original);
        if slot.listens() {
            return Ok(());
        }
        let upstream = UnsubscribeRequestParams::new(original);
        let forwarded = ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(upstream));
        self.forward_read_only(slot, session, forwarded, context)
            .await
            .map(|_| ())
    }
}
