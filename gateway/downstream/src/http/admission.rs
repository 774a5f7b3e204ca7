//! Who gets a connection, and for how long: the part of a listener that runs before any
//! request is read. `/mcp` and the admin API both accept through it.
//!
//! Why this file is long: the four steps of admission are one pipeline whose limits
//! interact (rate, per-address share, cap, first-byte deadline); its tests drive them on
//! real sockets together.
//!
//! In order, each step costing less than the next:
//! 1. a per-address accept rate (over it, the socket is closed at once, nothing read);
//! 2. a per-address share of the connection cap, then the cap itself (over either, a 503
//!    written without reading the request, and the socket closed);
//! 3. the TLS handshake, then the first bytes (enough to choose HTTP/1 or HTTP/2), within the
//!    first-byte deadline: a socket that sends nothing is closed;
//! 4. hyper, with its header timeout, HTTP/2 keep-alive pings, and an idle watchdog that
//!    closes a connection with no request or stream open for the idle time.
//!
//! An "address" is an IPv4 address or an IPv6 /64 (one host usually holds a whole /64), so
//! one machine cannot take every connection, whatever it presents later.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota};
use hyper::body::{Body, Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use wardgate_engine::lock::lock;

/// How one listener admits connections.
#[derive(Debug, Clone)]
pub struct Admission {
    /// What the listener is called in logs and refusals ("client", "admin API").
    pub name: &'static str,
    /// Open connections at once, all addresses together.
    pub max_connections: usize,
    /// Open connections at once from one address (an IPv6 /64 is one).
    pub max_connections_per_address: usize,
    /// New connections a second from one address, and the burst above it.
    pub accept_rate: u32,
    pub accept_burst: u32,
    /// From accept to the TLS handshake's end, and again from then to the first bytes of a
    /// request (enough to tell HTTP/1 from HTTP/2).
    pub first_byte_timeout: Duration,
    /// To send a request's header block (HTTP/1).
    pub header_read_timeout: Duration,
    /// A connection with no request in flight and no open stream for this long is closed.
    pub connection_idle: Duration,
    /// HTTP/2 allowed (else HTTP/1 only); when it is, a ping goes out after this long with
    /// nothing received, and a connection that does not answer it in as long is closed.
    pub http2: Option<Http2>,
}

/// HTTP/2 settings of a listener that speaks it.
#[derive(Debug, Clone)]
pub struct Http2 {
    pub keep_alive: Duration,
    pub max_concurrent_streams: u32,
}

impl Admission {
    /// `/mcp`'s defaults for a cap of `max_connections`: a quarter of it per address.
    pub fn clients(max_connections: usize, header_read_timeout: Duration) -> Admission {
        Admission {
            name: "client",
            max_connections,
            max_connections_per_address: (max_connections / 4).max(1),
            accept_rate: 256,
            accept_burst: 512,
            first_byte_timeout: header_read_timeout,
            header_read_timeout,
            connection_idle: Duration::from_secs(60),
            http2: Some(Http2 {
                keep_alive: Duration::from_secs(30),
                max_concurrent_streams: 8,
            }),
        }
    }

    /// The admin API's: a small cap, HTTP/1 only (its page and CLI need nothing more).
    pub fn admin() -> Admission {
        Admission {
            name: "admin API",
            max_connections: ADMIN_MAX_CONNECTIONS,
            max_connections_per_address: ADMIN_MAX_CONNECTIONS / 4,
            accept_rate: 32,
            accept_burst: 64,
            first_byte_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            connection_idle: Duration::from_secs(60),
            http2: None,
        }
    }
}

/// The admin API's connection cap; kept out of the clients' share of file descriptors.
pub const ADMIN_MAX_CONNECTIONS: usize = 64;

/// An address as admission counts it: an IPv4 address, or the /64 of an IPv6 one (an
/// IPv4-mapped IPv6 address is its IPv4 address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerKey(IpAddr);

impl PeerKey {
    pub fn of(ip: IpAddr) -> PeerKey {
        match ip {
            IpAddr::V4(v4) => PeerKey(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => PeerKey(IpAddr::V4(v4)),
                None => {
                    let bits = u128::from(v6) & !((1u128 << 64) - 1);
                    PeerKey(IpAddr::V6(Ipv6Addr::from(bits)))
                }
            },
        }
    }
}

impl std::fmt::Display for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

/// What each address holds: connections, and bytes of request bodies being read.
#[derive(Default)]
pub struct Shares {
    held: Mutex<HashMap<PeerKey, Held>>,
    max_connections: usize,
    max_body_bytes: usize,
}

#[derive(Default, Clone, Copy)]
struct Held {
    connections: usize,
    body_bytes: usize,
}

impl Held {
    fn is_empty(&self) -> bool {
        self.connections == 0 && self.body_bytes == 0
    }
}

impl Shares {
    /// At most `max_connections` connections and `max_body_bytes` of bodies per address.
    pub fn new(max_connections: usize, max_body_bytes: usize) -> Arc<Shares> {
        Arc::new(Shares {
            held: Mutex::default(),
            max_connections,
            max_body_bytes,
        })
    }

    fn connect(self: &Arc<Self>, peer: PeerKey) -> Option<ConnectionShare> {
        let mut held = lock(&self.held);
        let entry = held.entry(peer).or_default();
        if entry.connections >= self.max_connections {
            return None;
        }
        entry.connections += 1;
        Some(ConnectionShare {
            shares: self.clone(),
            peer,
        })
    }

    /// Count `bytes` more of a body from `peer`; `None` when its share has no room.
    pub fn hold(self: &Arc<Self>, peer: IpAddr, bytes: usize) -> Option<BodyShare> {
        let peer = PeerKey::of(peer);
        let mut held = lock(&self.held);
        let entry = held.entry(peer).or_default();
        if entry.body_bytes.saturating_add(bytes) > self.max_body_bytes {
            if entry.is_empty() {
                held.remove(&peer);
            }
            return None;
        }
        entry.body_bytes += bytes;
        Some(BodyShare {
            shares: self.clone(),
            peer,
            bytes,
        })
    }

    fn release(&self, peer: PeerKey, change: impl FnOnce(&mut Held)) {
        let mut held = lock(&self.held);
        if let Some(entry) = held.get_mut(&peer) {
            change(entry);
            if entry.is_empty() {
                held.remove(&peer);
            }
        }
    }

    /// Addresses holding anything (for tests of the bookkeeping).
    #[cfg(test)]
    fn addresses(&self) -> usize {
        lock(&self.held).len()
    }
}

/// One connection in its address's share; given back when dropped.
struct ConnectionShare {
    shares: Arc<Shares>,
    peer: PeerKey,
}

impl Drop for ConnectionShare {
    fn drop(&mut self) {
        self.shares.release(self.peer, |held| held.connections -= 1);
    }
}

/// Bytes of a body in its address's share; given back when dropped.
pub struct BodyShare {
    shares: Arc<Shares>,
    peer: PeerKey,
    bytes: usize,
}

impl BodyShare {
    /// One share for the bytes of both.
    pub fn merge(&mut self, mut other: BodyShare) {
        self.bytes += std::mem::take(&mut other.bytes);
    }
}

impl Drop for BodyShare {
    fn drop(&mut self) {
        let bytes = self.bytes;
        self.shares
            .release(self.peer, |held| held.body_bytes -= bytes);
    }
}

/// A listener with its admission state.
pub struct Door {
    listener: TcpListener,
    admission: Admission,
    shares: Arc<Shares>,
    connections: Arc<tokio::sync::Semaphore>,
    rate: Option<DefaultKeyedRateLimiter<PeerKey>>,
    tls: Option<super::tls::Acceptor>,
}

impl Door {
    /// Admit connections on `listener` by `admission`; `shares` also counts body bytes.
    pub fn new(
        listener: TcpListener,
        admission: Admission,
        shares: Arc<Shares>,
        tls: Option<super::tls::Acceptor>,
    ) -> Door {
        let rate = NonZeroU32::new(admission.accept_rate).map(|rate| {
            let burst = NonZeroU32::new(admission.accept_burst).unwrap_or(rate);
            governor::RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Door {
            listener,
            connections: Arc::new(tokio::sync::Semaphore::new(admission.max_connections)),
            admission,
            shares,
            rate,
            tls,
        }
    }

    /// Serve each admitted connection with `handle` until `stop` fires.
    pub async fn serve<H, F, B>(self, stop: CancellationToken, handle: H)
    where
        H: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
        F: Future<Output = Response<B>> + Send + 'static,
        B: Body<Data = bytes::Bytes> + Send + Unpin + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let handle = Arc::new(handle);
        let mut tidied = tokio::time::Instant::now();
        loop {
            let (stream, peer) = tokio::select! {
                _ = stop.cancelled() => return,
                accepted = self.listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: keep serving the others.
                        tracing::warn!("{}: accept failed: {error}", self.admission.name);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let key = PeerKey::of(peer.ip());
            if let Some(rate) = &self.rate {
                if tidied.elapsed() > Duration::from_secs(10) {
                    rate.retain_recent();
                    rate.shrink_to_fit();
                    tidied = tokio::time::Instant::now();
                }
                if rate.check_key(&key).is_err() {
                    tracing::debug!(%peer, "{}: over the per-address accept rate; closed", self.admission.name);
                    continue;
                }
            }
            // An answer goes out in pieces (headers, then events); without this, Nagle's
            // algorithm holds the later pieces until the client's delayed ACK, ~40 ms a request.
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%peer, "could not set TCP_NODELAY: {error}");
            }
            let Some(share) = self.shares.connect(key) else {
                let why = format!(
                    "{key} has {} {} connections open, its share of the gateway's limit",
                    self.admission.max_connections_per_address, self.admission.name
                );
                self.refuse(stream, why);
                continue;
            };
            let Ok(permit) = self.connections.clone().try_acquire_owned() else {
                let why = format!(
                    "the gateway has {} {} connections open, its limit",
                    self.admission.max_connections, self.admission.name
                );
                self.refuse(stream, why);
                continue;
            };
            let connection = Connection {
                admission: self.admission.clone(),
                tls: self.tls.clone(),
                peer,
                stop: stop.clone(),
            };
            let handle = handle.clone();
            tokio::spawn(async move {
                let _held = (share, permit);
                connection.run(stream, handle).await;
            });
        }
    }

    /// Answer a connection that may not stay with 503 saying `why`, without reading it.
    fn refuse(&self, stream: TcpStream, why: String) {
        tracing::debug!("{}: refused a connection: {why}", self.admission.name);
        // A TLS client would not understand a plain answer: it is closed.
        if self.tls.is_none() {
            tokio::spawn(refuse_busy(stream, why));
        }
    }
}

/// One admitted connection.
struct Connection {
    admission: Admission,
    tls: Option<super::tls::Acceptor>,
    peer: SocketAddr,
    stop: CancellationToken,
}

impl Connection {
    async fn run<H, F, B>(self, stream: TcpStream, handle: Arc<H>)
    where
        H: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
        F: Future<Output = Response<B>> + Send + 'static,
        B: Body<Data = bytes::Bytes> + Send + Unpin + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let peer = self.peer;
        let deadline = self.admission.first_byte_timeout;
        match self.tls.clone() {
            None => match first_bytes(stream, deadline).await {
                Ok(stream) => self.serve(stream, handle).await,
                Err(why) => tracing::debug!(%peer, "{}: closed: {why}", self.admission.name),
            },
            Some(tls) => {
                let stream = match tokio::time::timeout(deadline, tls.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => {
                        tracing::debug!(%peer, "TLS handshake failed: {error}");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
                match first_bytes(stream, deadline).await {
                    Ok(stream) => self.serve(stream, handle).await,
                    Err(why) => tracing::debug!(%peer, "{}: closed: {why}", self.admission.name),
                }
            }
        }
    }

    async fn serve<S, H, F, B>(self, stream: S, handle: Arc<H>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        H: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
        F: Future<Output = Response<B>> + Send + 'static,
        B: Body<Data = bytes::Bytes> + Send + Unpin + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let peer = self.peer;
        let activity = Arc::new(Activity::new());
        let watched = activity.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let open = Open::begin(activity.clone());
            let answer = handle(request, peer);
            async move {
                let response = answer.await;
                Ok::<_, std::convert::Infallible>(
                    response.map(|body| Tracked { body, _open: open }),
                )
            }
        });
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.admission.header_read_timeout)
            .max_buf_size(64 * 1024);
        match &self.admission.http2 {
            Some(http2) => {
                builder
                    .http2()
                    .timer(TokioTimer::new())
                    .keep_alive_interval(http2.keep_alive)
                    .keep_alive_timeout(http2.keep_alive)
                    .max_concurrent_streams(http2.max_concurrent_streams)
                    .max_header_list_size(64 * 1024)
                    .initial_stream_window_size(256 * 1024)
                    .initial_connection_window_size(1024 * 1024)
                    .max_send_buf_size(256 * 1024);
            }
            None => builder = builder.http1_only(),
        }
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        tokio::pin!(connection);
        let idle_for = self.admission.connection_idle;
        let mut closing = false;
        // A graceful close waits on the client (HTTP/2 waits for its ping's answer); one
        // that does not answer is dropped after this long.
        let grace = tokio::time::sleep(Duration::MAX);
        tokio::pin!(grace);
        let result = loop {
            tokio::select! {
                result = connection.as_mut() => break result,
                _ = self.stop.cancelled(), if !closing => break Ok(()),
                _ = watched.quiet(idle_for), if !closing => {
                    tracing::debug!(%peer, "{}: connection idle for {}; closing it", self.admission.name, humantime::format_duration(idle_for));
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                    grace.as_mut().reset(tokio::time::Instant::now() + self.admission.first_byte_timeout);
                }
                _ = &mut grace, if closing => break Ok(()),
            }
        };
        if let Err(error) = result {
            tracing::debug!(%peer, "{} connection ended: {error}", self.admission.name);
        }
    }
}

/// What is open on a connection, and when that last changed: two atomics a request
/// touches, read by a watchdog that looks a few times per idle period (no wake-up per
/// request).
struct Activity {
    open: std::sync::atomic::AtomicUsize,
    /// Milliseconds from `since` to the last change.
    last: std::sync::atomic::AtomicU64,
    since: tokio::time::Instant,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            open: Default::default(),
            last: Default::default(),
            since: tokio::time::Instant::now(),
        }
    }

    fn touch(&self) {
        let now = self.since.elapsed().as_millis() as u64;
        self.last.store(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// Resolves once nothing has been open for `idle` (checked every quarter of it).
    async fn quiet(&self, idle: Duration) {
        let every = (idle / 4).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(every).await;
            let open = self.open.load(std::sync::atomic::Ordering::Acquire);
            let last = self.last.load(std::sync::atomic::Ordering::Relaxed);
            let quiet_for = (self.since.elapsed().as_millis() as u64).saturating_sub(last);
            if open == 0 && quiet_for >= idle.as_millis() as u64 {
                return;
            }
        }
    }
}

/// A request in flight on a connection, until its answer's body has been sent or dropped.
struct Open {
    activity: Arc<Activity>,
}

impl Open {
    fn begin(activity: Arc<Activity>) -> Open {
        activity
            .open
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        activity.touch();
        Open { activity }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.activity.touch();
        self.activity
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// An answer's body that keeps its request counted as open while it is being sent.
struct Tracked<B> {
    body: B,
    _open: Open,
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The HTTP/2 connection preface; anything that is not a prefix of it is HTTP/1.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Wait (within `deadline`) for the first bytes of `stream`: enough to tell HTTP/1 from
/// HTTP/2 (one byte for HTTP/1, the whole preface for HTTP/2). They are read again first.
async fn first_bytes<S>(mut stream: S, deadline: Duration) -> Result<Replay<S>, String>
where
    S: AsyncRead + Unpin,
{
    let mut first = Vec::with_capacity(PREFACE.len());
    let read = async {
        let mut chunk = [0u8; PREFACE.len()];
        loop {
            let want = PREFACE.len() - first.len();
            let read = stream
                .read(&mut chunk[..want])
                .await
                .map_err(|error| format!("read failed: {error}"))?;
            if read == 0 {
                return Err("the client closed it before sending a request".to_owned());
            }
            first.extend_from_slice(&chunk[..read]);
            if first.len() == PREFACE.len() || !PREFACE.starts_with(&first) {
                return Ok(());
            }
        }
    };
    match tokio::time::timeout(deadline, read).await {
        Ok(Ok(())) => Ok(Replay {
            first,
            at: 0,
            stream,
        }),
        Ok(Err(why)) => Err(why),
        Err(_) => Err(format!(
            "no request began within {}",
            humantime::format_duration(deadline)
        )),
    }
}

/// A stream whose first bytes, already read, are read again.
struct Replay<S> {
    first: Vec<u8>,
    at: usize,
    stream: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Replay<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.at < self.first.len() {
            let rest = &self.first[self.at..];
            let taken = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..taken]);
            self.at += taken;
            if self.at == self.first.len() {
                self.first = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Replay<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Answer a connection with 503 saying `why`, and close it, without reading its request.
async fn refuse_busy(mut stream: TcpStream, why: String) {
    use tokio::io::AsyncWriteExt;
    let body = serde_json::json!({ "error": format!("{why}; retry shortly") }).to_string() + "\n";
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        stream.write_all(response.as_bytes()),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_host_counts_by_its_slash_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(PeerKey::of(a), PeerKey::of(b));
        assert_ne!(PeerKey::of(a), PeerKey::of(c));
        assert_eq!(PeerKey::of(a).to_string(), "2001:db8:1:2::/64");
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        assert_eq!(
            PeerKey::of(mapped),
            PeerKey::of("10.0.0.7".parse().unwrap())
        );
    }

    #[test]
    fn shares_are_per_address_and_given_back() {
        let shares = Shares::new(2, 100);
        let one = PeerKey::of("10.0.0.1".parse().unwrap());
        let two = PeerKey::of("10.0.0.2".parse().unwrap());
        let first = shares.connect(one).unwrap();
        let _second = shares.connect(one).unwrap();
        assert!(shares.connect(one).is_none(), "a third from one address");
        let _other = shares
            .connect(two)
            .expect("another address has its own share");
        drop(first);
        assert!(shares.connect(one).is_some(), "a share given back is free");
        let body = shares.hold("10.0.0.3".parse().unwrap(), 80).unwrap();
        assert!(shares.hold("10.0.0.3".parse().unwrap(), 30).is_none());
        assert!(shares.hold("10.0.0.4".parse().unwrap(), 30).is_some());
        drop(body);
        assert!(shares.hold("10.0.0.3".parse().unwrap(), 100).is_some());
        drop((_second, _other));
        assert_eq!(shares.addresses(), 0, "nothing held is forgotten");
    }

    #[tokio::test]
    async fn http1_and_http2_are_told_apart_and_their_bytes_read_again() {
        for sent in [&b"GET / HTTP/1.1\r\n"[..], PREFACE, b"POST /mcp"] {
            let (mut client, server) = tokio::io::duplex(64);
            tokio::io::AsyncWriteExt::write_all(&mut client, sent)
                .await
                .unwrap();
            drop(client);
            let mut replay = first_bytes(server, Duration::from_secs(5)).await.unwrap();
            let mut all = Vec::new();
            replay.read_to_end(&mut all).await.unwrap();
            assert_eq!(all, sent);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn silence_and_half_a_preface_meet_the_deadline() {
        let (mut client, server) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut client, b"PRI * HTTP/2.0\r\n")
            .await
            .unwrap();
        let why = first_bytes(server, Duration::from_secs(5))
            .await
            .err()
            .unwrap();
        assert!(why.contains("no request began within 5s"), "{why}");
        let (_client, server) = tokio::io::duplex(64);
        assert!(first_bytes(server, Duration::from_secs(5)).await.is_err());
    }
}
