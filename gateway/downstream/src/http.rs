//! Streamable HTTP for clients: `/mcp` on hyper, sessions shared by nothing but the upstreams.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;

mod admission;
pub mod credentials;
mod guard;
pub(crate) mod jwt;
mod peers;
pub mod tls;

pub use guard::Identity;
use guard::{Guard, Reply};
pub use peers::Peers;
use peers::{session_tag, Forwarder};

use super::idle::{IdleExpiry, SessionCap};
use super::{runs, SessionHandler, Traced};
use admission::BodyShare;
pub use admission::{Admission, Door as AdmissionDoor, Shares, ADMIN_MAX_CONNECTIONS};
use wardgate_engine::commands::CommandQueue;
use wardgate_engine::config::HttpSettings;
use wardgate_engine::gateway::Gateway;

pub const ENDPOINT: &str = "/mcp";

/// What one client connection may hold, with the documented defaults. Each limit refuses
/// cleanly (an HTTP status and a body saying which limit) and never touches other clients.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Open client connections at once; more are answered 503 and closed. Default 1024,
    /// and never more than the file-descriptor limit less [`FD_RESERVE`] and the admin API's
    /// [`ADMIN_MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// To send a request's header block; a connection that takes longer is closed. Default 10 s.
    pub header_read_timeout: Duration,
    /// To send a request's body once its headers are in; longer is an error. Default 30 s.
    pub body_read_timeout: Duration,
    /// The largest request body; a larger one is answered 413. Default 8 MiB
    /// (`[gateway.http] max_body_bytes`).
    pub max_body_bytes: usize,
    /// Request bodies being read or held, all connections together; a body that would go
    /// past it fails ("retry shortly"). Default 256 MiB: many connections each sending a
    /// large body slowly cannot make the gateway hold more than that.
    pub body_budget_bytes: usize,
    /// HTTP/2 streams at once on one connection. Default 8: a request body is read whole
    /// (up to `max_body_bytes`), so one connection can make the gateway hold 8 at most.
    pub max_http2_streams: u32,
    /// A session with no request and no open stream for this long is closed. Default 5 min
    /// (`[gateway.http] session_idle`).
    pub session_idle: Duration,
    /// A connection with no request in flight and no open stream for this long is closed
    /// (an HTTP/2 connection with no stream, an idle keep-alive). Default 60 s.
    pub connection_idle: Duration,
    /// Connections one address (an IPv6 /64 is one) may hold. Default a quarter of
    /// `max_connections` (`[gateway.http] max_connections_per_address`: raise it behind a
    /// proxy, where every client has the proxy's address).
    pub max_connections_per_address: Option<usize>,
}

impl HttpLimits {
    /// The defaults, with what the config sets.
    pub fn from_settings(settings: &HttpSettings) -> HttpLimits {
        HttpLimits {
            max_body_bytes: settings.max_body_bytes,
            session_idle: settings.session_idle,
            max_connections_per_address: settings.max_connections_per_address,
            ..HttpLimits::default()
        }
    }
}

/// File descriptors kept free of client connections, so the gateway can still spawn and
/// restart stdio servers (three pipes each) and reach HTTP upstreams when clients crowd in.
pub const FD_RESERVE: usize = 256;

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_body_bytes: 8 * 1024 * 1024,
            body_budget_bytes: 256 * 1024 * 1024,
            max_http2_streams: 8,
            session_idle: super::idle::IDLE,
            connection_idle: Duration::from_secs(60),
            max_connections_per_address: None,
        }
    }
}

/// Accept clients on `listener` until the gateway shuts down, within `limits`, admitting
/// them by the gateway's `[gateway.http]` and `[gateway.auth]` settings. `commands` is the
/// operator command queue (the admin tools submit to it). With `tls`, every connection is
/// TLS (`https://`). With `peers` (a fleet member), session ids name this member, and a
/// request for a session another member holds is handed to it.
pub async fn serve(
    gateway: Arc<Gateway>,
    commands: Arc<CommandQueue>,
    listener: TcpListener,
    limits: HttpLimits,
    tls: Option<tls::Acceptor>,
    peers: Option<Arc<dyn Peers>>,
) -> std::io::Result<()> {
    let stop = gateway.shutdown_token();
    let local: SocketAddr = listener.local_addr()?;
    let settings = gateway.settings.http.clone();
    let guard = Arc::new(Guard::new(&settings, &gateway.settings.auth, local));
    guard.warm_up();
    {
        let guard = guard.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(10)) => guard.tidy(),
                }
            }
        });
    }
    // Host and Origin are checked by `Guard`, with errors that say which setting to change;
    // rmcp's own checks are off (an empty host list admits every host).
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(Vec::<String>::new())
        .with_max_request_body_bytes(limits.max_body_bytes)
        .with_cancellation_token(stop.child_token());
    let factory_gateway = gateway.clone();
    let tag = peers
        .as_ref()
        .map(|peers| session_tag(peers.name()))
        .unwrap_or_default();
    let sessions = IdleExpiry::start(limits.session_idle, tag, stop.child_token());
    let mcp = StreamableHttpService::new(
        move || {
            Ok(Traced::new(SessionHandler::new(
                factory_gateway.clone(),
                commands.clone(),
            )))
        },
        sessions.clone(),
        config,
    );
    let max_connections = limits.max_connections.min(connection_budget());
    let mut admission = Admission::clients(max_connections, limits.header_read_timeout);
    admission.connection_idle = limits.connection_idle;
    if let Some(per_address) = limits.max_connections_per_address {
        admission.max_connections_per_address = per_address.clamp(1, max_connections);
    }
    if let Some(http2) = &mut admission.http2 {
        http2.max_concurrent_streams = limits.max_http2_streams;
    }
    let body_budget = limits
        .body_budget_bytes
        .min(tokio::sync::Semaphore::MAX_PERMITS);
    // An address may hold a quarter of the bodies' budget, and always one body of the
    // largest size.
    let body_share = (body_budget / 4).max(limits.max_body_bytes.min(body_budget));
    let shares = Shares::new(admission.max_connections_per_address, body_share);
    let door = Arc::new(Door {
        mcp,
        guard,
        sessions,
        limits: limits.clone(),
        settings,
        body_budget: Arc::new(tokio::sync::Semaphore::new(body_budget)),
        shares: shares.clone(),
        forwarder: peers.map(Forwarder::new),
    });
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!("serving MCP over Streamable HTTP at {scheme}://{local}{ENDPOINT}");
    tracing::debug!(
        "client connection limits: {limits:?}, {admission:?}, {FD_RESERVE} file descriptors kept for servers"
    );
    admission::Door::new(listener, admission, shares, tls)
        .serve(stop, move |request, peer| {
            let door = door.clone();
            async move { door.answer(request, peer).await }
        })
        .await;
    Ok(())
}

/// Everything one request passes through before rmcp's session layer sees it.
struct Door {
    mcp: StreamableHttpService<Traced, IdleExpiry>,
    guard: Arc<Guard>,
    sessions: Arc<IdleExpiry>,
    limits: HttpLimits,
    settings: HttpSettings,
    body_budget: Arc<tokio::sync::Semaphore>,
    /// What each address holds of the bodies' budget.
    shares: Arc<Shares>,
    /// In a fleet: hands requests for other members' sessions to them.
    forwarder: Option<Forwarder>,
}

impl Door {
    async fn answer(&self, request: Request<Incoming>, peer: SocketAddr) -> Reply {
        if let Some(metadata) = self.guard.metadata(&request) {
            return metadata;
        }
        if request.uri().path() != ENDPOINT {
            return not_found(request.uri().path());
        }
        let identity = match self.guard.admit(&request, peer).await {
            Ok(identity) => identity,
            Err(refused) => return refused,
        };
        let session = request
            .headers()
            .get(SESSION_HEADER)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        // A session is its client's: another client presenting its id is told what any
        // unknown id is told, so ids cannot be probed.
        if let (Some(id), true) = (&session, identity.authenticated) {
            if let Some(owner) = self.sessions.owner(id) {
                if owner.as_deref() != Some(&*identity.key) {
                    return no_such_session();
                }
            }
        }
        let declared = request
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|length| length > self.limits.max_body_bytes as u64) {
            return too_large(self.limits.max_body_bytes);
        }
        let (mut parts, body) = request.into_parts();
        let mut body = Deadline::new(
            body,
            self.limits.body_read_timeout,
            self.body_budget.clone(),
            (self.shares.clone(), peer.ip()),
        );
        let mut collected = bytes::BytesMut::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        if collected.len() + data.len() > self.limits.max_body_bytes {
                            return too_large(self.limits.max_body_bytes);
                        }
                        collected.extend_from_slice(&data);
                    }
                }
                Err(failure) => return failure.reply(),
            }
        }
        // The bytes stay counted against the budget until rmcp (or the member that holds
        // the session) has read them.
        let held = body.held.take();
        let body = collected.freeze();
        if let (Some(forwarder), Some(id)) = (&self.forwarder, &session) {
            if let Some(owner) = forwarder.owner_elsewhere(id, &parts.headers) {
                return forwarder.forward(&owner, parts, body, held).await;
            }
        }
        let _held = held;
        if session
            .as_deref()
            .is_some_and(|id| self.sessions.owner(id).is_none())
        {
            return no_such_session();
        }
        let posted = parts.method == hyper::Method::POST;
        let initialize = posted && session.is_none() && is_initialize(&body);
        // A 2025-11-25 session (it names its revision in every request after `initialize`)
        // is told of tasks in its `initialize` result and tool lists, and its task requests
        // get the gateway's methods, which rmcp hands over whole.
        let tasks_era = posted
            && parts
                .headers
                .get(PROTOCOL_VERSION_HEADER)
                .is_some_and(|version| version == runs::wire::REVISION);
        let declare_tasks =
            initialize || (tasks_era && memchr::memmem::find(&body, b"\"tools/list\"").is_some());
        let body = match tasks_era
            .then(|| runs::wire::inbound_bytes(&body))
            .flatten()
        {
            Some(rewritten) => {
                parts
                    .headers
                    .insert(hyper::header::CONTENT_LENGTH, rewritten.len().into());
                bytes::Bytes::from(rewritten)
            }
            None => body,
        };
        let opening = if initialize {
            let per_client = identity
                .limited(peer.ip())
                .then_some(self.settings.max_sessions_per_client);
            match self
                .sessions
                .open(&identity.key, self.settings.max_sessions, per_client)
            {
                Ok(opening) => Some(opening),
                Err(cap) => return session_cap(cap, &identity.name),
            }
        } else {
            None
        };
        let deleting = parts.method == hyper::Method::DELETE;
        let key = identity.key.clone();
        parts.extensions.insert(identity);
        // A session rmcp opens for this request is this client's from its first moment
        // (`IdleExpiry::create_session` reads the owner), even if the client goes away
        // before the answer.
        let response = super::idle::OWNER
            .scope(
                key,
                self.mcp.handle(Request::from_parts(parts, Full::new(body))),
            )
            .await;
        drop(opening);
        // A session rmcp no longer knows (its handler ended before the reaper saw it): the
        // same answer as any unknown one.
        if session.is_some() && response.status() == StatusCode::NOT_FOUND {
            return no_such_session();
        }
        // rmcp answers a session's end with 202; clients (the official Python SDK among
        // them) expect 200 or 204, as for any finished request.
        if deleting && response.status() == StatusCode::ACCEPTED {
            let mut ended = Reply::new(Full::new(bytes::Bytes::new()).boxed());
            *ended.status_mut() = StatusCode::NO_CONTENT;
            return ended;
        }
        if declare_tasks && response.status() == StatusCode::OK {
            return declared_tasks(response);
        }
        response
    }
}

/// The header a handshake-era client names its session's protocol version in.
const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

/// `response` (an `initialize` result or a tool list, as SSE events or JSON) with tasks
/// declared for a 2025-11-25 session (`runs::wire::outbound`). rmcp writes each event whole,
/// as one frame, and its data on one line.
fn declared_tasks(response: Reply) -> Reply {
    let (mut parts, body) = response.into_parts();
    // The length changes with the rewrite.
    parts.headers.remove(hyper::header::CONTENT_LENGTH);
    let body = body.map_frame(|frame| {
        frame.map_data(|data| {
            if let Some(rewritten) = runs::wire::outbound_bytes(&data) {
                return bytes::Bytes::from(rewritten);
            }
            if memchr::memmem::find(&data, b"data:").is_none() {
                return data;
            }
            let mut changed = false;
            let mut out = Vec::with_capacity(data.len() + 128);
            for line in data.split_inclusive(|&byte| byte == b'\n') {
                let rewritten = line
                    .strip_prefix(b"data:")
                    .map(|rest| rest.strip_prefix(b" ").unwrap_or(rest))
                    .and_then(|json| {
                        let json = json.strip_suffix(b"\n").unwrap_or(json);
                        let json = json.strip_suffix(b"\r").unwrap_or(json);
                        runs::wire::outbound_bytes(json)
                    });
                match rewritten {
                    Some(json) => {
                        changed = true;
                        out.extend_from_slice(b"data: ");
                        out.extend_from_slice(&json);
                        out.push(b'\n');
                    }
                    None => out.extend_from_slice(line),
                }
            }
            if changed {
                bytes::Bytes::from(out)
            } else {
                data
            }
        })
    });
    Reply::from_parts(parts, body.boxed())
}

/// The answer to a session id that names no session of this client: the same for an
/// unknown, an expired and another client's session, so ids cannot be probed.
fn no_such_session() -> Reply {
    guard::error(
        StatusCode::NOT_FOUND,
        "session not found; start a new one with initialize",
    )
}

const SESSION_HEADER: &str = "mcp-session-id";

/// Whether a POST body is an `initialize` request (which opens a session).
fn is_initialize(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Peek<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Peek<'_>>(body)
        .ok()
        .and_then(|peek| peek.method)
        .is_some_and(|method| method == "initialize")
}

fn session_cap(cap: SessionCap, client: &str) -> Reply {
    let (status, message) = match cap {
        SessionCap::Total(max) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the gateway has {max} sessions open, its limit ([gateway.http] max_sessions); retry shortly"),
        ),
        SessionCap::PerClient(max) => (
            StatusCode::TOO_MANY_REQUESTS,
            format!("client {client:?} has {max} sessions open, its limit ([gateway.http] max_sessions_per_client); close one (DELETE /mcp with its session id) or reuse it"),
        ),
    };
    let mut reply = guard::error(status, &message);
    reply.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("5"),
    );
    reply
}

/// The most client connections the file-descriptor limit allows, after [`FD_RESERVE`] and
/// the admin API's connections.
fn connection_budget() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return usize::MAX;
    }
    (limit.rlim_cur as usize)
        .saturating_sub(FD_RESERVE + ADMIN_MAX_CONNECTIONS)
        .max(1)
}

fn too_large(max: usize) -> Reply {
    guard::error(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("the request body is larger than the gateway's limit of {max} bytes ([gateway.http] max_body_bytes)"),
    )
}

/// A request body that fails once `timeout` has passed since the headers arrived (a client
/// that sends a body slowly, or never finishes it, cannot hold its connection for ever), and
/// that counts its bytes against the budget of all bodies being held (released when it is
/// dropped, after the request has been read).
struct Deadline<B> {
    body: B,
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    budget: Arc<tokio::sync::Semaphore>,
    /// The sender's address and what each address holds.
    share: (Arc<Shares>, IpAddr),
    held: Option<(tokio::sync::OwnedSemaphorePermit, BodyShare)>,
}

impl<B> Deadline<B> {
    fn new(
        body: B,
        timeout: Duration,
        budget: Arc<tokio::sync::Semaphore>,
        share: (Arc<Shares>, IpAddr),
    ) -> Self {
        Deadline {
            body,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            budget,
            share,
            held: None,
        }
    }

    /// Count `bytes` more against the sender's share and the budget; false when either has
    /// no room.
    fn hold(&mut self, bytes: usize) -> bool {
        let Ok(permits) = u32::try_from(bytes) else {
            return false;
        };
        let Some(share) = self.share.0.hold(self.share.1, bytes) else {
            return false;
        };
        match self.budget.clone().try_acquire_many_owned(permits) {
            Ok(permit) => {
                match &mut self.held {
                    Some((held, held_share)) => {
                        held.merge(permit);
                        held_share.merge(share);
                    }
                    None => self.held = Some((permit, share)),
                }
                true
            }
            Err(_) => false,
        }
    }
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
enum BodyFailure {
    #[error("the request body did not arrive within the gateway's body read timeout")]
    Timeout,
    #[error("the gateway is holding as many request bodies (from this address, or in all) as it may; retry shortly")]
    Budget,
    #[error("the request body could not be read: {0}")]
    Read(String),
}

impl BodyFailure {
    fn reply(&self) -> Reply {
        let status = match self {
            BodyFailure::Timeout => StatusCode::REQUEST_TIMEOUT,
            BodyFailure::Budget => StatusCode::SERVICE_UNAVAILABLE,
            BodyFailure::Read(_) => StatusCode::BAD_REQUEST,
        };
        guard::error(status, &self.to_string())
    }
}

impl<B> hyper::body::Body for Deadline<B>
where
    B: hyper::body::Body + Unpin,
    B::Error: std::fmt::Display,
{
    type Data = B::Data;
    type Error = BodyFailure;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        if let Poll::Ready(frame) = std::pin::Pin::new(&mut self.body).poll_frame(cx) {
            if let Some(Ok(frame)) = &frame {
                let bytes = frame.data_ref().map_or(0, bytes::Buf::remaining);
                if bytes > 0 && !self.hold(bytes) {
                    return Poll::Ready(Some(Err(BodyFailure::Budget)));
                }
            }
            return Poll::Ready(
                frame.map(|frame| frame.map_err(|error| BodyFailure::Read(error.to_string()))),
            );
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(BodyFailure::Timeout)));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

fn not_found(path: &str) -> Reply {
    let body = format!("no MCP endpoint at {path}; use {ENDPOINT}\n");
    Response::builder()
        .status(StatusCode::NOT_FOUND)
        .header("content-type", "text/plain")
        .body(Full::new(bytes::Bytes::from(body)).boxed())
        .expect("static response")
}
