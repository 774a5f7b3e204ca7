//! The admin HTTP API: server status, events, policies, metrics and commands for operators.
//!
//! Off unless `--admin HOST:PORT` is given. A non-loopback address needs a token; a
//! configured token is checked on every request. JSON everywhere but `/metrics` (Prometheus
//! text) and `/events` (Server-Sent Events); errors are `{"error": "..."}` naming the fix.

mod auth;
mod commands;
mod events;
mod metrics;
mod page;
mod reply;
mod routes;
mod servers;

use std::sync::Arc;

use anyhow::Context;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use wardgate_engine::events::GatewayEvent;
use wardgate_engine::Gateway;

use crate::feed::Feed;

use crate::policies::Policies;

pub use events::start as record_events;
pub use page::Started;

/// Everything the API reads and acts on.
pub struct Admin {
    pub gateway: Arc<Gateway>,
    pub policies: Arc<Policies>,
    pub events: Arc<Feed<GatewayEvent>>,
    pub queue: Arc<wardgate_engine::commands::CommandQueue>,
    /// In a fleet: commands submitted here go through the fleet's table.
    pub member: Option<Arc<crate::fleet::Member>>,
    pub started: Started,
    /// Whether requests for data need the admin token (the page asks for it then).
    pub token_required: bool,
}

/// The admin socket, bound before any server starts so a bad address fails fast.
pub struct AdminListener {
    listener: TcpListener,
    guard: auth::Guard,
}

impl AdminListener {
    /// Bind `address`. Refuses a non-loopback address without a token: anyone who can reach
    /// it could restart or disable servers.
    pub async fn bind(address: &str, token: Option<String>) -> anyhow::Result<AdminListener> {
        let token = token.filter(|token| !token.is_empty());
        let listener = TcpListener::bind(address).await.with_context(|| {
            format!("could not bind the admin API on {address}; pick a free address with --admin HOST:PORT")
        })?;
        let local = listener.local_addr()?;
        if !local.ip().is_loopback() && token.is_none() {
            anyhow::bail!(
                "refusing to serve the admin API on {address} ({local}) without a token: it is not a loopback address, \
                 so anyone who can reach it could restart or disable servers; set WARDGATE_ADMIN_TOKEN (or pass \
                 --admin-token TOKEN), or bind to loopback, such as --admin 127.0.0.1:{}",
                local.port()
            );
        }
        Ok(AdminListener {
            guard: auth::Guard::new(token, local),
            listener,
        })
    }

    pub fn has_token(&self) -> bool {
        self.guard.has_token()
    }

    /// The bound address, `http://HOST:PORT`.
    pub fn address(&self) -> Option<String> {
        self.listener
            .local_addr()
            .ok()
            .map(|local| format!("http://{local}"))
    }

    /// Serve the API until `stop` fires. Never writes to stdout.
    pub async fn serve(self, admin: Arc<Admin>, stop: CancellationToken) {
        let AdminListener { listener, guard } = self;
        if let Ok(local) = listener.local_addr() {
            let protection = if guard.has_token() {
                "bearer token required"
            } else {
                "no token, loopback only"
            };
            tracing::info!("admin API at http://{local} ({protection})");
        }
        let guard = Arc::new(guard);
        loop {
            let (stream, peer) = tokio::select! {
                _ = stop.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::warn!("admin API: accept failed: {error}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            // As on /mcp: no Nagle stall waiting for the client's delayed ACK.
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%peer, "admin API: could not set TCP_NODELAY: {error}");
            }
            let admin = admin.clone();
            let guard = guard.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let admin = admin.clone();
                    let guard = guard.clone();
                    let stop = stop.clone();
                    async move {
                        let response = match guard.check(&request) {
                            Ok(access) => routes::handle(&admin, request, access, stop).await,
                            Err(refusal) => *refusal,
                        };
                        Ok::<_, std::convert::Infallible>(response)
                    }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let connection = builder.serve_connection(TokioIo::new(stream), service);
                if let Err(error) = connection.await {
                    tracing::debug!(%peer, "admin connection ended: {error}");
                }
            });
        }
    }
}
