//! Streamable HTTP for clients: `/mcp` on hyper, sessions shared by nothing but the upstreams.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::Limited;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;

use super::idle::IdleExpiry;
use super::SessionHandler;
use crate::commands::CommandQueue;
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
    /// The largest request body; a larger one is answered 413. Default 8 MiB.
    pub max_body_bytes: usize,
    /// Request bodies being read or held, all connections together; a body that would go
    /// past it fails ("retry shortly"). Default 256 MiB: many connections each sending a
    /// large body slowly cannot make the gateway hold more than that.
    pub body_budget_bytes: usize,
    /// HTTP/2 streams at once on one connection. Default 8: a request body is read whole
    /// (up to `max_body_bytes`), so one connection can make the gateway hold 8 at most.
    pub max_http2_streams: u32,
    /// A session with no request and no open stream for this long is closed. Default 5 min.
    pub session_idle: Duration,
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

/// Accept clients on `listener` until the gateway shuts down, within `limits`. `commands` is
/// the operator command queue (the admin tools submit to it).
pub async fn serve(
    gateway: Arc<Gateway>,
    commands: Arc<CommandQueue>,
    listener: TcpListener,
    limits: HttpLimits,
) -> std::io::Result<()> {
    let stop = gateway.shutdown_token();
    let local: SocketAddr = listener.local_addr()?;
    let mut allowed_hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    if !local.ip().is_unspecified() {
        allowed_hosts.push(local.ip().to_string());
    }
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts)
        .with_cancellation_token(stop.child_token());
    let factory_gateway = gateway.clone();
    let mcp = StreamableHttpService::new(
        move || {
            Ok(SessionHandler::new(
                factory_gateway.clone(),
                commands.clone(),
            ))
        },
        IdleExpiry::start(limits.session_idle, stop.child_token()),
        config,
    );
    let max_connections = limits.max_connections.min(connection_budget());
    let connections = Arc::new(tokio::sync::Semaphore::new(max_connections));
    let body_budget = Arc::new(tokio::sync::Semaphore::new(
        limits
            .body_budget_bytes
            .min(tokio::sync::Semaphore::MAX_PERMITS),
    ));
    let limits = Arc::new(limits);
    tracing::info!("serving MCP over Streamable HTTP at http://{local}{ENDPOINT}");
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
            tokio::spawn(refuse_busy(stream, max_connections));
            continue;
        };
        let mcp = mcp.clone();
        let stop = stop.clone();
        let limits = limits.clone();
        let body_budget = body_budget.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let body_limits = limits.clone();
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let mcp = mcp.clone();
                let limits = body_limits.clone();
                let body_budget = body_budget.clone();
                async move {
                    if request.uri().path() != ENDPOINT {
                        return Ok::<_, std::convert::Infallible>(not_found(request.uri().path()));
                    }
                    let declared = request
                        .headers()
                        .get(hyper::header::CONTENT_LENGTH)
                        .and_then(|value| value.to_str().ok())
                        .and_then(|value| value.parse::<u64>().ok());
                    if declared.is_some_and(|length| length > limits.max_body_bytes as u64) {
                        return Ok(too_large(limits.max_body_bytes));
                    }
                    let request = request.map(|body| {
                        Limited::new(
                            Deadline::new(body, limits.body_read_timeout, body_budget),
                            limits.max_body_bytes,
                        )
                    });
                    Ok(mcp.handle(request).await)
                }
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
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                result = connection => if let Err(error) = result {
                    tracing::debug!(%peer, "client connection ended: {error}");
                },
                _ = stop.cancelled() => {}
            }
        });
    }
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

fn too_large(max: usize) -> Response<BoxBody<bytes::Bytes, std::convert::Infallible>> {
    let body = format!(
        "{{\"error\": \"the request body is larger than the gateway's limit of {max} bytes\"}}\n"
    );
    Response::builder()
        .status(StatusCode::PAYLOAD_TOO_LARGE)
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(body)).boxed())
        .expect("static response")
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

impl<B> hyper::body::Body for Deadline<B>
where
    B: hyper::body::Body + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        if let Poll::Ready(frame) = std::pin::Pin::new(&mut self.body).poll_frame(cx) {
            if let Some(Ok(frame)) = &frame {
                let bytes = frame.data_ref().map_or(0, bytes::Buf::remaining);
                if bytes > 0 && !self.hold(bytes) {
                    return Poll::Ready(Some(Err(
                        "the gateway is holding as many request bodies as it may; retry shortly"
                            .into(),
                    )));
                }
            }
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(
                "the request body did not arrive within the gateway's body read timeout".into(),
            )));
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

fn not_found(path: &str) -> Response<BoxBody<bytes::Bytes, std::convert::Infallible>> {
    let body = format!("no MCP endpoint at {path}; use {ENDPOINT}\n");
    Response::builder()
        .status(StatusCode::NOT_FOUND)
        .header("content-type", "text/plain")
        .body(Full::new(bytes::Bytes::from(body)).boxed())
        .expect("static response")
}
