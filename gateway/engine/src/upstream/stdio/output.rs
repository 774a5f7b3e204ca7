//! A stdio server's stdout on its way to rmcp, line by line: a line over the size limit ends
//! the stream with a visible error, and an answer no parser of the gateway can read (nested
//! deeper than serde_json goes) is followed by an error answer to the same request, naming
//! the server, so the call fails at once instead of waiting out its timeout (rmcp drops an
//! unreadable line without a word). Each line is shown to [`ToolTasks`], which learns from a
//! tool list which tools the server runs as tasks.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use super::StreamFault;
use crate::upstream::tool_tasks::ToolTasks;
use crate::upstream::unreadable::{self, LineScan, Unreadable};

/// A line buffer grown past this is let go once its line has been seen.
const KEPT_LINE_CAPACITY: usize = 256 * 1024;

/// A server's stdout as rmcp reads it.
#[derive(Debug)]
pub struct ServerOutput<R> {
    inner: R,
    server: String,
    since_newline: usize,
    limit: usize,
    fault: StreamFault,
    scan: LineScan,
    /// What the server wrote, with error answers put in, not yet handed on (empty but for a
    /// read that put one in).
    pending: Vec<u8>,
    pending_from: usize,
    /// The line being read, for [`ToolTasks`].
    line: Vec<u8>,
    tool_tasks: std::sync::Arc<ToolTasks>,
}

impl<R> ServerOutput<R> {
    pub fn new(
        inner: R,
        server: &str,
        limit: usize,
        fault: StreamFault,
        tool_tasks: std::sync::Arc<ToolTasks>,
    ) -> ServerOutput<R> {
        ServerOutput {
            line: Vec::new(),
            tool_tasks,
            inner,
            server: server.to_owned(),
            since_newline: 0,
            limit,
            fault,
            scan: LineScan::default(),
            pending: Vec::new(),
            pending_from: 0,
        }
    }

    /// Scan what was just read; the error answers to put after the lines that need one, by
    /// the offset just past each such line's newline. `Err` with the fault once a line is
    /// over the limit.
    fn inspect(&mut self, fresh: &[u8]) -> Result<Vec<(usize, Vec<u8>)>, String> {
        let mut answers = Vec::new();
        let mut start = 0;
        while start < fresh.len() {
            let newline = fresh[start..].iter().position(|&byte| byte == b'\n');
            let end = newline.map_or(fresh.len(), |at| start + at);
            self.since_newline += end - start;
            if self.since_newline > self.limit {
                return Err(format!(
                    "the server sent a message larger than {} MiB; the gateway cannot relay it",
                    self.limit / (1024 * 1024)
                ));
            }
            self.scan.feed(&fresh[start..end]);
            self.line.extend_from_slice(&fresh[start..end]);
            if newline.is_none() {
                break;
            }
            self.since_newline = 0;
            self.tool_tasks.learn(&self.line);
            self.line.clear();
            if self.line.capacity() > KEPT_LINE_CAPACITY {
                self.line = Vec::new();
            }
            if let Some(unreadable) = self.scan.finish() {
                answers.push((end + 1, self.error_answer(unreadable)));
            }
            start = end + 1;
        }
        Ok(answers)
    }

    /// The error answer, as one line, for a request whose answer cannot be read.
    fn error_answer(&self, unreadable: Unreadable) -> Vec<u8> {
        let mut line = serde_json::to_vec(&unreadable::error_answer(&self.server, &unreadable))
            .unwrap_or_default();
        line.push(b'\n');
        line
    }

    /// Hand on what waits in `pending`, as much as fits.
    fn drain_pending(&mut self, buf: &mut ReadBuf<'_>) {
        let waiting = &self.pending[self.pending_from..];
        let taken = waiting.len().min(buf.remaining());
        buf.put_slice(&waiting[..taken]);
        self.pending_from += taken;
        if self.pending_from == self.pending.len() {
            self.pending.clear();
            self.pending_from = 0;
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for ServerOutput<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.pending.is_empty() {
            this.drain_pending(buf);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        match this.inspect(&buf.filled()[before..]) {
            Err(message) => {
                let _ = this.fault.set(message.clone());
                buf.set_filled(before);
                Poll::Ready(Err(std::io::Error::other(message)))
            }
            // The usual case: what was read goes on as it is.
            Ok(answers) if answers.is_empty() => Poll::Ready(Ok(())),
            Ok(answers) => {
                let fresh = buf.filled()[before..].to_vec();
                let mut from = 0;
                for (at, answer) in answers {
                    this.pending.extend_from_slice(&fresh[from..at]);
                    this.pending.extend_from_slice(&answer);
                    from = at;
                }
                this.pending.extend_from_slice(&fresh[from..]);
                buf.set_filled(before);
                this.drain_pending(buf);
                Poll::Ready(Ok(()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn read_all(input: Vec<u8>, limit: usize) -> (std::io::Result<Vec<u8>>, StreamFault) {
        let fault = StreamFault::default();
        let mut reader =
            ServerOutput::new(&input[..], "deep", limit, fault.clone(), Default::default());
        let mut sink = Vec::new();
        let result = reader.read_to_end(&mut sink).await.map(|_| sink);
        (result, fault)
    }

    #[tokio::test]
    async fn a_tool_list_read_in_pieces_teaches_which_tools_run_as_tasks() {
        let list = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t","inputSchema":{},"execution":{"taskSupport":"required"}}]}}"#;
        let mut input = b"{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"id\":9}\n".to_vec();
        input.extend_from_slice(list);
        input.push(b'\n');
        let tasks = std::sync::Arc::new(ToolTasks::default());
        // Four bytes a read: every line arrives in pieces.
        let pieces = in_pieces(&input, 4);
        let mut reader = ServerOutput::new(
            pieces,
            "lists",
            1 << 20,
            StreamFault::default(),
            tasks.clone(),
        );
        let mut sink = Vec::new();
        reader.read_to_end(&mut sink).await.unwrap();
        assert_eq!(sink, input, "what the server wrote goes on unchanged");
        assert_eq!(
            tasks.of("t"),
            crate::upstream::tool_tasks::TaskSupport::Required
        );
    }

    /// `input` as a reader that gives `size` bytes a read.
    fn in_pieces(input: &[u8], size: usize) -> impl AsyncRead + Unpin {
        let chunks: Vec<std::io::Result<bytes::Bytes>> = input
            .chunks(size)
            .map(|chunk| Ok(bytes::Bytes::copy_from_slice(chunk)))
            .collect();
        tokio_util::io::StreamReader::new(futures::stream::iter(chunks))
    }

    #[tokio::test]
    async fn lines_within_the_limit_pass() {
        let input = b"0123456789\n0123456789\n".repeat(100);
        let (result, fault) = read_all(input.clone(), 10).await;
        assert_eq!(result.unwrap(), input);
        assert!(fault.get().is_none());
    }

    #[tokio::test]
    async fn an_oversized_line_is_an_error_with_a_reason() {
        let mut input = b"ok\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 100_000));
        input.push(b'\n');
        let (result, fault) = read_all(input, 50_000).await;
        assert!(result.is_err());
        assert!(fault.get().unwrap().contains("larger than"));
    }

    #[tokio::test]
    async fn an_unreadable_answer_is_followed_by_an_error_answer_naming_the_server() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let before = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#;
        let unreadable = format!(r#"{{"jsonrpc":"2.0","id":5,"result":{deep}}}"#);
        let after = r#"{"jsonrpc":"2.0","id":6,"result":{}}"#;
        let input = format!("{before}\n{unreadable}\n{after}\n");
        let (result, fault) = read_all(input.into_bytes(), 1 << 20).await;
        assert!(fault.get().is_none());
        let output = String::from_utf8(result.unwrap()).unwrap();
        let lines: Vec<&str> = output.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(
            (lines[0], lines[1], lines[3]),
            (before, &*unreadable, after)
        );
        let answer: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
        assert_eq!(answer["id"], 5);
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("server \"deep\"") && message.contains("levels deep"),
            "{message}"
        );
        assert_eq!(answer["error"]["data"]["server"], "deep");
        // rmcp reads it as the error answer to request 5.
        let read: rmcp::model::ServerJsonRpcMessage = serde_json::from_str(lines[2]).unwrap();
        assert!(
            matches!(read, rmcp::model::ServerJsonRpcMessage::Error(_)),
            "{read:?}"
        );
    }
}
