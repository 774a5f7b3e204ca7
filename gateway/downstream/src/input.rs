//! Multi round-trip requests across eras. A 2026-07-28 server asks for what it needs
//! (sampling, elicitation, roots) by answering a call with an `InputRequiredResult`; a
//! 2026-07-28 client fulfils it and calls again with the responses, which the gateway
//! forwards as they are. A handshake-era client knows nothing of that, so the gateway asks
//! it the server's questions as the server-to-client requests it does know, and calls the
//! server again with the answers itself. Asked for a gateway's task (2025-11-25), a
//! question names the task, which reads `input_required` until it is answered.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, GetExtensions, GetMeta, GetPromptRequestParams, InputRequest,
    InputRequiredResult, InputResponses, ReadResourceRequestParams, ServerRequest,
};
use rmcp::service::{OriginatingRequestId, Peer};
use rmcp::{ErrorData as McpError, RoleServer};
use wardgate_engine::runs::{Run, RELATED_TASK};
use wardgate_engine::sessions::SessionId;

/// Rounds of questions one call may take before the gateway gives up on the server.
pub const MAX_ROUNDS: usize = rmcp::model::DEFAULT_MRTR_MAX_ROUNDS;

/// A request a 2026-07-28 server may answer with questions, sent again with the answers.
pub trait Askable: Clone {
    fn with_answers(&mut self, responses: InputResponses, state: Option<String>);
}

macro_rules! askable {
    ($($params:ty),*) => {$(
        impl Askable for $params {
            fn with_answers(&mut self, responses: InputResponses, state: Option<String>) {
                self.input_responses = Some(responses);
                self.request_state = state;
            }
        }
    )*};
}

askable!(
    CallToolRequestParams,
    GetPromptRequestParams,
    ReadResourceRequestParams
);

/// Asks the handshake-era client on `peer` each of `input`'s questions; its answers, keyed
/// as the server asked them. `run`: the gateway's task the call runs for, and the client's
/// session.
pub async fn fulfil(
    peer: &Peer<RoleServer>,
    server: &str,
    input: &InputRequiredResult,
    timeout: std::time::Duration,
    run: Option<(&Arc<Run>, SessionId)>,
) -> Result<InputResponses, McpError> {
    let mut responses = InputResponses::new();
    for (key, request) in input.input_requests.iter().flatten() {
        let (what, request) = match request {
            InputRequest::CreateMessage(request) => {
                ("sampling", ServerRequest::CreateMessageRequest(request.clone()))
            }
            InputRequest::Elicitation(request) => {
                ("elicitation", ServerRequest::ElicitRequest(request.clone()))
            }
            InputRequest::ListRoots(request) => {
                ("roots", ServerRequest::ListRootsRequest(request.clone()))
            }
            _ => {
                return Err(McpError::internal_error(
                    format!("server \"{server}\" asked for input of a kind the gateway does not know (not sampling, elicitation or roots), so the call cannot go on"),
                    None,
                ))
            }
        };
        // Sent while the client's own call is being handled: rmcp tags it with that call,
        // so over Streamable HTTP it travels on the call's own response stream.
        // A client that never answers must not hold the call forever: the server's request
        // timeout bounds each question (rmcp cancels it at the client when it runs out).
        let options = rmcp::service::PeerRequestOptions::with_timeout(timeout);
        // A run's question names its task, and goes on the stream of the client's waiting
        // `tasks/result`, if any (the run's own call was answered with the task).
        let mut request = request;
        let mut _asking = None;
        if let Some((run, session)) = run {
            request
                .get_meta_mut()
                .insert(RELATED_TASK.into(), serde_json::json!({ "taskId": run.id }));
            _asking = Some(run.asking());
            if let Some(waiting) = run.result_stream(session).await {
                request
                    .extensions_mut()
                    .insert(OriginatingRequestId(waiting));
            }
        }
        let answer = async {
            peer.send_request_with_option(request, options)
                .await?
                .await_response()
                .await
        }
        .await
        .map_err(|error| {
            McpError::internal_error(
                format!("server \"{server}\" needs {what} from the client to answer this call, and the client's answer failed: {error}"),
                None,
            )
        })?;
        let answer = serde_json::to_value(&answer).map_err(|error| {
            McpError::internal_error(
                format!(
                    "could not encode the client's {what} answer for server \"{server}\": {error}"
                ),
                None,
            )
        })?;
        responses.insert(key.clone(), answer);
    }
    Ok(responses)
}

/// The call gave up after [`MAX_ROUNDS`] rounds of questions.
pub fn too_many_rounds(server: &str) -> McpError {
    McpError::internal_error(
        format!("server \"{server}\" kept asking for more input after {MAX_ROUNDS} rounds; the gateway stopped the call"),
        None,
    )
}
