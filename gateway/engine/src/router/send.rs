//! One attempt on the wire: the request sent on a live connection with its timeout (reset
//! by progress), the client's progress token mapped and its cancellation passed on, what of
//! its `_meta` travels upstream, and a closed stdio connection explained by its exit.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CancelledNotificationParam, ClientNotification, ClientRequest, ServerResult};
use rmcp::model::{ProgressToken, RequestId};
use rmcp::service::{PeerRequestOptions, RequestContext, RequestHandle, ServiceError};
use rmcp::{RoleClient, RoleServer};
use wardgate_policy::FailureKind;

use crate::failure::UpstreamError;
use crate::sessions::SessionId;
use crate::slot::Live;

/// How an attempt that got no answer ended.
pub(super) enum Sent {
    Cancelled,
    Failed(UpstreamError),
}

pub(super) async fn send(
    live: &Arc<Live>,
    session: SessionId,
    request: ClientRequest,
    timeout: Duration,
    context: &RequestContext<RoleServer>,
    span: &tracing::Span,
) -> Result<ServerResult, Sent> {
    let server = &live.links.server;
    let meta = passed_on(context, speaks_modern(live), span);
    let run = context
        .extensions
        .get::<crate::runs::ForRun>()
        .map(|run| run.0.clone());
    let in_flight = live.links.enter(session, context.id.clone(), run);
    let pending = match live.links.direct.get() {
        // A stdio server's request is written by this task, and its answer handed to it,
        // without rmcp's serve loop (`upstream::direct`).
        Some(direct) => {
            let version = live
                .peer
                .peer_info()
                .map(|info| info.protocol_version.clone())
                .filter(|version| !version.has_initialize());
            direct.prepare(request, meta, version).map(Pending::Direct)
        }
        None => {
            let options = PeerRequestOptions::with_timeout(timeout)
                .reset_timeout_on_progress()
                .with_meta(meta);
            live.peer
                .send_request_with_option(request, options)
                .await
                .map(Pending::Rmcp)
        }
    };
    let mut pending = match pending {
        Ok(pending) => pending,
        Err(error) => {
            let failure = UpstreamError::from_service(server, &error).reached(false);
            return Err(Sent::Failed(connection_failure(live, failure).await));
        }
    };
    let upstream_id = pending.id();
    if !span.is_disabled() {
        span.record("jsonrpc.request.id", upstream_id.to_string().as_str());
    }
    in_flight.sent_as(upstream_id.clone());
    let upstream_token = pending.progress_token();
    let mapped = match context.meta.get_progress_token() {
        Some(token) => {
            live.links
                .map_progress(upstream_token.clone(), context.peer.clone(), token);
            true
        }
        None => false,
    };
    // Expected (its id noted, its progress mapped) before the server can answer it.
    if let Err(error) = pending.write() {
        if mapped {
            live.links.unmap_progress(&upstream_token);
        }
        let failure = UpstreamError::from_service(server, &error).reached(false);
        return Err(Sent::Failed(connection_failure(live, failure).await));
    }
    // rmcp tells the server of a timeout itself; a direct request is told here, after the
    // select, so a client's cancellation cannot make it twice.
    let direct = matches!(pending, Pending::Direct(_));
    let mut tell_timeout = false;
    let outcome = tokio::select! {
        result = pending.answer(timeout) => result.map_err(|error| {
            tell_timeout = direct && matches!(error, ServiceError::Timeout { .. });
            Sent::Failed(UpstreamError::from_service(server, &error))
        }),
        _ = context.ct.cancelled() => {
            cancel(live, upstream_id.clone(), "cancelled by the client").await;
            Err(Sent::Cancelled)
        }
    };
    if tell_timeout {
        cancel(live, upstream_id, "request timeout").await;
    }
    // What the server said during the request goes out before its answer (and before its
    // progress token is forgotten).
    if !matches!(outcome, Err(Sent::Cancelled)) {
        live.links.delivered(session).await;
    }
    if mapped {
        live.links.unmap_progress(&upstream_token);
    }
    match outcome {
        Err(Sent::Failed(failure)) => Err(Sent::Failed(connection_failure(live, failure).await)),
        other => other,
    }
}

/// A request on its way: through rmcp's serve loop, or written directly.
enum Pending {
    Rmcp(RequestHandle<RoleClient>),
    Direct(crate::upstream::direct::Sent),
}

impl Pending {
    fn id(&self) -> RequestId {
        match self {
            Pending::Rmcp(handle) => handle.id.clone(),
            Pending::Direct(sent) => sent.id.clone(),
        }
    }

    /// A direct request is written here (rmcp's was sent when it was made).
    fn write(&mut self) -> Result<(), ServiceError> {
        match self {
            Pending::Rmcp(_) => Ok(()),
            Pending::Direct(sent) => sent.write(),
        }
    }

    fn progress_token(&self) -> ProgressToken {
        match self {
            Pending::Rmcp(handle) => handle.progress_token.clone(),
            Pending::Direct(sent) => sent.progress_token.clone(),
        }
    }

    /// The answer, within `timeout` of the request or of its last progress (rmcp's tells
    /// the server of a timeout; a direct one's caller does).
    async fn answer(self, timeout: Duration) -> Result<ServerResult, ServiceError> {
        match self {
            Pending::Rmcp(handle) => handle.await_response().await,
            Pending::Direct(sent) => sent.answer(timeout).await,
        }
    }
}

/// Tell the server the request `id` is no longer waited for.
async fn cancel(live: &Live, id: rmcp::model::RequestId, reason: &str) {
    let cancel = CancelledNotificationParam::new(Some(id), Some(reason.into()));
    let _ = live
        .peer
        .send_notification(ClientNotification::CancelledNotification(
            rmcp::model::Notification::new(cancel),
        ))
        .await;
}

/// Whether the live connection speaks 2026-07-28, where a request carries its client's
/// capabilities.
fn speaks_modern(live: &Live) -> bool {
    live.peer
        .peer_info()
        .is_some_and(|info| !info.protocol_version.has_initialize())
}

/// What of a client request's `_meta` travels upstream with it: trace context (the
/// gateway's own attempt `span`'s with telemetry on, else the client's W3C `traceparent`
/// and `tracestate`; `baggage` only when configured), the log level a 2026-07-28 client asked for,
/// and, to a 2026-07-28 server (`modern`), the client's capabilities: a 2026-07-28
/// client's as it sent them with the request, a handshake-era client's as it declared them
/// in `initialize`, so the server asks only what the client can answer and refuses
/// (-32021) what needs more. The protocol version and client info are the gateway's own on
/// each connection (rmcp adds them), and progress tokens are mapped, not copied.
fn passed_on(
    context: &RequestContext<RoleServer>,
    modern: bool,
    span: &tracing::Span,
) -> rmcp::model::RequestMetaObject {
    let meta = &context.meta;
    let mut upstream = rmcp::model::RequestMetaObject::new();
    if modern {
        let capabilities = meta.client_capabilities().or_else(|| {
            context
                .peer
                .peer_info()
                .map(|info| info.capabilities.clone())
        });
        if let Some(capabilities) = capabilities {
            upstream.set_client_capabilities(capabilities);
        }
    }
    let headers = context
        .extensions
        .get::<http::request::Parts>()
        .map(|parts| &parts.headers);
    crate::telemetry::pass_on(span, meta, headers, &mut upstream);
    if let Some(level) = meta.log_level() {
        upstream.set_log_level(level);
    }
    upstream
}

/// A stdio connection that closed most likely closed because the process died: say how.
async fn connection_failure(live: &Live, failure: UpstreamError) -> UpstreamError {
    if failure.kind != FailureKind::ConnectionClosed {
        return failure;
    }
    if let Some(reason) = live.stream_fault.as_ref().and_then(|fault| fault.get()) {
        return UpstreamError::new(&live.links.server, FailureKind::Protocol, reason.clone())
            .reached(true);
    }
    let Some(exit) = &live.exit else {
        return failure;
    };
    let mut exit = exit.clone();
    // EOF on stdout usually comes a moment before the exit status can be reaped.
    let exited =
        tokio::time::timeout(Duration::from_millis(250), exit.wait_for(Option::is_some)).await;
    match exited {
        Ok(Ok(end)) => end
            .as_ref()
            .expect("waited for Some")
            .error(&live.links.server),
        _ => failure,
    }
}
