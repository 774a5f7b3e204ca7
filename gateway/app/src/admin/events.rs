//! The event log behind `GET /events`: every gateway event, numbered and timestamped, in a
//! [`Feed`] that keeps the most recent for late subscribers.

use std::sync::Arc;

use tokio::sync::broadcast;
use wardgate_engine::events::GatewayEvent;
use wardgate_engine::Gateway;

use crate::feed::{Feed, Item};

/// How many past events a new subscriber is sent first.
pub const REPLAY: usize = 256;

impl Item for GatewayEvent {
    /// The event's kind: `status_changed`, `policy_loaded`, ...
    fn kind(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|value| value.get("event")?.as_str().map(str::to_owned))
            .unwrap_or_else(|| "event".to_owned())
    }
}

/// Subscribe to the gateway's events now and record them until it shuts down.
pub fn start(gateway: &Gateway) -> Arc<Feed<GatewayEvent>> {
    let log = Arc::new(Feed::new("events", REPLAY));
    let mut events = gateway.subscribe();
    let stop = gateway.shutdown_token();
    let recorder = Arc::downgrade(&log);
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                event = events.recv() => event,
            };
            let Some(log) = recorder.upgrade() else {
                return;
            };
            match event {
                Ok(event) => {
                    log.record(event);
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!("admin event log fell behind and missed {missed} events")
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    log
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_streamed_under_its_kind() {
        let event = GatewayEvent::HealthRestored {
            server: "s7".to_owned(),
        };
        assert_eq!(event.kind(), "health_restored");
    }
}
