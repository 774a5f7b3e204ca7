//! The event log behind `GET /events`: every gateway event numbered and timestamped, the
//! most recent kept for late subscribers, streamed as Server-Sent Events.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use wardgate_engine::events::GatewayEvent;
use wardgate_engine::Gateway;

/// How many past events a new subscriber is sent first.
pub const REPLAY: usize = 256;
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One event as operators see it.
#[derive(Debug, Clone, Serialize)]
pub struct Recorded {
    pub id: u64,
    /// RFC 3339, milliseconds, UTC.
    pub at: String,
    #[serde(flatten)]
    pub event: GatewayEvent,
}

impl Recorded {
    /// The event's kind: `status_changed`, `policy_loaded`, ...
    pub fn kind(&self) -> String {
        serde_json::to_value(&self.event)
            .ok()
            .and_then(|value| value.get("event")?.as_str().map(str::to_owned))
            .unwrap_or_else(|| "event".to_owned())
    }

    fn to_sse(&self) -> Bytes {
        let data = serde_json::to_string(self).unwrap_or_default();
        Bytes::from(format!(
            "id: {}\nevent: {}\ndata: {data}\n\n",
            self.id,
            self.kind()
        ))
    }
}

/// Numbers and keeps the gateway's events; fed by one task subscribed from the start.
pub struct EventLog {
    recent: Mutex<Inner>,
    live: broadcast::Sender<Arc<Recorded>>,
}

struct Inner {
    next_id: u64,
    events: VecDeque<Arc<Recorded>>,
}

impl EventLog {
    /// Subscribe to the gateway's events now and record them until it shuts down.
    pub fn start(gateway: &Gateway) -> Arc<EventLog> {
        let log = Arc::new(EventLog::empty());
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
                    Ok(event) => log.record(event),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!("admin event log fell behind and missed {missed} events")
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        log
    }

    fn empty() -> EventLog {
        EventLog {
            recent: Mutex::new(Inner {
                next_id: 1,
                events: VecDeque::with_capacity(REPLAY),
            }),
            live: broadcast::channel(REPLAY).0,
        }
    }

    fn record(&self, event: GatewayEvent) {
        let mut inner = wardgate_engine::lock::lock(&self.recent);
        let recorded = Arc::new(Recorded {
            id: inner.next_id,
            at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            event,
        });
        inner.next_id += 1;
        if inner.events.len() == REPLAY {
            inner.events.pop_front();
        }
        inner.events.push_back(recorded.clone());
        // Sent under the lock, so a subscriber sees every event exactly once: either in
        // its replay or live, never both and never neither.
        let _ = self.live.send(recorded);
    }

    /// The kept events numbered after `after`, and a receiver for the ones to come.
    fn subscribe(&self, after: u64) -> (Vec<Arc<Recorded>>, broadcast::Receiver<Arc<Recorded>>) {
        let inner = wardgate_engine::lock::lock(&self.recent);
        let replay = inner
            .events
            .iter()
            .filter(|event| event.id > after)
            .cloned()
            .collect();
        (replay, self.live.subscribe())
    }

    /// An SSE stream: the kept events after `after`, then (if `follow`) live ones until the
    /// client goes away or `stop` fires.
    pub fn stream(
        &self,
        after: u64,
        follow: bool,
        stop: CancellationToken,
    ) -> mpsc::Receiver<Bytes> {
        let (replay, mut live) = self.subscribe(after);
        let (sender, receiver) = mpsc::channel(64);
        tokio::spawn(async move {
            // An opening comment makes the response start at once, even with nothing to replay.
            if sender
                .send(Bytes::from_static(b": wardgate events\n\n"))
                .await
                .is_err()
            {
                return;
            }
            for event in replay {
                if sender.send(event.to_sse()).await.is_err() {
                    return;
                }
            }
            if !follow {
                return;
            }
            loop {
                let chunk = tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = sender.closed() => return,
                    _ = tokio::time::sleep(KEEP_ALIVE) => Bytes::from_static(b": keep-alive\n\n"),
                    event = live.recv() => match event {
                        Ok(event) => event.to_sse(),
                        Err(broadcast::error::RecvError::Lagged(missed)) => Bytes::from(format!(
                            ": {missed} events were skipped because this client read too slowly\n\n"
                        )),
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                };
                if sender.send(chunk).await.is_err() {
                    return;
                }
            }
        });
        receiver
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restored(n: usize) -> GatewayEvent {
        GatewayEvent::HealthRestored {
            server: format!("s{n}"),
        }
    }

    #[test]
    fn the_replay_keeps_the_most_recent_events_and_resumes_after_an_id() {
        let log = EventLog::empty();
        for n in 0..REPLAY + 44 {
            log.record(restored(n));
        }
        let (replay, _) = log.subscribe(0);
        let ids: Vec<u64> = replay.iter().map(|event| event.id).collect();
        assert_eq!(ids.len(), REPLAY);
        assert_eq!((ids[0], ids[REPLAY - 1]), (45, 300));
        let (replay, _) = log.subscribe(298);
        assert_eq!(replay.iter().map(|e| e.id).collect::<Vec<_>>(), [299, 300]);
    }

    #[test]
    fn an_event_arrives_in_the_replay_or_live_never_both() {
        let log = EventLog::empty();
        log.record(restored(1));
        let (replay, mut live) = log.subscribe(0);
        log.record(restored(2));
        assert_eq!(replay.len(), 1);
        assert_eq!(live.try_recv().map(|event| event.id).ok(), Some(2));
        assert!(live.try_recv().is_err());
    }

    #[test]
    fn sse_blocks_carry_id_kind_and_json_data() {
        let log = EventLog::empty();
        log.record(restored(7));
        let (replay, _) = log.subscribe(0);
        let text = String::from_utf8(replay[0].to_sse().to_vec()).unwrap();
        assert!(
            text.starts_with("id: 1\nevent: health_restored\ndata: {"),
            "{text}"
        );
        assert!(
            text.ends_with("}\n\n") && text.contains("\"server\":\"s7\""),
            "{text}"
        );
    }
}
