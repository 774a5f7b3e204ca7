//! Legacy MCP HTTP+SSE client transport (protocol 2024-11-05), plugged into rmcp as a `Transport`.

mod event_limit;
pub(crate) mod events;
#[cfg(test)]
mod tests;

use std::{future::Future, sync::Arc, time::Duration};

use http::{
    header::{ACCEPT, CONTENT_TYPE, WWW_AUTHENTICATE},
    HeaderMap, HeaderName, HeaderValue,
};
use reqwest::Url;
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::Transport,
    RoleClient,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wardgate_policy::FailureKind;

use crate::failure::Classified;
use events::{event_stream, run_reader, wait_for_endpoint};

const LOG_TARGET: &str = "wardgate::upstream::sse";
/// Messages parsed but not yet taken by rmcp; a full channel pauses reading, which is the backpressure we want.
const MESSAGE_BUFFER: usize = 64;
/// POST answers are tiny ("Accepted"); read at most this much so the connection can be reused.
const MAX_POST_RESPONSE_BYTES: usize = 64 * 1024;
/// Without keepalive a silently dead peer would leave the GET (and every pending request) waiting forever.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);
const PREVIEW_CHARS: usize = 200;

pub struct SseClientConfig {
    /// The server's name, for the error answer to an answer the gateway cannot read.
    pub server: String,
    pub url: String,
    /// Already-expanded values; they hold tokens, so they are never logged.
    pub headers: Vec<(String, String)>,
    /// Bounds TCP/TLS setup, the GET's response head and the wait for the `endpoint` event together.
    pub connect_timeout: Duration,
    pub post_timeout: Duration,
    /// Learns which tools the server runs as tasks from its tool lists.
    pub tool_tasks: std::sync::Arc<super::tool_tasks::ToolTasks>,
}

#[derive(thiserror::Error, Debug)]
pub enum SseError {
    #[error("invalid SSE upstream configuration: {detail}")]
    InvalidConfig { detail: String },
    #[error("could not connect to the SSE endpoint {url}")]
    Connect {
        /// The origin only: a path or query may carry a token.
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the SSE server answered HTTP {status}")]
    HttpStatus {
        status: u16,
        www_authenticate: Option<String>,
    },
    #[error(
        "the SSE GET answered with content type {content_type:?} instead of text/event-stream"
    )]
    NotEventStream { content_type: String },
    #[error("the SSE stream did not announce a message endpoint (`endpoint` event) in time")]
    NoEndpoint,
    #[error("the SSE server announced an unusable message endpoint {endpoint:?} (it must resolve to the SSE URL's origin)")]
    BadEndpoint { endpoint: String },
    #[error("the SSE stream is closed")]
    Closed,
    #[error("malformed message from the SSE server: {detail}")]
    Malformed { detail: String },
    #[error("POST to the SSE message endpoint failed")]
    Post {
        #[source]
        source: reqwest::Error,
    },
    #[error("timed out waiting for {what}")]
    Timeout { what: &'static str },
}

impl SseError {
    /// The failure this is, where the error itself says; `None` where its cause says more
    /// (a refused connection, DNS, a timeout of reqwest's).
    fn failure_kind(&self) -> Option<FailureKind> {
        Some(match self {
            SseError::HttpStatus { status, .. } => FailureKind::HttpStatus(*status),
            SseError::Closed => FailureKind::ConnectionClosed,
            SseError::Timeout { .. } => FailureKind::TimedOut,
            SseError::Malformed { .. }
            | SseError::NoEndpoint
            | SseError::NotEventStream { .. }
            | SseError::BadEndpoint { .. } => FailureKind::Protocol,
            SseError::InvalidConfig { .. } => FailureKind::Other,
            SseError::Connect { .. } | SseError::Post { .. } => return None,
        })
    }
}

impl From<SseError> for Classified {
    fn from(error: SseError) -> Classified {
        Classified::new(error.failure_kind(), error)
    }
}

pub struct SseClientTransport {
    http: reqwest::Client,
    endpoint: Arc<Url>,
    headers: HeaderMap,
    post_timeout: Duration,
    messages: mpsc::Receiver<ServerJsonRpcMessage>,
    /// Cancelled by `close`/drop to stop the reader, and by the reader when the stream ends,
    /// so later sends fail at once with `Closed`.
    stop: CancellationToken,
}

impl SseClientTransport {
    pub async fn connect(config: SseClientConfig) -> Result<Self, SseError> {
        let deadline = tokio::time::Instant::now() + config.connect_timeout;
        let url = Url::parse(&config.url)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https"))
            .ok_or_else(|| SseError::InvalidConfig {
                detail: "url is not an absolute http(s) URL".into(),
            })?;
        let headers = header_map(&config.headers)?;
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .tcp_keepalive(TCP_KEEPALIVE)
            .redirect(super::same_origin_redirects())
            .build()
            .map_err(|source| SseError::Connect {
                url: redact(&url),
                source,
            })?;

        let get = http
            .get(url.clone())
            .headers(headers.clone())
            .header(ACCEPT, "text/event-stream")
            .send();
        let response = tokio::time::timeout_at(deadline, get)
            .await
            .map_err(|_| SseError::Timeout {
                what: "the SSE GET response",
            })?
            .map_err(|source| SseError::Connect {
                url: redact(&url),
                source: source.without_url(),
            })?;
        check_status(&response)?;
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
            .unwrap_or_default();
        if !content_type
            .to_ascii_lowercase()
            .starts_with("text/event-stream")
        {
            return Err(SseError::NotEventStream { content_type });
        }

        // Resolve against the URL that answered, which may be a same-origin redirect target.
        let stream_url = response.url().clone();
        let mut events = event_stream(response);
        let announced = tokio::time::timeout_at(deadline, wait_for_endpoint(&mut events))
            .await
            .map_err(|_| SseError::NoEndpoint)??;
        let endpoint = resolve_endpoint(&stream_url, &announced)?;
        tracing::debug!(target: LOG_TARGET, url = %redact(&stream_url), endpoint = %endpoint.path(), "SSE stream open");

        let (sender, messages) = mpsc::channel(MESSAGE_BUFFER);
        let stop = CancellationToken::new();
        tokio::spawn(run_reader(
            events,
            sender,
            stop.clone(),
            redact(&stream_url),
            config.server,
            config.tool_tasks,
        ));
        Ok(Self {
            http,
            endpoint: Arc::new(endpoint),
            headers,
            post_timeout: config.post_timeout,
            messages,
            stop,
        })
    }
}

impl Drop for SseClientTransport {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Transport<RoleClient> for SseClientTransport {
    type Error = Classified;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Classified>> + Send + 'static {
        let http = self.http.clone();
        let endpoint = Arc::clone(&self.endpoint);
        let mut headers = self.headers.clone();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.extend(crate::telemetry::trace_headers(&item));
        let post_timeout = self.post_timeout;
        let stop = self.stop.clone();
        async move {
            // The session lives as long as the stream; posting into a dead one only risks a hang.
            if stop.is_cancelled() {
                return Err(SseError::Closed.into());
            }
            let body = serde_json::to_vec(&item).map_err(|error| SseError::Malformed {
                detail: format!("could not serialize an outgoing message: {error}"),
            })?;
            let post = post_message(
                http.post(endpoint.as_ref().clone())
                    .headers(headers)
                    .body(body),
            );
            let posted = tokio::time::timeout(post_timeout, post)
                .await
                .map_err(|_| SseError::Timeout {
                    what: "the POST to the SSE message endpoint",
                })
                .and_then(|posted| posted);
            Ok(posted?)
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        // `None` once the reader has stopped and the buffer is drained: rmcp then fails
        // pending requests with TransportClosed instead of letting them wait.
        self.messages.recv()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Classified>> + Send {
        self.stop.cancel();
        std::future::ready(Ok(()))
    }
}

async fn post_message(request: reqwest::RequestBuilder) -> Result<(), SseError> {
    let post_error = |source: reqwest::Error| SseError::Post {
        // The endpoint URL carries the session id.
        source: source.without_url(),
    };
    let mut response = request.send().await.map_err(post_error)?;
    check_status(&response)?;
    let mut n_read = 0;
    while n_read < MAX_POST_RESPONSE_BYTES {
        match response.chunk().await.map_err(post_error)? {
            Some(chunk) => n_read += chunk.len(),
            None => break,
        }
    }
    Ok(())
}

fn check_status(response: &reqwest::Response) -> Result<(), SseError> {
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let www_authenticate = response
        .headers()
        .get(WWW_AUTHENTICATE)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    Err(SseError::HttpStatus {
        status: status.as_u16(),
        www_authenticate,
    })
}

fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, SseError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let header_name =
            HeaderName::try_from(name.as_str()).map_err(|_| SseError::InvalidConfig {
                detail: format!("header name {name:?} is not a valid HTTP header name"),
            })?;
        // The value is a secret: the error names only the header.
        let mut header_value =
            HeaderValue::try_from(value.as_str()).map_err(|_| SseError::InvalidConfig {
                detail: format!("the value of header {name:?} is not a valid HTTP header value"),
            })?;
        header_value.set_sensitive(true);
        map.append(header_name, header_value);
    }
    Ok(map)
}

pub(crate) fn resolve_endpoint(stream_url: &Url, announced: &str) -> Result<Url, SseError> {
    let bad = || SseError::BadEndpoint {
        endpoint: preview(announced),
    };
    let endpoint = stream_url.join(announced.trim()).map_err(|_| bad())?;
    // Our headers (tokens) go with every POST: never to another origin.
    if endpoint.origin() != stream_url.origin() {
        return Err(bad());
    }
    Ok(endpoint)
}

fn preview(text: &str) -> String {
    match text.char_indices().nth(PREVIEW_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The origin only: a path or query may hold a `${VAR}` the config expanded (a token).
fn redact(url: &Url) -> String {
    url.origin().ascii_serialization()
}
