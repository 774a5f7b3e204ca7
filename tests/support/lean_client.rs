//! A lean MCP client over HTTP/1.1, as scripts and many HTTP libraries are: one keep-alive
//! connection and one Streamable HTTP session, each request's header block and body written
//! in two writes, with TCP_NODELAY on its own socket — exactly what Python's `http.client`
//! does. Such a client answers a server's separate writes with delayed ACKs, so a server
//! without TCP_NODELAY stalls ~40 ms on every response.
//!
//! Shared by the integration tests (tests/it/http_endpoint.rs), the lean-client benchmarks
//! (bench/lean_http.rs, aggregators.rs and others) and lean_sse.rs (its connection helpers).

// Included by tests and benchmarks, each of which uses part of it.
#![allow(dead_code)]

use std::net::SocketAddr;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One HTTP/1.1 connection with one MCP session on it.
pub struct LeanClient {
    stream: TcpStream,
    buffer: Vec<u8>,
    address: SocketAddr,
    path: String,
    session: Option<String>,
    protocol: Option<String>,
    /// `Authorization: Bearer ...` on every request, when set.
    bearer: Option<String>,
    next_id: u64,
}

struct Reply {
    status: u16,
    session: Option<String>,
    body: Vec<u8>,
    event_stream: bool,
}

impl LeanClient {
    pub async fn connect(address: SocketAddr, path: &str) -> Result<LeanClient, String> {
        LeanClient::connect_with_token(address, path, None).await
    }

    /// [`LeanClient::connect`], presenting `bearer` on every request.
    pub async fn connect_with_token(
        address: SocketAddr,
        path: &str,
        bearer: Option<&str>,
    ) -> Result<LeanClient, String> {
        let stream = connect_nodelay(address).await?;
        let mut client = LeanClient {
            stream,
            buffer: Vec::with_capacity(16 * 1024),
            address,
            path: path.to_owned(),
            session: None,
            protocol: None,
            bearer: bearer.map(str::to_owned),
            next_id: 1,
        };
        client.new_session().await?;
        Ok(client)
    }

    /// The session's id (none from a server without sessions).
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// Open a new session on this connection (initialize, initialized), leaving the one
    /// before as it is: abandoned.
    pub async fn new_session(&mut self) -> Result<(), String> {
        self.session = None;
        self.protocol = None;
        let initialize = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "lean-bench", "version": "0"}
            }
        });
        let reply = self.post(&initialize).await?;
        let result = response(&reply, 0)?;
        self.session = reply.session;
        self.protocol = result["result"]["protocolVersion"]
            .as_str()
            .map(str::to_owned);
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let reply = self.post(&initialized).await?;
        if !(200..300).contains(&reply.status) {
            return Err(format!(
                "notifications/initialized answered {}",
                reply.status
            ));
        }
        Ok(())
    }

    /// Call `tool` with `{argument: "ping"}`; an error result is an error.
    pub async fn call(&mut self, tool: &str, argument: &str) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {argument: "ping"}}
        });
        let reply = self.post(&request).await?;
        let message = response(&reply, id)?;
        if message.get("error").is_some() || message["result"]["isError"] == true {
            return Err(format!("{tool} failed: {message}"));
        }
        Ok(message)
    }

    /// Send a request: its JSON-RPC answer, error or not.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let reply = self.post(&request).await?;
        response(&reply, id)
    }

    /// POST one message: the header block in one write, the body in a second.
    async fn post(&mut self, message: &Value) -> Result<Reply, String> {
        let body = serde_json::to_vec(message).unwrap();
        let mut head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.path,
            self.address,
            body.len()
        );
        if let Some(session) = &self.session {
            head.push_str(&format!("Mcp-Session-Id: {session}\r\n"));
        }
        if let Some(protocol) = &self.protocol {
            head.push_str(&format!("Mcp-Protocol-Version: {protocol}\r\n"));
        }
        if let Some(bearer) = &self.bearer {
            head.push_str(&format!("Authorization: Bearer {bearer}\r\n"));
        }
        head.push_str("\r\n");
        let io = |error: std::io::Error| format!("write: {error}");
        self.stream.write_all(head.as_bytes()).await.map_err(io)?;
        self.stream.write_all(&body).await.map_err(io)?;
        self.read_reply().await
    }

    async fn read_reply(&mut self) -> Result<Reply, String> {
        let head = read_head(&mut self.stream, &mut self.buffer).await?;
        let body = read_body(&mut self.stream, &mut self.buffer, &head).await?;
        Ok(Reply {
            status: head.status,
            session: head.header("mcp-session-id").map(str::to_owned),
            body,
            event_stream: head
                .header("content-type")
                .is_some_and(|v| v.contains("text/event-stream")),
        })
    }

    async fn fill(&mut self) -> Result<(), String> {
        read_into(&mut self.stream, &mut self.buffer).await
    }
}

/// A connection to `address` with TCP_NODELAY, as the lean clients make them.
pub async fn connect_nodelay(address: SocketAddr) -> Result<TcpStream, String> {
    let stream = TcpStream::connect(address)
        .await
        .map_err(|error| format!("connect {address}: {error}"))?;
    stream
        .set_nodelay(true)
        .map_err(|error| format!("TCP_NODELAY: {error}"))?;
    Ok(stream)
}

/// Read what `stream` has into `buffer`; the server closing it is an error.
pub async fn read_into(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<(), String> {
    let mut chunk = [0u8; 16 * 1024];
    let read = stream
        .read(&mut chunk)
        .await
        .map_err(|error| format!("read: {error}"))?;
    if read == 0 {
        return Err("the server closed the connection".into());
    }
    buffer.extend_from_slice(&chunk[..read]);
    Ok(())
}

/// A response's status and headers.
pub struct Head {
    pub status: u16,
    headers: Vec<(String, String)>,
}

impl Head {
    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    pub fn chunked(&self) -> bool {
        self.header("transfer-encoding")
            .is_some_and(|v| v.contains("chunked"))
    }
}

/// A response's head from `stream` (what `buffer` already holds first); what follows it
/// stays in `buffer`.
pub async fn read_head(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<Head, String> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut parsed = httparse::Response::new(&mut headers);
        match parsed
            .parse(buffer)
            .map_err(|e| format!("bad response: {e}"))?
        {
            httparse::Status::Complete(end) => {
                let head = Head {
                    status: parsed.code.unwrap_or(0),
                    headers: parsed
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_owned(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect(),
                };
                buffer.drain(..end);
                return Ok(head);
            }
            httparse::Status::Partial => read_into(stream, buffer).await?,
        }
    }
}

/// The body after `head`: chunked, or as long as its Content-Length says (none: empty).
pub async fn read_body(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
    head: &Head,
) -> Result<Vec<u8>, String> {
    if head.chunked() {
        return read_chunked(stream, buffer).await;
    }
    let length: usize = head
        .header("content-length")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buffer.len() < length {
        read_into(stream, buffer).await?;
    }
    Ok(buffer.drain(..length).collect())
}

/// A chunked body from `stream` (what `buffer` already holds first), chunk by chunk up to
/// the last, empty one; what follows it stays in `buffer`.
pub async fn read_chunked(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(at) = buffer.windows(2).position(|w| w == b"\r\n") {
                break at;
            }
            read_into(stream, buffer).await?;
        };
        let size_text = String::from_utf8_lossy(&buffer[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        buffer.drain(..line_end + 2);
        while buffer.len() < size + 2 {
            read_into(stream, buffer).await?;
        }
        body.extend(buffer.drain(..size));
        buffer.drain(..2);
        if size == 0 {
            return Ok(body);
        }
    }
}

/// The JSON-RPC response with `id` in a reply: a JSON body, or one of an event stream's events.
fn response(reply: &Reply, id: u64) -> Result<Value, String> {
    if reply.status != 200 {
        return Err(format!(
            "HTTP {}: {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        ));
    }
    let text = String::from_utf8_lossy(&reply.body);
    let messages: Vec<Value> = if reply.event_stream {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    } else {
        vec![serde_json::from_str(&text).map_err(|e| format!("bad JSON: {e}"))?]
    };
    messages
        .into_iter()
        .find(|message| message["id"] == id)
        .ok_or_else(|| format!("no response to request {id} in: {text}"))
}
