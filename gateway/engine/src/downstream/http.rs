//! Streamable HTTP for clients: `/mcp` on hyper, sessions shared by nothing but the upstreams.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;

use super::idle::IdleExpiry;
use super::SessionHandler;
use crate::gateway::Gateway;

pub const ENDPOINT: &str = "/mcp";

/// Accept clients on `listener` until the gateway shuts down; a session unused for
/// `session_idle` (no request and no open stream) is closed.
pub async fn serve(
    gateway: Arc<Gateway>,
    listener: TcpListener,
    session_idle: Duration,
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
        move || Ok(SessionHandler::new(factory_gateway.clone())),
        IdleExpiry::start(session_idle, stop.child_token()),
        config,
    );
    tracing::info!("serving MCP over Streamable HTTP at http://{local}{ENDPOINT}");
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
        // Without it, a client that writes headers and body in two packets waits for a
        // delayed ACK (~40 ms) on every request (Nagle's algorithm).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%peer, "could not set TCP_NODELAY: {error}");
        }
        let mcp = mcp.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let mcp = mcp.clone();
                async move {
                    if request.uri().path() != ENDPOINT {
                        return Ok::<_, std::convert::Infallible>(not_found(request.uri().path()));
                    }
                    Ok(mcp.handle(request).await)
                }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
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

fn not_found(path: &str) -> Response<BoxBody<bytes::Bytes, std::convert::Infallible>> {
    let body = format!("no MCP endpoint at {path}; use {ENDPOINT}\n");
    Response::builder()
        .status(StatusCode::NOT_FOUND)
        .header("content-type", "text/plain")
        .body(Full::new(bytes::Bytes::from(body)).boxed())
        .expect("static response")
}
