//! Streamable HTTP sessions that expire when idle, where an open stream counts as use.
//!
//! rmcp's `LocalSessionManager` expired a session 300 s after its last message, even while
//! the client held its GET stream open and kept receiving pings: a client that only
//! listened lost its session. This wraps the sessions (`sessions::Sessions`, which have no
//! expiry of their own): every request and every open stream (the GET stream, a call's
//! response stream) keeps a session in use, and a reaper closes sessions with no open
//! stream and no request for `idle`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use std::task::{Context, Poll};
use std::time::Duration;
use wardgate_engine::lock::lock;

use futures::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::{SessionId, SessionManager};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::sessions::Sessions;

/// How long a session may go without a request or an open stream (rmcp's default).
pub const IDLE: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
struct Use {
    last: Instant,
    open_streams: usize,
    /// The client that opened it, once the HTTP layer has claimed it.
    owner: Option<Arc<str>>,
}

type Uses = Arc<Mutex<HashMap<SessionId, Use>>>;

/// A stream to a client that has not taken what it was given for this long is cut: what is
/// sent on a full stream waits, and the session's notifications (its outbox) wait with it.
pub const STALL: Duration = Duration::from_secs(10);

/// [`Sessions`] that expire only when really idle.
pub struct IdleExpiry {
    inner: Sessions,
    /// Every open stream's [`Flow`], to cut the ones whose clients stopped reading.
    flows: Mutex<Vec<std::sync::Weak<Flow>>>,
    /// Sessions a stream of which was cut: the next stream the client opens says so first.
    cut: Mutex<std::collections::HashSet<SessionId>>,
    /// Put in front of every session id opened here (a fleet member's [`session_tag`]), so
    /// another member can tell whose a session is; empty outside a fleet.
    tag: String,
    uses: Uses,
    /// Sessions being opened (an `initialize` admitted, its session not yet claimed), by
    /// client: they count against the caps like open ones.
    opening: Mutex<HashMap<Arc<str>, usize>>,
}

/// Which cap refused a new session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionCap {
    Total(usize),
    PerClient(usize),
}

tokio::task_local! {
    /// The client (its `Identity::key`) whose request is being handled: a session created
    /// meanwhile is its own.
    pub static OWNER: Arc<str>;
}

/// A session being opened for a client, counted against the caps until the request that
/// opens it has been handled (the session, if one came of it, is counted as open by then).
pub struct Opening {
    manager: Arc<IdleExpiry>,
    owner: Arc<str>,
}

impl Drop for Opening {
    fn drop(&mut self) {
        let mut opening = lock(&self.manager.opening);
        if let Some(count) = opening.get_mut(&self.owner) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                opening.remove(&self.owner);
            }
        }
    }
}

impl IdleExpiry {
    /// Sessions unused for `idle` are closed until `stop` fires.
    /// Session ids begin with `tag`.
    pub fn start(idle: Duration, tag: String, stop: CancellationToken) -> Arc<IdleExpiry> {
        let manager = Arc::new(IdleExpiry {
            inner: Sessions::default(),
            flows: Mutex::default(),
            cut: Mutex::default(),
            tag,
            uses: Arc::default(),
            opening: Mutex::default(),
        });
        let watcher = Arc::downgrade(&manager);
        let watching = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = watching.cancelled() => return,
                    _ = tokio::time::sleep(STALL / 4) => {}
                }
                let Some(manager) = watcher.upgrade() else {
                    return;
                };
                manager.cut_stalled(STALL);
            }
        });
        let reaper = Arc::downgrade(&manager);
        tokio::spawn(async move {
            let period = (idle / 4).max(Duration::from_millis(10));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(period) => {}
                }
                let Some(manager) = reaper.upgrade() else {
                    return;
                };
                manager.reap(idle).await;
            }
        });
        manager
    }

    async fn reap(&self, idle: Duration) {
        self.inner.tidy();
        let expired = |usage: &Use| usage.open_streams == 0 && usage.last.elapsed() >= idle;
        let candidates: Vec<SessionId> = lock(&self.uses)
            .iter()
            .filter(|(_, usage)| expired(usage))
            .map(|(id, _)| id.clone())
            .collect();
        for id in candidates {
            // Asked again as it goes: a request may have come for it meanwhile.
            {
                let mut uses = lock(&self.uses);
                if !uses.get(&id).is_some_and(expired) {
                    continue;
                }
                uses.remove(&id);
            }
            lock(&self.cut).remove(&id);
            tracing::debug!(session = %id, "closing a Streamable HTTP session idle for {}", humantime::format_duration(idle));
            let _ = self.inner.close_session(&self.inner_id(&id)).await;
        }
        // Sessions rmcp ended by itself (their handler quit) leave no entry behind.
        let known: Vec<SessionId> = lock(&self.uses).keys().cloned().collect();
        for id in known {
            if !self
                .inner
                .has_session(&self.inner_id(&id))
                .await
                .unwrap_or(false)
            {
                lock(&self.uses).remove(&id);
                lock(&self.cut).remove(&id);
            }
        }
    }

    /// Cut every stream whose client has not taken what it was given for `stall`.
    fn cut_stalled(&self, stall: Duration) {
        let mut flows = lock(&self.flows);
        flows.retain(|flow| {
            let Some(flow) = flow.upgrade() else {
                return false;
            };
            let waiting = *lock(&flow.waiting_since);
            if waiting.is_some_and(|since| since.elapsed() >= stall) {
                tracing::info!(session = %flow.session, "a client has not read its stream for {}; closing that stream (its session stays; the client may open it again)", humantime::format_duration(stall));
                // Dropping rmcp's receiver lets the session go on without it; the stream no
                // longer keeps its session in use, even before the HTTP layer lets go of it.
                lock(&flow.stream).take();
                flow.release(&self.uses);
                lock(&self.cut).insert(flow.session.clone());
                return false;
            }
            true
        });
    }

    /// Room for one more session of `owner`, within `max_total` sessions and `per_client`
    /// of its own (`None`: no per-client cap for it).
    pub fn open(
        self: &Arc<Self>,
        owner: &Arc<str>,
        max_total: usize,
        per_client: Option<usize>,
    ) -> Result<Opening, SessionCap> {
        let uses = lock(&self.uses);
        let mut opening = lock(&self.opening);
        let pending: usize = opening.values().sum();
        if uses.len() + pending >= max_total {
            return Err(SessionCap::Total(max_total));
        }
        if let Some(cap) = per_client {
            let own = uses
                .values()
                .filter(|usage| usage.owner.as_deref() == Some(&**owner))
                .count()
                + opening.get(owner).copied().unwrap_or(0);
            if own >= cap {
                return Err(SessionCap::PerClient(cap));
            }
        }
        *opening.entry(owner.clone()).or_default() += 1;
        Ok(Opening {
            manager: self.clone(),
            owner: owner.clone(),
        })
    }

    /// The client that owns session `id`: `None` for a session unknown here, `Some(None)`
    /// for one no client has claimed.
    pub fn owner(&self, id: &str) -> Option<Option<Arc<str>>> {
        lock(&self.uses).get(id).map(|usage| usage.owner.clone())
    }

    /// Sessions open now.
    pub fn count(&self) -> usize {
        lock(&self.uses).len()
    }

    /// rmcp's id for the session a client knows as `id`; an id without this gateway's tag
    /// names no session here.
    fn inner_id(&self, id: &SessionId) -> SessionId {
        match id.strip_prefix(&*self.tag) {
            Some(inner) if !self.tag.is_empty() => SessionId::from(inner),
            Some(_) => id.clone(),
            None => SessionId::from(""),
        }
    }

    fn touch(&self, id: &SessionId) {
        if let Some(usage) = lock(&self.uses).get_mut(id) {
            usage.last = Instant::now();
        }
    }

    /// `stream`, counted as use of session `id` until it ends, and cut if its client stops
    /// reading it.
    fn held(&self, id: &SessionId, stream: BoxedSse) -> Held {
        if let Some(usage) = lock(&self.uses).get_mut(id) {
            usage.open_streams += 1;
            usage.last = Instant::now();
        }
        let flow = Arc::new(Flow {
            counted: std::sync::atomic::AtomicBool::new(true),
            stream: Mutex::new(Some(stream)),
            waiting_since: Mutex::new(None),
            session: id.clone(),
        });
        lock(&self.flows).push(Arc::downgrade(&flow));
        Held {
            flow,
            uses: self.uses.clone(),
        }
    }
}

/// `stream`, first telling the client, if one of its session's streams was cut, that what
/// was sent on it meanwhile was lost.
fn after_notice(manager: &IdleExpiry, id: &SessionId, stream: BoxedSse) -> BoxedSse {
    if !lock(&manager.cut).remove(id) {
        return stream;
    }
    #[expect(
        deprecated,
        reason = "logging is current in the handshake-era revisions whose sessions have streams"
    )]
    let notice = {
        let params = rmcp::model::LoggingMessageNotificationParam::new(
            rmcp::model::LoggingLevel::Warning,
            serde_json::json!({
                "message": format!(
                    "a stream of this session was closed after {} in which the client read nothing; notifications sent meanwhile were lost (counted in wardgate_notifications_dropped)",
                    humantime::format_duration(STALL)
                ),
            }),
        )
        .with_logger("wardgate");
        ServerJsonRpcMessage::notification(
            rmcp::model::ServerNotification::LoggingMessageNotification(
                rmcp::model::Notification::new(params),
            ),
        )
    };
    Box::pin(
        futures::stream::once(std::future::ready(ServerSseMessage::from_message(notice)))
            .chain(stream),
    )
}

/// A stream to a client, as the stall watch sees it.
struct Flow {
    /// Whether it still counts among its session's open streams (until it ends or is cut).
    counted: std::sync::atomic::AtomicBool,
    /// rmcp's stream; taken (and dropped) when the stream is cut.
    stream: Mutex<Option<BoxedSse>>,
    /// Since when a message handed to the HTTP layer has waited for the client to take it
    /// (the next one is asked for only once there is room on the connection).
    waiting_since: Mutex<Option<Instant>>,
    session: SessionId,
}

/// A response or GET stream that keeps its session in use while it is open.
pub struct Held {
    flow: Arc<Flow>,
    uses: Uses,
}

impl Flow {
    /// No longer counted among its session's open streams, once.
    fn release(&self, uses: &Uses) {
        if !self
            .counted
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        if let Some(usage) = lock(uses).get_mut(&self.session) {
            usage.open_streams = usage.open_streams.saturating_sub(1);
            usage.last = Instant::now();
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.flow.release(&self.uses);
    }
}

impl Stream for Held {
    type Item = ServerSseMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ServerSseMessage>> {
        let mut stream = lock(&self.flow.stream);
        let Some(inner) = stream.as_mut() else {
            // Cut: the client was not reading.
            return Poll::Ready(None);
        };
        let polled = inner.as_mut().poll_next(cx);
        *lock(&self.flow.waiting_since) = match &polled {
            Poll::Ready(Some(_)) => Some(Instant::now()),
            _ => None,
        };
        polled
    }
}

type BoxedSse = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync + 'static>>;

impl SessionManager for IdleExpiry {
    type Error = <Sessions as SessionManager>::Error;
    type Transport = <Sessions as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        let id = if self.tag.is_empty() {
            id
        } else {
            SessionId::from(format!("{}{id}", self.tag))
        };
        lock(&self.uses).insert(
            id.clone(),
            Use {
                last: Instant::now(),
                open_streams: 0,
                owner: OWNER.try_with(Arc::clone).ok(),
            },
        );
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.touch(id);
        self.inner
            .initialize_session(&self.inner_id(id), message)
            .await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(&self.inner_id(id)).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        lock(&self.uses).remove(id);
        lock(&self.cut).remove(id);
        self.inner.close_session(&self.inner_id(id)).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // In use from now: the reaper does not close it while the stream is being made.
        self.touch(id);
        let stream = self
            .inner
            .create_stream(&self.inner_id(id), message)
            .await?;
        Ok(self.held(id, Box::pin(stream)))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        self.inner.accept_message(&self.inner_id(id), message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        let stream = self
            .inner
            .create_standalone_stream(&self.inner_id(id))
            .await?;
        Ok(self.held(id, after_notice(self, id, Box::pin(stream))))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        let stream = self.inner.resume(&self.inner_id(id), last_event_id).await?;
        Ok(self.held(id, after_notice(self, id, Box::pin(stream))))
    }
}
