//! Server-sent events read off an HTTP response as they arrive, for tests that read a
//! stream's events themselves (the admin API's `/events`, a Streamable HTTP response).

use std::time::Duration;

/// Server-sent events read off an HTTP response as they arrive.
pub struct SseReader {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
}

/// One server-sent event: its `id:` and `event:` fields, and its `data:` lines joined.
#[derive(Debug)]
pub struct SseEvent {
    pub id: Option<String>,
    pub kind: Option<String>,
    pub data: Option<String>,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> SseReader {
        use futures::StreamExt;
        SseReader {
            body: response.bytes_stream().boxed(),
            buffer: String::new(),
        }
    }

    /// The next event (a block of only comments, a keep-alive, is skipped); `None` at the
    /// end of the stream. Each read waits at most `limit`.
    pub async fn next(&mut self, limit: Duration) -> Option<SseEvent> {
        use futures::StreamExt;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let values = |name: &str| {
                    block
                        .lines()
                        .filter_map(|line| line.strip_prefix(name))
                        .map(|value| value.strip_prefix(' ').unwrap_or(value).to_owned())
                        .collect::<Vec<_>>()
                };
                let data = values("data:");
                let event = SseEvent {
                    id: values("id:").pop(),
                    kind: values("event:").pop(),
                    data: (!data.is_empty()).then(|| data.join("\n")),
                };
                if event.id.is_some() || event.kind.is_some() || event.data.is_some() {
                    return Some(event);
                }
            }
            let chunk = tokio::time::timeout(limit, self.body.next())
                .await
                .expect("an event in time")?;
            self.buffer
                .push_str(&String::from_utf8_lossy(&chunk.unwrap()).replace("\r\n", "\n"));
        }
    }
}
