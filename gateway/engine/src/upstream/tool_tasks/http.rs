//! rmcp's reqwest client for Streamable HTTP, but for a 2025-11-25 session's `tools/list`,
//! whose JSON answer it reads itself so that [`ToolTasks`] learns from its bytes before rmcp
//! parses them (an SSE answer is read event by event by `unreadable::Readable`, which
//! learns from it there).
//!
//! The POST is made as rmcp makes it (its `Accept`, bearer token, session and custom
//! headers). Anything but a 200 with a JSON body within the size limit is left to rmcp: the
//! request is sent again through it, which `tools/list`, a read, allows. A server that
//! answered a list with an event stream has its later lists left to rmcp at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::{Error as SseError, Sse};

use super::ToolTasks;

type Posted = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;

/// The largest JSON answer read here when rmcp names no limit: the largest message the
/// gateway relays.
const DEFAULT_MAX_BODY: usize = crate::upstream::stdio::MAX_MESSAGE_BYTES;

/// A reqwest client that shows [`ToolTasks`] a 2025-11-25 server's tool lists.
#[derive(Clone)]
pub struct Listing {
    inner: reqwest::Client,
    tasks: Arc<ToolTasks>,
    /// The server answered a list with an event stream: leave the lists to rmcp.
    streams_lists: Arc<AtomicBool>,
}

impl Listing {
    pub fn new(inner: reqwest::Client, tasks: Arc<ToolTasks>) -> Listing {
        Listing {
            inner,
            tasks,
            streams_lists: Arc::default(),
        }
    }

    /// Whether `message` is a list this client reads itself.
    fn reads(&self, message: &ClientJsonRpcMessage, headers: &HashMap<HeaderName, HeaderValue>) -> bool {
        let ClientJsonRpcMessage::Request(request) = message else {
            return false;
        };
        request.request.method() == "tools/list"
            && !self.streams_lists.load(Ordering::Relaxed)
            // (By its `HeaderName`: a `&str` key hashes otherwise and finds nothing.)
            && headers
                .get(&HeaderName::from_static("mcp-protocol-version"))
                .is_some_and(|version| version.as_bytes() == b"2025-11-25")
    }

    /// The list's JSON answer, read and learned from; `None` for anything else (left to
    /// rmcp).
    async fn read_list(
        &self,
        uri: &str,
        message: &ClientJsonRpcMessage,
        session_id: Option<&str>,
        auth_header: Option<&str>,
        custom_headers: &HashMap<HeaderName, HeaderValue>,
        max_body: usize,
    ) -> Option<Posted> {
        let mut request = self
            .inner
            .post(uri)
            .header(http::header::ACCEPT, "text/event-stream, application/json");
        if let Some(token) = auth_header {
            request = request.bearer_auth(token);
        }
        for (name, value) in custom_headers {
            request = request.header(name, value);
        }
        if let Some(session_id) = session_id {
            request = request.header("mcp-session-id", session_id);
        }
        let response = request.json(message).send().await.ok()?;
        let json = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.trim_start().starts_with("application/json"));
        if response.status() != reqwest::StatusCode::OK || !json {
            if response.status() == reqwest::StatusCode::OK {
                self.streams_lists.store(true, Ordering::Relaxed);
            }
            return None;
        }
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            body.extend_from_slice(&chunk.ok()?);
            if body.len() > max_body {
                return None;
            }
        }
        self.tasks.learn(&body);
        let parsed = serde_json::from_slice::<ServerJsonRpcMessage>(&body).ok()?;
        Some(Ok(StreamableHttpPostResponse::Json(parsed, session)))
    }

    /// Post `message` with `limits`: a list read here, anything else (and a list this could
    /// not read) by rmcp.
    async fn post(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: Option<StreamableHttpResponseLimits>,
    ) -> Posted {
        if self.reads(&message, &custom_headers) {
            let max_body = limits
                .as_ref()
                .map_or(DEFAULT_MAX_BODY, |limits| limits.max_json_response_size);
            if let Some(read) = self
                .read_list(
                    &uri,
                    &message,
                    session_id.as_deref(),
                    auth_header.as_deref(),
                    &custom_headers,
                    max_body,
                )
                .await
            {
                return read;
            }
        }
        match limits {
            Some(limits) => {
                self.inner
                    .post_message_with_response_limits(
                        uri,
                        message,
                        session_id,
                        auth_header,
                        custom_headers,
                        limits,
                    )
                    .await
            }
            None => {
                self.inner
                    .post_message(uri, message, session_id, auth_header, custom_headers)
                    .await
            }
        }
    }
}

type Events = BoxStream<'static, Result<Sse, SseError>>;

impl StreamableHttpClient for Listing {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Posted {
        self.post(uri, message, session_id, auth_header, custom_headers, None)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Posted {
        if self.reads(&message, &custom_headers) {
            if let Some(read) = self
                .read_list(
                    &uri,
                    &message,
                    session_id.as_deref(),
                    auth_header.as_deref(),
                    &custom_headers,
                    DEFAULT_MAX_BODY,
                )
                .await
            {
                return read;
            }
        }
        self.inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Posted {
        self.post(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            Some(limits),
        )
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<reqwest::Error>> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Events, StreamableHttpError<reqwest::Error>> {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<Events, StreamableHttpError<reqwest::Error>> {
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}
