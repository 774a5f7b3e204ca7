//! The status page at `/`: HTML, CSS and JavaScript embedded in the binary (nothing loads
//! from elsewhere), and `GET /gateway`, the gateway's own health as the page shows it.

use std::time::{Instant, SystemTime};

use bytes::Bytes;
use hyper::StatusCode;

use super::reply::{self, Response};
use super::Admin;

const INDEX: &str = include_str!("../../assets/status/index.html");
const SCRIPT: &str = include_str!("../../assets/status/app.js");
const STYLE: &str = include_str!("../../assets/status/app.css");
const ICON: &str = include_str!("../../assets/status/favicon.svg");

/// Only this origin's own files run, nothing may frame the page (its buttons restart
/// servers), and no form or link leaves it.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The page's files by path; none of them holds data, so they are served without the token
/// (the page asks for it, and sends it with every request for data).
pub fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    Some(match path {
        "" | "/" | "/index.html" => ("text/html; charset=utf-8", INDEX),
        "/ui/app.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "/ui/app.css" => ("text/css; charset=utf-8", STYLE),
        "/ui/favicon.svg" => ("image/svg+xml", ICON),
        _ => return None,
    })
}

pub fn serve(content_type: &'static str, body: &'static str) -> Response {
    let mut response = reply::bytes(
        StatusCode::OK,
        content_type,
        Bytes::from_static(body.as_bytes()),
    );
    let headers = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        // The files change with the binary; a browser asks again after a restart.
        ("cache-control", "no-cache"),
    ] {
        headers.insert(name, hyper::header::HeaderValue::from_static(value));
    }
    response
}

/// When the gateway started, for `/gateway`.
pub struct Started {
    pub at: SystemTime,
    pub instant: Instant,
}

impl Started {
    pub fn now() -> Started {
        Started {
            at: SystemTime::now(),
            instant: Instant::now(),
        }
    }
}

/// `GET /gateway`: version, uptime, readiness and how many servers are online.
pub fn gateway(admin: &Admin) -> Response {
    let servers = admin.gateway.servers();
    let online = servers
        .iter()
        .filter(|server| server.status == "online")
        .count();
    let reasons = admin.policies.not_ready();
    reply::ok(&serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "started_at": humantime::format_rfc3339_millis(admin.started.at).to_string(),
        "uptime_ms": u64::try_from(admin.started.instant.elapsed().as_millis()).unwrap_or(u64::MAX),
        "ready": reasons.is_empty(),
        "reasons": reasons,
        "servers": servers.len(),
        "online": online,
        "config": admin.gateway.config().source.display().to_string(),
        "admin_token": admin.token_required,
    }))
}
