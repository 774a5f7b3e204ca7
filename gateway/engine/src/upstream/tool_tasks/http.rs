//! rmcp's reqwest client for Streamable HTTP, which also shows [`ToolTasks`] a 2025-11-25
//! server's tool lists answered with a JSON body (rmcp reads those itself, and drops what
//! they say of tasks; an event-stream answer is read event by event by
//! `unreadable::Readable`, which learns from it there).
//!
//! Every message goes through rmcp's client as it is. When a `tools/list` of a 2025-11-25
//! session comes back as JSON, the same list is asked for once more with an id of the
//! gateway's own (`wardgate-tool-tasks-N`), posted as rmcp posts (its `Accept`, bearer token,
//! session and custom headers), and that answer's bytes are learned from, if it is a 200
//! with a JSON body within the size limit and five seconds; any other is let go. Asking
//! twice is what reading the bytes costs: a list is a read, and a request id is never used
//! twice.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::{Error as SseError, Sse};

use super::ToolTasks;

type Posted = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;

/// The largest JSON answer read here: the largest message the gateway relays (as
/// `upstream::stdio::MAX_MESSAGE_BYTES`, which this module does not reach into).
const MAX_BODY: usize = 16 * 1024 * 1024;

/// How long a list's answer waits for the second answer to be read.
const LEARN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// One POST as rmcp's transport hands it to its client.
#[derive(Clone)]
struct Post {
    uri: Arc<str>,
    message: ClientJsonRpcMessage,
    session_id: Option<Arc<str>>,
    auth_header: Option<String>,
    custom_headers: HashMap<HeaderName, HeaderValue>,
}

/// A reqwest client that shows [`ToolTasks`] a 2025-11-25 server's tool lists.
#[derive(Clone)]
pub struct Listing {
    inner: reqwest::Client,
    tasks: Arc<ToolTasks>,
    next_id: Arc<AtomicU64>,
}

/// Whether a `Content-Type` value is `application/json` (parameters and case aside), as
/// rmcp reads it.
fn is_json(content_type: &[u8]) -> bool {
    let media = content_type
        .split(|&byte| byte == b';')
        .next()
        .unwrap_or_default();
    media.trim_ascii().eq_ignore_ascii_case(b"application/json")
}

impl Listing {
    pub fn new(inner: reqwest::Client, tasks: Arc<ToolTasks>) -> Listing {
        Listing {
            inner,
            tasks,
            next_id: Arc::default(),
        }
    }

    /// Whether `message` is a 2025-11-25 session's tool list.
    fn is_list(message: &ClientJsonRpcMessage, headers: &HashMap<HeaderName, HeaderValue>) -> bool {
        let ClientJsonRpcMessage::Request(request) = message else {
            return false;
        };
        request.request.method() == "tools/list"
            // (By its `HeaderName`: a `&str` key hashes otherwise and finds nothing.)
            && headers
                .get(&HeaderName::from_static("mcp-protocol-version"))
                .is_some_and(|version| version.as_bytes() == b"2025-11-25")
    }

    /// `post` sent by `send` (one of rmcp's client's methods); when it was a tool list that
    /// rmcp's client answered with a JSON body, the list is asked for again and the bytes of
    /// that answer learned from.
    async fn through<F, Fut>(&self, post: Post, send: F) -> Posted
    where
        F: FnOnce(Post) -> Fut,
        Fut: std::future::Future<Output = Posted>,
    {
        if !Self::is_list(&post.message, &post.custom_headers) {
            return send(post).await;
        }
        let list = post.clone();
        let posted = send(post).await;
        if matches!(posted, Ok(StreamableHttpPostResponse::Json(..))) {
            // The list's answer waits for this (so what it teaches is known before the
            // list is used), but not for long.
            let _ = tokio::time::timeout(LEARN_WAIT, self.learn_list(&list)).await;
        }
        posted
    }

    async fn learn_list(&self, post: &Post) {
        let Ok(mut again) = serde_json::to_value(&post.message) else {
            return;
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        again["id"] = format!("wardgate-tool-tasks-{id}").into();
        let mut request = self
            .inner
            .post(post.uri.as_ref())
            .header(http::header::ACCEPT, "text/event-stream, application/json");
        if let Some(token) = &post.auth_header {
            request = request.bearer_auth(token);
        }
        for (name, value) in &post.custom_headers {
            request = request.header(name, value);
        }
        if let Some(session_id) = &post.session_id {
            request = request.header("mcp-session-id", session_id.as_ref());
        }
        let Ok(response) = request.json(&again).send().await else {
            return;
        };
        let json = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|value| is_json(value.as_bytes()));
        if response.status() != reqwest::StatusCode::OK || !json {
            return;
        }
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let Ok(chunk) = chunk else {
                return;
            };
            body.extend_from_slice(&chunk);
            if body.len() > MAX_BODY {
                return;
            }
        }
        self.tasks.learn(&body);
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
        let post = Post {
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
        };
        self.through(post, |post| {
            self.inner.post_message(
                post.uri,
                post.message,
                post.session_id,
                post.auth_header,
                post.custom_headers,
            )
        })
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
        let post = Post {
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
        };
        self.through(post, |post| {
            self.inner.post_message_with_max_sse_event_size(
                post.uri,
                post.message,
                post.session_id,
                post.auth_header,
                post.custom_headers,
                max_sse_event_size,
            )
        })
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
        let post = Post {
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
        };
        self.through(post, |post| {
            self.inner.post_message_with_response_limits(
                post.uri,
                post.message,
                post.session_id,
                post.auth_header,
                post.custom_headers,
                limits,
            )
        })
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

#[cfg(test)]
mod tests {
    use super::is_json;

    #[test]
    fn a_json_content_type_is_known_as_rmcp_knows_it() {
        assert!(is_json(b"application/json"));
        assert!(is_json(b"Application/JSON; charset=utf-8"));
        assert!(!is_json(b"application/json-seq"));
        assert!(!is_json(b"text/event-stream"));
    }
}
