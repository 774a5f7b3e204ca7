//! `GET /events`: a late subscriber is sent the recent events first, then live ones.

use std::time::Duration;

use serde_json::Value;

use super::support::{start, AdminGateway};
use super::SETTLE;
use crate::harness::*;
use crate::sse::{SseEvent, SseReader};

/// An open event stream, parsed block by block.
struct Events(SseReader);

impl Events {
    async fn open(admin: &AdminGateway, path: &str, last_event_id: Option<u64>) -> Events {
        let mut request = admin.request(reqwest::Method::GET, path);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Events(SseReader::new(response))
    }

    /// The next event: its SSE id, its `event:` kind and its JSON data; `None` at the end.
    async fn next(&mut self, limit: Duration) -> Option<(u64, String, Value)> {
        loop {
            if let SseEvent {
                id: Some(id),
                kind: Some(kind),
                data: Some(data),
            } = self.0.next(limit).await?
            {
                return Some((
                    id.parse().unwrap(),
                    kind,
                    serde_json::from_str(&data).unwrap(),
                ));
            }
        }
    }

    /// Read until an event matches; every event read on the way is returned too.
    async fn until(
        &mut self,
        limit: Duration,
        wanted: impl Fn(&str, &Value) -> bool,
    ) -> Vec<(u64, String, Value)> {
        let mut seen = Vec::new();
        loop {
            let event = self
                .next(limit)
                .await
                .unwrap_or_else(|| panic!("stream ended; saw {seen:?}"));
            let found = wanted(&event.1, &event.2);
            seen.push(event);
            if found {
                return seen;
            }
        }
    }
}

#[tokio::test]
async fn a_late_subscriber_gets_the_replay_then_live_events_after_a_kill_9() {
    let admin = start(config(&stdio_server("alpha", &[])), &[], &[]).await;
    let alpha = admin.wait_status("alpha", "online", SETTLE).await;
    let pid = alpha["pid"].as_u64().unwrap() as i32;

    // Subscribed only now: the server's start is replayed, numbered and in order.
    let mut events = Events::open(&admin, "/events", None).await;
    let replay = events
        .until(SETTLE, |kind, data| {
            kind == "status_changed" && data["server"] == "alpha" && data["to"] == "online"
        })
        .await;
    let ids: Vec<u64> = replay.iter().map(|(id, _, _)| *id).collect();
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "{ids:?}");
    let (_, _, online) = replay.last().unwrap();
    assert!(online["at"].as_str().is_some(), "{online}");
    assert_eq!(online["event"], "status_changed");

    // A process killed by SIGKILL shows up live on the same stream.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let live = events
        .until(SETTLE, |kind, data| {
            kind == "status_changed" && data["server"] == "alpha" && data["from"] == "online"
        })
        .await;
    let (_, _, left) = live.last().unwrap();
    assert!(
        !left["reason"].as_str().unwrap_or_default().is_empty(),
        "{left}"
    );
    admin.wait_status("alpha", "online", SETTLE).await;
}

#[tokio::test]
async fn last_event_id_resumes_after_the_events_already_seen() {
    let admin = start(config(&stdio_server("alpha", &[])), &[], &[]).await;
    admin.wait_status("alpha", "online", SETTLE).await;
    let mut all = Events::open(&admin, "/events?follow=false", None).await;
    let mut ids = Vec::new();
    while let Some((id, _, _)) = all.next(SETTLE).await {
        ids.push(id);
    }
    // Online, and the tools it brought.
    assert!(
        ids.len() >= 2,
        "starting alpha makes several events: {ids:?}"
    );
    let resume_after = ids[0];
    let mut rest = Events::open(&admin, "/events?follow=false", Some(resume_after)).await;
    let mut resumed = Vec::new();
    while let Some((id, _, _)) = rest.next(SETTLE).await {
        resumed.push(id);
    }
    assert_eq!(resumed, ids[1..].to_vec());
}
