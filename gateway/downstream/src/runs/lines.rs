//! The stdio client's messages, line by line, through [`wire`](super::wire): the `tasks`
//! capability and tool lists on the way out ([`Outbound`], after rmcp writes them), and,
//! once the `initialize` result has declared tasks, the client's task requests on the way in
//! ([`Inbound`], before rmcp parses them). A line that needs nothing passes as it came; a
//! session that does not speak 2025-11-25 has every line pass so.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::wire;

/// The longest line rewritten; a longer one passes as it is, for rmcp to refuse (the same
/// limit as rmcp's own).
const MAX_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// Lines in, the same or rewritten lines out.
#[derive(Debug, Default)]
struct Lines {
    /// The line being gathered.
    pending: Vec<u8>,
    /// Passing the rest of a line past [`MAX_LINE`] as it comes.
    passing: bool,
    /// Bytes ready to go on, from `sent`.
    ready: Vec<u8>,
    sent: usize,
}

impl Lines {
    fn is_drained(&self) -> bool {
        self.sent == self.ready.len()
    }

    /// Take `bytes` in; complete lines go to `ready`, rewritten by `rewrite` where it says.
    fn feed(&mut self, mut bytes: &[u8], rewrite: &mut impl FnMut(&[u8]) -> Option<Vec<u8>>) {
        if self.is_drained() {
            self.ready.clear();
            self.sent = 0;
        }
        while !bytes.is_empty() {
            let end = memchr::memchr(b'\n', bytes);
            let (part, rest) = match end {
                Some(at) => bytes.split_at(at + 1),
                None => (bytes, &[][..]),
            };
            bytes = rest;
            if self.passing {
                self.ready.extend_from_slice(part);
                self.passing = end.is_none();
                continue;
            }
            if self.pending.is_empty() && end.is_some() {
                self.line(part, rewrite);
                continue;
            }
            self.pending.extend_from_slice(part);
            if end.is_some() {
                let line = std::mem::take(&mut self.pending);
                self.line(&line, rewrite);
            } else if self.pending.len() > MAX_LINE {
                self.ready.append(&mut self.pending);
                self.passing = true;
            }
        }
    }

    /// The line gathered so far, whole or not: at the end of the stream.
    fn finish(&mut self) {
        self.ready.append(&mut self.pending);
    }

    fn line(&mut self, line: &[u8], rewrite: &mut impl FnMut(&[u8]) -> Option<Vec<u8>>) {
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        match rewrite(body) {
            Some(rewritten) => {
                self.ready.extend_from_slice(&rewritten);
                self.ready.push(b'\n');
            }
            None => self.ready.extend_from_slice(line),
        }
    }
}

/// The session's era, shared by both sides and decided by its first answer: not yet.
const UNDECIDED: u8 = 0;
/// Its `initialize` result declared tasks: it speaks 2025-11-25.
const TASKS: u8 = 1;
/// Anything else: every line passes as it is, with no copy.
const PLAIN: u8 = 2;

/// A client's stdin and stdout, through the rewrites of a 2025-11-25 session.
pub fn lines<R, W>(read: R, write: W) -> (Inbound<R>, Outbound<W>) {
    let era = Arc::new(AtomicU8::new(UNDECIDED));
    (
        Inbound {
            inner: read,
            lines: Lines::default(),
            ended: false,
            era: era.clone(),
        },
        Outbound {
            inner: write,
            lines: Lines::default(),
            era,
        },
    )
}

/// The client's side of stdin: a 2025-11-25 session's task requests renamed for the
/// handler ([`wire::inbound_bytes`]).
pub struct Inbound<R> {
    inner: R,
    lines: Lines,
    ended: bool,
    /// Decided by [`Outbound`] at the session's first answer.
    era: Arc<AtomicU8>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Inbound<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.lines.is_drained() {
                let ready = &this.lines.ready[this.lines.sent..];
                let n = ready.len().min(buf.remaining());
                buf.put_slice(&ready[..n]);
                this.lines.sent += n;
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            let era = this.era.load(Ordering::Acquire);
            if era == PLAIN && this.lines.pending.is_empty() && !this.lines.passing {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.ended = true;
                this.lines.finish();
            } else if era == TASKS {
                this.lines.feed(read.filled(), &mut wire::inbound_bytes);
            } else {
                this.lines.feed(read.filled(), &mut |_| None);
            }
        }
    }
}

/// The client's side of stdout: a 2025-11-25 session's `initialize` result declares tasks,
/// and from then on its tool lists say every tool may run as one ([`wire::outbound_bytes`]).
pub struct Outbound<W> {
    inner: W,
    lines: Lines,
    /// Decided here, at the session's first answer: to a handshake-era client it is the
    /// `initialize` result (no other request may come before it).
    era: Arc<AtomicU8>,
}

impl<W: AsyncWrite + Unpin> Outbound<W> {
    /// Write what is ready to the client.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.lines.is_drained() {
            let ready = &self.lines.ready[self.lines.sent..];
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, ready))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.lines.sent += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Outbound<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        // Once the session is known not to speak 2025-11-25, every line passes as it is.
        let era = this.era.load(Ordering::Acquire);
        if era == PLAIN && this.lines.pending.is_empty() && !this.lines.passing {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        let shared = &this.era;
        let mut era = era;
        this.lines.feed(buf, &mut |line: &[u8]| match era {
            TASKS => wire::outbound_bytes(line),
            PLAIN => None,
            _ if !is_answer(line) => None,
            _ => {
                let rewritten = is_initialize_result(line)
                    .then(|| wire::outbound_bytes(line))
                    .flatten();
                era = if rewritten.is_some() { TASKS } else { PLAIN };
                shared.store(era, Ordering::Release);
                rewritten
            }
        });
        // Accepted whatever the client's pipe takes now; the rest goes on the next write or
        // flush.
        let _ = this.poll_drain(cx)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.lines.finish();
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Whether `line` answers a request (a result or an error), not a notification or request.
fn is_answer(line: &[u8]) -> bool {
    (memchr::memmem::find(line, b"\"result\"").is_some()
        || memchr::memmem::find(line, b"\"error\"").is_some())
        && memchr::memmem::find(line, b"\"method\"").is_none()
}

/// Whether `line` is the answer to `initialize` (the one result with `serverInfo`).
fn is_initialize_result(line: &[u8]) -> bool {
    memchr::memmem::find(line, b"\"serverInfo\"").is_some()
        && memchr::memmem::find(line, b"\"protocolVersion\"").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_task_request_split_across_reads_is_renamed_and_other_lines_pass_as_they_came() {
        let input = concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"a__x"}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
        );
        let (mut client, server) = tokio::io::duplex(7);
        let writer = tokio::spawn(async move {
            client.write_all(input.as_bytes()).await.unwrap();
        });
        let (mut inbound, _) = lines(server, tokio::io::sink());
        inbound.era.store(TASKS, Ordering::Release);
        let mut read = String::new();
        inbound.read_to_string(&mut read).await.unwrap();
        writer.await.unwrap();
        let read: Vec<&str> = read.split('\n').collect();
        assert_eq!(read.len(), 3, "{read:?}");
        assert_eq!(read[0], r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        let renamed: serde_json::Value = serde_json::from_str(read[1]).unwrap();
        assert_eq!(renamed["method"], wire::GET);
        assert_eq!(read[2], r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#);
    }

    async fn written(sent: &[&str]) -> Vec<serde_json::Value> {
        let (client, mut server) = tokio::io::duplex(5);
        let reader = tokio::spawn(async move {
            let mut read = String::new();
            server.read_to_string(&mut read).await.unwrap();
            read
        });
        let (_, mut out) = lines(tokio::io::empty(), client);
        for line in sent {
            out.write_all(line.as_bytes()).await.unwrap();
            out.write_all(b"\n").await.unwrap();
            out.flush().await.unwrap();
        }
        out.shutdown().await.unwrap();
        drop(out);
        let read = reader.await.unwrap();
        read.lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    const TOOLS: &str =
        r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","inputSchema":{}}]}}"#;

    #[tokio::test]
    async fn a_2025_11_25_session_is_told_of_tasks_and_an_older_one_sees_its_lines_unchanged() {
        let current = written(&[
            r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"w","version":"1"}}}"#,
            TOOLS,
        ])
        .await;
        assert!(current[0]["result"]["capabilities"]["tasks"].is_object());
        assert_eq!(
            current[1]["result"]["tools"][0]["execution"]["taskSupport"],
            "optional"
        );

        let older = written(&[
            r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"w","version":"1"}}}"#,
            TOOLS,
        ])
        .await;
        assert!(older[0]["result"]["capabilities"].get("tasks").is_none());
        assert!(older[1]["result"]["tools"][0].get("execution").is_none());

        // A 2026-07-28 client sends no `initialize`: its first answer decides, and every
        // line after passes as it is.
        let modern = written(&[
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":0,"result":{"resultType":"complete","supportedVersions":["2026-07-28"]}}"#,
            r#"{"jsonrpc":"2.0","id":9,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"w","version":"1"}}}"#,
            TOOLS,
        ])
        .await;
        assert!(modern[2]["result"]["capabilities"].get("tasks").is_none());
        assert!(modern[3]["result"]["tools"][0].get("execution").is_none());
    }

    #[tokio::test]
    async fn an_older_session_s_task_requests_reach_rmcp_as_they_came() {
        let line = r#"{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"x"}}"#;
        let sent = format!("{line}\n");
        let (inbound, _) = lines(sent.as_bytes(), tokio::io::sink());
        let mut read = String::new();
        let mut inbound = inbound;
        inbound.read_to_string(&mut read).await.unwrap();
        assert_eq!(read, format!("{line}\n"));
    }
}
