//! A call on a stdio server that bypasses rmcp's serve loop on its way out and back: the
//! calling task writes the request to the server's stdin itself ([`LinePipe`]), and the
//! transport hands the answer straight to it ([`Answers`]), instead of the request passing
//! through rmcp's loop, a task spawned to write it and a join back, and the answer through
//! the loop again. On two cores shared with the client and the server, each of those
//! hand-offs is a wake-up the call waits for (BENCHMARKS.md, "The stdio round trip").
//!
//! The request is the one rmcp would write: to a 2026-07-28 server it carries the gateway's
//! protocol version, client info and capabilities in `_meta`, as rmcp puts them on every
//! request ([`Direct::prepare`]), and a progress token of its own; the server's progress on it
//! resets the call's timeout, as rmcp's `reset_timeout_on_progress` does, and is relayed
//! by the handler as any progress is. Everything else the server sends, and every other
//! request, goes through rmcp as before. The ids and progress tokens are numbers from 2³⁰
//! up: rmcp counts its own from 0, and a server that reads ids as 32-bit integers reads
//! these too.
//!
//! One difference stays: rmcp does not know of a direct call, so a 2026-07-28 server's
//! sampling, elicitation or roots *request* during one, with no call of rmcp's in flight,
//! is refused as unassociated (SEP-2260). The 2026-07-28 revision asks those questions in
//! results (`input_required`), which are answers like any other, and earlier revisions
//! are not checked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ErrorData, GetMeta, JsonRpcMessage, NumberOrString,
    ProgressToken, ProtocolVersion, RequestId, RequestMetaObject, ServerNotification, ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, ServiceError, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleClient;
use std::future::IntoFuture;
use tokio::sync::{oneshot, Notify};

use crate::line_pipe::{LinePipe, Ticket};
use crate::lock::lock;

/// The first id of a direct call.
const FIRST_ID: i64 = 1 << 30;

/// The direct call `id` names, if it names one (as a number, or as a string of one, which
/// rmcp matches too).
fn direct_number(id: &NumberOrString) -> Option<i64> {
    let number = match id {
        NumberOrString::Number(number) => *number,
        NumberOrString::String(text) => text.parse().ok()?,
    };
    (number >= FIRST_ID).then_some(number)
}

/// A stdio server's connection, for calls made directly.
#[derive(Debug)]
pub struct Direct {
    stdin: LinePipe,
    waiting: Arc<Waiting>,
    next_id: AtomicI64,
    /// What the gateway says of itself as a client (rmcp's `ClientRequestMetadata`).
    client: rmcp::model::ClientConfig,
}

/// The direct calls waiting for their answers; `None` while no transport reads them.
#[derive(Debug, Default)]
pub struct Waiting {
    calls: Mutex<Option<HashMap<i64, Waiter>>>,
}

#[derive(Debug)]
struct Waiter {
    answer: oneshot::Sender<Answer>,
    /// Told of each progress notification on the call's token.
    progress: Arc<Notify>,
}

type Answer = Result<ServerResult, ErrorData>;

impl Waiting {
    fn open(&self) {
        let mut calls = lock(&self.calls);
        if calls.is_none() {
            *calls = Some(HashMap::new());
        }
    }

    /// No one reads answers any more: every waiting call hears the connection closed.
    fn close(&self) {
        lock(&self.calls).take();
    }

    fn wait(&self, id: i64) -> Option<(oneshot::Receiver<Answer>, Arc<Notify>)> {
        let (answer, receiver) = oneshot::channel();
        let progress = Arc::new(Notify::new());
        let waiter = Waiter {
            answer,
            progress: progress.clone(),
        };
        lock(&self.calls).as_mut()?.insert(id, waiter);
        Some((receiver, progress))
    }

    /// Progress on `token`: if it is a waiting call's, its timeout starts again.
    fn progressed(&self, token: &ProgressToken) {
        let Some(id) = direct_number(&token.0) else {
            return;
        };
        if let Some(waiter) = lock(&self.calls).as_ref().and_then(|calls| calls.get(&id)) {
            waiter.progress.notify_one();
        }
    }

    fn forget(&self, id: i64) {
        if let Some(calls) = lock(&self.calls).as_mut() {
            calls.remove(&id);
        }
    }

    /// The waiting call `id` names, if it is one.
    fn take(&self, id: &RequestId) -> Option<oneshot::Sender<Answer>> {
        let id = direct_number(id)?;
        lock(&self.calls)
            .as_mut()?
            .remove(&id)
            .map(|waiter| waiter.answer)
    }
}

/// A direct call: made ([`Direct::prepare`]), written ([`Sent::write`]), answered
/// ([`Sent::answer`]). Dropped at any point, it is forgotten.
pub struct Sent {
    pub id: RequestId,
    /// The token the server reports progress on.
    pub progress_token: ProgressToken,
    number: i64,
    /// The request, until it is given to the pipe; then, if the pipe could not take it at
    /// once, its ticket.
    line: Option<Vec<u8>>,
    queued: Option<Ticket>,
    stdin: LinePipe,
    answer: oneshot::Receiver<Answer>,
    progress: Arc<Notify>,
    waiting: Arc<Waiting>,
}

impl Direct {
    /// `client`: what the gateway says of itself as a client, as its handler tells rmcp.
    pub fn new(stdin: LinePipe, client: rmcp::model::ClientConfig) -> Direct {
        Direct {
            stdin,
            waiting: Arc::default(),
            next_id: AtomicI64::new(FIRST_ID),
            client,
        }
    }

    /// Wrap the connection's transport so that it hands direct calls their answers.
    pub fn answers<T>(&self, inner: T) -> Answers<T> {
        self.waiting.open();
        Answers {
            inner,
            waiting: self.waiting.clone(),
        }
    }

    /// `request`, with `meta`, for a server that speaks `version` (`Some` for 2026-07-28 and
    /// later, which has no handshake), waiting for its answer but not yet written, so that
    /// whatever the server may say about it can be expected first. `Err` if the connection
    /// is closed.
    pub fn prepare(
        &self,
        mut request: ClientRequest,
        meta: RequestMetaObject,
        version: Option<ProtocolVersion>,
    ) -> Result<Sent, ServiceError> {
        // As rmcp's `Peer::send_request_with_option` does: its metadata first, then what the
        // caller passes on (a 2026-07-28 client's own capabilities replace the gateway's).
        let request_meta = request.get_meta_mut();
        if let Some(version) = version {
            request_meta.set_protocol_version(version);
            request_meta.set_client_info(self.client.client_info.clone());
            request_meta.set_client_capabilities(self.client.capabilities.clone());
        }
        request_meta.extend(meta);
        let number = self.next_id.fetch_add(1, Ordering::Relaxed);
        let id = RequestId::Number(number);
        let progress_token = ProgressToken(NumberOrString::Number(number));
        request_meta.set_progress_token(progress_token.clone());
        let message: ClientJsonRpcMessage = JsonRpcMessage::request(request, id.clone());
        let mut line = serde_json::to_vec(&message).map_err(|error| {
            ServiceError::McpError(ErrorData::internal_error(
                format!("the request could not be written: {error}"),
                None,
            ))
        })?;
        line.push(b'\n');
        let (answer, progress) = self
            .waiting
            .wait(number)
            .ok_or(ServiceError::TransportClosed)?;
        Ok(Sent {
            id,
            progress_token,
            number,
            line: Some(line),
            queued: None,
            stdin: self.stdin.clone(),
            answer,
            progress,
            waiting: self.waiting.clone(),
        })
    }
}

impl Sent {
    /// Give the request to the server's stdin, without waiting: `Err` if the pipe is broken
    /// (nothing was written). A request the pipe cannot take at once is written as it
    /// drains, within the call's timeout ([`Sent::answer`]).
    pub fn write(&mut self) -> Result<(), ServiceError> {
        let Some(line) = self.line.take() else {
            return Ok(());
        };
        match self.stdin.send(line) {
            Ticket::Written => Ok(()),
            Ticket::Failed(_) => Err(ServiceError::TransportClosed),
            queued => {
                self.queued = Some(queued);
                Ok(())
            }
        }
    }

    fn answered(
        answer: Result<Answer, oneshot::error::RecvError>,
    ) -> Result<ServerResult, ServiceError> {
        match answer {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(ServiceError::McpError(error)),
            Err(_) => Err(ServiceError::TransportClosed),
        }
    }

    /// The server's answer, within `timeout` of the request or of its last progress.
    pub async fn answer(mut self, timeout: Duration) -> Result<ServerResult, ServiceError> {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        if let Some(queued) = self.queued.take() {
            tokio::select! {
                written = queued.into_future() => written.map_err(|_| ServiceError::TransportClosed)?,
                // The connection ended while the request waited for the pipe.
                answer = &mut self.answer => return Self::answered(answer),
                () = &mut deadline => return Err(ServiceError::Timeout { timeout }),
            }
        }
        loop {
            tokio::select! {
                biased;
                answer = &mut self.answer => return Self::answered(answer),
                () = self.progress.notified() => {
                    deadline.as_mut().reset(tokio::time::Instant::now() + timeout);
                }
                () = &mut deadline => return Err(ServiceError::Timeout { timeout }),
            }
        }
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        self.waiting.forget(self.number);
    }
}

/// The transport of a stdio connection with direct calls: their answers go to them, the
/// rest to rmcp.
pub struct Answers<T> {
    inner: T,
    waiting: Arc<Waiting>,
}

impl<T> Drop for Answers<T> {
    fn drop(&mut self) {
        self.waiting.close();
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Answers<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await;
            let id = match &message {
                Some(JsonRpcMessage::Response(response)) => Some(&response.id),
                Some(JsonRpcMessage::Error(error)) => error.id.as_ref(),
                Some(JsonRpcMessage::Notification(notification)) => {
                    if let ServerNotification::ProgressNotification(progress) =
                        &notification.notification
                    {
                        self.waiting.progressed(&progress.params.progress_token);
                    }
                    None
                }
                Some(_) => None,
                None => {
                    self.waiting.close();
                    return None;
                }
            };
            // rmcp's own answers, and everything else, are rmcp's.
            let Some(call) = id.and_then(|id| self.waiting.take(id)) else {
                return message;
            };
            let answer = match message {
                Some(JsonRpcMessage::Response(response)) => Ok(response.result),
                Some(JsonRpcMessage::Error(error)) => Err(error.error),
                _ => continue,
            };
            let _ = call.send(answer);
        }
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.waiting.close();
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn an_answer_naming_a_direct_call_by_number_or_by_string_finds_it_and_no_other_does() {
        let waiting = Waiting::default();
        waiting.open();
        let (_answer, progress) = waiting.wait(FIRST_ID + 7).expect("open");
        // Progress on the call's token, as a string too, is the call's.
        waiting.progressed(&ProgressToken(NumberOrString::String(
            (FIRST_ID + 7).to_string().into(),
        )));
        assert!(progress.notified().now_or_never().is_some());
        // rmcp's own ids are below the range, and are never taken.
        assert!(waiting.take(&RequestId::Number(7)).is_none());
        let by_string = RequestId::String((FIRST_ID + 7).to_string().into());
        assert!(waiting.take(&by_string).is_some());
        assert!(waiting.take(&by_string).is_none(), "taken once");
        // A closed connection waits for nothing.
        waiting.close();
        assert!(waiting.wait(FIRST_ID + 8).is_none());
    }
}
