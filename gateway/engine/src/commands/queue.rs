//! The queue itself: records, the executor task, retries with backoff, expiry, history.

use std::collections::{BTreeMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use serde_json::Value;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{
    Command, CommandError, CommandRecord, CommandRequest, CommandState, CommandTarget, Priority,
};

/// Timings and bounds of a queue; the defaults are the documented ones.
#[derive(Debug, Clone)]
pub struct QueueSettings {
    /// The first retry waits this long, each later one twice the one before. Default 1 s.
    pub retry_base: Duration,
    /// Retries after the first attempt fails. Default 3.
    pub max_retries: u32,
    /// A command not started within this long expires. Default 5 minutes.
    pub ttl: Duration,
    /// Finished commands kept for `get` and `list`. Default 500.
    pub history: usize,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            retry_base: Duration::from_secs(1),
            max_retries: 3,
            ttl: Duration::from_secs(300),
            history: 500,
        }
    }
}

struct Entry {
    record: CommandRecord,
    created: Instant,
    /// Not started before this (a retry's backoff).
    ready_at: Instant,
}

#[derive(Default)]
struct State {
    /// Every live command and the finished history, by sequence number (`cmd-N` has N).
    entries: BTreeMap<u64, Entry>,
    /// Sequence numbers of finished commands, oldest first.
    finished: VecDeque<u64>,
    next_seq: u64,
}

struct Shared {
    state: Mutex<State>,
    target: Arc<dyn CommandTarget>,
    settings: QueueSettings,
    /// Wakes the executor: something was submitted.
    submitted: Notify,
    /// Bumped on every state change, for `wait`.
    changed: watch::Sender<u64>,
}

/// Where the gateway's own operator interfaces submit first, when not straight to the
/// queue: a fleet member's command table, which hands the command back to the queue it is
/// given.
pub type Front = Arc<
    dyn Fn(
            CommandRequest,
            Arc<CommandQueue>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Routed> + Send>>
        + Send
        + Sync,
>;

/// Where an operator's command went: this queue's record of it, and what the front says
/// about where it went (a fleet's row, or why it ran on the local queue alone), for the
/// operator's answer; `None` without a front.
#[derive(Debug, Clone)]
pub struct Routed {
    pub record: CommandRecord,
    pub via: Option<serde_json::Value>,
}

/// The command queue; dropping it stops its executor and any command still running.
pub struct CommandQueue {
    shared: Arc<Shared>,
    executor: tokio::task::JoinHandle<()>,
    front: std::sync::OnceLock<Front>,
}

impl Drop for CommandQueue {
    fn drop(&mut self) {
        self.executor.abort();
    }
}

impl CommandQueue {
    /// Start the executor (inside a tokio runtime).
    pub fn start(target: Arc<dyn CommandTarget>, settings: QueueSettings) -> Arc<CommandQueue> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            target,
            settings,
            submitted: Notify::new(),
            changed: watch::channel(0).0,
        });
        let executor = tokio::spawn(run(shared.clone()));
        Arc::new(CommandQueue {
            shared,
            executor,
            front: std::sync::OnceLock::new(),
        })
    }

    /// Send operator commands (`submit_operator`) through `front` from now on; once only.
    pub fn set_front(&self, front: Front) {
        let _ = self.front.set(front);
    }

    /// Submit a command of an operator interface (the admin API and the MCP admin tools
    /// alike): through the front when there is one (a fleet member's table), else straight
    /// to this queue. The record is this queue's either way.
    pub async fn submit_operator(self: &Arc<Self>, request: CommandRequest) -> Routed {
        match self.front.get() {
            Some(front) => front(request, self.clone()).await,
            None => Routed {
                record: self.submit(request),
                via: None,
            },
        }
    }

    /// Enqueue a command; returns its record (pending).
    pub fn submit(&self, request: CommandRequest) -> CommandRecord {
        let record = {
            let mut state = self.shared.lock();
            state.next_seq += 1;
            let seq = state.next_seq;
            let now = Instant::now();
            let record = CommandRecord {
                id: format!("cmd-{seq}"),
                correlation_id: request
                    .correlation_id
                    .unwrap_or_else(|| format!("corr-{seq}")),
                command: request.command,
                priority: request.priority,
                state: CommandState::Pending,
                attempts: 0,
                created_at: timestamp(SystemTime::now()),
                acknowledged_at: None,
                started_at: None,
                finished_at: None,
                next_attempt_at: None,
                result: None,
                error: None,
            };
            state.entries.insert(
                seq,
                Entry {
                    record: record.clone(),
                    created: now,
                    ready_at: now,
                },
            );
            record
        };
        self.shared.changed(std::slice::from_ref(&record));
        self.shared.submitted.notify_one();
        record
    }

    pub fn get(&self, id: &str) -> Option<CommandRecord> {
        let seq = id.strip_prefix("cmd-")?.parse::<u64>().ok()?;
        let state = self.shared.lock();
        state.entries.get(&seq).map(|entry| entry.record.clone())
    }

    /// Live commands and the kept history, newest first.
    pub fn list(&self) -> Vec<CommandRecord> {
        let state = self.shared.lock();
        state
            .entries
            .values()
            .rev()
            .map(|entry| entry.record.clone())
            .collect()
    }

    /// Wait until the command has finished (completed, failed or expired); `None` for an id
    /// the queue does not know (or no longer keeps).
    pub async fn wait(&self, id: &str) -> Option<CommandRecord> {
        let mut changes = self.shared.changed.subscribe();
        loop {
            let record = self.get(id)?;
            if record.state.is_finished() {
                return Some(record);
            }
            if changes.changed().await.is_err() {
                return self.get(id);
            }
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::lock::lock(&self.state)
    }

    /// Tell the target and any waiter; called outside the lock.
    fn changed(&self, records: &[CommandRecord]) {
        if records.is_empty() {
            return;
        }
        for record in records {
            self.target.observe(record);
        }
        self.changed.send_modify(|version| *version += 1);
    }

    /// Expire commands that were never started within the TTL.
    fn expire(&self, now: Instant) {
        let mut expired = Vec::new();
        {
            let mut state = self.lock();
            let due: Vec<u64> = state
                .entries
                .iter()
                .filter(|(_, entry)| {
                    entry.record.state == CommandState::Pending
                        && entry.record.attempts == 0
                        && now >= entry.created + self.settings.ttl
                })
                .map(|(seq, _)| *seq)
                .collect();
            for seq in due {
                if let Some(entry) = state.entries.get_mut(&seq) {
                    entry.record.state = CommandState::Expired;
                    entry.record.finished_at = Some(timestamp(SystemTime::now()));
                    entry.record.error = Some(format!(
                        "not started within {}; the queue was busy — submit it again if it is still wanted",
                        humantime::format_duration(self.settings.ttl)
                    ));
                    expired.push(entry.record.clone());
                }
                self.retire(&mut state, seq);
            }
        }
        self.changed(&expired);
    }

    /// Take the best command that may start now: highest priority, then oldest. While a
    /// serial command runs, only an immediate one may start.
    fn take_next(&self, now: Instant, serial_busy: bool) -> Option<(u64, Command, Priority)> {
        let (taken, records) = {
            let mut state = self.lock();
            let seq = state
                .entries
                .iter()
                .filter(|(_, entry)| {
                    entry.record.state == CommandState::Pending
                        && entry.ready_at <= now
                        && (!serial_busy || entry.record.priority == Priority::Immediate)
                })
                .max_by_key(|(seq, entry)| (entry.record.priority, std::cmp::Reverse(**seq)))
                .map(|(seq, _)| *seq)?;
            let entry = state.entries.get_mut(&seq)?;
            let at = timestamp(SystemTime::now());
            entry.record.state = CommandState::Acknowledged;
            entry
                .record
                .acknowledged_at
                .get_or_insert_with(|| at.clone());
            let acknowledged = entry.record.clone();
            entry.record.state = CommandState::Executing;
            entry.record.started_at = Some(at);
            entry.record.next_attempt_at = None;
            entry.record.attempts += 1;
            let taken = (seq, entry.record.command.clone(), entry.record.priority);
            (taken, vec![acknowledged, entry.record.clone()])
        };
        self.changed(&records);
        Some(taken)
    }

    /// Record how an execution ended: completed, failed, or pending again for a retry.
    fn finish(&self, seq: u64, outcome: Result<Value, CommandError>) {
        let record = {
            let mut state = self.lock();
            let Some(entry) = state.entries.get_mut(&seq) else {
                return;
            };
            let now = SystemTime::now();
            match outcome {
                Ok(value) => {
                    entry.record.state = CommandState::Completed;
                    entry.record.result = Some(value);
                    entry.record.error = None;
                }
                Err(error)
                    if error.retryable && entry.record.attempts <= self.settings.max_retries =>
                {
                    let delay =
                        self.settings.retry_base * 2u32.saturating_pow(entry.record.attempts - 1);
                    entry.record.state = CommandState::Pending;
                    entry.record.error = Some(error.message);
                    entry.record.next_attempt_at = Some(timestamp(now + delay));
                    entry.ready_at = Instant::now() + delay;
                }
                Err(error) => {
                    entry.record.state = CommandState::Failed;
                    entry.record.error = Some(error.message);
                }
            }
            if entry.record.state.is_finished() {
                entry.record.finished_at = Some(timestamp(now));
            }
            let record = entry.record.clone();
            if record.state.is_finished() {
                self.retire(&mut state, seq);
            }
            record
        };
        self.changed(&[record]);
    }

    /// Keep a finished command in the history, dropping the oldest beyond the bound.
    fn retire(&self, state: &mut State, seq: u64) {
        state.finished.push_back(seq);
        while state.finished.len() > self.settings.history {
            if let Some(oldest) = state.finished.pop_front() {
                state.entries.remove(&oldest);
            }
        }
    }

    /// When the executor must look again without being woken: a retry comes due or a
    /// pending command expires.
    fn next_deadline(&self, serial_busy: bool) -> Option<Instant> {
        let state = self.lock();
        state
            .entries
            .values()
            .filter(|entry| entry.record.state == CommandState::Pending)
            .flat_map(|entry| {
                let startable = !serial_busy || entry.record.priority == Priority::Immediate;
                let expiry =
                    (entry.record.attempts == 0).then(|| entry.created + self.settings.ttl);
                [startable.then_some(entry.ready_at), expiry]
            })
            .flatten()
            .min()
    }
}

/// The executor: starts commands as priorities and the serial lane allow, and records how
/// they end.
async fn run(shared: Arc<Shared>) {
    let mut running: JoinSet<(u64, Priority, Result<Value, CommandError>)> = JoinSet::new();
    let mut serial_busy = false;
    loop {
        let now = Instant::now();
        shared.expire(now);
        while let Some((seq, command, priority)) = shared.take_next(now, serial_busy) {
            if priority != Priority::Immediate {
                serial_busy = true;
            }
            let target = shared.target.clone();
            running.spawn(async move {
                let outcome = AssertUnwindSafe(target.execute(&command))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| {
                        Err(CommandError::permanent(format!(
                            "the {} command failed unexpectedly (a bug: please report it)",
                            command.kind()
                        )))
                    });
                (seq, priority, outcome)
            });
        }
        let deadline = shared.next_deadline(serial_busy);
        tokio::select! {
            Some(done) = running.join_next(), if !running.is_empty() => {
                if let Ok((seq, priority, outcome)) = done {
                    if priority != Priority::Immediate {
                        serial_busy = false;
                    }
                    shared.finish(seq, outcome);
                }
            }
            _ = shared.submitted.notified() => {}
            _ = sleep_until_or_forever(deadline) => {}
        }
    }
}

async fn sleep_until_or_forever(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn timestamp(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}
