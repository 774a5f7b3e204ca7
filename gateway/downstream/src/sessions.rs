//! Streamable HTTP sessions without a task of their own.
//!
//! This does what rmcp's `LocalSessionManager` does: a response stream per client request
//! opened by a priming event, the GET stream, resumption by `Last-Event-ID`, and SEP-2260's
//! rule that a server request made while serving a client request rides that request's
//! stream. rmcp gives every session a worker task and five channels (its own two and its
//! `WorkerTransport`'s three), and every message crosses that task. A tokio channel
//! allocates 32 slots of its message when it is made, ~400 bytes each here, so those
//! channels were half of what a session cost, and a call crossed the task three times.
//!
//! Here the routing is a table under a lock, changed by whoever sends: the HTTP request
//! that brings a client message, or the serve loop's [`SessionTransport::send`]. A session
//! has one small queue to its serve loop ([`Inbox`]); a stream's channel is made when a
//! client opens the stream. A GET stream opened while another is live waits, and takes over
//! with what it missed when that one's client goes (rmcp's would only keep the connection).
//!
//! Why this file is long: the routing table, the transport that feeds it and rmcp's
//! `SessionManager` trait are one piece, and its tests (a request's stream until its answer,
//! a cancelled one resumed, a closed session) drive all three.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use rmcp::model::{
    CancelledNotificationParam, ClientJsonRpcMessage, ClientNotification, GetExtensions, GetMeta,
    JsonRpcNotification, Notification, ProgressNotificationParam, ProgressToken, RequestId,
    ServerJsonRpcMessage, ServerNotification,
};
use rmcp::service::OriginatingRequestId;
use rmcp::transport::common::server_side_http::session_id;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::{SessionId, SessionManager};
use rmcp::transport::Transport;
use rmcp::RoleServer;
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio::time::Instant;
use wardgate_engine::lock::lock;

/// Messages a stream holds for a client slow to take them, and the events each stream
/// keeps for a client that resumes it (rmcp's default for both).
const CAPACITY: usize = 16;
/// The `retry` of the priming event that opens every response stream (rmcp's default).
const SSE_RETRY: Duration = Duration::from_secs(3);
/// How long the stream of a request the client cancelled keeps its events for a resume.
const CANCELLED_KEPT: Duration = Duration::from_secs(60);
/// GET streams a session holds beside the one that gets its messages (rmcp's limit). They
/// carry only keep-alives; clients that reconnect an EventSource make them.
const MAX_IDLE_STREAMS: usize = 32;

/// Client messages on their way to the session's serve loop, at most [`CAPACITY`] waiting
/// (an HTTP request that brings one more waits for room). Lighter than a tokio channel,
/// which is ~0.8 KB before its first message (fields padded to cache lines, a first block
/// of 32 slots), held for the session's whole life.
struct Inbox {
    /// Boxed: a message is ~300 bytes, and the queue keeps the room it grew to.
    waiting: Mutex<VecDeque<Box<ClientJsonRpcMessage>>>,
    arrived: Notify,
    /// Free places; closed when the session ends.
    room: Semaphore,
}

impl Inbox {
    fn new() -> Inbox {
        Inbox {
            waiting: Mutex::default(),
            arrived: Notify::new(),
            room: Semaphore::new(CAPACITY),
        }
    }

    async fn push(&self, message: ClientJsonRpcMessage) -> Result<(), SessionError> {
        let place = self.place().await?;
        self.put(place, message);
        Ok(())
    }

    /// A place in the queue, once there is one.
    async fn place(&self) -> Result<tokio::sync::SemaphorePermit<'_>, SessionError> {
        self.room.acquire().await.map_err(|_| SessionError::Ended)
    }

    fn put(&self, place: tokio::sync::SemaphorePermit<'_>, message: ClientJsonRpcMessage) {
        place.forget();
        lock(&self.waiting).push_back(Box::new(message));
        self.arrived.notify_one();
    }

    /// The next message; `None` once the session has ended and nothing waits. One reader
    /// (the serve loop): `notify_one` keeps a wake-up for it when it is not waiting yet.
    async fn pop(&self) -> Option<ClientJsonRpcMessage> {
        loop {
            if let Some(message) = lock(&self.waiting).pop_front() {
                self.room.add_permits(1);
                return Some(*message);
            }
            if self.room.is_closed() {
                return None;
            }
            self.arrived.notified().await;
        }
    }

    fn close(&self) {
        self.room.close();
        self.arrived.notify_one();
    }
}

/// What went wrong with a session; rmcp's HTTP layer answers 500 or, for a resume, an empty
/// stream.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no session {0} here")]
    NotFound(SessionId),
    #[error("the session has ended")]
    Ended,
    #[error("the stream of request {0} is closed")]
    StreamClosed(u64),
    #[error("`{0}` is not an event id of this session's streams")]
    BadEventId(String),
}

/// Every session of one HTTP front.
#[derive(Default)]
pub struct Sessions {
    open: Mutex<HashMap<SessionId, Arc<Session>>>,
}

struct Session {
    routes: Mutex<Routes>,
    inbox: Inbox,
}

/// Where a session's messages go.
#[derive(Default)]
struct Routes {
    /// Set when the session ends.
    ended: bool,
    /// The request that opened the session, waiting for the answer to its `initialize`.
    initializing: Option<oneshot::Sender<ServerJsonRpcMessage>>,
    next_stream: u64,
    /// Each client request's response stream, by the number in its event ids.
    streams: HashMap<u64, RequestStream>,
    /// Which stream a request id or progress token is served on.
    owners: HashMap<Key, u64>,
    /// The GET stream's messages: those no request owns.
    common: Events,
    /// GET streams opened while another one was live, with the last event each client had
    /// seen: the newest takes over when that one is found gone.
    idle_streams: Vec<(mpsc::Sender<ServerSseMessage>, Option<usize>)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Request(RequestId),
    Progress(ProgressToken),
}

struct RequestStream {
    keys: Vec<Key>,
    events: Events,
    /// Set when the client cancelled the request: the stream is closed, its events kept.
    cancelled_at: Option<Instant>,
    /// The answer is in: the stream goes once nothing of it waits for room.
    answered: bool,
}

/// A stream's sender and the events it keeps for a resume.
#[derive(Default)]
struct Events {
    tx: Option<mpsc::Sender<ServerSseMessage>>,
    kept: VecDeque<ServerSseMessage>,
    /// Events that found the channel full, in order: each waiting send puts the oldest in
    /// once it has room, whichever of them runs first (rmcp runs each send as a task).
    pending: VecDeque<ServerSseMessage>,
    /// The number of a request's stream, which its event ids carry (`index/stream`); `None`
    /// for the GET stream (`index`).
    stream: Option<u64>,
    next_index: usize,
}

impl Events {
    fn request(stream: u64, tx: mpsc::Sender<ServerSseMessage>) -> Events {
        Events {
            tx: Some(tx),
            kept: VecDeque::new(),
            pending: VecDeque::new(),
            stream: Some(stream),
            next_index: 0,
        }
    }

    /// The GET stream's events are numbered from 1: rmcp's HTTP layer opens every GET
    /// stream with a priming event of id 0.
    fn common() -> Events {
        Events {
            next_index: 1,
            ..Events::default()
        }
    }

    /// `event`, numbered and kept; what is left to do to send it.
    fn add(&mut self, mut event: ServerSseMessage) -> Sending {
        let index = self.next_index;
        self.next_index += 1;
        event.event_id = Some(match self.stream {
            Some(stream) => format!("{index}/{stream}"),
            None => index.to_string(),
        });
        if self.kept.len() >= CAPACITY {
            self.kept.pop_front();
        }
        self.kept.push_back(event.clone());
        let Some(tx) = &self.tx else {
            return Sending::Done;
        };
        if !self.pending.is_empty() {
            self.pending.push_back(event);
            return Sending::Wait;
        }
        match tx.try_send(event) {
            Ok(()) => Sending::Done,
            Err(mpsc::error::TrySendError::Full(event)) => {
                self.pending.push_back(event);
                Sending::Wait
            }
            // The client went away: the event is kept for its resume.
            Err(mpsc::error::TrySendError::Closed(_)) => Sending::Done,
        }
    }

    /// Sends again, on a new channel, every kept event after the one numbered `seen`.
    fn replay_after(&mut self, seen: Option<usize>) -> Result<Receiver, SessionError> {
        if let Some(seen) = seen.filter(|seen| *seen >= self.next_index) {
            return Err(SessionError::BadEventId(seen.to_string()));
        }
        let (tx, rx) = mpsc::channel(CAPACITY);
        self.take_over(tx, seen);
        Ok(Receiver::new(rx))
    }

    /// `tx`, a channel of [`CAPACITY`] with nothing in it yet, becomes the stream's, with
    /// every kept event after the one numbered `seen`.
    fn take_over(&mut self, tx: mpsc::Sender<ServerSseMessage>, seen: Option<usize>) {
        for event in &self.kept {
            if seen.is_none_or(|seen| event_index(event) > seen) {
                // At most CAPACITY kept, into a channel of that capacity.
                let _ = tx.try_send(event.clone());
            }
        }
        // What waited for the old channel is replayed if it is among the last CAPACITY
        // events; older ones are not kept, and a resume goes on without them, as rmcp's.
        self.pending.clear();
        self.tx = Some(tx);
    }
}

fn event_index(event: &ServerSseMessage) -> usize {
    event
        .event_id
        .as_deref()
        .and_then(|id| id.split('/').next())
        .and_then(|index| index.parse().ok())
        .unwrap_or(0)
}

/// What sending an event still needs once the lock is let go.
#[must_use]
enum Sending {
    Done,
    /// The stream's channel was full: the event waits in its `pending`.
    Wait,
}

/// Which of a session's streams.
#[derive(Clone, Copy)]
enum Which {
    Request(u64),
    Common,
}

impl Routes {
    fn events(&mut self, which: Which) -> Option<&mut Events> {
        match which {
            Which::Request(stream) => self
                .streams
                .get_mut(&stream)
                .map(|request| &mut request.events),
            Which::Common => Some(&mut self.common),
        }
    }
}

/// Once stream `which` has room, puts its oldest pending event in; a request's stream whose
/// answer was the last of them goes then.
async fn send_pending(session: Arc<Session>, which: Which) {
    let Some(tx) = lock(&session.routes)
        .events(which)
        .and_then(|events| events.tx.clone())
    else {
        return;
    };
    let permit = tx.reserve().await;
    let mut routes = lock(&session.routes);
    let Some(events) = routes.events(which) else {
        return;
    };
    // A resume may have replaced the channel meanwhile, and replayed what waited.
    if events.tx.as_ref().is_some_and(|now| now.same_channel(&tx)) {
        match permit {
            Ok(permit) => {
                if let Some(event) = events.pending.pop_front() {
                    permit.send(event);
                }
            }
            // The client went away: what waited is among the kept events, for its resume.
            Err(_) => events.pending.clear(),
        }
    }
    if let Which::Request(stream) = which {
        if routes
            .streams
            .get(&stream)
            .is_some_and(|request| request.answered && request.events.pending.is_empty())
        {
            routes.streams.remove(&stream);
        }
    }
}

/// Where a server message goes.
enum Outbound {
    /// A request's stream, closed after this message when it is the request's answer.
    Request {
        stream: u64,
        last: bool,
    },
    Common,
}

impl Routes {
    fn owner(&self, key: Key) -> Option<u64> {
        self.owners.get(&key).copied()
    }

    /// rmcp's routing (`LocalSessionWorker::resolve_outbound_channel`).
    fn outbound(&self, message: &ServerJsonRpcMessage) -> Outbound {
        let on = |stream: Option<u64>, last: bool| match stream {
            Some(stream) => Outbound::Request { stream, last },
            None => Outbound::Common,
        };
        match message {
            ServerJsonRpcMessage::Request(request) => {
                let originating = request
                    .request
                    .extensions()
                    .get::<OriginatingRequestId>()
                    .map(|originating| originating.0.clone());
                match originating {
                    Some(id) => {
                        let stream = self.owner(Key::Request(id.clone()));
                        if stream.is_none() {
                            tracing::debug!(originating_request_id = %id, "a server request for a request already answered goes on the GET stream");
                        }
                        on(stream, false)
                    }
                    None => Outbound::Common,
                }
            }
            ServerJsonRpcMessage::Notification(JsonRpcNotification {
                notification:
                    ServerNotification::ProgressNotification(Notification {
                        params: ProgressNotificationParam { progress_token, .. },
                        ..
                    }),
                ..
            }) => on(self.owner(Key::Progress(progress_token.clone())), false),
            ServerJsonRpcMessage::Notification(JsonRpcNotification {
                notification:
                    ServerNotification::CancelledNotification(Notification {
                        params:
                            CancelledNotificationParam {
                                request_id: Some(id),
                                ..
                            },
                        ..
                    }),
                ..
            }) => on(self.owner(Key::Request(id.clone())), false),
            ServerJsonRpcMessage::Notification(_) => Outbound::Common,
            ServerJsonRpcMessage::Response(response) => {
                on(self.owner(Key::Request(response.id.clone())), true)
            }
            ServerJsonRpcMessage::Error(error) => on(
                error.id.clone().and_then(|id| self.owner(Key::Request(id))),
                true,
            ),
        }
    }

    /// Sends `message` where it goes; `Some`: on that stream once it has room.
    fn route(&mut self, message: ServerJsonRpcMessage) -> Result<Option<Which>, SessionError> {
        if self.ended {
            return Err(SessionError::Ended);
        }
        if let Some(initializing) = self.initializing.take() {
            // The serve loop's first message is its answer to `initialize`.
            return initializing
                .send(message)
                .map(|()| None)
                .map_err(|_| SessionError::Ended);
        }
        let answered = match &message {
            ServerJsonRpcMessage::Response(response) => Some(response.id.clone()),
            ServerJsonRpcMessage::Error(error) => error.id.clone(),
            _ => None,
        };
        let waiting = match self.outbound(&message) {
            Outbound::Request { stream, last } => {
                let Some(request) = self.streams.get_mut(&stream) else {
                    return Err(SessionError::StreamClosed(stream));
                };
                let sending = request.events.add(ServerSseMessage::from_message(message));
                if last {
                    request.answered = true;
                    release(&mut self.owners, std::mem::take(&mut request.keys), stream);
                    if matches!(sending, Sending::Done) {
                        // Its channel closes: the client's stream ends after the answer.
                        self.streams.remove(&stream);
                    }
                }
                matches!(sending, Sending::Wait).then_some(Which::Request(stream))
            }
            Outbound::Common => {
                self.promote_idle();
                let sending = self.common.add(ServerSseMessage::from_message(message));
                matches!(sending, Sending::Wait).then_some(Which::Common)
            }
        };
        if let Some(id) = answered {
            self.close_request(&id);
        }
        Ok(waiting)
    }

    /// The stream of request `id` ends, keeping its events for a while for a resume.
    fn close_request(&mut self, id: &RequestId) {
        let Some(stream) = self.owners.remove(&Key::Request(id.clone())) else {
            return;
        };
        let Some(request) = self.streams.get_mut(&stream) else {
            return;
        };
        release(&mut self.owners, std::mem::take(&mut request.keys), stream);
        request.cancelled_at = Some(Instant::now());
        request.events.tx = None;
        // What waited for room is among the kept events.
        request.events.pending.clear();
    }

    fn forget_cancelled(&mut self) {
        self.streams.retain(|_, request| {
            request
                .cancelled_at
                .is_none_or(|at| at.elapsed() < CANCELLED_KEPT)
        });
    }

    /// A GET stream: the one that gets the session's messages if that one is gone (with
    /// those after `seen` it missed), else one that waits to take over from it.
    fn common_stream(&mut self, seen: Option<usize>) -> Result<Receiver, SessionError> {
        if self.common.tx.as_ref().is_none_or(|tx| tx.is_closed()) {
            return self.common.replay_after(seen);
        }
        if let Some(seen) = seen.filter(|seen| *seen >= self.common.next_index) {
            return Err(SessionError::BadEventId(seen.to_string()));
        }
        self.idle_streams.retain(|(tx, _)| !tx.is_closed());
        if self.idle_streams.len() >= MAX_IDLE_STREAMS {
            self.idle_streams.remove(0);
        }
        // Of the full capacity, so that it can take over (the channel's first block is
        // allocated whatever its capacity). A client that gave no last event has seen
        // nothing sent before it opened this one.
        let (tx, rx) = mpsc::channel(CAPACITY);
        let seen = seen.or(self.common.next_index.checked_sub(1));
        self.idle_streams.push((tx, seen));
        Ok(Receiver::new(rx))
    }

    /// The GET stream's client is gone, though a newer GET stream of the session waited
    /// (its client reconnected while the server still saw the old connection open): the
    /// newest one still open takes over, with what it missed.
    fn promote_idle(&mut self) {
        if self.common.tx.as_ref().is_some_and(|tx| !tx.is_closed()) {
            return;
        }
        self.idle_streams.retain(|(tx, _)| !tx.is_closed());
        if let Some((tx, seen)) = self.idle_streams.pop() {
            self.common.take_over(tx, seen);
        }
    }

    fn end(&mut self) {
        *self = Routes {
            ended: true,
            common: Events::common(),
            ..Routes::default()
        };
    }
}

/// Lets go of `keys` that still name `stream`: a progress token or request id another
/// request reused since belongs to that one now.
fn release(owners: &mut HashMap<Key, u64>, keys: Vec<Key>, stream: u64) {
    for key in keys {
        if owners.get(&key) == Some(&stream) {
            owners.remove(&key);
        }
    }
}

/// A stream of events to a client.
pub struct Receiver {
    rx: mpsc::Receiver<ServerSseMessage>,
    /// A GET stream's session: when its client goes, a waiting GET stream takes over at
    /// once, not when the session next has something to send.
    session: Option<std::sync::Weak<Session>>,
}

impl Receiver {
    fn new(rx: mpsc::Receiver<ServerSseMessage>) -> Receiver {
        Receiver { rx, session: None }
    }

    fn of_get_stream(mut self, session: &Arc<Session>) -> Receiver {
        self.session = Some(Arc::downgrade(session));
        self
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let Some(session) = self.session.take().and_then(|weak| weak.upgrade()) else {
            return;
        };
        // Closed first, so that its sender reads as closed. (No receiver is dropped while
        // its session's routes are locked.)
        self.rx.close();
        lock(&session.routes).promote_idle();
    }
}

impl Stream for Receiver {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl Session {
    /// Its routes, unless it has ended.
    fn live(&self) -> Result<std::sync::MutexGuard<'_, Routes>, SessionError> {
        let routes = lock(&self.routes);
        if routes.ended {
            return Err(SessionError::Ended);
        }
        Ok(routes)
    }

    fn end(&self) {
        lock(&self.routes).end();
        self.inbox.close();
    }
}

impl Sessions {
    /// Lets go of the streams of cancelled requests kept past [`CANCELLED_KEPT`], in every
    /// session: not only when a client next sends a request.
    pub fn tidy(&self) {
        let open: Vec<Arc<Session>> = lock(&self.open).values().cloned().collect();
        for session in open {
            lock(&session.routes).forget_cancelled();
        }
    }

    fn get(&self, id: &SessionId) -> Result<Arc<Session>, SessionError> {
        lock(&self.open)
            .get(id)
            .cloned()
            .ok_or_else(|| SessionError::NotFound(id.clone()))
    }
}

/// Routes `message` now (the serve loop's order), and sends it once its stream has room.
fn send(
    session: &Arc<Session>,
    message: ServerJsonRpcMessage,
) -> impl Future<Output = Result<(), SessionError>> + Send + 'static {
    let waiting = lock(&session.routes).route(message);
    let session = session.clone();
    async move {
        if let Some(which) = waiting? {
            send_pending(session, which).await;
        }
        Ok(())
    }
}

/// The serve loop's side of a session.
pub struct SessionTransport {
    session: Arc<Session>,
}

impl Drop for SessionTransport {
    fn drop(&mut self) {
        // The serve loop is gone: the session's streams end.
        self.session.end();
    }
}

impl Transport<RoleServer> for SessionTransport {
    type Error = SessionError;

    fn send(
        &mut self,
        message: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), SessionError>> + Send + 'static {
        send(&self.session, message)
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        self.session.inbox.pop().await
    }

    async fn close(&mut self) -> Result<(), SessionError> {
        self.session.inbox.close();
        Ok(())
    }
}

impl SessionManager for Sessions {
    type Error = SessionError;
    type Transport = SessionTransport;

    async fn create_session(&self) -> Result<(SessionId, SessionTransport), SessionError> {
        let id = session_id();
        let session = Arc::new(Session {
            routes: Mutex::new(Routes {
                common: Events::common(),
                ..Routes::default()
            }),
            inbox: Inbox::new(),
        });
        lock(&self.open).insert(id.clone(), session.clone());
        Ok((id, SessionTransport { session }))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, SessionError> {
        let session = self.get(id)?;
        let (answer, answered) = oneshot::channel();
        session.live()?.initializing = Some(answer);
        session.inbox.push(message).await?;
        answered.await.map_err(|_| SessionError::Ended)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, SessionError> {
        Ok(lock(&self.open).contains_key(id))
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), SessionError> {
        let session = lock(&self.open).remove(id);
        if let Some(session) = session {
            session.end();
        }
        Ok(())
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, SessionError> {
        let session = self.get(id)?;
        // A place first: a request dropped while it waits for one leaves no stream behind.
        let place = session.inbox.place().await?;
        let rx = {
            let mut routes = session.live()?;
            routes.forget_cancelled();
            let stream = routes.next_stream;
            routes.next_stream = stream.wrapping_add(1);
            let (tx, rx) = mpsc::channel(CAPACITY);
            let mut events = Events::request(stream, tx);
            // Into a new channel: there is room.
            let _ = events.add(ServerSseMessage::retry(SSE_RETRY));
            let mut keys = Vec::new();
            if let ClientJsonRpcMessage::Request(request) = &message {
                // An id still in flight, used again: the earlier request's stream ends
                // (kept for a while, as a cancelled one's), or nothing would ever end it.
                routes.close_request(&request.id);
                keys.push(Key::Request(request.id.clone()));
                if let Some(token) = request.request.get_meta().get_progress_token() {
                    keys.push(Key::Progress(token));
                }
            }
            for key in &keys {
                routes.owners.insert(key.clone(), stream);
            }
            routes.streams.insert(
                stream,
                RequestStream {
                    keys,
                    events,
                    cancelled_at: None,
                    answered: false,
                },
            );
            Receiver::new(rx)
        };
        session.inbox.put(place, message);
        Ok(rx)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), SessionError> {
        let session = self.get(id)?;
        // A place first: a cancel dropped while it waits for one is not half applied.
        let place = session.inbox.place().await?;
        if let ClientJsonRpcMessage::Notification(JsonRpcNotification {
            notification: ClientNotification::CancelledNotification(cancelled),
            ..
        }) = &message
        {
            if let Some(request) = &cancelled.params.request_id {
                session.live()?.close_request(request);
            }
        }
        session.inbox.put(place, message);
        Ok(())
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, SessionError> {
        let session = self.get(id)?;
        let stream = session.live()?.common_stream(None)?;
        Ok(stream.of_get_stream(&session))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, SessionError> {
        let session = self.get(id)?;
        let bad = || SessionError::BadEventId(last_event_id.clone());
        let (index, stream) = match last_event_id.split_once('/') {
            Some((index, stream)) => (index, Some(stream.parse::<u64>().map_err(|_| bad())?)),
            None => (last_event_id.as_str(), None),
        };
        let seen: usize = index.parse().map_err(|_| bad())?;
        let mut routes = session.live()?;
        match stream {
            None => {
                let stream = routes.common_stream(Some(seen))?;
                drop(routes);
                Ok(stream.of_get_stream(&session))
            }
            Some(number) => {
                let request = routes
                    .streams
                    .get_mut(&number)
                    .ok_or(SessionError::StreamClosed(number))?;
                let receiver = request.events.replay_after(Some(seen))?;
                if request.cancelled_at.is_some() {
                    // Replayed; the stream ends there.
                    request.events.tx = None;
                }
                Ok(receiver)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use rmcp::model::{
        CancelledNotification, CancelledNotificationParam, ClientRequest, NumberOrString,
        ProgressNotificationParam, ServerRequest, ServerResult,
    };

    use super::*;

    fn ping(id: i64, progress: Option<&str>) -> ClientJsonRpcMessage {
        let mut request = ClientRequest::PingRequest(Default::default());
        if let Some(token) = progress {
            request
                .get_meta_mut()
                .set_progress_token(ProgressToken(NumberOrString::String(token.into())));
        }
        ClientJsonRpcMessage::request(request, RequestId::Number(id))
    }

    fn progress(token: &str) -> ServerJsonRpcMessage {
        ServerJsonRpcMessage::notification(ServerNotification::ProgressNotification(
            Notification::new(ProgressNotificationParam::new(
                ProgressToken(NumberOrString::String(token.into())),
                1.0,
            )),
        ))
    }

    /// A server request, made while serving client request `originating` if given.
    fn server_ping(id: i64, originating: Option<i64>) -> ServerJsonRpcMessage {
        let mut request = ServerRequest::PingRequest(Default::default());
        if let Some(originating) = originating {
            request
                .extensions_mut()
                .insert(OriginatingRequestId(RequestId::Number(originating)));
        }
        ServerJsonRpcMessage::request(request, RequestId::Number(id))
    }

    fn answer(id: i64) -> ServerJsonRpcMessage {
        ServerJsonRpcMessage::response(ServerResult::empty(()), RequestId::Number(id))
    }

    async fn next(stream: &mut (impl Stream<Item = ServerSseMessage> + Unpin)) -> (String, String) {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("an event")
            .expect("the stream is open");
        let data = event
            .message
            .map(|message| serde_json::to_string(&*message).unwrap())
            .unwrap_or_default();
        (event.event_id.unwrap_or_default(), data)
    }

    async fn ends(stream: &mut (impl Stream<Item = ServerSseMessage> + Unpin)) -> bool {
        tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("the stream ends or goes on within 5 s")
            .is_none()
    }

    /// The ids of a stream's events until it ends.
    async fn ids_to_end(
        stream: &mut (impl Stream<Item = ServerSseMessage> + Unpin),
    ) -> Vec<String> {
        let mut ids = Vec::new();
        while let Some(event) = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("an event or the end within 5 s")
        {
            ids.push(event.event_id.unwrap_or_default());
        }
        ids
    }

    async fn receive(transport: &mut SessionTransport) -> Option<ClientJsonRpcMessage> {
        tokio::time::timeout(Duration::from_secs(5), transport.receive())
            .await
            .expect("the serve loop gets a message or the end within 5 s")
    }

    /// A session past `initialize`, and its serve loop's transport.
    async fn opened(sessions: &Arc<Sessions>) -> (SessionId, SessionTransport) {
        let (id, mut transport) = sessions.create_session().await.unwrap();
        let initializing = tokio::spawn({
            let sessions = sessions.clone();
            let id = id.clone();
            async move { sessions.initialize_session(&id, ping(0, None)).await }
        });
        assert!(receive(&mut transport).await.is_some());
        transport.send(answer(0)).await.unwrap();
        let answered = initializing.await.unwrap().unwrap();
        assert!(matches!(answered, ServerJsonRpcMessage::Response(_)));
        (id, transport)
    }

    /// An opened session with request 7 (progress token `p`) in flight, and its stream.
    async fn calling() -> (Arc<Sessions>, SessionId, SessionTransport, Sse) {
        let sessions = Arc::new(Sessions::default());
        let (id, mut transport) = opened(&sessions).await;
        let stream: Sse = Box::pin(
            sessions
                .create_stream(&id, ping(7, Some("p")))
                .await
                .unwrap(),
        );
        assert!(receive(&mut transport).await.is_some());
        (sessions, id, transport, stream)
    }

    type Sse = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>;

    #[tokio::test]
    async fn a_request_s_progress_and_server_requests_ride_its_stream_until_its_answer() {
        let (sessions, id, mut transport, mut stream) = calling().await;
        let (priming, data) = next(&mut stream).await;
        assert_eq!((priming.as_str(), data.as_str()), ("0/0", ""));
        transport.send(progress("p")).await.unwrap();
        transport.send(server_ping(100, Some(7))).await.unwrap();
        // Neither a request's progress nor made for it: the GET stream's.
        transport.send(server_ping(101, None)).await.unwrap();
        transport.send(answer(7)).await.unwrap();
        let (first, data) = next(&mut stream).await;
        assert_eq!(first, "1/0");
        assert!(data.contains("notifications/progress"), "{data}");
        let (second, data) = next(&mut stream).await;
        assert_eq!(second, "2/0");
        assert!(data.contains(r#""id":100"#), "{data}");
        let (third, data) = next(&mut stream).await;
        assert_eq!(third, "3/0");
        assert!(data.contains(r#""id":7"#), "{data}");
        assert!(ends(&mut stream).await, "the answer ends the stream");
        // A server request for a request already answered goes on the GET stream too.
        transport.send(server_ping(102, Some(7))).await.unwrap();
        let mut get = Box::pin(sessions.create_standalone_stream(&id).await.unwrap());
        let (kept, data) = next(&mut get).await;
        assert_eq!(kept, "1");
        assert!(data.contains(r#""id":101"#), "{data}");
        let (kept, data) = next(&mut get).await;
        assert_eq!(kept, "2");
        assert!(data.contains(r#""id":102"#), "{data}");
    }

    #[tokio::test]
    async fn events_that_wait_for_room_keep_their_order() {
        let (_sessions, _id, transport, mut stream) = calling().await;
        // 15 fit beside the priming event, unread; the rest and the answer wait for room,
        // their sends run as tasks, the answer's first and the rest last first.
        let session = transport.session.clone();
        let sends: Vec<_> = (0..20).map(|_| send(&session, progress("p"))).collect();
        let mut tasks = vec![tokio::spawn(send(&session, answer(7)))];
        tasks.extend(sends.into_iter().rev().map(tokio::spawn));
        let expected: Vec<String> = (0..=21).map(|index| format!("{index}/0")).collect();
        assert_eq!(ids_to_end(&mut stream).await, expected);
        for task in tasks {
            task.await.unwrap().unwrap();
        }
    }

    #[tokio::test]
    async fn a_cancelled_request_s_stream_closes_and_resumes_from_the_last_event_seen() {
        let (sessions, id, mut transport, mut stream) = calling().await;
        transport.send(progress("p")).await.unwrap();
        transport.send(progress("p")).await.unwrap();
        let cancel = ClientJsonRpcMessage::notification(ClientNotification::CancelledNotification(
            CancelledNotification::new(CancelledNotificationParam::new(
                Some(RequestId::Number(7)),
                None,
            )),
        ));
        sessions.accept_message(&id, cancel).await.unwrap();
        assert!(
            receive(&mut transport).await.is_some(),
            "the cancel reaches the serve loop"
        );
        assert_eq!(
            ids_to_end(&mut stream).await,
            ["0/0", "1/0", "2/0"],
            "the stream ends when cancelled"
        );
        // Resumed after the first progress: the second only, and the stream ends.
        let mut resumed = Box::pin(sessions.resume(&id, "1/0".into()).await.unwrap());
        let (again, _) = next(&mut resumed).await;
        assert_eq!(again, "2/0");
        assert!(ends(&mut resumed).await);
        // An event never sent, or a stream never opened, is not resumed.
        assert!(sessions.resume(&id, "9/0".into()).await.is_err());
        assert!(sessions.resume(&id, "0/5".into()).await.is_err());
        assert!(sessions.resume(&id, "x".into()).await.is_err());
    }

    #[tokio::test]
    async fn a_request_id_used_again_while_in_flight_ends_the_earlier_stream() {
        let (sessions, id, mut transport, mut first) = calling().await;
        // Request 8 shares progress token `p` with 7; then 7's id is used again.
        let mut eight = Box::pin(
            sessions
                .create_stream(&id, ping(8, Some("p")))
                .await
                .unwrap(),
        );
        assert!(receive(&mut transport).await.is_some());
        let mut again = Box::pin(sessions.create_stream(&id, ping(7, None)).await.unwrap());
        assert!(receive(&mut transport).await.is_some());
        assert_eq!(ids_to_end(&mut first).await, ["0/0"], "the earlier 7 ends");
        // The second 7's answer ends its stream; 8 keeps the token 7 had shared.
        transport.send(answer(7)).await.unwrap();
        assert_eq!(ids_to_end(&mut again).await, ["0/2", "1/2"]);
        transport.send(progress("p")).await.unwrap();
        assert_eq!(next(&mut eight).await.0, "0/1");
        let (progressed, data) = next(&mut eight).await;
        assert_eq!(progressed, "1/1");
        assert!(data.contains("notifications/progress"), "{data}");
    }

    #[tokio::test]
    async fn a_newer_get_stream_takes_over_when_the_live_one_is_found_gone() {
        let sessions = Arc::new(Sessions::default());
        let (id, mut transport) = opened(&sessions).await;
        let mut old = Box::pin(sessions.create_standalone_stream(&id).await.unwrap());
        transport.send(server_ping(100, None)).await.unwrap();
        assert_eq!(next(&mut old).await.0, "1");
        transport.send(server_ping(101, None)).await.unwrap();
        // The client reconnects, having seen event 1, while the old stream looks open.
        let mut new = Box::pin(sessions.resume(&id, "1".into()).await.unwrap());
        // Once the old one goes, the new one has what it missed, with nothing more sent.
        drop(old);
        let (missed, data) = next(&mut new).await;
        assert_eq!(missed, "2");
        assert!(data.contains(r#""id":101"#), "{data}");
        transport.send(server_ping(102, None)).await.unwrap();
        let (then, data) = next(&mut new).await;
        assert_eq!(then, "3");
        assert!(data.contains(r#""id":102"#), "{data}");
        // An event never sent is refused while the live stream is open, too.
        assert!(sessions.resume(&id, "9".into()).await.is_err());
        // A GET stream opened with no last event has seen nothing before it opened.
        let mut third = Box::pin(sessions.create_standalone_stream(&id).await.unwrap());
        transport.send(server_ping(103, None)).await.unwrap();
        assert_eq!(next(&mut new).await.0, "4");
        drop(new);
        let (first, data) = next(&mut third).await;
        assert_eq!(first, "4");
        assert!(data.contains(r#""id":103"#), "{data}");
    }

    #[tokio::test]
    async fn cancelled_streams_are_let_go_by_tidying_without_a_new_request() {
        let (sessions, id, mut transport, _stream) = calling().await;
        let cancel = ClientJsonRpcMessage::notification(ClientNotification::CancelledNotification(
            CancelledNotification::new(CancelledNotificationParam::new(
                Some(RequestId::Number(7)),
                None,
            )),
        ));
        sessions.accept_message(&id, cancel).await.unwrap();
        assert!(receive(&mut transport).await.is_some());
        let kept = |sessions: &Sessions| {
            let session = sessions.get(&id).unwrap();
            let count = lock(&session.routes).streams.len();
            count
        };
        sessions.tidy();
        assert_eq!(kept(&sessions), 1, "kept for a resume");
        if let Some(request) = lock(&sessions.get(&id).unwrap().routes)
            .streams
            .values_mut()
            .next()
        {
            request.cancelled_at = Instant::now().checked_sub(CANCELLED_KEPT);
        }
        sessions.tidy();
        assert_eq!(kept(&sessions), 0, "let go once kept long enough");
    }

    #[tokio::test]
    async fn a_closed_session_ends_its_streams_and_its_serve_loop() {
        let sessions = Arc::new(Sessions::default());
        let (id, mut transport) = opened(&sessions).await;
        let mut get = Box::pin(sessions.create_standalone_stream(&id).await.unwrap());
        sessions.close_session(&id).await.unwrap();
        assert!(!sessions.has_session(&id).await.unwrap());
        assert!(ends(&mut get).await);
        assert!(receive(&mut transport).await.is_none());
        assert!(matches!(
            sessions.create_stream(&id, ping(1, None)).await.map(|_| ()),
            Err(SessionError::NotFound(_))
        ));
    }
}
