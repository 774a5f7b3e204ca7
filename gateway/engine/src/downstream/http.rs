//! Streamable HTTP for clients: `/mcp` on hyper, sessions shared by nothing but the upstreams.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;

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
use super::SessionHandler;
use crate::commands::CommandQueue;
use crate::config::HttpSettings;
use crate::gateway::Gateway;

pub const ENDPOINT: &str = "/mcp";

/// What one client connection may hold, with the documented defaults. Each limit refuses
/// cleanly (an HTTP status and a body saying which limit) and never touches other clients.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Open client connections at once; more are answered 503 and closed. Default 1024,
    /// and never more than the file-descriptor limit less [`FD_RESERVE`].
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
}

impl HttpLimits {
    /// The defaults, with what the config sets.
    pub fn from_settings(settings: &HttpSettings) -> HttpLimits {
        HttpLimits {
            max_body_bytes: settings.max_body_bytes,
            session_idle: settings.session_idle,
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
            Ok(SessionHandler::new(
                factory_gateway.clone(),
                commands.clone(),
            ))
        },
        sessions.clone(),
        config,
    );
    let max_connections = limits.max_connections.min(connection_budget());
    let connections = Arc::new(tokio::sync::Semaphore::new(max_connections));
    let body_budget = Arc::new(tokio::sync::Semaphore::new(
        limits
            .body_budget_bytes
            .min(tokio::sync::Semaphore::MAX_PERMITS),
    ));
    let door = Arc::new(Door {
        mcp,
        guard,
        sessions,
        limits: limits.clone(),
        settings,
        body_budget,
        forwarder: peers.map(Forwarder::new),
    });
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!("serving MCP over Streamable HTTP at {scheme}://{local}{ENDPOINT}");
    tracing::debug!(
        max_connections,
        "client connection limits: {limits:?}, {FD_RESERVE} file descriptors kept for servers"
    );
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: keep serving the others.
                    tracing::warn!("accept failed: {error}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // An answer goes out in pieces (headers, then events); without this, Nagle's
        // algorithm holds the later pieces until the client's delayed ACK, ~40 ms a request.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%peer, "could not set TCP_NODELAY: {error}");
        }
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            if tls.is_none() {
                tokio::spawn(refuse_busy(stream, max_connections));
            }
            continue;
        };
        let door = door.clone();
        let stop = stop.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let limits = door.limits.clone();
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let door = door.clone();
                async move { Ok::<_, std::convert::Infallible>(door.answer(request, peer).await) }
            });
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .max_buf_size(64 * 1024);
            builder
                .http2()
                .timer(TokioTimer::new())
                .max_concurrent_streams(limits.max_http2_streams)
                .max_header_list_size(64 * 1024)
                .initial_stream_window_size(256 * 1024)
                .initial_connection_window_size(1024 * 1024)
                .max_send_buf_size(256 * 1024);
            let result = match tls {
                None => {
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        result = connection => result,
                        _ = stop.cancelled() => Ok(()),
                    }
                }
                Some(tls) => {
                    // The handshake has the header block's time limit.
                    let handshake =
                        tokio::time::timeout(limits.header_read_timeout, tls.accept(stream));
                    let stream = match handshake.await {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, "TLS handshake failed: {error}");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        result = connection => result,
                        _ = stop.cancelled() => Ok(()),
                    }
                }
            };
            if let Err(error) = result {
                tracing::debug!(%peer, "client connection ended: {error}");
            }
        });
    }
}

/// Everything one request passes through before rmcp's session layer sees it.
struct Door {
    mcp: StreamableHttpService<SessionHandler, IdleExpiry>,
    guard: Arc<Guard>,
    sessions: Arc<IdleExpiry>,
    limits: HttpLimits,
    settings: HttpSettings,
    body_budget: Arc<tokio::sync::Semaphore>,
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
                    return guard::error(
                        StatusCode::NOT_FOUND,
                        "session not found; start a new one with initialize",
                    );
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
        let opening =
            if parts.method == hyper::Method::POST && session.is_none() && is_initialize(&body) {
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
        response
    }
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

/// The most client connections the file-descriptor limit allows, after [`FD_RESERVE`].
fn connection_budget() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return usize::MAX;
    }
    (limit.rlim_cur as usize).saturating_sub(FD_RESERVE).max(1)
}

/// Answer a connection over the cap with 503 and close it, without reading its request.
async fn refuse_busy(mut stream: tokio::net::TcpStream, max_connections: usize) {
    use tokio::io::AsyncWriteExt;
    let body = format!(
        "{{\"error\": \"the gateway has {max_connections} client connections open, its limit; retry shortly\"}}\n"
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        stream.write_all(response.as_bytes()),
    )
    .await;
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
    held: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl<B> Deadline<B> {
    fn new(body: B, timeout: Duration, budget: Arc<tokio::sync::Semaphore>) -> Self {
        Deadline {
            body,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            budget,
            held: None,
        }
    }

    /// Count `bytes` more against the budget; false when the budget has no room.
    fn hold(&mut self, bytes: usize) -> bool {
        let Ok(bytes) = u32::try_from(bytes) else {
            return false;
        };
        match self.budget.clone().try_acquire_many_owned(bytes) {
            Ok(permit) => {
                match &mut self.held {
                    Some(held) => held.merge(permit),
                    None => self.held = Some(permit),
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
    #[error("the gateway is holding as many request bodies as it may; retry shortly")]
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
