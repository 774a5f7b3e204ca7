//! Upstream connections: stdio children, Streamable HTTP and legacy HTTP+SSE servers, all spoken
//! to through rmcp's client.

pub mod direct;
pub mod handler;
mod lent;
pub mod memory;
pub mod oauth;
pub mod settle;
pub mod sse;
pub mod stdio;
pub mod tool_tasks;
pub mod unreadable;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use tokio::sync::watch;
use wardgate_policy::{ExitInfo, FailureKind, TransportKind};
use wardgate_recovery::UNSUPPORTED_PROTOCOL_VERSION;

use crate::config::TransportConfig;
use crate::failure::{classify_error_chain, UpstreamError};
pub use handler::{InFlightGuard, Links, UpstreamHandler, UpstreamSignal};
pub use stdio::StreamFault;
use stdio::{StdioCommand, StdioProcess};

/// A live, initialized connection to one upstream server.
pub struct Connection {
    pub service: RunningService<RoleClient, UpstreamHandler>,
    /// The child process, for stdio servers.
    pub process: Option<Box<dyn ProcessControl>>,
    pub links: Arc<Links>,
}

/// How a server process ended: its exit status, and the last lines it wrote to stderr
/// (escaped, bounded, its configured secrets masked; empty when it said nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessEnd {
    pub exit: ExitInfo,
    pub last_words: Vec<String>,
}

impl ProcessEnd {
    /// The error a request or a start fails with when the process ended.
    pub fn error(&self, server: &str) -> UpstreamError {
        UpstreamError::process_exited(server, self.exit, &self.last_words)
    }
}

/// What the supervisor needs of a server process: its exit, and ways to end it.
/// `StdioProcess` is the real one; tests script their own.
pub trait ProcessControl: Send + Sync {
    /// Changes once, when the process exits.
    fn exit_watch(&self) -> watch::Receiver<Option<ProcessEnd>>;
    /// Why the gateway stopped reading the process's output, if it did.
    fn stream_fault(&self) -> StreamFault;
    /// End it now, with everything it started.
    fn kill(&self);
    /// End it politely (stdin is already closed), escalating as needed: SIGTERM after
    /// `grace`, SIGKILL `kill_grace` after that.
    fn shutdown(&self, grace: Duration, kill_grace: Duration) -> BoxFuture<'_, ExitInfo>;
    /// The operating system's process id, when there is one.
    fn pid(&self) -> Option<u32> {
        None
    }
}

/// Wait for a process to exit.
pub async fn exited(process: &dyn ProcessControl) -> ProcessEnd {
    let mut exit = process.exit_watch();
    let end = match exit.wait_for(Option::is_some).await {
        Ok(end) => end.clone().expect("waited for Some"),
        Err(_) => ProcessEnd {
            exit: ExitInfo {
                code: None,
                signal: None,
            },
            last_words: Vec::new(),
        },
    };
    end
}

impl ProcessControl for StdioProcess {
    fn exit_watch(&self) -> watch::Receiver<Option<ProcessEnd>> {
        StdioProcess::exit_watch(self)
    }
    fn stream_fault(&self) -> StreamFault {
        StdioProcess::stream_fault(self)
    }
    fn kill(&self) {
        StdioProcess::kill(self)
    }
    fn shutdown(&self, grace: Duration, kill_grace: Duration) -> BoxFuture<'_, ExitInfo> {
        Box::pin(StdioProcess::shutdown(self, grace, kill_grace))
    }

    fn pid(&self) -> Option<u32> {
        Some(StdioProcess::pid(self))
    }
}

/// What a server's earlier connections taught about opening the next one, kept for the
/// life of its slot (a config change or a gateway restart asks afresh).
#[derive(Debug, Default)]
pub struct Learned {
    /// Only the `initialize` handshake opened it, after `server/discover` failed on a first
    /// process: start there, rather than spawning the server twice on every reconnect.
    handshake_only: std::sync::atomic::AtomicBool,
    /// A server that signs in with OAuth: its tokens, shared by its connections.
    signed_in: std::sync::Mutex<Option<Arc<oauth::SignedIn>>>,
}

impl Learned {
    fn handshake_only(&self) -> bool {
        self.handshake_only
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The sign-in of server `name` at `url` with `client`, made on first use.
    fn signed_in(
        &self,
        name: &str,
        url: &str,
        client: &crate::config::OAuthClient,
    ) -> Arc<oauth::SignedIn> {
        let mut signed_in = wardgate_policy::lock::lock(&self.signed_in);
        match &*signed_in {
            Some(current) if current.is_for(url, client) => current.clone(),
            _ => {
                let made = Arc::new(oauth::SignedIn::new(name, url, client));
                *signed_in = Some(made.clone());
                made
            }
        }
    }

    fn remember_handshake_only(&self, handshake_only: bool) {
        self.handshake_only
            .store(handshake_only, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Opens connections; the engine's one way to reach a server. Tests replace it with a
/// scripted one to drive the supervisor on paused time.
pub trait Connector: Send + Sync + 'static {
    fn connect<'a>(
        &'a self,
        transport: &'a TransportConfig,
        links: Arc<Links>,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Connection, UpstreamError>>;
}

/// Real processes and sockets.
pub struct RealConnector;

impl Connector for RealConnector {
    fn connect<'a>(
        &'a self,
        transport: &'a TransportConfig,
        links: Arc<Links>,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Connection, UpstreamError>> {
        Box::pin(connect(transport, links, timeout))
    }
}

pub fn transport_kind(transport: &TransportConfig) -> TransportKind {
    match transport {
        TransportConfig::Stdio { .. } => TransportKind::Stdio,
        TransportConfig::StreamableHttp { .. } => TransportKind::StreamableHttp,
        TransportConfig::Sse { .. } => TransportKind::Sse,
    }
}

/// Open the transport and run the `initialize` handshake, all within `timeout`.
///
/// On any failure nothing is left behind: a spawned process is killed with its group.
pub async fn connect(
    transport: &TransportConfig,
    links: Arc<Links>,
    timeout: Duration,
) -> Result<Connection, UpstreamError> {
    let server = links.server.clone();
    let handler = UpstreamHandler {
        links: links.clone(),
    };
    let timed_out = || {
        UpstreamError::new(
            &server,
            FailureKind::TimedOut,
            format!(
                "no answer to server/discover or initialize within {}",
                humantime::format_duration(timeout)
            ),
        )
    };
    match transport {
        TransportConfig::Stdio {
            command,
            args,
            env,
            inherit_env,
            cwd,
            ..
        } => {
            let command = StdioCommand {
                command: command.clone(),
                args: args.clone(),
                env: env
                    .iter()
                    .map(|(key, value)| (key.clone(), value.expose().to_owned()))
                    .collect(),
                inherit_env: *inherit_env,
                cwd: cwd.clone(),
            };
            let deadline = tokio::time::Instant::now() + timeout;
            // The failure of the discover attempt, once the handshake is being tried.
            let mut first: Option<UpstreamError> = None;
            // A server that needed the handshake last time gets it first.
            let mut remembered = links.learned.handshake_only();
            let mut legacy = remembered;
            // One process per attempt: a handshake that did not settle the revision hands
            // the pipes back, and the next one is asked on the same process.
            let (process, stdout, stdin) =
                StdioProcess::spawn(&server, &command, links.tool_tasks.clone()).await?;
            let direct = links.direct.get_or_init(|| {
                direct::Direct::new(stdin.pipe().clone(), handler::client_config())
            });
            let mut pipes = (stdout, stdin);
            loop {
                let (stdout, stdout_back) = lent::Lent::new(pipes.0);
                let (stdin, stdin_back) = lent::Lent::new(pipes.1);
                let handler = UpstreamHandler {
                    links: links.clone(),
                };
                let handshake = tokio::time::timeout_at(
                    deadline,
                    handler.serve_with_lifecycle(
                        settle::Counting::new(
                            direct.answers(
                                rmcp::transport::async_rw::AsyncRwTransport::new_client(
                                    stdout, stdin,
                                ),
                            ),
                            links.settle.clone(),
                        ),
                        lifecycle(legacy),
                    ),
                )
                .await;
                let result = match handshake {
                    Ok(Ok(service)) => {
                        links.learned.remember_handshake_only(legacy);
                        return Ok(Connection {
                            service,
                            process: Some(Box::new(process)),
                            links,
                        });
                    }
                    // Discover did not settle it: the handshake, on the same process. On
                    // stdio any failure counts (stray or malformed output before a
                    // handshake-era server serves, which `initialize` alone tolerates).
                    Ok(Err(error)) if !legacy => {
                        // A process that exited has failed this attempt, whatever it said. It
                        // may have died of the probe itself (a handshake-era server that
                        // wrote JSON-shaped junk first is answered with an error before its
                        // `initialize`): its next start goes straight to the handshake, and
                        // a server that speaks only newer revisions is asked with discover
                        // again, on that same process, once it refuses the handshake.
                        if let Some(end) = exited_soon(&process).await {
                            links.learned.remember_handshake_only(true);
                            return Err(end.error(&server));
                        }
                        first = Some(init_error(&server, &error));
                        legacy = true;
                        match lent::reclaim(stdout_back, stdin_back).await {
                            Some(back) => {
                                pipes = back;
                                continue;
                            }
                            None => return Err(first.take().expect("just set")),
                        }
                    }
                    // The remembered handshake is refused as a revision the server does not
                    // speak: it was upgraded. Ask it with discover again.
                    Ok(Err(error))
                        if remembered && init_error(&server, &error).kind == incompatible() =>
                    {
                        links.learned.remember_handshake_only(false);
                        remembered = false;
                        legacy = false;
                        match lent::reclaim(stdout_back, stdin_back).await {
                            Some(back) => {
                                pipes = back;
                                continue;
                            }
                            None => Err(init_error(&server, &error)),
                        }
                    }
                    Ok(Err(error)) => Err(init_error(&server, &error)),
                    Err(_) => Err(timed_out()),
                };
                // A server that refuses the handshake as a revision it does not speak
                // speaks only newer ones: the discover attempt's failure is what explains
                // (no revision in common, or whatever else ended it).
                if let (Some(first), Err(error)) = (first, &result) {
                    if error.kind == incompatible() {
                        return Err(first);
                    }
                }
                // A process that died during the handshake explains the failure best.
                return match exited_soon(&process).await {
                    Some(end) => Err(end.error(&server)),
                    None => result,
                };
            }
        }
        TransportConfig::StreamableHttp {
            url,
            headers,
            oauth,
            ..
        } => {
            let client = http_client(
                &server,
                headers.iter().map(|(k, v)| (k.as_str(), v.expose())),
            )?;
            let signed_in = oauth
                .as_ref()
                .map(|oauth| links.learned.signed_in(&server, url, oauth));
            let deadline = tokio::time::Instant::now() + timeout;
            let mut legacy = false;
            loop {
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .reinit_on_expired_session(true);
                let handler = UpstreamHandler {
                    links: links.clone(),
                };
                let handshake: BoxFuture<'_, Result<_, _>> = match &signed_in {
                    Some(tokens) => {
                        let client = oauth::OAuthHttp {
                            inner: tool_tasks::http::Listing::new(
                                client.clone(),
                                links.tool_tasks.clone(),
                            ),
                            tokens: tokens.clone(),
                        };
                        let client =
                            unreadable::Readable::new(client, &server, links.tool_tasks.clone());
                        let transport = StreamableHttpClientTransport::with_client(client, config);
                        let transport = settle::Counting::new(transport, links.settle.clone());
                        Box::pin(handler.serve_with_lifecycle(transport, lifecycle(legacy)))
                    }
                    None => {
                        let client = tool_tasks::http::Listing::new(
                            client.clone(),
                            links.tool_tasks.clone(),
                        );
                        let client =
                            unreadable::Readable::new(client, &server, links.tool_tasks.clone());
                        let transport = StreamableHttpClientTransport::with_client(client, config);
                        let transport = settle::Counting::new(transport, links.settle.clone());
                        Box::pin(handler.serve_with_lifecycle(transport, lifecycle(legacy)))
                    }
                };
                return match tokio::time::timeout_at(deadline, handshake).await {
                    Ok(Ok(service)) => Ok(Connection {
                        service,
                        process: None,
                        links,
                    }),
                    Ok(Err(error)) if !legacy && retry_with_initialize(&error) => {
                        legacy = true;
                        continue;
                    }
                    Ok(Err(error)) => Err(init_error(&server, &error)),
                    Err(_) => Err(timed_out()),
                };
            }
        }
        TransportConfig::Sse { url, headers, .. } => {
            let config = sse::SseClientConfig {
                server: server.clone(),
                url: url.clone(),
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.expose().to_owned()))
                    .collect(),
                connect_timeout: timeout,
                post_timeout: timeout,
                tool_tasks: links.tool_tasks.clone(),
            };
            let attempt = async {
                let transport =
                    sse::SseClientTransport::connect(config)
                        .await
                        .map_err(|error| {
                            let (kind, message) =
                                classify_error_chain(&crate::failure::Classified::from(error));
                            UpstreamError::new(&server, kind, message)
                        })?;
                handler
                    .serve(settle::Counting::new(transport, links.settle.clone()))
                    .await
                    .map_err(|error| init_error(&server, &error))
            };
            match tokio::time::timeout(timeout, attempt).await {
                Ok(Ok(service)) => Ok(Connection {
                    service,
                    process: None,
                    links,
                }),
                Ok(Err(error)) => Err(error),
                Err(_) => Err(timed_out()),
            }
        }
    }
}

fn versions(versions: &[ProtocolVersion]) -> String {
    let names: Vec<&str> = versions.iter().map(ProtocolVersion::as_str).collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// Redirects followed, at most, within one origin.
const MAX_REDIRECTS: usize = 5;

/// Follow redirects only within the origin: configured headers hold tokens, and reqwest
/// strips only the standard credential headers when a redirect leaves the origin. A
/// redirect elsewhere fails the request with a reason (never naming the URLs, which may
/// carry a token) rather than being followed. Every HTTP transport uses this one rule.
pub fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !same_origin {
            attempt.error(
                "the server redirected the request to another origin; the gateway does not follow it, so configured headers never leave their origin: set `url` to the new address",
            )
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

/// A reqwest client carrying the configured headers on every request.
fn http_client<'a>(
    server: &str,
    headers: impl Iterator<Item = (&'a str, &'a str)>,
) -> Result<reqwest::Client, UpstreamError> {
    let mut map = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        let bad = |what: &str| {
            UpstreamError::new(
                server,
                FailureKind::Other,
                format!("header {name:?} has an invalid {what}; fix it in the config"),
            )
        };
        let name =
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad("name"))?;
        let mut value = reqwest::header::HeaderValue::from_str(value).map_err(|_| bad("value"))?;
        value.set_sensitive(true);
        map.insert(name, value);
    }
    reqwest::Client::builder()
        .default_headers(map)
        .redirect(same_origin_redirects())
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|error| {
            UpstreamError::new(
                server,
                FailureKind::Other,
                format!("could not build an HTTP client: {error}"),
            )
        })
}

/// How the process ended, if it does within a moment of a failed handshake (EOF on stdout
/// comes a moment before the exit status can be reaped).
async fn exited_soon(process: &StdioProcess) -> Option<ProcessEnd> {
    tokio::time::timeout(Duration::from_millis(200), process.exited())
        .await
        .ok()
}

/// How a connection is opened: the 2026-07-28 way first (`server/discover`; rmcp falls back
/// to `initialize` on the same transport when the server does not know the method or stays
/// silent for 10 s), or `initialize` alone (`legacy`) when that did not settle it: over
/// HTTP on a fresh transport ([`retry_with_initialize`]), over stdio after any failure, on
/// the same process's pipes (`upstream/lent`). Legacy HTTP+SSE servers predate discover
/// and always get `initialize`.
fn lifecycle(legacy: bool) -> ClientLifecycleMode {
    if legacy {
        ClientLifecycleMode::Initialize
    } else {
        ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        }
    }
}

/// Connect again with the handshake (on a fresh transport; rmcp's Auto mode consumed the
/// first) when discover did not settle the revision: the server answered it with
/// revisions that all use `initialize`, or with something that is not an answer to it
/// (stray or malformed output before a handshake-era server serves, which `initialize`
/// alone tolerates).
fn retry_with_initialize(error: &ClientInitializeError) -> bool {
    match error {
        ClientInitializeError::NoCompatibleProtocolVersion {
            server_supported, ..
        } => {
            !server_supported.is_empty()
                && server_supported.iter().all(ProtocolVersion::has_initialize)
        }
        ClientInitializeError::ExpectedInitResponse(_)
        | ClientInitializeError::ExpectedInitResult(_)
        | ClientInitializeError::UncorrelatedErrorResponse { .. }
        | ClientInitializeError::ConflictInitResponseId(..) => true,
        _ => false,
    }
}

/// The failure kind of "no revision in common".
fn incompatible() -> FailureKind {
    FailureKind::JsonRpc {
        code: UNSUPPORTED_PROTOCOL_VERSION,
    }
}

fn init_error(server: &str, error: &ClientInitializeError) -> UpstreamError {
    match error {
        ClientInitializeError::NoCompatibleProtocolVersion {
            client_supported,
            server_supported,
        } => UpstreamError::new(
            server,
            incompatible(),
            format!(
                "no protocol revision in common: the server speaks {}, the gateway {} and the handshake era ({}); upgrade one of them",
                versions(server_supported),
                versions(client_supported),
                versions(ProtocolVersion::known_up_to(&ProtocolVersion::LATEST_WITH_INITIALIZE)),
            ),
        ),
        // Discover was not understood and the fallback `initialize` failed: that failure
        // is the one that explains.
        ClientInitializeError::LegacyFallbackFailed { fallback, .. } => init_error(server, fallback),
        ClientInitializeError::TransportError { error, context } => {
            let (kind, message) = classify_error_chain(error.error.as_ref());
            UpstreamError::new(server, kind, format!("{context}: {message}"))
        }
        ClientInitializeError::ConnectionClosed(detail) => UpstreamError::new(
            server,
            FailureKind::ConnectionClosed,
            format!("the connection closed during initialize ({detail})"),
        ),
        ClientInitializeError::JsonRpcError(data) => UpstreamError::new(
            server,
            FailureKind::JsonRpc { code: data.code.0 },
            format!("initialize was refused: {}", data.message),
        ),
        other => UpstreamError::new(
            server,
            FailureKind::Protocol,
            format!("initialize failed: {other}"),
        ),
    }
}
