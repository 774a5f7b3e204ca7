//! Status, events and tools, written back to the fleet database.
//!
//! A task drains the gateway's events into a bounded outbox (the newest 1000 are kept while
//! the database is away; how many were dropped is recorded as an event of its own). The
//! sync loop wakes on an event (debounced 100 ms) or every 30 s, and writes only what
//! changed since its last successful write: a server's status row, its tool snapshot, new
//! events. After a reconnect it writes everything again. A server whose tools changed while
//! online shows `syncing_tools` until its snapshot is written, as in the seeds.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use wardgate_engine::status::StatusName;
use wardgate_engine::Gateway;

/// The status a member writes in its server's row: the server's own, or `syncing_tools`
/// while an online server's new tool list is being written (readers wait for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowStatus {
    Server(StatusName),
    SyncingTools,
}

impl RowStatus {
    fn as_str(self) -> &'static str {
        match self {
            RowStatus::Server(status) => status.as_str(),
            RowStatus::SyncingTools => "syncing_tools",
        }
    }
}

use super::Member;
use crate::error::Result;

const MAX_EVENTS: usize = 1000;
/// Events kept in the database per member.
const KEPT_EVENTS: i64 = 1000;

#[derive(Default)]
pub(crate) struct Outbox {
    state: Mutex<OutboxState>,
    dirty: Notify,
}

#[derive(Default)]
struct OutboxState {
    events: VecDeque<(SystemTime, Value)>,
    dropped: u64,
    /// What the database holds, as last written (volatile fields left out).
    status: HashMap<String, Value>,
    tools: HashMap<String, Value>,
}

impl Outbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, OutboxState> {
        wardgate_engine::lock::lock(&self.state)
    }

    /// Forget what was written: the next sync writes everything.
    pub(crate) fn rewrite_all(&self) {
        let mut state = self.lock();
        state.status.clear();
        state.tools.clear();
        drop(state);
        self.dirty.notify_one();
    }

    fn push(&self, event: Value) {
        let mut state = self.lock();
        if state.events.len() >= MAX_EVENTS {
            state.events.pop_front();
            state.dropped += 1;
        }
        state.events.push_back((SystemTime::now(), event));
        drop(state);
        self.dirty.notify_one();
    }
}

/// Drain `gateway`'s events into the member's outbox until `stop`.
pub(crate) fn collect(member: Arc<Member>, gateway: &Gateway, stop: CancellationToken) {
    let mut events = gateway.subscribe();
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                event = events.recv() => event,
            };
            match event {
                Ok(event) => member
                    .outbox
                    .push(serde_json::to_value(&event).unwrap_or(Value::Null)),
                Err(RecvError::Lagged(missed)) => {
                    member.outbox.lock().dropped += missed;
                    member.outbox.dirty.notify_one();
                }
                Err(RecvError::Closed) => return,
            }
        }
    });
}

impl Member {
    pub(crate) async fn sync_loop(&self, gateway: &Arc<Gateway>) -> Result<()> {
        loop {
            self.sync_once(gateway).await?;
            tokio::select! {
                _ = self.outbox.dirty.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(30)) => {}
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Write what changed. The caches are updated only after a write succeeded.
    pub(crate) async fn sync_once(&self, gateway: &Gateway) -> Result<()> {
        let client = self.fleet.client().await?;
        let name = &self.options.name;
        let servers = gateway.servers();
        let names: Vec<String> = servers.iter().map(|info| info.name.clone()).collect();
        for info in &servers {
            let mut stable = serde_json::to_value(info)?;
            if let Some(fields) = stable.as_object_mut() {
                fields.remove("uptime_ms");
                fields.remove("next_retry_in_ms");
            }
            let tools = gateway
                .server(&info.name)
                .map(|detail| serde_json::to_value(&detail.tools).unwrap_or(Value::Null))
                .unwrap_or(Value::Null);
            let (status_changed, tools_changed) = {
                let state = self.outbox.lock();
                (
                    state.status.get(&info.name) != Some(&stable),
                    state.tools.get(&info.name) != Some(&tools),
                )
            };
            if tools_changed {
                if info.status == StatusName::Online {
                    self.write_status(&client, info, RowStatus::SyncingTools)
                        .await?;
                }
                client
                    .execute(
                        "INSERT INTO wardgate_tools (member, server, tools) VALUES ($1, $2, $3)
                         ON CONFLICT (member, server) DO UPDATE SET tools = EXCLUDED.tools, updated_at = now()",
                        &[name, &info.name, &tools],
                    )
                    .await?;
                self.outbox.lock().tools.insert(info.name.clone(), tools);
            }
            if status_changed || tools_changed {
                self.write_status(&client, info, RowStatus::Server(info.status))
                    .await?;
                self.outbox.lock().status.insert(info.name.clone(), stable);
            }
        }
        client
            .execute(
                "DELETE FROM wardgate_server_status WHERE member = $1 AND NOT (server = ANY($2))",
                &[name, &names],
            )
            .await?;
        client
            .execute(
                "DELETE FROM wardgate_tools WHERE member = $1 AND NOT (server = ANY($2))",
                &[name, &names],
            )
            .await?;
        {
            let mut state = self.outbox.lock();
            state.status.retain(|server, _| names.contains(server));
            state.tools.retain(|server, _| names.contains(server));
        }
        self.write_events(&client).await
    }

    async fn write_status(
        &self,
        client: &tokio_postgres::Client,
        info: &wardgate_engine::info::ServerInfo,
        status: RowStatus,
    ) -> Result<()> {
        let status = status.as_str();
        let next_retry_at = info
            .next_retry_in_ms
            .map(|ms| SystemTime::now() + Duration::from_millis(ms));
        let crashes = info.crashes_in_window as i32;
        client
            .execute(
                "INSERT INTO wardgate_server_status
                     (member, server, status, degraded, reason, last_error, next_retry_at, crashes, info)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 ON CONFLICT (member, server) DO UPDATE SET
                     status = EXCLUDED.status, degraded = EXCLUDED.degraded,
                     reason = EXCLUDED.reason, last_error = EXCLUDED.last_error,
                     next_retry_at = EXCLUDED.next_retry_at, crashes = EXCLUDED.crashes,
                     info = EXCLUDED.info, updated_at = now()",
                &[
                    &self.options.name,
                    &info.name,
                    &status,
                    &info.degraded,
                    &info.reason,
                    &info.last_error,
                    &next_retry_at,
                    &crashes,
                    &serde_json::to_value(info)?,
                ],
            )
            .await?;
        Ok(())
    }

    async fn write_events(&self, client: &tokio_postgres::Client) -> Result<()> {
        let (mut batch, dropped) = {
            let mut state = self.outbox.lock();
            let take = state.events.len().min(500);
            let batch: Vec<(SystemTime, Value)> = state.events.drain(..take).collect();
            (batch, std::mem::take(&mut state.dropped))
        };
        if dropped > 0 {
            batch.push((
                SystemTime::now(),
                serde_json::json!({"type": "events_dropped", "count": dropped,
                    "reason": "the fleet database was away or the member fell behind; the newest events were kept"}),
            ));
        }
        if batch.is_empty() {
            return Ok(());
        }
        let times: Vec<SystemTime> = batch.iter().map(|(at, _)| *at).collect();
        let events: Vec<Value> = batch.iter().map(|(_, event)| event.clone()).collect();
        let written = client
            .execute(
                "INSERT INTO wardgate_events (member, at, event)
                 SELECT $1, at, event FROM unnest($2::timestamptz[], $3::jsonb[]) AS e(at, event)",
                &[&self.options.name, &times, &events],
            )
            .await;
        if let Err(error) = written {
            // Put them back, oldest first, so nothing is lost to a failed write.
            let mut state = self.outbox.lock();
            for event in batch.into_iter().rev() {
                state.events.push_front(event);
            }
            while state.events.len() > MAX_EVENTS {
                state.events.pop_front();
                state.dropped += 1;
            }
            return Err(error.into());
        }
        client
            .execute(
                "DELETE FROM wardgate_events WHERE member = $1 AND id <
                   (SELECT id FROM wardgate_events WHERE member = $1 ORDER BY id DESC OFFSET $2 LIMIT 1)",
                &[&self.options.name, &KEPT_EVENTS],
            )
            .await?;
        if !self.outbox.lock().events.is_empty() {
            self.outbox.dirty.notify_one();
        }
        Ok(())
    }
}
