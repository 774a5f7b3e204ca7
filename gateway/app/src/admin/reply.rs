//! Responses of the admin API: JSON bodies, JSON errors that name the fix, and streams.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::StatusCode;
use serde::Serialize;

pub type Body = UnsyncBoxBody<Bytes, Infallible>;
pub type Response = hyper::Response<Body>;

pub fn json(status: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_vec_pretty(value) {
        Ok(mut body) => {
            body.push(b'\n');
            with_body(status, "application/json", Bytes::from(body))
        }
        Err(error) => self::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("could not encode the answer as JSON: {error}; please report this"),
        ),
    }
}

pub fn ok(value: &impl Serialize) -> Response {
    json(StatusCode::OK, value)
}

/// `{"error": message}`; the message says what to do about it.
pub fn error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message }).to_string() + "\n";
    with_body(status, "application/json", Bytes::from(body))
}

pub fn not_found(message: &str) -> Response {
    error(StatusCode::NOT_FOUND, message)
}

pub fn method_not_allowed(method: &hyper::Method, path: &str, allowed: &str) -> Response {
    let mut response = error(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!("{method} is not supported on {path}; use {allowed}"),
    );
    if let Ok(value) = hyper::header::HeaderValue::from_str(allowed) {
        response.headers_mut().insert(hyper::header::ALLOW, value);
    }
    response
}

pub fn text(status: StatusCode, content_type: &'static str, body: String) -> Response {
    with_body(status, content_type, Bytes::from(body))
}

pub fn bytes(status: StatusCode, content_type: &'static str, body: Bytes) -> Response {
    with_body(status, content_type, body)
}

fn with_body(status: StatusCode, content_type: &'static str, body: Bytes) -> Response {
    let mut response = hyper::Response::new(Full::new(body).boxed_unsync());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    // Answers carry text from upstream servers: a browser must never run it as a page.
    headers.insert(
        hyper::header::X_CONTENT_TYPE_OPTIONS,
        hyper::header::HeaderValue::from_static("nosniff"),
    );
    response
}

/// A streamed body fed by a channel; the stream ends when the sender is dropped, and the
/// sender sees the receiver gone when the client disconnects.
pub fn stream(content_type: &'static str, chunks: tokio::sync::mpsc::Receiver<Bytes>) -> Response {
    let frames = futures::stream::unfold(chunks, |mut chunks| async move {
        let chunk = chunks.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(chunk)), chunks))
    });
    let mut response = hyper::Response::new(StreamBody::new(frames).boxed_unsync());
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    headers.insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-cache"),
    );
    headers.insert(
        hyper::header::X_CONTENT_TYPE_OPTIONS,
        hyper::header::HeaderValue::from_static("nosniff"),
    );
    response
}
