//! The SSE event side: byte stream to events, the wait for `endpoint`, and the reader task.

use futures::{stream::BoxStream, StreamExt};
use rmcp::model::ServerJsonRpcMessage;
use sse_stream::{Sse, SseStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::event_limit::EventSizeLimit;
use super::{preview, SseError, LOG_TARGET};
use crate::upstream::unreadable;

/// Same cap rmcp applies to Streamable HTTP events: an upstream must not make us buffer without bound.
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

pub(crate) type EventStream = BoxStream<'static, Result<Sse, sse_stream::Error>>;

/// Why the reader task stopped; logged, since rmcp only learns "closed".
#[derive(Debug)]
enum ReaderEnd {
    StreamEnded,
    StreamFailed { detail: String },
    TransportDropped,
    Cancelled,
}

pub(crate) fn event_stream(response: reqwest::Response) -> EventStream {
    let mut limit = EventSizeLimit::new(MAX_EVENT_BYTES);
    let bytes = response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(|error| std::io::Error::other(error.without_url()))?;
        limit.observe(&chunk)?;
        Ok::<_, std::io::Error>(chunk)
    });
    SseStream::from_bytes_stream(bytes).boxed()
}

pub(crate) async fn wait_for_endpoint(events: &mut EventStream) -> Result<String, SseError> {
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(target: LOG_TARGET, %error, "SSE stream broke before the endpoint event");
                break;
            }
        };
        match event.event.as_deref() {
            Some("endpoint") => return Ok(event.data.unwrap_or_default()),
            // Nothing was sent yet, so nothing can be answered: a message now is noise.
            other => {
                tracing::debug!(target: LOG_TARGET, event = ?other, "ignoring an event before the endpoint event")
            }
        }
    }
    Err(SseError::NoEndpoint)
}

pub(crate) async fn run_reader(
    events: EventStream,
    sender: mpsc::Sender<ServerJsonRpcMessage>,
    stop: CancellationToken,
    url: String,
    server: String,
    tool_tasks: std::sync::Arc<crate::upstream::tool_tasks::ToolTasks>,
) {
    let end = stop
        .run_until_cancelled(read_events(events, sender, &server, &tool_tasks))
        .await
        .unwrap_or(ReaderEnd::Cancelled);
    stop.cancel();
    match end {
        ReaderEnd::StreamFailed { detail } => {
            tracing::warn!(target: LOG_TARGET, %url, %detail, "SSE stream failed")
        }
        ReaderEnd::StreamEnded => tracing::info!(target: LOG_TARGET, %url, "SSE stream ended"),
        ReaderEnd::TransportDropped | ReaderEnd::Cancelled => {
            tracing::debug!(target: LOG_TARGET, %url, ?end, "SSE reader stopped")
        }
    }
}

async fn read_events(
    mut events: EventStream,
    sender: mpsc::Sender<ServerJsonRpcMessage>,
    server: &str,
    tool_tasks: &crate::upstream::tool_tasks::ToolTasks,
) -> ReaderEnd {
    while let Some(event) = events.next().await {
        // sse-stream drops the rest of a chunk after a parse error, so going on could
        // silently lose a response: end the stream and let the owner reconnect.
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                return ReaderEnd::StreamFailed {
                    detail: error.to_string(),
                }
            }
        };
        // An event without an `event:` field is a `message` event (SSE spec).
        match (event.event.as_deref(), event.data) {
            (None | Some("message"), Some(data)) => {
                tool_tasks.learn(data.as_bytes());
                for message in parse_messages(&data, server) {
                    if sender.send(message).await.is_err() {
                        return ReaderEnd::TransportDropped;
                    }
                }
            }
            (other, _) => {
                tracing::debug!(target: LOG_TARGET, event = ?other, "ignoring an SSE event")
            }
        }
    }
    ReaderEnd::StreamEnded
}

/// One message, or a JSON-RPC batch (allowed in 2024-11-05). An answer nested too deep to read
/// becomes an error answer to its request, naming the server; anything else is logged and
/// skipped, because one bad event should not take down every other request on the connection.
fn parse_messages(data: &str, server: &str) -> Vec<ServerJsonRpcMessage> {
    let parsed = if data.trim_start().starts_with('[') {
        serde_json::from_str::<Vec<ServerJsonRpcMessage>>(data)
    } else {
        serde_json::from_str::<ServerJsonRpcMessage>(data).map(|message| vec![message])
    };
    parsed.unwrap_or_else(|error| {
        if let Some(found) = unreadable::unreadable(data.as_bytes()) {
            return vec![unreadable::error_answer(server, &found)];
        }
        let error = SseError::Malformed {
            detail: error.to_string(),
        };
        tracing::warn!(target: LOG_TARGET, %error, data = %preview(data), "skipping a message event");
        Vec::new()
    })
}
