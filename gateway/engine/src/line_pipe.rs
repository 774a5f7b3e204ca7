//! A pipe that more than one writer sends whole messages down: rmcp's transport and a call
//! that writes its own request to a stdio server without handing it to rmcp's serve loop
//! (`upstream::direct`). Each message is written whole, in the order it was given; a
//! writer that finds the pipe empty and with room writes in its own poll, with no task
//! woken. What the pipe cannot take at once waits in a queue that one task drains, so a
//! writer that stops waiting loses nothing.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use tokio::io::AsyncWrite;
use tokio::net::unix::pipe;
use tokio::sync::watch;

use crate::lock::lock;

/// The writing end of a pipe, shared.
#[derive(Debug, Clone)]
pub struct LinePipe {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<Queue>,
    /// How many messages are written, or why the pipe broke: published under `state`'s
    /// lock, so it only ever moves forward.
    written: watch::Sender<Written>,
    /// Wakes the draining task when the pipe is closed, so it lets go of the pipe.
    closed: tokio::sync::Notify,
}

/// How many messages a pipe has written, and why it broke if it did.
#[derive(Debug, Clone, Copy, Default)]
struct Written {
    count: u64,
    broken: Option<io::ErrorKind>,
}

#[derive(Debug, Default)]
struct Queue {
    /// `None` once closed: the reader sees the end of its input when the last task
    /// writing lets go of it.
    pipe: Option<Arc<pipe::Sender>>,
    /// Messages not yet written, the first perhaps in part (from `offset`).
    waiting: VecDeque<Vec<u8>>,
    offset: usize,
    /// Messages given so far: a message's ticket is its place in this count.
    given: u64,
    written: u64,
    draining: bool,
    /// Closed by the transport: nothing more is taken, and the pipe goes once what is
    /// queued is written.
    closing: bool,
    broken: Option<io::ErrorKind>,
}

impl Queue {
    /// Write what waits, as far as the pipe takes it now.
    fn drain(&mut self) {
        let Some(pipe) = &self.pipe else {
            self.broken = Some(io::ErrorKind::BrokenPipe);
            self.waiting.clear();
            return;
        };
        while let Some(front) = self.waiting.front() {
            match pipe.try_write(&front[self.offset..]) {
                Ok(0) => {
                    self.broken = Some(io::ErrorKind::WriteZero);
                    break;
                }
                Ok(n) => {
                    self.offset += n;
                    if self.offset == front.len() {
                        self.waiting.pop_front();
                        self.offset = 0;
                        self.written += 1;
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => {
                    self.broken = Some(error.kind());
                    break;
                }
            }
        }
        if self.broken.is_some() {
            self.waiting.clear();
        }
    }
}

impl LinePipe {
    /// The write end of a pipe (a child's stdin), made non-blocking.
    pub fn new(fd: std::os::fd::OwnedFd) -> io::Result<LinePipe> {
        Ok(LinePipe {
            shared: Arc::new(Shared {
                state: Mutex::new(Queue {
                    pipe: Some(Arc::new(pipe::Sender::from_owned_fd(fd)?)),
                    ..Queue::default()
                }),
                written: watch::Sender::new(Written::default()),
                closed: tokio::sync::Notify::new(),
            }),
        })
    }

    /// Send `message` (with its newline): written at once if the pipe takes it, else
    /// queued. The returned ticket is done when the message is written.
    pub fn send(&self, message: Vec<u8>) -> Ticket {
        let shared = &self.shared;
        let mut queue = lock(&shared.state);
        if let Some(kind) = queue.broken {
            return Ticket::Failed(kind);
        }
        if queue.closing {
            return Ticket::Failed(io::ErrorKind::BrokenPipe);
        }
        queue.given += 1;
        let ticket = queue.given;
        queue.waiting.push_back(message);
        let before = queue.written;
        queue.drain();
        let progress = Written {
            count: queue.written,
            broken: queue.broken,
        };
        let done = queue.written >= ticket;
        if !done && queue.broken.is_none() && !queue.draining {
            queue.draining = true;
            tokio::spawn(drain(shared.clone()));
        }
        // Earlier messages written here too: their writers hear it.
        if progress.count > before + u64::from(done) || progress.broken.is_some() {
            shared.written.send_replace(progress);
        }
        drop(queue);
        if let Some(kind) = progress.broken {
            return Ticket::Failed(kind);
        }
        if done {
            return Ticket::Written;
        }
        Ticket::Queued(Queued {
            ticket,
            written: shared.written.subscribe(),
        })
    }

    /// Close the pipe: every later message fails, and the reader sees the end of its input
    /// once what is queued is written (at once if nothing is).
    pub fn close(&self) {
        let mut queue = lock(&self.shared.state);
        queue.closing = true;
        if queue.waiting.is_empty() {
            queue.pipe = None;
        }
        drop(queue);
        self.shared.closed.notify_one();
    }
}

/// A message given to a [`LinePipe`]: written, failed, or queued (awaited, it ends when
/// the message is written).
#[derive(Debug)]
pub enum Ticket {
    Written,
    Failed(io::ErrorKind),
    Queued(Queued),
}

/// A queued message's place in its pipe's count.
#[derive(Debug)]
pub struct Queued {
    ticket: u64,
    written: watch::Receiver<Written>,
}

impl std::future::IntoFuture for Ticket {
    type Output = io::Result<()>;
    type IntoFuture = futures::future::BoxFuture<'static, io::Result<()>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            match self {
                Ticket::Written => Ok(()),
                Ticket::Failed(kind) => Err(kind.into()),
                Ticket::Queued(Queued {
                    ticket,
                    mut written,
                }) => {
                    let done = written
                        .wait_for(|written| written.count >= ticket || written.broken.is_some())
                        .await
                        .map(|written| *written);
                    match done {
                        Ok(Written { count, .. }) if count >= ticket => Ok(()),
                        Ok(Written {
                            broken: Some(kind), ..
                        }) => Err(kind.into()),
                        _ => Err(io::ErrorKind::BrokenPipe.into()),
                    }
                }
            }
        })
    }
}

/// Write the queue out as the pipe takes it; the one task doing so for a pipe.
async fn drain(shared: Arc<Shared>) {
    loop {
        let Some(pipe) = lock(&shared.state).pipe.clone() else {
            return;
        };
        let ready = tokio::select! {
            ready = pipe.writable() => Some(ready),
            () = shared.closed.notified() => None,
        };
        drop(pipe);
        let mut queue = lock(&shared.state);
        match ready {
            Some(Err(error)) => {
                queue.broken = Some(error.kind());
                queue.waiting.clear();
            }
            Some(Ok(())) => queue.drain(),
            // Closed: the pipe is gone if nothing waits, else the queue is drained first.
            None if queue.pipe.is_none() => {
                queue.draining = false;
                return;
            }
            None => {}
        }
        let progress = Written {
            count: queue.written,
            broken: queue.broken,
        };
        let finished = queue.waiting.is_empty();
        if finished {
            queue.draining = false;
            if queue.closing {
                queue.pipe = None;
            }
        }
        shared.written.send_replace(progress);
        drop(queue);
        if finished {
            return;
        }
    }
}

/// A [`LinePipe`] as rmcp's transport writes to it: what is written between two flushes
/// is one message, sent whole at the flush.
pub struct PipeWriter {
    pipe: LinePipe,
    gathered: Vec<u8>,
    sending: Option<futures::future::BoxFuture<'static, io::Result<()>>>,
}

impl std::fmt::Debug for PipeWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipeWriter")
            .field("gathered", &self.gathered.len())
            .field("sending", &self.sending.is_some())
            .finish()
    }
}

impl PipeWriter {
    pub fn new(pipe: LinePipe) -> PipeWriter {
        PipeWriter {
            pipe,
            gathered: Vec::new(),
            sending: None,
        }
    }

    pub fn pipe(&self) -> &LinePipe {
        &self.pipe
    }

    fn poll_sent(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(sending) = &mut self.sending {
            let sent = ready!(sending.as_mut().poll(cx));
            self.sending = None;
            sent?;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for PipeWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_sent(cx))?;
        this.gathered.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_sent(cx))?;
        if !this.gathered.is_empty() {
            let message = std::mem::take(&mut this.gathered);
            match this.pipe.send(message) {
                Ticket::Written => {}
                Ticket::Failed(kind) => return Poll::Ready(Err(kind.into())),
                queued => {
                    this.sending = Some(std::future::IntoFuture::into_future(queued));
                    ready!(this.poll_sent(cx))?;
                }
            }
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        self.pipe.close();
        Poll::Ready(Ok(()))
    }
}

/// The transport that wrote to the pipe is gone: so is the pipe, for every writer.
impl Drop for PipeWriter {
    fn drop(&mut self) {
        self.pipe.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn pair() -> (LinePipe, tokio::net::unix::pipe::Receiver) {
        let (sender, receiver) = tokio::net::unix::pipe::pipe().unwrap();
        let fd = sender.into_blocking_fd().unwrap();
        (LinePipe::new(fd).unwrap(), receiver)
    }

    #[tokio::test]
    async fn messages_larger_than_the_pipe_from_many_writers_arrive_whole_and_in_turn() {
        let (pipe, mut receiver) = pair();
        // Each over the pipe's 64 KiB, so every one is queued in part.
        let messages: Vec<Vec<u8>> = (0..8u8)
            .map(|n| {
                let mut message = vec![b'a' + n; 100_000];
                message.push(b'\n');
                message
            })
            .collect();
        let mut writers = Vec::new();
        for message in messages.clone() {
            let pipe = pipe.clone();
            writers.push(tokio::spawn(async move { pipe.send(message).await }));
        }
        // A writer that stops waiting loses nothing: its message still goes.
        let mut dropped = vec![b'z'; 100_000];
        dropped.push(b'\n');
        drop(pipe.send(dropped.clone()));
        let mut read = Vec::new();
        let expected = messages.iter().map(Vec::len).sum::<usize>() + dropped.len();
        while read.len() < expected {
            let mut chunk = vec![0; 65536];
            let n = receiver.read(&mut chunk).await.unwrap();
            assert_ne!(n, 0);
            read.extend_from_slice(&chunk[..n]);
        }
        for writer in writers {
            writer.await.unwrap().unwrap();
        }
        let lines: Vec<&[u8]> = read
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(lines.len(), 9);
        for line in lines {
            assert!(
                line.iter().all(|&b| b == line[0]),
                "a message was interleaved"
            );
        }
    }

    /// Many small writers on two threads and a reader that stops now and then: every
    /// writer hears its message written (the count published never goes back).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_writer_on_every_thread_hears_its_message_written() {
        let (pipe, mut receiver) = pair();
        let message = |n: usize| format!("{n:0>2000}\n").into_bytes();
        let writers: Vec<_> = (0..400)
            .map(|n| {
                let pipe = pipe.clone();
                tokio::spawn(async move { pipe.send(message(n)).await })
            })
            .collect();
        let expected = 400 * message(0).len();
        let mut read = 0;
        let mut chunk = vec![0; 4096];
        while read < expected {
            let n = receiver.read(&mut chunk).await.unwrap();
            assert_ne!(n, 0);
            read += n;
            tokio::task::yield_now().await;
        }
        for writer in writers {
            writer.await.unwrap().unwrap();
        }
    }

    #[tokio::test]
    async fn closing_refuses_new_messages_and_ends_the_pipe_once_the_queued_ones_are_written() {
        let (pipe, mut receiver) = pair();
        let mut message = vec![b'q'; 200_000];
        message.push(b'\n');
        let queued = pipe.send(message.clone());
        assert!(matches!(queued, Ticket::Queued(_)), "over the pipe's size");
        pipe.close();
        assert!(matches!(pipe.send(b"late\n".to_vec()), Ticket::Failed(_)));
        let mut read = Vec::new();
        receiver.read_to_end(&mut read).await.unwrap();
        assert_eq!(read, message, "the queued message whole, then the end");
        queued.await.unwrap();
    }

    #[tokio::test]
    async fn a_closed_reader_fails_the_write_and_every_later_one() {
        let (pipe, receiver) = pair();
        drop(receiver);
        let error = pipe.send(b"x\n".to_vec()).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
        assert!(pipe.send(b"y\n".to_vec()).await.is_err());
    }
}
