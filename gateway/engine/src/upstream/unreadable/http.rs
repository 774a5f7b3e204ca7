//! rmcp's Streamable HTTP client with unreadable answers turned into error answers: an SSE
//! event's, by its data, and a JSON body's, by the error rmcp gives when serde_json stops at
//! its recursion limit.

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use super::{error_answer, unreadable, Unreadable, UNREADABLE_DEPTH};
use crate::upstream::tool_tasks::ToolTasks;

type Events = BoxStream<'static, Result<Sse, sse_stream::Error>>;
type Posted<E> = Result<StreamableHttpPostResponse, StreamableHttpError<E>>;

/// An HTTP client for rmcp's Streamable HTTP transport, as `inner` but for answers nested too
/// deep to read, which become error answers naming `server`.
#[derive(Clone)]
pub struct Readable<C> {
    inner: C,
    server: Arc<str>,
    /// Learns which tools the server runs as tasks from the tool lists among its events.
    tool_tasks: Arc<ToolTasks>,
}

impl<C> Readable<C> {
    pub fn new(inner: C, server: &str, tool_tasks: Arc<ToolTasks>) -> Readable<C> {
        Readable {
            inner,
            server: server.into(),
            tool_tasks,
        }
    }

    fn events(&self, events: Events) -> Events {
        let server = Arc::clone(&self.server);
        let tool_tasks = Arc::clone(&self.tool_tasks);
        events
            .map(move |event| {
                let mut event = event?;
                let is_message =
                    matches!(event.event.as_deref(), None | Some("") | Some("message"));
                if is_message {
                    if let Some(data) = &event.data {
                        tool_tasks.learn(data.as_bytes());
                    }
                    let found = event
                        .data
                        .as_deref()
                        .and_then(|data| unreadable(data.as_bytes()));
                    if let Some(found) = found {
                        event.data = serde_json::to_string(&error_answer(&server, &found)).ok();
                    }
                }
                Ok(event)
            })
            .boxed()
    }

    fn posted<E: std::error::Error + Send + Sync + 'static>(
        &self,
        message: &ClientJsonRpcMessage,
        posted: Posted<E>,
    ) -> Posted<E> {
        match (posted, message) {
            (Ok(StreamableHttpPostResponse::Sse(events, session)), _) => Ok(
                StreamableHttpPostResponse::Sse(self.events(events), session),
            ),
            (
                Err(StreamableHttpError::UnexpectedServerResponse(text)),
                ClientJsonRpcMessage::Request(request),
            ) if is_too_deep(&text) => {
                let found = Unreadable {
                    id: request.id.clone(),
                    depth: UNREADABLE_DEPTH,
                };
                Ok(StreamableHttpPostResponse::Json(
                    error_answer(&self.server, &found),
                    None,
                ))
            }
            (other, _) => other,
        }
    }
}

/// Whether rmcp's error for a JSON body it could not parse says serde_json stopped at its
/// recursion limit (the body itself is gone by then).
fn is_too_deep(text: &str) -> bool {
    text.strip_prefix("could not parse JSON response as ServerJsonRpcMessage: ")
        .is_some_and(|error| error.starts_with("recursion limit exceeded"))
}

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for Readable<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Posted<C::Error> {
        custom_headers.extend(crate::telemetry::trace_headers(&message));
        let posted = self
            .inner
            .post_message(
                uri,
                message.clone(),
                session_id,
                auth_header,
                custom_headers,
            )
            .await;
        self.posted(&message, posted)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Posted<C::Error> {
        custom_headers.extend(crate::telemetry::trace_headers(&message));
        let posted = self
            .inner
            .post_message_with_max_sse_event_size(
                uri,
                message.clone(),
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.posted(&message, posted)
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Posted<C::Error> {
        custom_headers.extend(crate::telemetry::trace_headers(&message));
        let posted = self
            .inner
            .post_message_with_response_limits(
                uri,
                message.clone(),
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        self.posted(&message, posted)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<C::Error>> {
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
    ) -> Result<Events, StreamableHttpError<C::Error>> {
        let events = self
            .inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await?;
        Ok(self.events(events))
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<Events, StreamableHttpError<C::Error>> {
        let events = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await?;
        Ok(self.events(events))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ServerJsonRpcMessage;

    /// The text rmcp gives for a JSON body too deep to read is what [`is_too_deep`] knows.
    #[test]
    fn rmcp_s_words_for_a_body_too_deep_are_recognised() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let error = serde_json::from_str::<ServerJsonRpcMessage>(&deep).unwrap_err();
        // As rmcp's `json_rpc_parse_error_message` words it.
        let text = format!(
            "could not parse JSON response as ServerJsonRpcMessage: {error}: {}",
            &deep[..256]
        );
        assert!(is_too_deep(&text), "{text}");
        assert!(!is_too_deep(
            "could not parse JSON response as ServerJsonRpcMessage: EOF while parsing: <empty>"
        ));
    }
}
