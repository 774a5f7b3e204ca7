//! The task that sends one client session's notifications in order, made when the session
//! is first notified, and what it takes from the session's outbox.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rmcp::model::{LoggingLevel, ServerNotification};
use tokio::sync::mpsc;

use super::{log_notification, Backlog, Channel, Total, OUTBOX};

/// What a session's task takes from its outbox, in order.
pub(super) enum Outgoing {
    /// A notification, and its size as JSON (counted against the byte budgets until sent).
    Notification(Box<ServerNotification>, usize),
    /// Everything queued before this was sent (or failed): say so.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// The task that sends a session's notifications in order, and its outbox.
pub(super) fn send_in_order(
    sender: Channel,
    counted: Arc<(AtomicU64, AtomicU64)>,
    drained: Arc<Backlog>,
    total: Arc<Total>,
) -> mpsc::Sender<Outgoing> {
    let (outbox, mut queued) = mpsc::channel::<Outgoing>(OUTBOX);
    tokio::spawn(async move {
        while let Some(outgoing) = queued.recv().await {
            let notification = match outgoing {
                Outgoing::Notification(notification, bytes) => {
                    drained.bytes.fetch_sub(bytes, Ordering::AcqRel);
                    total.bytes.fetch_sub(bytes, Ordering::AcqRel);
                    Some(*notification)
                }
                Outgoing::Flush(done) => {
                    let _ = done.send(());
                    None
                }
            };
            if let Some(notification) = notification {
                let sent = match &sender {
                    Channel::Connection(peer) | Channel::Request(peer) => peer
                        .send_notification(notification)
                        .await
                        .map_err(|error| error.to_string()),
                    Channel::Listen(sink) => sink
                        .send(notification)
                        .await
                        .map_err(|error| error.to_string()),
                };
                counted.1.fetch_add(1, Ordering::AcqRel);
                if let Err(error) = sent {
                    tracing::debug!("could not notify a client session: {error}");
                    continue;
                }
            }
            // Caught up after losing some: say how many, if the client hears it (after a
            // flush too, since an answer's flush is often the last thing queued).
            if queued.is_empty() && drained.dropped.load(Ordering::Acquire) > 0 {
                let dropped = drained.dropped.swap(0, Ordering::AcqRel);
                if let (Channel::Connection(peer), true) =
                    (&sender, drained.hears_warnings.load(Ordering::Relaxed))
                {
                    let notice = log_notification(
                        LoggingLevel::Warning,
                        "wardgate",
                        serde_json::json!({
                            "message": format!("{dropped} notifications were dropped while this client was not reading its stream"),
                            "dropped": dropped,
                        }),
                    );
                    let _ = peer.send_notification(notice).await;
                }
            }
        }
    });
    outbox
}
