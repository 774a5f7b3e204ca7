//! Sessions across fleet members. A handshake-era session lives in the gateway that opened
//! it, so a member tags the ids of the sessions it opens with its name; a request for a
//! session another member holds is handed to that member and its answer streamed back. A
//! client behind a load balancer that spreads its requests keeps its session, with no
//! sticky routing. A session whose member is gone is answered 404, which the protocol tells
//! a client to take as "start a new session".

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper::{Response, StatusCode};

use super::guard::{self, Reply};
use super::ENDPOINT;

/// The other members of this gateway's fleet, as far as sessions go.
pub trait Peers: Send + Sync + 'static {
    /// This gateway's member name.
    fn name(&self) -> &str;
    /// The base URL (`http://host:port`) of live member `name`, or why there is none.
    fn locate<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>>;
}

/// Marks a request one member hands to another: it is never handed on again.
const FORWARDED: &str = "wardgate-forwarded-by";

/// Hop-by-hop headers, and the length (the body is re-framed), which do not cross a hop.
const NOT_FORWARDED: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// What a session id opened by member `name` begins with: the name in hex (any name, only
/// visible ASCII in the header) and a dot.
pub fn session_tag(name: &str) -> String {
    let mut tag: String = name.bytes().map(|byte| format!("{byte:02x}")).collect();
    tag.push('.');
    tag
}

/// The member whose tag session id `id` carries, if it carries one.
fn tagged_member(id: &str) -> Option<String> {
    let (hex, _) = id.split_once('.')?;
    if hex.is_empty() || hex.len() % 2 != 0 {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(hex.get(at..at + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// Hands requests for other members' sessions to them.
pub struct Forwarder {
    peers: Arc<dyn Peers>,
    client: reqwest::Client,
}

impl Forwarder {
    pub fn new(peers: Arc<dyn Peers>) -> Forwarder {
        let client = reqwest::Client::builder()
            // Members reach each other directly, never through a proxy from the environment.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            // An owner that stops answering: its SSE streams carry a keep-alive every 15 s,
            // so a minute without a byte is a dead one, and so is a peer TCP gives up on.
            .read_timeout(Duration::from_secs(60))
            .tcp_keepalive(Duration::from_secs(15))
            .tcp_keepalive_interval(Duration::from_secs(5))
            .tcp_keepalive_retries(3)
            .build()
            .unwrap_or_default();
        Forwarder { peers, client }
    }

    /// The member that holds session `id` when it is not this one (and the request was not
    /// handed here by another member already).
    pub fn owner_elsewhere(&self, id: &str, headers: &hyper::HeaderMap) -> Option<String> {
        if headers.contains_key(FORWARDED) {
            return None;
        }
        tagged_member(id).filter(|owner| owner != self.peers.name())
    }

    /// Send the request to `owner` and stream its answer back; 404 (start a new session),
    /// saying why, when the member cannot be found or reached.
    /// `held` (the body's place in the budget of bodies being read) is let go once the
    /// body has been sent.
    pub async fn forward<H: Send>(
        &self,
        owner: &str,
        parts: hyper::http::request::Parts,
        body: bytes::Bytes,
        held: H,
    ) -> Reply {
        let base = match self.peers.locate(owner).await {
            Ok(base) => base,
            Err(why) => {
                tracing::info!(
                    member = owner,
                    "not handing a session's request to fleet member {owner:?}: {why}"
                );
                return gone(owner, &why);
            }
        };
        let mut request = self
            .client
            .request(parts.method.clone(), format!("{base}{ENDPOINT}"))
            .body(body);
        let named_by_connection = connection_named(&parts.headers);
        for (name, value) in &parts.headers {
            if !NOT_FORWARDED.contains(&name.as_str())
                && !named_by_connection
                    .iter()
                    .any(|named| named == name.as_str())
            {
                request = request.header(name, value);
            }
        }
        // HTTP/2 carries the host in the URI: the owner checks the same Host the client
        // sent here, not the owner's own address.
        if !parts.headers.contains_key(hyper::header::HOST) {
            if let Some(authority) = parts.uri.authority() {
                request = request.header(hyper::header::HOST, authority.as_str());
            }
        }
        request = request.header(
            FORWARDED,
            session_tag(self.peers.name()).trim_end_matches('.'),
        );
        let sent = request.send().await;
        drop(held);
        let response = match sent {
            Ok(response) => response,
            Err(error) => {
                tracing::info!(member = owner, "could not hand a session's request to fleet member {owner:?} at {base}: {error}");
                return gone(owner, &format!("it could not be reached at {base}"));
            }
        };
        tracing::debug!(member = owner, status = %response.status(), "handed a session's request to its fleet member");
        let mut reply = Response::builder().status(response.status());
        for (name, value) in response.headers() {
            if !NOT_FORWARDED.contains(&name.as_str()) {
                reply = reply.header(name, value);
            }
        }
        let (sender, receiver) = tokio::sync::mpsc::channel(8);
        tokio::spawn(pump(response, sender));
        reply
            .body(Relayed { receiver }.boxed())
            .unwrap_or_else(|_| {
                guard::error(
                    StatusCode::BAD_GATEWAY,
                    "a fleet member's answer could not be relayed",
                )
            })
    }
}

/// Header names a request's `Connection` header lists: hop-by-hop too.
fn connection_named(headers: &hyper::HeaderMap) -> Vec<String> {
    headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect()
}

/// 404 for a session whose member `owner` is gone, saying so.
fn gone(owner: &str, why: &str) -> Reply {
    guard::error(
        StatusCode::NOT_FOUND,
        &format!("session not found: it was opened on fleet member {owner:?}, and {why}; start a new one with initialize"),
    )
}

/// Copy the member's answer into `sender` until either side ends.
async fn pump(mut response: reqwest::Response, sender: tokio::sync::mpsc::Sender<bytes::Bytes>) {
    loop {
        let chunk = tokio::select! {
            // The client went away: stop reading, which closes the stream at the member.
            _ = sender.closed() => return,
            chunk = response.chunk() => chunk,
        };
        match chunk {
            Ok(Some(bytes)) => {
                if sender.send(bytes).await.is_err() {
                    return;
                }
            }
            Ok(None) => return,
            Err(error) => {
                tracing::debug!("a fleet member's answer ended early: {error}");
                return;
            }
        }
    }
}

/// A body fed by [`pump`].
struct Relayed {
    receiver: tokio::sync::mpsc::Receiver<bytes::Bytes>,
}

impl hyper::body::Body for Relayed {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, Self::Error>>> {
        self.receiver
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_names_its_member_whatever_the_name() {
        for name in ["m1", "gateway.eu-1", "naïve name", ""] {
            let id = format!("{}0a1b-2c3d", session_tag(name));
            let expected = (!name.is_empty()).then(|| name.to_owned());
            assert_eq!(tagged_member(&id), expected, "{id}");
        }
        assert_eq!(tagged_member("0a1b2c3d-uuid-without-tag"), None);
        assert_eq!(tagged_member("zz.x"), None);
        assert_eq!(tagged_member("abc.x"), None);
    }
}
