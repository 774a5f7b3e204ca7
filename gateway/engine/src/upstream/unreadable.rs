//! Answers no parser of the gateway can read: nested deeper than serde_json goes. rmcp drops
//! such a message without a word, so the request it answered would wait out its timeout.
//! Every transport finds them with one shallow scan and puts in their place an error answer
//! to the same request, naming the server, so the call fails at once.
//!
//! - stdio: `stdio::ServerOutput`, line by line;
//! - Streamable HTTP: [`Readable`], around rmcp's HTTP client, event by event and for a JSON
//!   body;
//! - legacy SSE: `sse::events`, event by event.

mod http;
mod scan;

pub use http::Readable;
pub(crate) use scan::{LineScan, Unreadable, UNREADABLE_DEPTH};

/// The answer in `text` (one JSON-RPC message) the gateway cannot read, if it is one.
pub(crate) fn unreadable(text: &[u8]) -> Option<Unreadable> {
    // Most messages cannot nest that deep: they do not open that many containers.
    let opened = text
        .iter()
        .filter(|&&byte| byte == b'[' || byte == b'{')
        .count();
    if opened < UNREADABLE_DEPTH as usize {
        return None;
    }
    let mut scan = LineScan::default();
    scan.feed(text);
    scan.finish()
}

/// The error answer, as the server would have written it, for a request whose answer cannot
/// be read; logged once, naming the server.
pub(crate) fn error_answer(
    server: &str,
    unreadable: &Unreadable,
) -> rmcp::model::ServerJsonRpcMessage {
    let reason = format!(
        "its answer nests {} levels deep or more, past the {UNREADABLE_DEPTH} levels the gateway reads",
        unreadable.depth
    );
    tracing::warn!(
        server = %server,
        id = %unreadable.id,
        "an answer of the server cannot be read ({reason}); its request fails at once"
    );
    let error = rmcp::ErrorData::internal_error(
        format!(
            "server \"{server}\" sent an answer the gateway cannot read: {reason}; fix the server (or call the tool with arguments that give a smaller answer)"
        ),
        Some(serde_json::json!({ "server": server, "reason": reason })),
    );
    rmcp::model::ServerJsonRpcMessage::error(error, Some(unreadable.id.clone()))
}
