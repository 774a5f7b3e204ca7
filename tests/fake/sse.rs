//! Legacy HTTP+SSE transport (2024-11-05): `GET /sse` opens a session, `POST /messages` feeds it.

use std::{
    collections::{hash_map::RandomState, HashMap},
    convert::Infallible,
    hash::{BuildHasher, Hasher},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
};

use bytes::Bytes;
use futures::{
    channel::mpsc::{self, UnboundedSender},
    stream, StreamExt,
};
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    ServiceExt,
};
use tokio::net::TcpListener;

use crate::{
    http::{serve_connections, text_response, Body},
    server::FakeServer,
    state::Shared,
};

/// Larger POST bodies are refused with 413.
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

struct SseEndpoint {
    shared: Arc<Shared>,
    /// Open sessions: where POSTed client messages go.
    sessions: Mutex<HashMap<String, UnboundedSender<ClientJsonRpcMessage>>>,
}

/// Removes its session when the event stream is dropped (the client went away),
/// which closes the session's input and so ends its rmcp service.
struct SessionGuard {
    endpoint: Arc<SseEndpoint>,
    session_id: String,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.endpoint.sessions().remove(&self.session_id);
    }
}

impl SseEndpoint {
    fn sessions(&self) -> MutexGuard<'_, HashMap<String, UnboundedSender<ClientJsonRpcMessage>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        match (request.method(), request.uri().path()) {
            (&Method::GET, "/sse") => self.open_session(),
            (&Method::POST, "/messages") => self.post_message(request).await,
            (_, "/sse" | "/messages") => text_response(
                StatusCode::METHOD_NOT_ALLOWED,
                "use GET /sse and POST /messages\n",
            ),
            _ => text_response(
                StatusCode::NOT_FOUND,
                "not found: open a session with GET /sse\n",
            ),
        }
    }

    /// Starts an rmcp server for a new session and streams its messages as SSE events.
    fn open_session(self: Arc<Self>) -> Response<Body> {
        let session_id = new_session_id();
        let (to_server, from_client) = mpsc::unbounded::<ClientJsonRpcMessage>();
        let (to_client, from_server) = mpsc::unbounded::<ServerJsonRpcMessage>();
        self.sessions().insert(session_id.clone(), to_server);

        let shared = self.shared.clone();
        tokio::spawn(async move {
            match FakeServer::new(shared.clone())
                .serve((to_client, from_client))
                .await
            {
                Ok(running) => {
                    let _ = running.waiting().await;
                }
                Err(error) => shared.say(format!("SSE session ended before initialize: {error}")),
            }
        });

        let endpoint_event = sse_event("endpoint", &format!("/messages?sessionId={session_id}"));
        let shared = self.shared.clone();
        let guard = SessionGuard {
            endpoint: self,
            session_id,
        };
        let messages = from_server.map(move |message| match serde_json::to_string(&message) {
            Ok(json) => sse_event("message", &json),
            Err(error) => {
                shared.say(format!("could not serialize a message: {error}"));
                Bytes::from_static(b": unserializable message dropped\n\n")
            }
        });
        let events = stream::once(async { endpoint_event })
            .chain(messages)
            .map(move |event| {
                let _session_lives_while_streaming = &guard;
                Ok::<_, Infallible>(Frame::data(event))
            });
        let mut response = Response::new(BodyExt::boxed(StreamBody::new(events)));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-cache"),
        );
        response
    }

    /// Hands one JSON-RPC message to its session; the answer comes on the event stream.
    async fn post_message(&self, request: Request<Incoming>) -> Response<Body> {
        let Some(session_id) = query_value(request.uri().query(), "sessionId") else {
            return text_response(
                StatusCode::BAD_REQUEST,
                "missing sessionId query parameter\n",
            );
        };
        let Some(session) = self.sessions().get(&session_id).cloned() else {
            return text_response(StatusCode::NOT_FOUND, format!("no session {session_id}\n"));
        };
        let body = match Limited::new(request.into_body(), MAX_MESSAGE_BYTES)
            .collect()
            .await
        {
            Ok(collected) => collected.to_bytes(),
            Err(error) => {
                let status = if error.is::<http_body_util::LengthLimitError>() {
                    StatusCode::PAYLOAD_TOO_LARGE
                } else {
                    StatusCode::BAD_REQUEST
                };
                return text_response(status, format!("could not read the body: {error}\n"));
            }
        };
        let message: ClientJsonRpcMessage = match serde_json::from_slice(&body) {
            Ok(message) => message,
            Err(error) => {
                let text = format!("not a JSON-RPC message: {error}\n");
                return text_response(StatusCode::BAD_REQUEST, text);
            }
        };
        if session.unbounded_send(message).is_err() {
            return text_response(
                StatusCode::NOT_FOUND,
                format!("session {session_id} has ended\n"),
            );
        }
        text_response(StatusCode::ACCEPTED, "Accepted\n")
    }
}

fn sse_event(event: &str, data: &str) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// The value of `name` in a query string; session ids need no percent-decoding.
fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_owned())
}

/// Unguessable enough for a test server, unique within the process.
fn new_session_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let number = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(number);
    format!("{:016x}{number:04x}", hasher.finish())
}

pub async fn run(shared: Arc<Shared>, listener: TcpListener) {
    let endpoint = Arc::new(SseEndpoint {
        shared: shared.clone(),
        sessions: Mutex::new(HashMap::new()),
    });
    serve_connections(shared, listener, move |request| {
        endpoint.clone().handle(request)
    })
    .await
}
