//! Classified upstream failures: what went wrong, where, and whether the request may have arrived.

use std::sync::Arc;

use rmcp::service::ServiceError;
use rmcp::transport::streamable_http_client::StreamableHttpError;
use wardgate_policy::{ExitInfo, FailureKind};

/// One failed upstream operation, carrying what recovery needs.
#[derive(Debug, Clone, thiserror::Error)]
#[error("server \"{server}\": {message}")]
pub struct UpstreamError {
    pub server: String,
    pub kind: FailureKind,
    pub message: String,
    /// The request may have been received by the server (so replaying it may repeat a side effect).
    pub may_have_reached_server: bool,
    /// The server's own error answer, as it sent it, when it answered with one: a client
    /// gets its code, message and data unchanged.
    pub answer: Option<Arc<rmcp::model::ErrorData>>,
}

impl UpstreamError {
    pub fn new(server: &str, kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            server: server.to_owned(),
            kind,
            message: message.into(),
            may_have_reached_server: false,
            answer: None,
        }
    }

    pub fn reached(mut self, may_have_reached_server: bool) -> Self {
        self.may_have_reached_server = may_have_reached_server;
        self
    }

    /// The process ended; what it last wrote to stderr says why, so it leads the message
    /// after the exit status (`the server process exited with code 1; it said: KEY is not set`).
    pub fn process_exited(server: &str, exit: ExitInfo, last_words: &[String]) -> Self {
        Self::new(
            server,
            FailureKind::ProcessExited {
                code: exit.code,
                signal: exit.signal,
            },
            exit_message(exit, last_words),
        )
        .reached(true)
    }

    /// Classify an error rmcp returned for a request that was handed to the transport.
    pub fn from_service(server: &str, error: &ServiceError) -> Self {
        match error {
            ServiceError::McpError(data) => Self {
                answer: Some(Arc::new(data.clone())),
                ..Self::new(
                    server,
                    FailureKind::JsonRpc { code: data.code.0 },
                    format!(
                        "the server answered with error {}: {}",
                        data.code.0, data.message
                    ),
                )
                .reached(true)
            },
            ServiceError::TransportClosed => Self::new(
                server,
                FailureKind::ConnectionClosed,
                "the connection to the server closed",
            )
            .reached(true),
            ServiceError::Timeout { timeout } => Self::new(
                server,
                FailureKind::TimedOut,
                format!("no answer within {}", humantime::format_duration(*timeout)),
            )
            .reached(true),
            ServiceError::TransportSend(dynamic) => {
                // The request left rmcp but the transport failed to deliver it; whether the
                // server saw it depends on how far the HTTP exchange got, so stay pessimistic
                // except for failures that happen before any byte is sent.
                let (kind, detail) = classify_error_chain(dynamic.error.as_ref());
                let reached = !matches!(kind, FailureKind::ConnectRefused | FailureKind::Dns);
                Self::new(server, kind, detail).reached(reached)
            }
            ServiceError::Cancelled { reason } => Self::new(
                server,
                FailureKind::Other,
                format!(
                    "the request was cancelled ({})",
                    reason.as_deref().unwrap_or("no reason given")
                ),
            )
            .reached(true),
            other => Self::new(server, FailureKind::Protocol, other.to_string()).reached(true),
        }
    }
}

/// Walk an error's source chain and name the first cause that recovery cares about.
pub fn classify_error_chain(error: &(dyn std::error::Error + 'static)) -> (FailureKind, String) {
    let (kind, text) = classify_chain(error);
    let text = headlined(&kind, text);
    (kind, text)
}

/// The cause in a few words first, then the library's chain, which starts with the outermost
/// wrapper ("Client error: error sending request …") and reaches the cause last.
fn headlined(kind: &FailureKind, chain: String) -> String {
    let headline = match kind {
        FailureKind::ConnectRefused => "connection refused",
        FailureKind::Dns => "the server's name did not resolve (DNS)",
        FailureKind::TimedOut => "timed out",
        FailureKind::ConnectionReset => "the connection broke",
        FailureKind::ConnectionClosed => "the connection closed",
        FailureKind::Protocol => "the answer was not MCP",
        FailureKind::HttpStatus(status) => {
            let reason = http::StatusCode::from_u16(*status)
                .ok()
                .and_then(|status| status.canonical_reason())
                .unwrap_or("");
            let bare = format!("HTTP {status}");
            return if chain == bare {
                format!("{bare} {reason}").trim_end().to_owned()
            } else if chain.starts_with("HTTP ") {
                chain
            } else {
                format!("HTTP {status} {reason}: {chain}")
            };
        }
        _ => return chain,
    };
    if chain.starts_with(headline) {
        chain
    } else {
        format!("{headline}: {chain}")
    }
}

/// A transport's error with the failure kind its transport gave it, so that classification
/// reads the kind without knowing the transport (a transport of ours hands rmcp its errors
/// as `Classified`). It reads as the error it wraps; with no kind, the causes of that error
/// are classified instead.
#[derive(Debug)]
pub struct Classified {
    kind: Option<FailureKind>,
    error: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl Classified {
    pub fn new(
        kind: Option<FailureKind>,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Classified {
        Classified {
            kind,
            error: Box::new(error),
        }
    }
}

impl Classified {
    /// The error it wraps, if it is an `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.error.downcast_ref()
    }
}

impl std::fmt::Display for Classified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for Classified {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

fn classify_chain(error: &(dyn std::error::Error + 'static)) -> (FailureKind, String) {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let text = error_chain_text(error);
    while let Some(cause) = current {
        if let Some(http) = cause.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            match http {
                StreamableHttpError::HttpStatus(status) => {
                    return (
                        FailureKind::HttpStatus(status.status),
                        format!("HTTP {}", status.status),
                    )
                }
                StreamableHttpError::AuthRequired(_) => {
                    return (
                        FailureKind::HttpStatus(401),
                        "HTTP 401: the server requires authorization".into(),
                    )
                }
                // An OAuth server's sign-in (upstream/oauth.rs): refused means sign in
                // again (as a 401 does); unavailable means try again later.
                StreamableHttpError::Auth(
                    rmcp::transport::auth::AuthError::AuthorizationFailed(reason),
                ) => return (FailureKind::HttpStatus(401), reason.clone()),
                StreamableHttpError::Auth(error) => return (FailureKind::Other, error.to_string()),
                StreamableHttpError::InsufficientScope(refused) => {
                    let wanted = match &refused.required_scope {
                        Some(scope) => format!(
                            "; it needs the OAuth scope \"{scope}\", which the next sign-in asks for"
                        ),
                        None => String::new(),
                    };
                    return (
                        FailureKind::HttpStatus(403),
                        format!("HTTP 403: insufficient scope{wanted}"),
                    );
                }
                StreamableHttpError::SessionExpired => {
                    return (
                        FailureKind::SessionExpired,
                        "the HTTP session expired (HTTP 404)".into(),
                    )
                }
                StreamableHttpError::UnexpectedServerResponse(message) => {
                    // rmcp reports a 401/403 without WWW-Authenticate only as text.
                    if let Some(status) = http_status_in(message) {
                        return (FailureKind::HttpStatus(status), format!("HTTP {status}"));
                    }
                }
                StreamableHttpError::Client(inner) => {
                    if let Some(classified) = classify_reqwest(inner, &text) {
                        return classified;
                    }
                }
                StreamableHttpError::UnexpectedEndOfStream
                | StreamableHttpError::TransportChannelClosed => {
                    return (FailureKind::ConnectionClosed, text)
                }
                StreamableHttpError::Deserialize(_)
                | StreamableHttpError::UnexpectedContentType(_) => {
                    return (FailureKind::Protocol, text)
                }
                _ => {}
            }
        }
        if let Some(kind) = cause
            .downcast_ref::<Classified>()
            .and_then(|classified| classified.kind.clone())
        {
            return (kind, text);
        }
        if let Some(reqwest_error) = cause.downcast_ref::<reqwest::Error>() {
            if let Some(classified) = classify_reqwest(reqwest_error, &text) {
                return classified;
            }
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            match io.kind() {
                ConnectionRefused | NotFound | PermissionDenied => {
                    return (FailureKind::ConnectRefused, text)
                }
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => {
                    return (FailureKind::ConnectionReset, text)
                }
                TimedOut => return (FailureKind::TimedOut, text),
                _ => {}
            }
        }
        current = cause.source();
    }
    if let Some(status) = http_status_in(&text) {
        return (FailureKind::HttpStatus(status), text);
    }
    (FailureKind::Other, text)
}

fn classify_reqwest(error: &reqwest::Error, text: &str) -> Option<(FailureKind, String)> {
    // The outer text may stop short of the reqwest cause (rmcp's `Client(E)` hides its
    // source), or already include it: keep whichever says more.
    let inner = error_chain_text(error);
    let text = if inner.len() > text.len() {
        inner
    } else {
        text.to_owned()
    };
    if let Some(status) = error.status() {
        return Some((FailureKind::HttpStatus(status.as_u16()), text));
    }
    if error.is_timeout() {
        return Some((FailureKind::TimedOut, text));
    }
    if error.is_connect() {
        return Some((connect_kind(&text), text));
    }
    if error.is_request() || error.is_body() {
        // The connection broke while the request or its answer was in flight.
        return Some((FailureKind::ConnectionReset, text));
    }
    None
}

fn connect_kind(text: &str) -> FailureKind {
    let lower = text.to_ascii_lowercase();
    if lower.contains("dns")
        || lower.contains("failed to lookup")
        || lower.contains("name or service not known")
    {
        FailureKind::Dns
    } else if lower.contains("timed out") {
        FailureKind::TimedOut
    } else {
        FailureKind::ConnectRefused
    }
}

/// "HTTP 401 Unauthorized ..." → 401, for errors that only carry text.
fn http_status_in(text: &str) -> Option<u16> {
    let index = text.find("HTTP ")?;
    let digits: String = text[index + 5..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .ok()
        .filter(|status| (400..600).contains(status))
}

/// "outer: middle: inner", without repeating causes whose text the outer one already includes.
///
/// The URL a request went to is taken out: it is the config's URL with any `${VAR}` already
/// expanded (a token in a path or query, say), and this text reaches logs, events, the
/// admin API and clients. The server's name, and its URL as written, say which server it is.
pub fn error_chain_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut urls = Vec::new();
    let mut current = Some(error);
    while let Some(cause) = current {
        // rmcp's `Client(reqwest::Error)` shows the reqwest error but hides it from
        // `source()`: go on with the reqwest error, whose own causes say why (a refused
        // redirect, say).
        let hidden = match cause.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            Some(StreamableHttpError::Client(inner)) => Some(inner),
            _ => None,
        };
        let request_error = cause.downcast_ref::<reqwest::Error>().or(hidden);
        if let Some(url) = request_error.and_then(reqwest::Error::url) {
            urls.push(url.as_str().to_owned());
        }
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        current = match hidden {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => cause.source(),
        };
    }
    for url in urls {
        text = text.replace(&url, URL_WITHHELD);
    }
    text
}

/// What stands where an error's text named the (expanded) URL of a request.
const URL_WITHHELD: &str = "the server's URL";

/// `the server process exited with code 1`, and what it last said on stderr, if anything.
pub fn exit_message(exit: ExitInfo, last_words: &[String]) -> String {
    if last_words.is_empty() {
        format!("the server process {exit}")
    } else {
        format!(
            "the server process {exit}; it said: {}",
            last_words.join(" ⏎ ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_requests_url_is_withheld_from_error_text() {
        // A token expanded from ${VAR} into the path and the query; nothing listens on port 9.
        let url = "http://127.0.0.1:9/secret-path-token/mcp?key=secret-query-token";
        let error = reqwest::Client::new().get(url).send().await.unwrap_err();
        let text = error_chain_text(&error);
        assert!(!text.contains("secret-"), "{text}");
        assert!(text.contains(URL_WITHHELD), "{text}");
        let wrapped = StreamableHttpError::<reqwest::Error>::Client(
            reqwest::Client::new().get(url).send().await.unwrap_err(),
        );
        let (_, message) = classify_error_chain(&wrapped);
        assert!(!message.contains("secret-"), "{message}");
    }

    #[test]
    fn finds_http_status_in_text() {
        assert_eq!(
            http_status_in("unexpected server response: HTTP 401 Unauthorized"),
            Some(401)
        );
        assert_eq!(http_status_in("HTTP 200"), None);
        assert_eq!(http_status_in("no status"), None);
    }

    #[test]
    fn io_errors_are_classified_by_kind() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            classify_error_chain(&refused).0,
            FailureKind::ConnectRefused
        );
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(classify_error_chain(&reset).0, FailureKind::ConnectionReset);
    }
}
