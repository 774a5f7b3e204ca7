//! HTTP serving on hyper: the accept loop both HTTP modes share, and Streamable HTTP at `/mcp`.

use std::{
    convert::Infallible,
    future::Future,
    io::Write,
    sync::{Arc, Mutex, PoisonError},
};

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use rmcp::transport::{
    streamable_http_server::session::local::LocalSessionManager, StreamableHttpServerConfig,
    StreamableHttpService,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{server::FakeServer, state::Shared};

/// The body type of every response the fake sends (rmcp's own responses use it too).
pub type Body = BoxBody<Bytes, Infallible>;

pub fn text_response(status: StatusCode, text: impl Into<String>) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(text.into())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Binds 127.0.0.1:`port` and announces the address on stdout, the one line tests wait for.
pub async fn bind(port: u16) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|error| {
            std::io::Error::new(
                error.kind(),
                format!("cannot listen on 127.0.0.1:{port}: {error}"),
            )
        })?;
    let address = listener.local_addr()?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "LISTENING http://{address}")?;
    stdout.flush()?;
    Ok(listener)
}

/// Serves HTTP/1.1 connections until the process ends, answering each request
/// with `handle`, or with the scripted status when `--http-status` is set.
pub async fn serve_connections<H, F>(shared: Arc<Shared>, listener: TcpListener, handle: H)
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors and the like: wait for the next client rather than exit.
                shared.say(format!("accept failed: {error}"));
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let handle = handle.clone();
        let forced = shared.clone();
        let service = service_fn(move |request: Request<Incoming>| {
            let handle = handle.clone();
            let forced_status = forced.forced_http_status();
            async move {
                let response = match forced_status {
                    Some(status) => forced_response(status),
                    None => handle(request).await,
                };
                Ok::<_, Infallible>(response)
            }
        });
        let shared = shared.clone();
        tokio::spawn(async move {
            let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            match connection.await {
                // A client dropping an open event stream is an ordinary way to leave.
                Err(error) if !error.is_incomplete_message() => {
                    shared.say(format!("HTTP connection ended with an error: {error}"));
                }
                _ => {}
            }
        });
    }
}

/// The answer to every request under `--http-status`; a 401 says which scheme to use.
fn forced_response(status: StatusCode) -> Response<Body> {
    let mut response = text_response(status, format!("scripted HTTP status {status}\n"));
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    response
}

type McpService = StreamableHttpService<FakeServer, LocalSessionManager>;

/// rmcp's Streamable HTTP service plus the token that ends all of its sessions.
struct Generation {
    service: McpService,
    shutdown: CancellationToken,
}

impl Generation {
    fn new(shared: &Arc<Shared>) -> Self {
        let shutdown = CancellationToken::new();
        let config = StreamableHttpServerConfig::default()
            .with_cancellation_token(shutdown.clone())
            .with_json_response(shared.json_response);
        let factory_shared = shared.clone();
        let service = StreamableHttpService::new(
            move || Ok(FakeServer::new(factory_shared.clone())),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        Self { service, shutdown }
    }
}

/// Streamable HTTP at `/mcp`. `--expire-session-after` swaps in a fresh
/// generation with no sessions, so old session ids get rmcp's 404.
struct StreamableEndpoint {
    shared: Arc<Shared>,
    generation: Mutex<Generation>,
}

impl StreamableEndpoint {
    async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        if request.uri().path() != "/mcp" {
            return text_response(
                StatusCode::NOT_FOUND,
                "not found: the MCP endpoint is /mcp\n",
            );
        }
        let service = self.current_service();
        service.handle(request).await
    }

    fn current_service(&self) -> McpService {
        let mut generation = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.shared.take_session_expiry() {
            let expired = std::mem::replace(&mut *generation, Generation::new(&self.shared));
            expired.shutdown.cancel();
            self.shared
                .say("forgot all sessions (--expire-session-after)");
        }
        generation.service.clone()
    }
}

pub async fn run(shared: Arc<Shared>, listener: TcpListener) {
    let endpoint = Arc::new(StreamableEndpoint {
        generation: Mutex::new(Generation::new(&shared)),
        shared: shared.clone(),
    });
    serve_connections(shared, listener, move |request| {
        let endpoint = endpoint.clone();
        async move { endpoint.handle(request).await }
    })
    .await
}
