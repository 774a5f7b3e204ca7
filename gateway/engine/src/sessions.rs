//! Connected downstream client sessions: who gets list_changed, log messages and resource updates.
//!
//! Three kinds, by how notifications reach the client (`Channel`):
//! - a session that began with `initialize` (2025-06-18 and 2025-11-25): everything is
//!   pushed on its connection, as the client asked (`logging/setLevel`, subscriptions);
//! - a 2026-07-28 `subscriptions/listen` stream: only what its accepted filter names
//!   (list changes, updates of the resources it listed), tagged by rmcp's sink; never a
//!   log message, which that revision allows only within a request;
//! - one 2026-07-28 request in flight: the server's log messages during it, at the level
//!   its `_meta` asked for, and nothing when it asked for none.

// rmcp marks logging deprecated for 2026-07-28 (SEP-2577); the handshake-era revisions the
// gateway speaks still have it, and this module is its fan-out.
#![expect(
    deprecated,
    reason = "logging is current in the handshake-era revisions the gateway speaks (SEP-2577)"
)]

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ResourceUpdatedNotificationParam,
    ServerNotification,
};
use rmcp::service::SubscriptionSink;
use rmcp::{Peer, RoleServer};
use tokio::sync::mpsc;

use crate::catalogue::Counts;
use crate::config::Grant;
use crate::events::GatewayEvent;

/// Identifies one downstream session for the life of the gateway.
pub type SessionId = u64;

mod audience;
pub use audience::Audience;
mod outbox;
use outbox::{send_in_order, Outgoing};

/// How notifications reach one session's client.
#[derive(Clone)]
enum Channel {
    /// Began with `initialize`: pushed on its connection.
    Connection(Peer<RoleServer>),
    /// A 2026-07-28 `subscriptions/listen` stream.
    Listen(SubscriptionSink),
    /// One 2026-07-28 request: its server log messages, on its own stream.
    Request(Peer<RoleServer>),
}

/// How long an answer waits for the notifications queued before it to be sent.
const FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_millis(250);

struct Session {
    channel: Channel,
    /// Notifications for this client, sent in order by the session's own task; dropping
    /// the session ends that task. Bounded: a client that stops reading loses the
    /// notifications past [`OUTBOX`] instead of growing the gateway's memory. Made, with
    /// its task, when the session is first notified: most sessions never are, and the two
    /// were ~2.5 KB of each one's memory.
    outbox: std::sync::OnceLock<mpsc::Sender<Outgoing>>,
    /// Notifications queued and sent so far: equal when nothing waits in the outbox.
    progress: Arc<(AtomicU64, AtomicU64)>,
    /// What waits in the outbox, in bytes of JSON, and what was dropped since the client
    /// last caught up (shared with the session's task).
    backlog: Arc<Backlog>,
    /// Set once the outbox has overflowed (logged once).
    lagging: std::sync::atomic::AtomicBool,
    /// Namespaced resource URIs this session subscribed to.
    subscriptions: HashSet<String>,
    /// The least severe log level the client asked for with `logging/setLevel`; `None`
    /// until it asks.
    log_level: Option<LoggingLevel>,
    /// What the client may use (`[gateway.auth]`); `None`: everything. Log messages of, and
    /// events about, servers outside it never reach it.
    grant: Option<Arc<Grant>>,
}

impl Session {
    fn may_see(&self, server: &str) -> bool {
        self.grant
            .as_ref()
            .is_none_or(|grant| grant.allows_server_any(server))
    }
}

/// Notifications queued for one client at most; a client that reads none of them (a stalled
/// SSE stream) loses what comes after, and the gateway's memory stays bounded.
pub const OUTBOX: usize = 1024;

/// Bytes (as JSON) of notifications queued for one client at most: past it, further ones
/// are dropped and counted until the client reads again.
pub const SESSION_BACKLOG_BYTES: usize = 4 * 1024 * 1024;

/// Bytes of notifications queued for all clients together at most.
pub const TOTAL_BACKLOG_BYTES: usize = 64 * 1024 * 1024;

/// A session's queued bytes, and the notifications it lost since it last caught up.
#[derive(Default)]
struct Backlog {
    bytes: AtomicUsize,
    dropped: AtomicU64,
    /// Whether the client would take a warning-level log message (the drop notice).
    hears_warnings: std::sync::atomic::AtomicBool,
}

impl Session {
    /// Queue `notification` (`bytes` long as JSON), or drop it, counted, when the session's
    /// or the gateway's backlog has no room for it.
    fn queue(&self, notification: ServerNotification, bytes: usize, total: &Arc<Total>) {
        let over = self.backlog.bytes.load(Ordering::Acquire) + bytes > SESSION_BACKLOG_BYTES
            || total.bytes.load(Ordering::Acquire) + bytes > TOTAL_BACKLOG_BYTES;
        let queued = if over {
            Err(())
        } else {
            self.backlog.bytes.fetch_add(bytes, Ordering::AcqRel);
            total.bytes.fetch_add(bytes, Ordering::AcqRel);
            self.outbox
                .get_or_init(|| {
                    send_in_order(
                        self.channel.clone(),
                        self.progress.clone(),
                        self.backlog.clone(),
                        total.clone(),
                    )
                })
                .try_send(Outgoing::Notification(Box::new(notification), bytes))
                .map_err(|_| {
                    self.backlog.bytes.fetch_sub(bytes, Ordering::AcqRel);
                    total.bytes.fetch_sub(bytes, Ordering::AcqRel);
                })
        };
        match queued {
            Ok(()) => {
                self.progress.0.fetch_add(1, Ordering::AcqRel);
                self.lagging.store(false, Ordering::Relaxed);
            }
            Err(()) => {
                self.backlog.dropped.fetch_add(1, Ordering::AcqRel);
                total.dropped.inc();
                if !self.lagging.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "a client session is not reading its notifications ({} bytes or {OUTBOX} of them wait); dropping further ones until it reads (a stalled stream or a slow client)",
                        SESSION_BACKLOG_BYTES
                    );
                }
            }
        }
    }
}

/// What all sessions hold together, and what they lost.
#[derive(Default)]
struct Total {
    bytes: Arc<AtomicUsize>,
    /// `wardgate_notifications_dropped` on /metrics.
    dropped: prometheus_client::metrics::counter::Counter,
}

/// Every connected client session.
#[derive(Default)]
pub struct Sessions {
    next_id: AtomicU64,
    /// Boxed, so the table's empty places are a pointer each rather than a `Session`.
    sessions: Mutex<HashMap<SessionId, Box<Session>>>,
    total: Arc<Total>,
}

/// Which list a `list_changed` notification is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Tools,
    Prompts,
    Resources,
}

impl Sessions {
    /// Sessions whose dropped notifications count into `dropped`.
    pub(crate) fn counting_drops(
        dropped: prometheus_client::metrics::counter::Counter,
    ) -> Sessions {
        Sessions {
            total: Arc::new(Total {
                dropped,
                ..Total::default()
            }),
            ..Sessions::default()
        }
    }

    /// Bytes of notifications queued for all clients now.
    pub fn backlog_bytes(&self) -> usize {
        self.total.bytes.load(Ordering::Acquire)
    }

    pub fn allocate_id(&self) -> SessionId {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A session that began with `initialize`, of a client that may use `grant` (`None`:
    /// everything).
    pub fn register(&self, id: SessionId, peer: Peer<RoleServer>, grant: Option<Arc<Grant>>) {
        self.insert(id, Channel::Connection(peer), HashSet::new(), None);
        if let Some(session) = self.lock().get_mut(&id) {
            session.grant = grant;
        }
    }

    /// A 2026-07-28 `subscriptions/listen` stream; its resource URIs are added with
    /// [`Self::subscribe`], as a handshake-era session's are. Its list changes, like a
    /// session's, are only those of servers its client's `grant` reaches.
    pub fn register_listen(
        &self,
        id: SessionId,
        sink: SubscriptionSink,
        grant: Option<Arc<Grant>>,
    ) {
        self.insert(id, Channel::Listen(sink), HashSet::new(), None);
        if let Some(session) = self.lock().get_mut(&id) {
            session.grant = grant;
        }
    }

    /// One 2026-07-28 request in flight; `log_level` is what its `_meta` asked for.
    pub fn register_request(
        &self,
        id: SessionId,
        peer: Peer<RoleServer>,
        log_level: Option<LoggingLevel>,
    ) {
        self.insert(id, Channel::Request(peer), HashSet::new(), log_level);
    }

    fn insert(
        &self,
        id: SessionId,
        channel: Channel,
        subscriptions: HashSet<String>,
        log_level: Option<LoggingLevel>,
    ) {
        self.lock().entry(id).or_insert_with(|| {
            let backlog = Arc::new(Backlog::default());
            backlog.hears_warnings.store(
                log_level.is_none_or(|level| at_least(LoggingLevel::Warning, level)),
                Ordering::Relaxed,
            );
            Box::new(Session {
                channel,
                outbox: std::sync::OnceLock::new(),
                progress: Arc::default(),
                backlog,
                lagging: Default::default(),
                subscriptions,
                log_level,
                grant: None,
            })
        });
    }

    /// Wait, briefly, until the notifications queued for `id` so far were sent: a request's
    /// log messages and progress go out before its answer.
    pub async fn flushed(&self, id: SessionId) {
        let Some(outbox) = self
            .lock()
            .get(&id)
            .filter(|session| {
                session.progress.0.load(Ordering::Acquire)
                    != session.progress.1.load(Ordering::Acquire)
            })
            .and_then(|session| session.outbox.get().cloned())
        else {
            // Unknown, or nothing waiting: nothing to wait for.
            return;
        };
        let (done, sent) = tokio::sync::oneshot::channel();
        let _ = tokio::time::timeout(FLUSH_LIMIT, async {
            if outbox.send(Outgoing::Flush(done)).await.is_ok() {
                let _ = sent.await;
            }
        })
        .await;
    }

    pub fn unregister(&self, id: SessionId) {
        self.lock().remove(&id);
    }

    /// The connection to send server-to-client requests (sampling, elicitation, roots) on:
    /// only a session that began with `initialize` has one.
    pub fn peer(&self, id: SessionId) -> Option<Peer<RoleServer>> {
        match &self.lock().get(&id)?.channel {
            Channel::Connection(peer) => Some(peer.clone()),
            Channel::Listen(_) | Channel::Request(_) => None,
        }
    }

    /// Whether `id` is connected (or, for a request's session, still running).
    pub fn contains(&self, id: SessionId) -> bool {
        self.lock().contains_key(&id)
    }

    /// Whether `id` is a 2026-07-28 client's, which takes no server-to-client requests.
    pub fn is_modern(&self, id: SessionId) -> bool {
        self.lock()
            .get(&id)
            .is_some_and(|session| !matches!(session.channel, Channel::Connection(_)))
    }

    /// Record a subscription; true if this is the first session subscribed to `uri`.
    pub fn subscribe(&self, id: SessionId, uri: &str) -> bool {
        let mut sessions = self.lock();
        let first = !sessions
            .values()
            .any(|session| session.subscriptions.contains(uri));
        if let Some(session) = sessions.get_mut(&id) {
            session.subscriptions.insert(uri.to_owned());
        }
        first
    }

    /// Drop a subscription; true if no session is subscribed to `uri` any more.
    pub fn unsubscribe(&self, id: SessionId, uri: &str) -> bool {
        let mut sessions = self.lock();
        if let Some(session) = sessions.get_mut(&id) {
            session.subscriptions.remove(uri);
        }
        !sessions
            .values()
            .any(|session| session.subscriptions.contains(uri))
    }

    /// A list changed for `servers`: told to every session that may use one of them (and
    /// to listen streams that asked for that list).
    pub fn list_changed(&self, kind: ListKind, servers: &BTreeSet<String>) {
        let notification = match kind {
            ListKind::Tools => ServerNotification::ToolListChangedNotification(Default::default()),
            ListKind::Prompts => {
                ServerNotification::PromptListChangedNotification(Default::default())
            }
            ListKind::Resources => {
                ServerNotification::ResourceListChangedNotification(Default::default())
            }
        };
        self.broadcast(|session| {
            if !servers.iter().any(|server| session.may_see(server)) {
                return None;
            }
            let wanted = match &session.channel {
                Channel::Connection(_) => true,
                Channel::Listen(sink) => {
                    let accepted = sink.accepted();
                    let flag = match kind {
                        ListKind::Tools => accepted.tools_list_changed,
                        ListKind::Prompts => accepted.prompts_list_changed,
                        ListKind::Resources => accepted.resources_list_changed,
                    };
                    flag == Some(true)
                }
                Channel::Request(_) => false,
            };
            wanted.then(|| notification.clone())
        });
    }

    /// `logging/setLevel` from a client: from now on it gets messages at `level` or above.
    pub fn set_log_level(&self, id: SessionId, level: LoggingLevel) {
        if let Some(session) = self.lock().get_mut(&id) {
            session.log_level = Some(level);
            session
                .backlog
                .hears_warnings
                .store(at_least(LoggingLevel::Warning, level), Ordering::Relaxed);
        }
    }

    /// The gateway's own news (status changes, events): to every session that began with
    /// `initialize`, at the level each asked for (all of it to a session that never asked).
    /// 2026-07-28 allows log messages only within a request, so its clients learn a
    /// server's status from the errors of their calls and from list changes.
    /// A client that may use only some servers hears the event as
    /// [`GatewayEvent::as_heard_by`] tells it (`counts`: what its grant lists), or not at all.
    pub fn event(
        &self,
        level: LoggingLevel,
        logger: &str,
        event: &GatewayEvent,
        counts: impl Fn(&Grant) -> Counts,
    ) {
        let notification = |event: &GatewayEvent| {
            log_notification(
                level,
                logger,
                serde_json::to_value(event).unwrap_or_default(),
            )
        };
        let everything = notification(event);
        self.broadcast(|session| {
            let connected = matches!(session.channel, Channel::Connection(_));
            if !connected || !at_least(level, session.log_level.unwrap_or(LoggingLevel::Debug)) {
                return None;
            }
            match session.grant.as_deref() {
                None | Some(Grant::All) => Some(everything.clone()),
                Some(grant) => event
                    .as_heard_by(grant, || counts(grant))
                    .map(|heard| notification(&heard)),
            }
        });
    }

    /// A server's log message. `owner`: the one session whose calls were running on that
    /// connection when it came, which alone gets it. Without an owner (outside any call, or
    /// with calls of several sessions in flight) it goes only to the sessions that asked
    /// for server logs with `logging/setLevel`, at their level; the others never see one
    /// client's data logged during another's call.
    /// A per-client instance's server (`audience`) is heard by its own sessions only, as
    /// the owner of what it says outside a call.
    pub fn log_from_server(
        &self,
        server: &str,
        owner: Option<SessionId>,
        audience: Option<&Audience>,
        level: LoggingLevel,
        logger: &str,
        data: serde_json::Value,
    ) {
        let notification = log_notification(level, logger, data);
        let bytes = json_size(&notification);
        let sessions = self.lock();
        for (id, session) in sessions.iter() {
            if !session.may_see(server) {
                continue;
            }
            // A call's own logs are its client's; the rest of an instance's, its audience's.
            let owner = match (owner, audience) {
                (Some(owner), _) => Some(owner),
                (None, Some(audience)) if audience.contains(*id) => Some(*id),
                (None, Some(_)) => continue,
                (None, None) => None,
            };
            let wanted = match (&session.channel, owner) {
                (Channel::Listen(_), _) => false,
                // A 2026-07-28 request gets logs only at the level it asked for, if any.
                (Channel::Request(_), owner) => {
                    owner == Some(*id)
                        && session
                            .log_level
                            .is_some_and(|asked| at_least(level, asked))
                }
                (Channel::Connection(_), Some(owner)) => {
                    *id == owner
                        && at_least(level, session.log_level.unwrap_or(LoggingLevel::Debug))
                }
                (Channel::Connection(_), None) => session
                    .log_level
                    .is_some_and(|asked| at_least(level, asked)),
            };
            if wanted {
                session.queue(notification.clone(), bytes, &self.total);
            }
        }
    }

    pub fn resource_updated(&self, uri: &str) {
        self.resource_updated_to(uri, None);
    }

    /// [`Sessions::resource_updated`] by a per-client instance: to its `audience` only.
    pub fn resource_updated_to(&self, uri: &str, audience: Option<&Audience>) {
        let notification = ServerNotification::ResourceUpdatedNotification(
            rmcp::model::Notification::new(ResourceUpdatedNotificationParam::new(uri)),
        );
        let Some(audience) = audience else {
            self.broadcast(|session| {
                session
                    .subscriptions
                    .contains(uri)
                    .then(|| notification.clone())
            });
            return;
        };
        let bytes = json_size(&notification);
        let sessions = self.lock();
        let heard = audience
            .sessions()
            .into_iter()
            .filter_map(|id| sessions.get(&id));
        for session in heard.filter(|session| session.subscriptions.contains(uri)) {
            session.queue(notification.clone(), bytes, &self.total);
        }
    }

    /// Queue for every session the filter picks, without waiting on any of them: one slow
    /// client must not hold up the others or the caller. Each session gets its
    /// notifications in the order they were queued (a status change never overtakes the
    /// one before it).
    fn broadcast(&self, filter: impl Fn(&Session) -> Option<ServerNotification>) {
        let mut size = None;
        for session in self.lock().values() {
            if let Some(notification) = filter(session) {
                let bytes = *size.get_or_insert_with(|| json_size(&notification));
                session.queue(notification, bytes, &self.total);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Box<Session>>> {
        crate::lock::lock(&self.sessions)
    }
}

/// How long `value` is as JSON, without writing it anywhere.
pub(crate) fn json_size<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

fn log_notification(
    level: LoggingLevel,
    logger: &str,
    data: serde_json::Value,
) -> ServerNotification {
    let params = LoggingMessageNotificationParam::new(level, data).with_logger(logger);
    ServerNotification::LoggingMessageNotification(rmcp::model::Notification::new(params))
}

/// Is `level` at least as severe as `threshold`?
fn at_least(level: LoggingLevel, threshold: LoggingLevel) -> bool {
    level as u8 >= threshold as u8
}
