//! A stdio server's pipe lent to one handshake: dropped with a transport whose handshake
//! failed, it comes back, so the next handshake is asked on the same process.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

/// `T`, handed back through a channel when dropped. A transport that succeeded keeps it for
/// the connection's life, and its receiver is long gone by then: the pipe is dropped as usual.
pub struct Lent<T> {
    inner: Option<T>,
    back: Option<oneshot::Sender<T>>,
}

impl<T> Lent<T> {
    pub fn new(inner: T) -> (Lent<T>, oneshot::Receiver<T>) {
        let (back, receiver) = oneshot::channel();
        (
            Lent {
                inner: Some(inner),
                back: Some(back),
            },
            receiver,
        )
    }

    fn inner(self: Pin<&mut Self>) -> Pin<&mut T>
    where
        T: Unpin,
    {
        // `inner` is `Some` from `new` until `drop`, the only place that takes it.
        Pin::new(
            self.get_mut()
                .inner
                .as_mut()
                .expect("a lent pipe is present until dropped"),
        )
    }
}

impl<T> Drop for Lent<T> {
    fn drop(&mut self) {
        if let (Some(inner), Some(back)) = (self.inner.take(), self.back.take()) {
            let _ = back.send(inner);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Lent<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.inner().poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Lent<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.inner().poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.inner().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.inner().poll_shutdown(cx)
    }
}

/// Both pipes back from a failed handshake's transport (dropped by then, or within a
/// moment); `None` if either is not handed back, and the caller starts over.
pub async fn reclaim<R, W>(
    read: oneshot::Receiver<R>,
    write: oneshot::Receiver<W>,
) -> Option<(R, W)> {
    let both = async { Some((read.await.ok()?, write.await.ok()?)) };
    tokio::time::timeout(Duration::from_secs(1), both)
        .await
        .ok()
        .flatten()
}
