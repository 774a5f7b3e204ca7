//! The admin HTTP API: server status, events, policies, metrics and commands for operators.
//!
//! Off unless `--admin HOST:PORT` is given. A non-loopback address needs a token; a
//! configured token is checked on every request. JSON everywhere but `/metrics` (Prometheus
//! text) and `/events` (Server-Sent Events); errors are `{"error": "..."}` naming the fix.

use crate::AppError;
mod auth;
mod commands;
mod events;
mod metrics;
mod page;
mod reply;
mod routes;
mod servers;

use std::sync::Arc;

use crate::error::Context;
use hyper::body::Incoming;
use hyper::Request;
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
    pub started: Started,
    /// Whether requests for data need the admin token (the page asks for it then).
    pub token_required: bool,
}

/// The admin socket, bound before any server starts so a bad address fails fast.
pub struct AdminListener {
    listener: TcpListener,
    guard: auth::Guard,
    /// TLS, when the API listens beyond loopback and the gateway has a certificate.
    tls: Option<wardgate_downstream::http::tls::Acceptor>,
}

impl AdminListener {
    /// Bind `address`. Refuses a non-loopback address without a token: anyone who can reach
    /// it could restart or disable servers.
    /// Beyond loopback, it is served over TLS with `tls` (the `--tls-cert` pair) when there
    /// is one.
    pub async fn bind(
        address: &str,
        token: Option<String>,
        tls: Option<wardgate_downstream::http::tls::Acceptor>,
    ) -> Result<AdminListener, AppError> {
        let token = token.filter(|token| !token.is_empty());
        let listener = TcpListener::bind(address).await.with_context(|| {
            format!("could not bind the admin API on {address}; pick a free address with --admin HOST:PORT")
        })?;
        let local = listener.local_addr()?;
        if !local.ip().is_loopback() && token.is_none() {
            return Err(AppError::new(format!(
                "refusing to serve the admin API on {address} ({local}) without a token: it is not a loopback address, \
                 so anyone who can reach it could restart or disable servers; set WARDGATE_ADMIN_TOKEN (or pass \
                 --admin-token TOKEN), or bind to loopback, such as --admin 127.0.0.1:{}",
                local.port()
            )));
        }
        let tls = tls.filter(|_| !local.ip().is_loopback());
        if !local.ip().is_loopback() && tls.is_none() {
            tracing::warn!(
                "the admin API on {local} is served without TLS: its token crosses the network in clear; give --tls-cert and --tls-key (the admin API uses them too), or bind it to loopback"
            );
        }
        Ok(AdminListener {
            guard: auth::Guard::new(token, local),
            listener,
            tls,
        })
    }

    pub fn has_token(&self) -> bool {
        self.guard.has_token()
    }

    /// The bound address, `http://HOST:PORT` (`https://` with TLS).
    pub fn address(&self) -> Option<String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.listener
            .local_addr()
            .ok()
            .map(|local| format!("{scheme}://{local}"))
    }

    /// Serve the API until `stop` fires. Never writes to stdout.
    pub async fn serve(self, admin: Arc<Admin>, stop: CancellationToken) {
        let address = self.address();
        let AdminListener {
            listener,
            guard,
            tls,
        } = self;
        if let Some(local) = address {
            let protection = if guard.has_token() {
                "bearer token required"
            } else {
                "no token, loopback only"
            };
            tracing::info!("admin API at {local} ({protection})");
        }
        let guard = Arc::new(guard);
        // The same kinds of limits as /mcp: a small cap shared out per address, the
        // first-byte and header deadlines, idle connections closed; HTTP/1 only.
        let admission = wardgate_downstream::http::Admission::admin();
        let shares =
            wardgate_downstream::http::Shares::new(admission.max_connections_per_address, 0);
        wardgate_downstream::http::AdmissionDoor::new(listener, admission, shares, tls)
            .serve(stop.clone(), move |request: Request<Incoming>, _peer| {
                let admin = admin.clone();
                let guard = guard.clone();
                let stop = stop.clone();
                async move {
                    match guard.check(&request) {
                        Ok(access) => routes::handle(&admin, request, access, stop).await,
                        Err(refusal) => *refusal,
                    }
                }
            })
            .await;
    }
}
