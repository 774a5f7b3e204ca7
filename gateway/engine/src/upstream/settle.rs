//! A request's log messages and progress must not be overtaken by its answer. A server
//! writes them before the answer, and the transport reads them in that order, but rmcp runs
//! each notification's handler in a task of its own while it hands the answer straight to
//! the waiting request. Then the answer can reach a 2026-07-28 client first, and the
//! request's stream closes before the messages that belong on it are relayed.
//!
//! So the transport counts those notifications as it reads them (`Counting`), the handler
//! counts them once relayed (`Settle::handled`), and a request waits, after its answer and
//! only briefly, until every one read before the answer was relayed (`Settle::settled`).
//!
//! The same tasks would also relay them out of order (progress 50 before 0). So each is
//! stamped with its place in the order they were read ([`Turn`], in the notification's
//! extensions, which rmcp hands to the handler), and the handler relays it only once every
//! one read before it was relayed (`Settle::my_turn`), waiting for a missing one as briefly
//! as an answer does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{GetExtensions, JsonRpcMessage, ServerNotification};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleClient;

/// How long an answer waits for its notifications at most. A handler that never runs (a
/// notification rmcp dropped) must not cost every later request: its debt is forgiven.
/// The wait normally ends within microseconds, when the handler tasks have run; the limit
/// is what a busy machine may take to run them (250 ms lost progress notifications under
/// the full test suite on two cores), and only a dropped notification ever costs it, once.
const LIMIT: Duration = Duration::from_secs(2);

/// Where a log message or progress notification came in its connection's order: how many
/// were read before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn(u64);

/// Notifications read and relayed, for one connection.
#[derive(Debug, Default)]
pub struct Settle {
    received: AtomicU64,
    handled: AtomicU64,
    relayed: tokio::sync::Notify,
}

impl Settle {
    /// A log message or progress notification was relayed (or had no one to go to).
    pub fn handled(&self) {
        self.handled.fetch_add(1, Ordering::AcqRel);
        self.relayed.notify_waiters();
    }

    /// Wait until every log message and progress notification read before the one stamped
    /// `turn` was relayed, for at most [`LIMIT`] (a notification rmcp dropped is forgiven).
    /// Without a stamp (a notification the transport did not count), at once.
    pub async fn my_turn(&self, turn: Option<&Turn>) {
        let Some(&Turn(before)) = turn else {
            return;
        };
        self.until_handled(before).await;
    }

    /// Wait until every log message and progress notification read so far was relayed.
    pub async fn settled(&self) {
        self.until_handled(self.received.load(Ordering::Acquire))
            .await;
    }

    /// Wait, for at most [`LIMIT`], until `target` notifications were relayed; then count
    /// them relayed whatever happened.
    async fn until_handled(&self, target: u64) {
        let done = || self.handled.load(Ordering::Acquire) >= target;
        let waited = tokio::time::timeout(LIMIT, async {
            loop {
                let relayed = self.relayed.notified();
                if done() {
                    return;
                }
                relayed.await;
            }
        })
        .await;
        if waited.is_err() {
            self.handled.fetch_max(target, Ordering::AcqRel);
        }
    }
}

/// The transport of one upstream connection, counting the notifications it reads that
/// belong to a request.
pub struct Counting<T> {
    inner: T,
    settle: Arc<Settle>,
}

impl<T> Counting<T> {
    pub fn new(inner: T, settle: Arc<Settle>) -> Self {
        Counting { inner, settle }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Counting<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let mut message = self.inner.receive().await;
        if let Some(JsonRpcMessage::Notification(notification)) = &mut message {
            if matches!(
                notification.notification,
                ServerNotification::LoggingMessageNotification(_)
                    | ServerNotification::ProgressNotification(_)
            ) {
                let before = self.settle.received.fetch_add(1, Ordering::AcqRel);
                notification
                    .notification
                    .extensions_mut()
                    .insert(Turn(before));
            }
        }
        message
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_answer_waits_for_what_was_read_before_it_and_forgives_what_never_comes() {
        let settle = Arc::new(Settle::default());
        settle.received.fetch_add(2, Ordering::AcqRel);
        let waiting = tokio::spawn({
            let settle = settle.clone();
            async move { settle.settled().await }
        });
        tokio::task::yield_now().await;
        settle.handled();
        assert!(!waiting.is_finished(), "one of two relayed");
        settle.handled();
        waiting.await.unwrap();
        // A notification that is never handled holds one answer for the limit only.
        settle.received.fetch_add(1, Ordering::AcqRel);
        let started = tokio::time::Instant::now();
        settle.settled().await;
        assert_eq!(started.elapsed(), LIMIT);
        let started = tokio::time::Instant::now();
        settle.settled().await;
        assert_eq!(started.elapsed(), Duration::ZERO, "the debt was forgiven");
    }
}
