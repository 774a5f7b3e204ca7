//! A lean MCP client for the legacy HTTP+SSE transport (protocol 2024-11-05), for peers that
//! serve nothing else (mcp-hub): one `GET` event stream whose first event names the endpoint
//! to post to, and one keep-alive connection posting to it, each request's header block and
//! body in two writes with TCP_NODELAY, as the Streamable HTTP client (lean_client.rs) does.
//! Every answer arrives on the event stream.

// Included by benchmarks, each of which uses part of it.
#![allow(dead_code)]

use std::net::SocketAddr;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::lean_client::{connect_nodelay as connect, read_body, read_head, read_into as fill};

/// One legacy SSE session: its event stream and the connection that posts to it.
pub struct SseClient {
    events: Body,
    post: TcpStream,
    post_buffer: Vec<u8>,
    address: SocketAddr,
    endpoint: String,
    next_id: u64,
}

impl SseClient {
    /// Open the event stream at `path`, read the endpoint, and initialize the session.
    pub async fn connect(address: SocketAddr, path: &str) -> Result<SseClient, String> {
        let mut stream = connect(address).await?;
        let head =
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n\r\n");
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|error| format!("write: {error}"))?;
        let mut buffer = Vec::with_capacity(4096);
        let head = read_head(&mut stream, &mut buffer).await?;
        if head.status != 200 {
            return Err(format!("GET {path} answered {}", head.status));
        }
        let mut events = Body {
            stream,
            raw: buffer,
            chunked: head.chunked(),
            chunk_left: 0,
            text: Vec::new(),
        };
        let endpoint = loop {
            let (event, data) = events.next_event().await?;
            if event == "endpoint" {
                break data;
            }
        };
        let mut client = SseClient {
            events,
            post: connect(address).await?,
            post_buffer: Vec::with_capacity(1024),
            address,
            endpoint,
            next_id: 1,
        };
        client
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2024-11-05",
                    "capabilities": {},
                    "clientInfo": {"name": "lean-bench", "version": "0"}
                }),
            )
            .await?;
        client
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(client)
    }

    /// Send a request and wait for its answer on the event stream: the JSON-RPC message.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        loop {
            let (event, data) = self.events.next_event().await?;
            if event != "message" && !event.is_empty() {
                continue;
            }
            let message: Value =
                serde_json::from_str(&data).map_err(|e| format!("bad JSON event: {e}"))?;
            if message["id"] == id {
                return Ok(message);
            }
        }
    }

    /// POST one message to the endpoint: the header block in one write, the body in a second;
    /// the answer (202) carries nothing.
    async fn send(&mut self, message: &Value) -> Result<(), String> {
        let body = serde_json::to_vec(message).unwrap();
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.endpoint,
            self.address,
            body.len()
        );
        let io = |error: std::io::Error| format!("write: {error}");
        self.post.write_all(head.as_bytes()).await.map_err(io)?;
        self.post.write_all(&body).await.map_err(io)?;
        let head = read_head(&mut self.post, &mut self.post_buffer).await?;
        let body = read_body(&mut self.post, &mut self.post_buffer, &head).await?;
        if !(200..300).contains(&head.status) {
            let body = String::from_utf8_lossy(&body);
            return Err(format!(
                "POST {} answered {}: {body}",
                self.endpoint, head.status
            ));
        }
        Ok(())
    }
}

/// An event stream's body, de-chunked as it arrives.
struct Body {
    stream: TcpStream,
    /// Bytes read and not yet de-chunked.
    raw: Vec<u8>,
    chunked: bool,
    /// Bytes left in the current chunk.
    chunk_left: usize,
    /// De-chunked text not yet split into events.
    text: Vec<u8>,
}

impl Body {
    /// The next event: its type (empty when it has none) and its data lines joined.
    async fn next_event(&mut self) -> Result<(String, String), String> {
        loop {
            if let Some(end) = self.text.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.text.drain(..end + 2).collect();
                let block = String::from_utf8_lossy(&block).into_owned();
                let (mut event, mut data) = (String::new(), Vec::new());
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("event:") {
                        event = value.trim().to_owned();
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push(value.strip_prefix(' ').unwrap_or(value).to_owned());
                    }
                }
                if event.is_empty() && data.is_empty() {
                    continue;
                }
                return Ok((event, data.join("\n")));
            }
            self.read_more().await?;
        }
    }

    async fn read_more(&mut self) -> Result<(), String> {
        if !self.chunked {
            if self.raw.is_empty() {
                fill(&mut self.stream, &mut self.raw).await?;
            }
            self.text
                .extend(self.raw.drain(..).filter(|byte| *byte != b'\r'));
            return Ok(());
        }
        loop {
            if self.chunk_left > 0 && !self.raw.is_empty() {
                let take = self.chunk_left.min(self.raw.len());
                self.text
                    .extend(self.raw.drain(..take).filter(|byte| *byte != b'\r'));
                self.chunk_left -= take;
                if self.chunk_left == 0 {
                    while self.raw.len() < 2 {
                        fill(&mut self.stream, &mut self.raw).await?;
                    }
                    self.raw.drain(..2);
                }
                return Ok(());
            }
            if self.chunk_left == 0 {
                if let Some(at) = self.raw.windows(2).position(|w| w == b"\r\n") {
                    let line = String::from_utf8_lossy(&self.raw[..at]).into_owned();
                    let size =
                        usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                            .map_err(|_| format!("bad chunk size {line:?}"))?;
                    self.raw.drain(..at + 2);
                    if size == 0 {
                        return Err("the event stream ended".into());
                    }
                    self.chunk_left = size;
                    continue;
                }
            }
            fill(&mut self.stream, &mut self.raw).await?;
        }
    }
}
