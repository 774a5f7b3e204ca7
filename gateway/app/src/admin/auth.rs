//! Who may use the admin API: a bearer token (compared in constant time) when one is set,
//! and never a web page (DNS rebinding, cross-site requests) when none is.

use std::net::SocketAddr;

use hyper::{Request, StatusCode};
use wardgate_downstream::http::credentials::{bearer, same, strip_port};

use super::reply::{self, Response};

/// Checks every request before it is routed.
pub struct Guard {
    token: Option<String>,
    allowed_hosts: Vec<String>,
}

impl Guard {
    pub fn new(token: Option<String>, local: SocketAddr) -> Guard {
        let mut allowed_hosts = vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "[::1]".to_owned(),
        ];
        if !local.ip().is_unspecified() {
            allowed_hosts.push(match local {
                SocketAddr::V4(v4) => v4.ip().to_string(),
                SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
            });
        }
        Guard {
            token,
            allowed_hosts,
        }
    }

    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Whether a request may pass, and as whom; `Err` is the answer to one that may not
    /// (boxed: a response is large, and passing is the common case).
    pub fn check<B>(&self, request: &Request<B>) -> Result<Access, Box<Response>> {
        // Browsers send Origin on cross-site and scripted requests; the CLI, curl and
        // Prometheus do not. Only the status page this address serves may script it: any
        // other page is refused, so it cannot drive the gateway. The page's own files hold
        // no data and are exempt: browsers fetch its script modules with an Origin, which a
        // proxy that rewrites Host would make look foreign.
        if let Some(origin) = request.headers().get(hyper::header::ORIGIN) {
            if !same_origin(origin, request) && !is_page(request) {
                return Err(Box::new(reply::error(
                    StatusCode::FORBIDDEN,
                    "requests from other web pages (with a foreign Origin header) are refused; open the status page this admin address serves at /, or use the wardgate CLI, curl or a script",
                )));
            }
        }
        match &self.token {
            Some(token) => {
                let presented = request
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|value| value.to_str().ok())
                    .and_then(bearer);
                match presented {
                    Some(presented) if same(presented, token) => Ok(Access::Operator),
                    // Liveness and readiness probes carry no token; what they read reveals nothing.
                    _ if is_probe(request) => Ok(Access::Probe),
                    // The status page's files hold no data; the page asks for the token.
                    _ if is_page(request) => Ok(Access::Page),
                    Some(_) => Err(Box::new(unauthorized(
                        "the admin token is wrong; send the token the gateway was started with (--admin-token, --admin-token-file or WARDGATE_ADMIN_TOKEN)",
                    ))),
                    None => Err(Box::new(unauthorized(
                        "the admin API requires a token; send Authorization: Bearer TOKEN (the CLI reads --admin-token, --admin-token-file or WARDGATE_ADMIN_TOKEN)",
                    ))),
                }
            }
            // No token: reachable on loopback only, so the remaining risk is a web page
            // reaching it through a rebound DNS name; those arrive with a foreign Host.
            None => {
                let host = request
                    .headers()
                    .get(hyper::header::HOST)
                    .and_then(|value| value.to_str().ok())
                    .map(strip_port)
                    .unwrap_or("");
                if self.allowed_hosts.iter().any(|allowed| allowed == host) {
                    Ok(Access::Operator)
                } else {
                    Err(Box::new(reply::error(
                        StatusCode::FORBIDDEN,
                        &format!("the Host header {host:?} is not this gateway's loopback address; connect to 127.0.0.1 or localhost, or start the gateway with --admin-token to accept other names"),
                    )))
                }
            }
        }
    }
}

/// Who a request that passed is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Presented the token (or none is needed): everything.
    Operator,
    /// A `GET`/`HEAD` of `/healthz` or `/readyz` without the token: the status, no details.
    Probe,
    /// A `GET`/`HEAD` of the status page's files without the token: no data.
    Page,
}

/// Whether a request with an `Origin` comes from a page of this very address: its Origin
/// is `http://` (or `https://`, through a proxy) and the Host it was sent to. A page elsewhere carries its own origin; one
/// that rebinds its DNS name to this address still carries its own name as the Host, which
/// the Host rule (without a token) or the token (which that page does not have) refuses.
fn same_origin<B>(origin: &hyper::header::HeaderValue, request: &Request<B>) -> bool {
    let host = request
        .headers()
        .get(hyper::header::HOST)
        .and_then(|value| value.to_str().ok())
        .or_else(|| {
            request
                .uri()
                .authority()
                .map(|authority| authority.as_str())
        });
    match (origin.to_str().ok(), host) {
        (Some(origin), Some(host)) => origin
            .strip_prefix("http://")
            // Behind a reverse proxy that ends TLS, the page's origin is https.
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|origin_host| origin_host.eq_ignore_ascii_case(host)),
        _ => false,
    }
}

fn is_page<B>(request: &Request<B>) -> bool {
    let method = request.method();
    (method == hyper::Method::GET || method == hyper::Method::HEAD)
        && super::page::asset(request.uri().path()).is_some()
}

fn is_probe<B>(request: &Request<B>) -> bool {
    let method = request.method();
    let path = request.uri().path().trim_end_matches('/');
    (method == hyper::Method::GET || method == hyper::Method::HEAD)
        && matches!(path, "/healthz" | "/readyz")
}

fn unauthorized(message: &str) -> Response {
    let mut response = reply::error(StatusCode::UNAUTHORIZED, message);
    response.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Bearer realm=\"wardgate-admin\""),
    );
    response
}
