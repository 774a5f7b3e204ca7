//! The fleet's command queue, as a member works it.
//!
//! Why this file is long: claiming, leases, fencing and expiry are one protocol over one
//! table, whose SQL must be read together to see that no row is run twice.
//!
//! A member claims its own pending rows, highest priority first and oldest first within a
//! priority, with `FOR UPDATE SKIP LOCKED`, so members never wait on each other's locks.
//! LISTEN/NOTIFY wakes it the moment a row is inserted for it; polling at the seeds'
//! intervals (2, 10, 30, 60 s by priority) is the fallback for a missed notification.
//!
//! A claimed row carries a lease that its member renews while the command runs. The command
//! itself runs on the member's local queue, which does the retries with backoff and the
//! expiry it does for every command. When a lease runs out (the member died or lost the
//! database), any member puts the row back to pending — saying that the interrupted attempt
//! may have run in part — or fails it once its retries are spent. Results are fenced by the
//! claim (`claimed_by`, `attempts`): a late result of an attempt the fleet has given up on
//! is not written over the retry's.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio::time::Instant;
use wardgate_engine::commands::{
    Command, CommandQueue, CommandRecord, CommandRequest, CommandState, Routed,
};

use super::Member;
use crate::backoff::Backoff;
use crate::error::{FleetError, Result};

/// Where a command of a member's own admin API went.
pub enum Submitted {
    /// Into the fleet's table, as row `fleet_id`, and on to the local queue.
    Fleet {
        fleet_id: i64,
        record: CommandRecord,
    },
    /// To the local queue alone, because the database could not take it (`why`).
    Local { record: CommandRecord, why: String },
}

impl Submitted {
    /// Where it went, as an operator's answer says: the fleet's row and the member, or
    /// why it ran on `member`'s local queue alone.
    pub fn routed(self, member: &str) -> Routed {
        match self {
            Submitted::Fleet { fleet_id, record } => Routed {
                record,
                via: Some(serde_json::json!({ "command": fleet_id, "member": member })),
            },
            Submitted::Local { record, why } => Routed {
                record,
                via: Some(serde_json::json!({
                    "queue": "local",
                    "why": format!("{why}; the command ran on this member's local queue, and its row is written to `wardgate fleet commands` when the database answers"),
                })),
            },
        }
    }
}

/// Where a command of the member's own admin API runs: decided once, by whichever of the
/// insert and the caller's 2 s wait comes first.
enum Decision {
    Open,
    /// Its row was inserted: the fleet's lifecycle runs it.
    Fleet,
    /// The insert failed: the caller runs it locally and records it.
    Failed,
    /// The caller ran it on the local queue as this command.
    Local(String),
}

/// The command in row `id`'s `command` column, or why this member cannot run it.
pub(crate) fn decode(id: i64, command: &Value) -> Result<Command, String> {
    serde_json::from_value(command.clone()).map_err(|error| {
        let kind = command
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("(none)");
        format!(
            "command {id} cannot be run: {error} (type {kind:?}); nothing was changed; known types: configure, spawn, kill, restart, reconnect, enable, disable, health_check, reload_policies, shadow_policy, promote_shadow, rollback_policy"
        )
    })
}

/// One claimed row.
struct Claimed {
    id: i64,
    correlation_id: String,
    command: Value,
    priority: i16,
    attempts: i32,
}

impl Member {
    /// Hold a connection that LISTENs, and wake the claimer on each notification for this
    /// member. Ends with an error when the connection does.
    pub(crate) async fn listen(&self) -> Result<()> {
        let (client, mut connection) = self.fleet.dedicated().await?;
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        let listening = client.batch_execute("LISTEN wardgate_commands");
        tokio::pin!(listening);
        let mut listened = false;
        loop {
            tokio::select! {
                result = &mut listening, if !listened => {
                    result?;
                    listened = true;
                    // Anything inserted before LISTEN took effect is claimed now.
                    self.wake.notify_one();
                }
                message = messages.next() => match message {
                    Some(Ok(tokio_postgres::AsyncMessage::Notification(note))) => {
                        if note.payload() == self.options.name {
                            self.wake.notify_one();
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => return Err(FleetError::Unreachable(format!("the fleet database's notification connection failed: {error}"))),
                    None => return Err(FleetError::Unreachable("the fleet database closed the notification connection".into())),
                },
            }
        }
    }

    /// Claim and start commands: at once on a notification, else when a priority's poll
    /// interval comes round.
    pub(crate) async fn claim_loop(self: &Arc<Member>, queue: &Arc<CommandQueue>) -> Result<()> {
        let mut polls = Polls::new(self.options.poll, Instant::now());
        let tick = polls.tick();
        // When the soonest retry's backoff ends (a notified retry waits for it).
        let mut retry_at: Option<Instant> = None;
        loop {
            // Which priorities are due: every one after a notification, or when a retry's
            // backoff has ended.
            let notified = tokio::select! {
                _ = self.wake.notified() => true,
                _ = tokio::time::sleep_until(retry_at.unwrap_or_else(|| Instant::now() + tick)), if retry_at.is_some() => {
                    retry_at = None;
                    true
                }
                _ = tokio::time::sleep(tick) => false,
            };
            let Some(up_to) = polls.due(Instant::now(), notified) else {
                continue;
            };
            while let Some(claimed) = self.claim(up_to).await? {
                let member = self.clone();
                let queue = queue.clone();
                tokio::spawn(async move { member.execute(claimed, queue).await });
            }
            // A retried row is notified while its backoff still runs: wake when it ends
            // rather than at the next poll of its priority.
            if notified {
                if let Some(wait) = self.next_retry_in().await? {
                    let at = Instant::now() + wait;
                    retry_at = Some(retry_at.map_or(at, |earlier| earlier.min(at)));
                }
            }
        }
    }
}

/// When each priority's pending commands are looked for, without a notification: every
/// `every[rank]` (the seeds' 2, 10, 30 and 60 s for immediate, high, normal and low).
#[derive(Debug, Clone)]
pub(crate) struct Polls {
    every: [Duration; 4],
    last: [Instant; 4],
}

impl Polls {
    pub(crate) fn new(every: [Duration; 4], now: Instant) -> Polls {
        Polls {
            every,
            last: [now; 4],
        }
    }

    /// How often the loop wakes to see what is due: the immediate poll's interval, at
    /// most 2 s.
    pub(crate) fn tick(&self) -> Duration {
        self.every[0].min(Duration::from_secs(2))
    }

    /// The lowest priority (its rank, 0 = immediate) to claim now, if any: all of them
    /// after a notification, else each whose interval has passed, in order (a priority is
    /// looked for only with every more urgent one).
    pub(crate) fn due(&mut self, now: Instant, notified: bool) -> Option<i16> {
        let mut up_to = None;
        for (rank, interval) in self.every.iter().enumerate() {
            if notified || now.duration_since(self.last[rank]) >= *interval {
                up_to = Some(rank as i16);
                self.last[rank] = now;
            } else {
                break;
            }
        }
        up_to
    }
}

impl Member {
    /// Until the soonest pending row of this member whose backoff still runs may start.
    async fn next_retry_in(&self) -> Result<Option<Duration>> {
        let client = self.fleet.client().await?;
        let row = client
            .query_one(
                "SELECT extract(epoch FROM min(not_before) - now())::float8
                   FROM wardgate_commands
                  WHERE member = $1 AND state = 'pending' AND not_before > now()
                    AND expires_at > now()",
                &[&self.options.name],
            )
            .await?;
        let seconds: Option<f64> = row.get(0);
        Ok(seconds.map(|seconds| {
            Duration::from_secs_f64(seconds.clamp(0.0, 3600.0)) + Duration::from_millis(5)
        }))
    }

    async fn claim(&self, up_to: i16) -> Result<Option<Claimed>> {
        let client = self.fleet.client().await?;
        let lease = self.options.lease.as_millis() as i64;
        let row = client
            .query_opt(
                "UPDATE wardgate_commands SET state = 'acknowledged', acknowledged_at = now(),
                        claimed_by = $2, attempts = attempts + 1,
                        lease_until = now() + $3::bigint * interval '1 millisecond'
                  WHERE id = (SELECT id FROM wardgate_commands
                               WHERE member = $1 AND state = 'pending' AND priority <= $4
                                 AND not_before <= now() AND expires_at > now()
                               ORDER BY priority, created_at, id
                               LIMIT 1 FOR UPDATE SKIP LOCKED)
              RETURNING id, correlation_id, command, priority, attempts",
                &[&self.options.name, &self.instance, &lease, &up_to],
            )
            .await?;
        Ok(row.map(|row| Claimed {
            id: row.get(0),
            correlation_id: row.get(1),
            command: row.get(2),
            priority: row.get(3),
            attempts: row.get(4),
        }))
    }

    /// Run one claimed command on the local queue, renewing its lease, and write how it
    /// ended. A row this member cannot understand fails at once and changes nothing.
    async fn execute(self: Arc<Member>, claimed: Claimed, queue: Arc<CommandQueue>) {
        let command = match decode(claimed.id, &claimed.command) {
            Ok(command) => command,
            Err(message) => {
                tracing::warn!(member = %self.options.name, "{message}");
                self.finish(&claimed, "failed", None, Some(message), None)
                    .await;
                return;
            }
        };
        let record = self.start(&claimed, command, &queue).await;
        self.follow(claimed, record.id, queue).await;
    }

    /// Mark a claimed row executing.
    async fn mark_executing(&self, claimed: &Claimed) {
        let _ = self
            .write(
                "UPDATE wardgate_commands SET state = 'executing', started_at = now(),
                        lease_until = now() + $4::bigint * interval '1 millisecond'
                  WHERE id = $1 AND claimed_by = $2 AND attempts = $3",
                claimed,
            )
            .await;
    }

    /// Mark a claimed row executing and hand its command to the local queue.
    async fn start(
        &self,
        claimed: &Claimed,
        command: Command,
        queue: &CommandQueue,
    ) -> CommandRecord {
        self.mark_executing(claimed).await;
        queue.submit(CommandRequest {
            command,
            priority: crate::priority_of_rank(claimed.priority),
            correlation_id: Some(claimed.correlation_id.clone()),
        })
    }

    /// Renew a started row's lease until its local command `local_id` ends, then write how
    /// it ended.
    async fn follow(
        self: Arc<Member>,
        claimed: Claimed,
        local_id: String,
        queue: Arc<CommandQueue>,
    ) {
        let finished = queue.wait(&local_id);
        tokio::pin!(finished);
        let renew_every = self.options.lease / 3;
        let outcome = loop {
            tokio::select! {
                record = &mut finished => break record,
                _ = tokio::time::sleep(renew_every) => {
                    let renewed = self.write(
                        "UPDATE wardgate_commands
                            SET lease_until = now() + $4::bigint * interval '1 millisecond'
                          WHERE id = $1 AND claimed_by = $2 AND attempts = $3",
                        &claimed,
                    ).await;
                    if renewed == Some(0) {
                        tracing::warn!(member = %self.options.name, command = claimed.id, "the fleet retried or failed command {} while it still ran here (its lease ran out)", claimed.id);
                    }
                }
            }
        };
        let (state, result, error, local_attempts) = match outcome {
            Some(record) => (
                match record.state {
                    CommandState::Completed => "completed",
                    CommandState::Expired => "expired",
                    _ => "failed",
                },
                record.result,
                record.error,
                Some(record.attempts as i32),
            ),
            None => (
                "failed",
                None,
                Some("the local queue lost the command".to_owned()),
                None,
            ),
        };
        self.finish(&claimed, state, result, error, local_attempts)
            .await;
    }

    /// Submit a command of this member's own admin API (and so its CLI and its MCP admin
    /// tools) through the fleet's table: a row for this member, inserted already claimed by
    /// it (no notification round trip), that runs on the local queue and reports its
    /// lifecycle, lease and retry like any fleet command. While the database is away (or
    /// does not answer within 2 s) the command runs on the local queue at once, and the
    /// answer says why; its row is written when the database is back, so the fleet's table
    /// still shows it. It runs once either way: an insert that lands late is not run again
    /// but follows the local run.
    pub async fn submit_here(
        self: &Arc<Member>,
        request: CommandRequest,
        queue: &Arc<CommandQueue>,
    ) -> Submitted {
        let submitted_at = std::time::SystemTime::now();
        let correlation_id = request
            .correlation_id
            .clone()
            .unwrap_or_else(|| crate::new_correlation_id(&self.options.name));
        let request = CommandRequest {
            correlation_id: Some(correlation_id.clone()),
            ..request
        };
        let command = match serde_json::to_value(&request.command) {
            Ok(command) => command,
            Err(error) => return self.run_locally(request, queue, error.to_string(), submitted_at),
        };
        let rank = crate::priority_rank(request.priority);
        // The insert and what follows it run on their own, so a caller that goes away
        // (a client that hangs up) leaves no row behind that nobody runs.
        let decision = Arc::new(std::sync::Mutex::new(Decision::Open));
        let (answer, mut answered) =
            tokio::sync::oneshot::channel::<Result<(i64, CommandRecord), String>>();
        {
            let member = self.clone();
            let queue = queue.clone();
            let decision = decision.clone();
            let command_here = request.command.clone();
            tokio::spawn(async move {
                let inserted = member
                    .clone()
                    .insert_own(correlation_id, command, rank)
                    .await;
                let local = {
                    let mut decision = wardgate_engine::lock::lock(&decision);
                    match &*decision {
                        Decision::Local(local_id) => Some(local_id.clone()),
                        _ => {
                            *decision = if inserted.is_ok() {
                                Decision::Fleet
                            } else {
                                Decision::Failed
                            };
                            None
                        }
                    }
                };
                match (inserted, local) {
                    (Ok(claimed), None) => {
                        let fleet_id = claimed.id;
                        let record = member.start(&claimed, command_here, &queue).await;
                        let _ = answer.send(Ok((fleet_id, record.clone())));
                        member.follow(claimed, record.id, queue).await;
                    }
                    // The caller ran it locally meanwhile: the row follows that run.
                    (Ok(claimed), Some(local_id)) => {
                        member.mark_executing(&claimed).await;
                        member.follow(claimed, local_id, queue).await;
                    }
                    (Err(error), None) => {
                        let _ = answer.send(Err(format!("{error:#}")));
                    }
                    (Err(error), Some(local_id)) => {
                        let why = format!("{error:#}");
                        let ended = queue.wait(&local_id).await;
                        member.record_local(ended, submitted_at, &why).await;
                    }
                }
            });
        }
        match tokio::time::timeout(Duration::from_secs(2), &mut answered).await {
            Ok(Ok(Ok((fleet_id, record)))) => Submitted::Fleet { fleet_id, record },
            Ok(Ok(Err(why))) => self.run_locally(request, queue, why, submitted_at),
            Ok(Err(_)) => self.run_locally(
                request,
                queue,
                "the fleet's insert ended without an answer".to_owned(),
                submitted_at,
            ),
            Err(_) => {
                let why = format!(
                    "the fleet database {} did not answer within 2 s",
                    self.fleet.shown_url()
                );
                // Run it here now, unless the insert ended just now; if the insert lands
                // later, its row follows this run, and if it never does, the task records
                // it.
                let ran = {
                    let mut decided = wardgate_engine::lock::lock(&decision);
                    if !matches!(*decided, Decision::Open) {
                        None
                    } else {
                        let record = queue.submit(request.clone());
                        *decided = Decision::Local(record.id.clone());
                        Some(record)
                    }
                };
                let Some(record) = ran else {
                    // The insert just ended, one way or the other: its answer is on the way.
                    return match answered.await {
                        Ok(Ok((fleet_id, record))) => Submitted::Fleet { fleet_id, record },
                        _ => self.run_locally(request, queue, why, submitted_at),
                    };
                };
                self.say_local(&why);
                Submitted::Local { record, why }
            }
        }
    }

    /// Insert a row for this member, already claimed by it.
    async fn insert_own(
        self: Arc<Member>,
        correlation_id: String,
        command: Value,
        rank: i16,
    ) -> Result<Claimed> {
        if !self.connected.load(Ordering::Relaxed) {
            crate::error::invalid!(
                "the fleet database {} is unreachable",
                self.fleet.shown_url()
            );
        }
        let lease = self.options.lease.as_millis() as i64;
        let client = self.fleet.client().await?;
        let row = client
            .query_one(
                "INSERT INTO wardgate_commands
                     (correlation_id, member, command, priority, expires_at, state,
                      acknowledged_at, claimed_by, attempts, lease_until)
                 VALUES ($1, $2, $3, $4, now() + $7::bigint * interval '1 millisecond',
                         'acknowledged', now(), $5, 1,
                         now() + $6::bigint * interval '1 millisecond')
                 RETURNING id",
                &[
                    &correlation_id,
                    &self.options.name,
                    &command,
                    &rank,
                    &self.instance,
                    &lease,
                    &crate::db::expiry_ms(),
                ],
            )
            .await?;
        Ok(Claimed {
            id: row.get(0),
            correlation_id,
            command,
            priority: rank,
            attempts: 1,
        })
    }

    /// Say that a command runs on the local queue because of `why`.
    fn say_local(&self, why: &str) {
        tracing::warn!(member = %self.options.name, "{why}; running the command on this member's local queue now, and recording it in the fleet's command table when the database answers");
    }

    /// Run a command on the local queue alone (the database could not take it: `why`), and
    /// record it in the fleet's table once it has ended and the database answers.
    fn run_locally(
        self: &Arc<Member>,
        request: CommandRequest,
        queue: &Arc<CommandQueue>,
        why: String,
        submitted_at: std::time::SystemTime,
    ) -> Submitted {
        self.say_local(&why);
        let record = queue.submit(request);
        let member = self.clone();
        let queue = queue.clone();
        let local_id = record.id.clone();
        let reason = why.clone();
        tokio::spawn(async move {
            let ended = queue.wait(&local_id).await;
            member.record_local(ended, submitted_at, &reason).await;
        });
        Submitted::Local { record, why }
    }

    /// Write the row of a command that ran on the local queue alone, once the database
    /// answers (trying for up to an hour, with backoff).
    async fn record_local(
        &self,
        ended: Option<CommandRecord>,
        submitted_at: std::time::SystemTime,
        why: &str,
    ) {
        let Some(record) = ended else {
            return;
        };
        let Ok(command) = serde_json::to_value(&record.command) else {
            return;
        };
        let state = match record.state {
            CommandState::Completed => "completed",
            CommandState::Expired => "expired",
            _ => "failed",
        };
        let note = format!(
            "ran on {}'s local queue only ({why}); recorded when the database answered",
            self.options.name
        );
        // The note goes with the result of a command that completed, before the error of
        // one that did not.
        let (result, error) = match state {
            "completed" => (
                Some(match record.result.clone() {
                    Some(Value::Object(mut fields)) => {
                        fields.insert("fleet_note".to_owned(), Value::String(note));
                        Value::Object(fields)
                    }
                    other => serde_json::json!({ "result": other, "fleet_note": note }),
                }),
                None,
            ),
            _ => (
                record.result.clone(),
                Some(match &record.error {
                    Some(error) => format!("{note}; {error}"),
                    None => note,
                }),
            ),
        };
        let rank = crate::priority_rank(record.priority);
        let local_attempts = record.attempts as i32;
        let deadline = Instant::now() + Duration::from_secs(3600);
        let mut backoff = Backoff::new();
        loop {
            let written = async {
                let client = self.fleet.client().await?;
                // A row whose insert committed though its answer was lost: it is this run,
                // so it takes this run's end (and is never claimed and run again).
                let adopted = client
                    .execute(
                        "UPDATE wardgate_commands
                            SET state = $4, finished_at = now(), result = $5, error = $6,
                                local_attempts = $7, lease_until = NULL,
                                started_at = coalesce(started_at, created_at)
                          WHERE id = (SELECT id FROM wardgate_commands
                                       WHERE correlation_id = $1 AND member = $2
                                         AND state IN ('pending', 'acknowledged', 'executing')
                                         AND created_at >= $3::timestamptz - interval '1 minute'
                                       ORDER BY id DESC LIMIT 1)",
                        &[
                            &record.correlation_id,
                            &self.options.name,
                            &submitted_at,
                            &state,
                            &result,
                            &error,
                            &local_attempts,
                        ],
                    )
                    .await?;
                if adopted == 0 {
                    client
                        .execute(
                            "INSERT INTO wardgate_commands
                                 (correlation_id, member, command, priority, state, attempts,
                                  local_attempts, created_at, acknowledged_at, started_at,
                                  finished_at, expires_at, claimed_by, result, error)
                             VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $7, $7, now(), now(), $8, $9, $10)",
                            &[
                                &record.correlation_id,
                                &self.options.name,
                                &command,
                                &rank,
                                &state,
                                &local_attempts,
                                &submitted_at,
                                &self.instance,
                                &result,
                                &error,
                            ],
                        )
                        .await?;
                }
                Ok::<_, FleetError>(())
            }
            .await;
            match written {
                Ok(()) => return,
                Err(error) if Instant::now() < deadline => {
                    tracing::debug!(
                        "recording command {} of the local queue in the fleet: {error:#}; retrying",
                        record.id
                    );
                    tokio::time::sleep(backoff.next_wait()).await;
                }
                Err(error) => {
                    tracing::warn!(member = %self.options.name, "could not record command {} of the local queue in the fleet: {error:#}", record.id);
                    return;
                }
            }
        }
    }

    /// Write a command's end, retrying while the database is away (up to 5 minutes), fenced
    /// by the claim.
    async fn finish(
        &self,
        claimed: &Claimed,
        state: &str,
        result: Option<Value>,
        error: Option<String>,
        local_attempts: Option<i32>,
    ) {
        let deadline = Instant::now() + Duration::from_secs(300);
        let mut backoff = Backoff::new();
        loop {
            let written = async {
                let client = self.fleet.client().await?;
                let rows = client
                    .execute(
                        "UPDATE wardgate_commands
                            SET state = $4, finished_at = now(), result = $5,
                                -- An earlier attempt's interruption stays on record.
                                error = CASE WHEN error IS NULL THEN $6
                                             WHEN $6::text IS NULL THEN error
                                             ELSE error || '; then: ' || $6 END,
                                lease_until = NULL, local_attempts = $7
                          WHERE id = $1 AND claimed_by = $2 AND attempts = $3",
                        &[
                            &claimed.id,
                            &self.instance,
                            &claimed.attempts,
                            &state,
                            &result,
                            &error,
                            &local_attempts,
                        ],
                    )
                    .await?;
                Ok::<_, FleetError>(rows)
            }
            .await;
            match written {
                Ok(0) => {
                    tracing::warn!(member = %self.options.name, command = claimed.id, "command {} ended here ({state}) after the fleet had already retried or failed it; its row keeps the fleet's account", claimed.id);
                    return;
                }
                Ok(_) => return,
                Err(error) if Instant::now() < deadline => {
                    tracing::debug!(
                        "writing the end of command {}: {error:#}; retrying",
                        claimed.id
                    );
                    tokio::time::sleep(backoff.next_wait()).await;
                }
                Err(error) => {
                    tracing::warn!(member = %self.options.name, "could not report the end of command {} ({state}): {error:#}", claimed.id);
                    return;
                }
            }
        }
    }

    /// One fenced update of a claimed row that extends its lease (`$1` id, `$2` instance,
    /// `$3` attempts, `$4` lease in ms); `None` when the database is away.
    async fn write(&self, sql: &str, claimed: &Claimed) -> Option<u64> {
        let client = self.fleet.client().await.ok()?;
        let lease = self.options.lease.as_millis() as i64;
        client
            .execute(
                sql,
                &[&claimed.id, &self.instance, &claimed.attempts, &lease],
            )
            .await
            .ok()
    }

    /// Retry or fail rows whose lease ran out, and expire rows never started in time. Every
    /// member does it; the updates are idempotent.
    pub(crate) async fn reap_loop(&self) -> Result<()> {
        let every = (self.options.lease / 2).max(Duration::from_millis(250));
        loop {
            tokio::time::sleep(every).await;
            let client = self.fleet.client().await?;
            let retried = client
                .query(
                    "UPDATE wardgate_commands SET
                        state = CASE WHEN attempts <= max_retries THEN 'pending' ELSE 'failed' END,
                        error = format('attempt %s on member %s stopped reporting (its lease ran out: the member died or lost the database) and may have run in part; %s',
                                       attempts, member,
                                       CASE WHEN attempts <= max_retries THEN 'it will be tried again' ELSE 'no retries are left' END),
                        not_before = now() + power(2, greatest(attempts - 1, 0)) * interval '1 second',
                        finished_at = CASE WHEN attempts <= max_retries THEN NULL ELSE now() END,
                        lease_until = NULL, claimed_by = NULL
                      WHERE state IN ('acknowledged', 'executing') AND lease_until < now()
                  RETURNING id, member, state",
                    &[],
                )
                .await?;
            for row in retried {
                let (id, member, state): (i64, String, String) =
                    (row.get(0), row.get(1), row.get(2));
                tracing::warn!(
                    command = id,
                    "fleet command {id} on member {member} lost its lease; now {state}"
                );
            }
            client
                .execute(
                    "UPDATE wardgate_commands SET state = 'expired', finished_at = now(),
                            error = coalesce(error || '; ', '') || 'not started before it expired'
                      WHERE state = 'pending' AND expires_at <= now()",
                    &[],
                )
                .await?;
        }
    }
}

#[cfg(test)]
mod tests;
