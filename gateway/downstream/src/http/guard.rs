//! Who may use `/mcp`: every request passes the `Host` and `Origin` rules (DNS rebinding,
//! cross-site pages), then says who it is (a bearer token of a named client, or an OAuth
//! access token), then stays within its client's request rate. What passes carries an
//! [`Identity`] in its extensions, which the session handler reads for authorization.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, AUTHORIZATION, HOST, ORIGIN, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Request, Response, StatusCode};

use super::credentials::{bearer, same};
use super::jwt::{JwtError, JwtVerifier};
use wardgate_engine::config::{Grant, HttpSettings, OAuthSettings, TokenClient, ToolDiscovery};

pub type Reply = Response<BoxBody<bytes::Bytes, std::convert::Infallible>>;

/// Who a request is, as the session handler sees it.
#[derive(Debug, Clone)]
pub struct Identity {
    /// A configured client's name, the client claim of an access token, or (without
    /// authentication) the peer's address.
    pub name: Arc<str>,
    /// What sessions, session caps and the rate limit are counted by: `token:NAME` for a
    /// configured client; for an access token `oauth:["ISSUER","SUB","CLIENT"]` (issuer,
    /// subject and client together: two users of one OAuth app are two clients, and one
    /// user through two apps too) or, for a token with no `sub` or an empty one,
    /// `oauth-client:["ISSUER","CLIENT"]` (its client; a token naming neither is refused);
    /// `addr:IP` without authentication. The parts are JSON strings (`jwt::Holder::key`),
    /// and the kinds cannot collide.
    pub key: Arc<str>,
    pub grant: Arc<Grant>,
    /// How this client finds tools, where its config says (`None`: as `[gateway]` says).
    pub tool_discovery: Option<ToolDiscovery>,
    /// Presented credentials (false: authentication is off).
    pub authenticated: bool,
}

impl Identity {
    /// The one client of a stdio gateway, and tests: everything.
    pub fn local() -> Identity {
        Identity {
            name: Arc::from("local"),
            key: Arc::from("local"),
            grant: Arc::new(Grant::All),
            tool_discovery: None,
            authenticated: false,
        }
    }

    /// Whether per-client limits apply: they do to every client but an anonymous one on
    /// this machine (the user who runs the gateway), which only the gateway-wide caps bound.
    pub fn limited(&self, peer: IpAddr) -> bool {
        self.authenticated || !peer.is_loopback()
    }
}

pub struct Guard {
    hosts: Vec<String>,
    any_host: bool,
    origins: Vec<AllowedOrigin>,
    loopback_origins: bool,
    clients: Vec<(TokenClient, Arc<Grant>)>,
    oauth: Option<OAuth>,
    rate: Option<DefaultKeyedRateLimiter<Arc<str>>>,
}

struct OAuth {
    verifier: JwtVerifier,
    settings: OAuthSettings,
    /// `resource_metadata` of a 401's `WWW-Authenticate`.
    metadata_url: String,
    /// Paths the Protected Resource Metadata is served at.
    metadata_paths: Vec<String>,
}

#[expect(
    clippy::result_large_err,
    reason = "a refusal is the HTTP answer itself, built once on the rare path and returned as is"
)]
impl Guard {
    pub fn new(
        settings: &HttpSettings,
        auth: &wardgate_engine::config::AuthSettings,
        local: SocketAddr,
    ) -> Guard {
        let loopback = local.ip().is_loopback();
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(|host| host.to_string())
            .collect();
        if !local.ip().is_unspecified() {
            hosts.push(match local {
                SocketAddr::V4(v4) => v4.ip().to_string(),
                SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
            });
        }
        let any_host = settings.allowed_hosts.iter().any(|host| host == "*");
        hosts.extend(settings.allowed_hosts.iter().cloned());
        let rate = NonZeroU32::new(settings.rate_limit).map(|rate| {
            let burst = NonZeroU32::new(settings.rate_burst).unwrap_or(rate);
            governor::RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        let oauth = auth.oauth.as_ref().map(|settings| {
            let (origin, path) = split_resource(&settings.resource);
            let metadata_url = format!("{origin}/.well-known/oauth-protected-resource{path}");
            let mut metadata_paths = vec!["/.well-known/oauth-protected-resource".to_owned()];
            if !path.is_empty() {
                metadata_paths.push(format!("/.well-known/oauth-protected-resource{path}"));
            }
            OAuth {
                verifier: JwtVerifier::new(settings.clone()),
                settings: settings.clone(),
                metadata_url,
                metadata_paths,
            }
        });
        Guard {
            hosts,
            any_host,
            origins: settings
                .allowed_origins
                .iter()
                .filter_map(|origin| AllowedOrigin::parse(origin))
                .collect(),
            loopback_origins: loopback,
            clients: auth
                .clients
                .iter()
                .map(|client| (client.clone(), Arc::new(client.grant.clone())))
                .collect(),
            oauth,
            rate,
        }
    }

    /// Fetch the issuer's keys now, so the first client does not wait for them.
    pub fn warm_up(self: &Arc<Self>) {
        if let Some(oauth) = &self.oauth {
            oauth.verifier.warm_up();
        }
    }

    /// Forget rate-limit state of clients not seen lately (memory stays bounded by the
    /// clients active in the last few seconds).
    pub fn tidy(&self) {
        if let Some(rate) = &self.rate {
            rate.retain_recent();
            rate.shrink_to_fit();
        }
    }

    /// The answer to a request for the Protected Resource Metadata, if `path` is one.
    pub fn metadata<B>(&self, request: &Request<B>) -> Option<Reply> {
        let oauth = self.oauth.as_ref()?;
        let path = request.uri().path();
        if !oauth.metadata_paths.iter().any(|known| known == path) {
            return None;
        }
        if let Err(refused) = self.host(request) {
            return Some(refused);
        }
        let scopes: Vec<&String> = oauth.settings.scopes.keys().collect();
        let mut document = serde_json::json!({
            "resource": oauth.settings.resource,
            "authorization_servers": [oauth.settings.issuer],
            "bearer_methods_supported": ["header"],
            "resource_name": "Wardgate MCP gateway",
        });
        if !scopes.is_empty() {
            document["scopes_supported"] = serde_json::json!(scopes);
        }
        Some(json(StatusCode::OK, &document))
    }

    /// Whether the request may go on, and as whom.
    pub async fn admit<B>(
        &self,
        request: &Request<B>,
        peer: SocketAddr,
    ) -> Result<Identity, Reply> {
        self.host(request)?;
        self.origin(request)?;
        let identity = self.authenticate(request, peer).await?;
        if let Some(rate) = &self.rate {
            if identity.limited(peer.ip()) {
                if let Err(not_until) = rate.check_key(&identity.key) {
                    let wait = not_until.wait_time_from(DefaultClock::default().now());
                    return Err(too_many(&identity.name, wait));
                }
            }
        }
        Ok(identity)
    }

    fn host<B>(&self, request: &Request<B>) -> Result<(), Reply> {
        if self.any_host {
            return Ok(());
        }
        let host = request
            .uri()
            .authority()
            .map(|authority| authority.as_str())
            .or_else(|| request.headers().get(HOST).and_then(|v| v.to_str().ok()))
            .unwrap_or("")
            .to_ascii_lowercase();
        let name = super::credentials::strip_port(&host);
        if self
            .hosts
            .iter()
            .any(|allowed| *allowed == host || *allowed == name)
        {
            return Ok(());
        }
        Err(error(
            StatusCode::FORBIDDEN,
            &format!(
                "the Host {host:?} is not one this gateway answers to; if clients reach it by that name, add it to [gateway.http] allowed_hosts"
            ),
        ))
    }

    fn origin<B>(&self, request: &Request<B>) -> Result<(), Reply> {
        let Some(origin) = request.headers().get(ORIGIN) else {
            return Ok(());
        };
        let text = origin.to_str().unwrap_or("").trim().to_ascii_lowercase();
        let parsed = AllowedOrigin::parse(&text);
        let allowed = match &parsed {
            Some(AllowedOrigin::Tuple { scheme, host, port }) => {
                (self.loopback_origins
                    && matches!(host.as_str(), "localhost" | "127.0.0.1" | "[::1]"))
                    || self
                        .origins
                        .iter()
                        .any(|allowed| allowed.admits(scheme, host, port.or(default_port(scheme))))
            }
            Some(AllowedOrigin::Null) => self.origins.contains(&AllowedOrigin::Null),
            None => false,
        };
        if allowed {
            return Ok(());
        }
        Err(error(
            StatusCode::FORBIDDEN,
            &format!(
                "requests from web pages at {:?} are refused; if that page is yours, add its origin to [gateway.http] allowed_origins",
                wardgate_engine::log_text::Untrusted(&text).to_string()
            ),
        ))
    }

    async fn authenticate<B>(
        &self,
        request: &Request<B>,
        peer: SocketAddr,
    ) -> Result<Identity, Reply> {
        if self.clients.is_empty() && self.oauth.is_none() {
            // An IPv6 host holds a whole /64: its limits count by it.
            let address = super::admission::PeerKey::of(peer.ip()).to_string();
            return Ok(Identity {
                key: Arc::from(format!("addr:{address}")),
                name: Arc::from(address),
                grant: Arc::new(Grant::All),
                tool_discovery: None,
                authenticated: false,
            });
        }
        let presented = request
            .headers()
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(bearer);
        let Some(presented) = presented else {
            return Err(self.unauthorized(
                None,
                "this gateway requires a bearer token: send Authorization: Bearer TOKEN (a client's token, or an access token from the issuer named at /.well-known/oauth-protected-resource)",
            ));
        };
        // Every configured token is compared, whatever matches, so the time taken says
        // nothing about which one came close.
        let mut matched = None;
        for (client, grant) in &self.clients {
            if same(presented, client.token.expose()) {
                matched = Some((client, grant));
            }
        }
        if let Some((client, grant)) = matched {
            return Ok(Identity {
                name: Arc::from(client.name.as_str()),
                key: Arc::from(format!("token:{}", client.name)),
                grant: grant.clone(),
                tool_discovery: client.tool_discovery,
                authenticated: true,
            });
        }
        let Some(oauth) = &self.oauth else {
            return Err(self.unauthorized(
                Some("invalid_token"),
                "the bearer token is not one of this gateway's client tokens; send the token configured for your client",
            ));
        };
        match oauth.verifier.verify(presented).await {
            Ok(claims) => {
                let grant = if oauth.settings.scopes.is_empty() {
                    oauth.settings.grant.clone()
                } else {
                    let granted: Vec<&Grant> = claims
                        .scopes
                        .iter()
                        .filter_map(|scope| oauth.settings.scopes.get(scope))
                        .collect();
                    if granted.is_empty() {
                        let wanted: Vec<&str> =
                            oauth.settings.scopes.keys().map(String::as_str).collect();
                        return Err(insufficient_scope(&wanted, &oauth.metadata_url));
                    }
                    granted
                        .into_iter()
                        .fold(Grant::Only(Vec::new()), |all, grant| all.union(grant))
                };
                Ok(Identity {
                    name: Arc::from(claims.holder.name()),
                    key: Arc::from(claims.holder.key()),
                    grant: Arc::new(grant),
                    tool_discovery: oauth.settings.tool_discovery,
                    authenticated: true,
                })
            }
            Err(JwtError::Invalid(reason)) => Err(self.unauthorized(
                Some("invalid_token"),
                &format!("the access token was refused: {reason}"),
            )),
            Err(JwtError::Unavailable(reason)) => {
                let mut reply = error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!(
                        "the gateway cannot check access tokens right now: {reason}; retry shortly"
                    ),
                );
                reply
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from_static("5"));
                Err(reply)
            }
        }
    }

    fn unauthorized(&self, code: Option<&str>, message: &str) -> Reply {
        let mut challenge = String::from("Bearer realm=\"wardgate\"");
        if let Some(oauth) = &self.oauth {
            challenge.push_str(&format!(", resource_metadata=\"{}\"", oauth.metadata_url));
        }
        if let Some(code) = code {
            challenge.push_str(&format!(", error=\"{code}\""));
        }
        let mut reply = error(StatusCode::UNAUTHORIZED, message);
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            reply.headers_mut().insert(WWW_AUTHENTICATE, value);
        }
        reply
    }
}

/// `https://host:port/path` → (`https://host:port`, `/path` without a trailing `/`).
fn split_resource(resource: &str) -> (String, String) {
    match reqwest::Url::parse(resource) {
        Ok(url) => (
            url.origin().ascii_serialization(),
            url.path().trim_end_matches('/').to_owned(),
        ),
        Err(_) => (resource.to_owned(), String::new()),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum AllowedOrigin {
    Null,
    /// `port`: `None` in an allowed entry means any port (`:*`).
    Tuple {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
}

impl AllowedOrigin {
    /// `scheme://host[:port]`, `scheme://host:*` (any port) or `null`. A missing port is
    /// the scheme's default.
    fn parse(text: &str) -> Option<AllowedOrigin> {
        let text = text.trim().trim_end_matches('/');
        if text.eq_ignore_ascii_case("null") {
            return Some(AllowedOrigin::Null);
        }
        let (scheme, authority) = text.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        if let Some(host) = authority.strip_suffix(":*") {
            return Some(AllowedOrigin::Tuple {
                scheme,
                host: host.to_ascii_lowercase(),
                port: None,
            });
        }
        let authority = ::http::uri::Authority::try_from(authority).ok()?;
        let host = authority.host().to_ascii_lowercase();
        let port = authority.port_u16().or(default_port(&scheme));
        Some(AllowedOrigin::Tuple { scheme, host, port })
    }

    fn admits(&self, scheme: &str, host: &str, port: Option<u16>) -> bool {
        match self {
            AllowedOrigin::Null => false,
            AllowedOrigin::Tuple {
                scheme: allowed_scheme,
                host: allowed_host,
                port: allowed_port,
            } => {
                allowed_scheme == scheme
                    && allowed_host == host
                    && allowed_port.is_none_or(|allowed| Some(allowed) == port)
            }
        }
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

pub(super) fn json(status: StatusCode, body: &serde_json::Value) -> Reply {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .body(Full::new(bytes::Bytes::from(format!("{body}\n"))).boxed())
        .expect("static response")
}

/// `{"error": message}` with `status`.
pub(super) fn error(status: StatusCode, message: &str) -> Reply {
    json(status, &serde_json::json!({ "error": message }))
}

fn too_many(client: &str, wait: Duration) -> Reply {
    let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
    let mut reply = error(
        StatusCode::TOO_MANY_REQUESTS,
        &format!(
            "client {client:?} is sending requests faster than its rate limit ([gateway.http] rate_limit); retry after {seconds} s"
        ),
    );
    reply
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(seconds));
    reply
}

fn insufficient_scope(wanted: &[&str], metadata_url: &str) -> Reply {
    let scopes = wanted.join(" ");
    let mut reply = error(
        StatusCode::FORBIDDEN,
        &format!("the access token has none of the scopes this gateway grants access by ({scopes}); request a token with one of them"),
    );
    let challenge = format!(
        "Bearer realm=\"wardgate\", error=\"insufficient_scope\", scope=\"{scopes}\", resource_metadata=\"{metadata_url}\""
    );
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        reply.headers_mut().insert(WWW_AUTHENTICATE, value);
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_compare_scheme_host_and_port() {
        let allowed = AllowedOrigin::parse("https://app.example.com").unwrap();
        assert!(allowed.admits("https", "app.example.com", Some(443)));
        assert!(!allowed.admits("https", "app.example.com", Some(8443)));
        assert!(!allowed.admits("http", "app.example.com", Some(443)));
        let any_port = AllowedOrigin::parse("http://localhost:*").unwrap();
        assert!(any_port.admits("http", "localhost", Some(5173)));
        assert!(!any_port.admits("http", "evil.example", Some(5173)));
    }

    #[test]
    fn metadata_lives_at_the_resource_path() {
        assert_eq!(
            split_resource("https://mcp.example.com:8443/mcp/"),
            ("https://mcp.example.com:8443".to_owned(), "/mcp".to_owned())
        );
    }
}
