//! Tasks of the 2025-11-25 revision, run by the gateway itself for handshake-era clients.
//! A client asks for a `tools/call` as a task (`params.task`); the gateway answers at once
//! with a task of its own, makes the call as it makes any other (routing, recovery, the
//! server's request timeout), and keeps the outcome for `tasks/get`, `tasks/result`,
//! `tasks/list` and `tasks/cancel` (`wardgate_downstream`'s `runs`).
//!
//! - **Names.** A run calling a prefixed server is listed as `PREFIX{separator}ID`, like its
//!   tools; `ID` is 122 random bits, so it cannot be guessed.
//! - **Isolation.** A run is found only by the client that started it ([`Owner`], as for
//!   relayed tasks); any other is told it does not exist.
//! - **Truth.** A run ends with what its call ended with: the server's answer, or the
//!   gateway's error when the server failed and recovery gave up. The call has its
//!   deadline (a server's own task it follows, the run's `ttl`), so a run never stays
//!   `working` for ever. While its server waits on the
//!   client (elicitation, sampling, roots) the run reads `input_required` ([`Run::asking`]):
//!   those requests name the task ([`RELATED_TASK`]) and go on the stream of the client's
//!   `tasks/result` when one waits ([`Run::result_stream`]).
//! - **Bounded.** A run's entry lasts its `ttl` (the client's, within [`MIN_TTL`] and
//!   [`MAX_RETENTION`]; [`DEFAULT_TTL`] when it asked for none), and a run still working
//!   when it expires is cancelled. At most [`MAX_RUNS`] are kept, [`MAX_RUNS_PER_CLIENT`] of
//!   one client's: past either, the finished one closest to expiry goes (the client's own,
//!   past its share), and with none finished a new run is refused. The results (and
//!   errors) kept are bounded in bytes the same way ([`MAX_KEPT_BYTES`],
//!   [`MAX_KEPT_BYTES_PER_CLIENT`], [`Runs::end`]): a result that needs room makes it from
//!   the finished runs closest to expiry, the client's own first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{JsonObject, RequestId};
use rmcp::ErrorData;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wardgate_policy::lock::lock;

use crate::sessions::SessionId;
use crate::tasks::{timestamp, Listing, Owner, MAX_RETENTION};

/// The `_meta` key that ties a message to its task (2025-11-25).
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// How long a run is kept when its client asked for no `ttl`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);
/// How many runs the gateway keeps at most, each with its call's result.
pub const MAX_RUNS: usize = 1_000;
/// How many of them one client may hold, so that no client can take every run.
pub const MAX_RUNS_PER_CLIENT: usize = 100;
/// How many bytes of results and errors the gateway keeps for its runs at most.
pub const MAX_KEPT_BYTES: usize = 256 * 1024 * 1024;
/// How many of them one client's runs may hold: twice the largest message a server may
/// send, so any one result fits.
pub const MAX_KEPT_BYTES_PER_CLIENT: usize = 32 * 1024 * 1024;
/// The shortest `ttl` a run gets, whatever its client asked for.
pub const MIN_TTL: Duration = Duration::from_secs(5);
/// How often a client is told to poll a run (`pollInterval`).
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// How a run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The call's result, as the server answered it (`isError` included).
    Answered(JsonObject),
    /// The call's error, the server's or the gateway's.
    Failed(ErrorData),
}

impl Outcome {
    /// Its size as JSON, in bytes: what keeping it costs.
    fn size(&self) -> usize {
        match self {
            Outcome::Answered(result) => crate::sessions::json_size(result),
            Outcome::Failed(error) => crate::sessions::json_size(error),
        }
    }
}

/// Where a run is in its life.
#[derive(Debug, Clone)]
pub enum Status {
    Working,
    /// Its call waits on requests its server sent the client (elicitation, sampling,
    /// roots), which the client has not answered yet.
    InputRequired,
    Ended(Arc<Outcome>),
    /// Cancelled by its client (or expired while working): it stays so whatever the call
    /// then does.
    Cancelled,
}

impl Status {
    pub fn is_terminal(&self) -> bool {
        !matches!(self, Status::Working | Status::InputRequired)
    }
}

/// A run's state as a client is told of it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub id: String,
    pub status: Status,
    pub created_at: String,
    pub last_updated_at: String,
    pub ttl_ms: u64,
}

/// One task the gateway runs.
#[derive(Debug)]
pub struct Run {
    /// The id its client knows it by.
    pub id: String,
    /// The server its call goes to.
    pub server: String,
    owner: Owner,
    created_at: String,
    created: Instant,
    ttl: Duration,
    state: watch::Sender<(Status, String)>,
    /// Cancelled when the run is: stops its call.
    pub cancel: CancellationToken,
    /// How many requests of its server to its client are unanswered.
    asking: Mutex<usize>,
    /// The client's `tasks/result` requests waiting on it, by session, oldest first.
    results: Mutex<Vec<(SessionId, RequestId)>>,
    /// The size of the outcome it keeps, once ended with one.
    kept: std::sync::atomic::AtomicUsize,
    /// Whether its client is served over Streamable HTTP, where a request of the server's
    /// has a stream to go on.
    over_http: std::sync::atomic::AtomicBool,
    /// Told when a `tasks/result` begins to wait on it.
    result_waiting: tokio::sync::Notify,
}

/// How long a question of the run's server waits, over HTTP, for its client to ask for the
/// run's result (the client polls, sees `input_required` and calls `tasks/result`, as the
/// revision says) before it goes where any request of an answered call goes.
pub const QUESTION_WAIT: Duration = Duration::from_secs(5);

/// The context extension that marks a call as a run's: what its server asks the client
/// on the way is the run's (`upstream::handler`).
#[derive(Debug, Clone)]
pub struct ForRun(pub Arc<Run>);

/// A request of the run's server to its client, unanswered while this lives: the run reads
/// `input_required` until the last one is dropped.
#[derive(Debug)]
pub struct Asking(Arc<Run>);

impl Drop for Asking {
    fn drop(&mut self) {
        let mut asking = lock(&self.0.asking);
        *asking = asking.saturating_sub(1);
        if *asking == 0 {
            self.0.state.send_if_modified(|(status, at)| {
                if !matches!(status, Status::InputRequired) {
                    return false;
                }
                *status = Status::Working;
                *at = timestamp();
                true
            });
        }
    }
}

/// A client's `tasks/result` waiting on a run, noted while this lives.
#[derive(Debug)]
pub struct AwaitingResult {
    run: Arc<Run>,
    session: SessionId,
    request: RequestId,
}

impl Drop for AwaitingResult {
    fn drop(&mut self) {
        let mut results = lock(&self.run.results);
        if let Some(index) = results
            .iter()
            .position(|(session, request)| *session == self.session && *request == self.request)
        {
            results.remove(index);
        }
    }
}

impl Run {
    pub fn snapshot(&self) -> Snapshot {
        let (status, last_updated_at) = self.state.borrow().clone();
        Snapshot {
            id: self.id.clone(),
            status,
            created_at: self.created_at.clone(),
            last_updated_at,
            ttl_ms: u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// When the run expires: cancelled if still working, then forgotten.
    pub fn expires(&self) -> Instant {
        self.created + self.ttl
    }

    fn is_terminal(&self) -> bool {
        self.state.borrow().0.is_terminal()
    }

    /// The call ended with `outcome`; a run cancelled meanwhile stays cancelled. (A run
    /// ended through [`Runs::end`] has room made for what it keeps.)
    pub fn end(&self, outcome: Outcome) {
        let size = outcome.size();
        self.end_sized(outcome, size);
    }

    fn end_sized(&self, outcome: Outcome, size: usize) {
        let outcome = Arc::new(outcome);
        let ended = self.state.send_if_modified(|(status, at)| {
            if status.is_terminal() {
                return false;
            }
            *status = Status::Ended(outcome);
            *at = timestamp();
            true
        });
        if ended {
            self.kept.store(size, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The bytes its outcome keeps (none before it ended, or when it was cancelled).
    fn kept(&self) -> usize {
        self.kept.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Cancel the run and stop its call. `false` if it had already ended.
    pub fn cancel(&self) -> bool {
        let cancelled = self.state.send_if_modified(|(status, at)| {
            if status.is_terminal() {
                return false;
            }
            *status = Status::Cancelled;
            *at = timestamp();
            true
        });
        self.cancel.cancel();
        cancelled
    }

    /// Its server sent the client a request: the run reads `input_required` until the
    /// guard, and every other such guard, is dropped (the client answered, or the request
    /// was given up).
    pub fn asking(self: &Arc<Self>) -> Asking {
        let mut asking = lock(&self.asking);
        *asking += 1;
        self.state.send_if_modified(|(status, at)| {
            if !matches!(status, Status::Working) {
                return false;
            }
            *status = Status::InputRequired;
            *at = timestamp();
            true
        });
        drop(asking);
        Asking(self.clone())
    }

    /// Note the `tasks/result` request `request` of `session` as waiting on the run until
    /// the guard is dropped.
    pub fn awaiting_result(
        self: &Arc<Self>,
        session: SessionId,
        request: RequestId,
    ) -> AwaitingResult {
        lock(&self.results).push((session, request.clone()));
        self.result_waiting.notify_waiters();
        AwaitingResult {
            run: self.clone(),
            session,
            request,
        }
    }

    /// Its client is served over Streamable HTTP.
    pub fn by_http(&self) {
        self.over_http
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The stream a request of the run's server to `session` belongs on: that of a waiting
    /// `tasks/result`. Over HTTP, with none waiting yet, the client is given
    /// [`QUESTION_WAIT`] to ask (call it with the run reading `input_required`).
    pub async fn result_stream(&self, session: SessionId) -> Option<RequestId> {
        if !self.over_http.load(std::sync::atomic::Ordering::Relaxed) {
            return self.result_request(session);
        }
        let deadline = Instant::now() + QUESTION_WAIT;
        loop {
            let notified = self.result_waiting.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(waiting) = self.result_request(session) {
                return Some(waiting);
            }
            if self.is_terminal() || tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.result_request(session);
            }
        }
    }

    /// The newest `tasks/result` request of `session` waiting on the run: the stream a
    /// request of its server to that client belongs on.
    fn result_request(&self, session: SessionId) -> Option<RequestId> {
        lock(&self.results)
            .iter()
            .rev()
            .find(|(waiting, _)| *waiting == session)
            .map(|(_, request)| request.clone())
    }

    /// Told of each change of the run's state.
    pub fn changes(&self) -> watch::Receiver<(Status, String)> {
        self.state.subscribe()
    }

    /// The run's state once it is terminal (at once if it is).
    pub async fn ended(&self) -> Snapshot {
        let mut changes = self.state.subscribe();
        // The sender lives as long as `self`, so waiting cannot fail.
        let _ = changes.wait_for(|(status, _)| status.is_terminal()).await;
        self.snapshot()
    }
}

/// No run can start: the table, or the client's share of it, is full of runs still working.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// [`MAX_RUNS`] runs are working.
    Gateway,
    /// [`MAX_RUNS_PER_CLIENT`] of this client's runs are working.
    Client,
}

/// The runs the gateway keeps, by id.
#[derive(Debug)]
pub struct Runs {
    entries: Mutex<HashMap<String, Arc<Run>>>,
    /// The bytes of outcomes kept: one client's share, and the whole.
    kept_limits: (usize, usize),
}

impl Default for Runs {
    fn default() -> Runs {
        Runs {
            entries: Mutex::default(),
            kept_limits: (MAX_KEPT_BYTES_PER_CLIENT, MAX_KEPT_BYTES),
        }
    }
}

impl Runs {
    /// Start a run of a call to `listing`'s server, kept for `ttl_ms` as the client asked
    /// (within bounds).
    pub fn start(&self, listing: Listing, ttl_ms: Option<u64>) -> Result<Arc<Run>, Full> {
        let owner = listing.owner.clone();
        let now = Instant::now();
        let mut entries = lock(&self.entries);
        expire(&mut entries, now);
        let theirs = entries.values().filter(|run| run.owner == owner).count();
        if theirs >= MAX_RUNS_PER_CLIENT {
            evict(&mut entries, |run| run.owner == owner).ok_or(Full::Client)?;
        } else if entries.len() >= MAX_RUNS {
            evict(&mut entries, |_| true).ok_or(Full::Gateway)?;
        }
        let id = listing.listed(&uuid::Uuid::new_v4().simple().to_string());
        let ttl = ttl_ms
            .map_or(DEFAULT_TTL, Duration::from_millis)
            .clamp(MIN_TTL, MAX_RETENTION);
        let created_at = timestamp();
        let run = Arc::new(Run {
            id: id.clone(),
            server: listing.server.to_owned(),
            owner,
            created_at: created_at.clone(),
            created: now,
            ttl,
            state: watch::Sender::new((Status::Working, created_at)),
            cancel: CancellationToken::new(),
            over_http: Default::default(),
            result_waiting: tokio::sync::Notify::new(),
            asking: Mutex::default(),
            results: Mutex::default(),
            kept: Default::default(),
        });
        entries.insert(id, run.clone());
        Ok(run)
    }

    /// The run `id`, if `owner` started it and it has not expired.
    pub fn find(&self, id: &str, owner: &Owner) -> Option<Arc<Run>> {
        let mut entries = lock(&self.entries);
        expire(&mut entries, Instant::now());
        entries.get(id).filter(|run| &run.owner == owner).cloned()
    }

    /// `owner`'s runs, oldest first.
    pub fn list(&self, owner: &Owner) -> Vec<Arc<Run>> {
        let mut entries = lock(&self.entries);
        expire(&mut entries, Instant::now());
        let mut runs: Vec<Arc<Run>> = entries
            .values()
            .filter(|run| &run.owner == owner)
            .cloned()
            .collect();
        runs.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
        runs
    }
}

impl Runs {
    /// End `run` with its call's `outcome`, first making room for what it keeps: past
    /// [`MAX_KEPT_BYTES_PER_CLIENT`] of its client's, or [`MAX_KEPT_BYTES`] of all, the
    /// finished runs closest to expiry are forgotten, the client's own first.
    pub fn end(&self, run: &Arc<Run>, outcome: Outcome) {
        let size = outcome.size();
        // Room is made and the run ended under one lock: two runs ending at once each count
        // the other's outcome.
        let mut entries = lock(&self.entries);
        if run.is_terminal() {
            // Cancelled meanwhile: the outcome is not kept.
            return;
        }
        let owner = run.owner.clone();
        let (per_client, all) = self.kept_limits;
        make_room(&mut entries, run, size, per_client, |other| {
            other.owner == owner
        });
        make_room(&mut entries, run, size, all, |_| true);
        run.end_sized(outcome, size);
    }

    /// `owner` has gone for good (an anonymous client's session ended, and no one can ask
    /// for its runs again): cancel and forget them.
    pub fn forget(&self, owner: &Owner) {
        lock(&self.entries).retain(|_, run| {
            let theirs = &run.owner == owner;
            if theirs {
                run.cancel();
            }
            !theirs
        });
    }
}

/// Forget finished runs among `which` (other than `run`), closest to expiry first, until
/// what they keep and `size` more fit in `limit`, or none is left.
fn make_room(
    entries: &mut HashMap<String, Arc<Run>>,
    run: &Run,
    size: usize,
    limit: usize,
    which: impl Fn(&Run) -> bool,
) {
    loop {
        let kept: usize = entries
            .values()
            .filter(|other| which(other))
            .map(|other| other.kept())
            .sum();
        if kept + size <= limit {
            return;
        }
        let first = entries
            .values()
            .filter(|other| which(other) && other.id != run.id && other.kept() > 0)
            .min_by_key(|other| other.expires())
            .map(|other| other.id.clone());
        match first {
            Some(first) => {
                entries.remove(&first);
            }
            None => return,
        }
    }
}

/// Forget the finished run among `which` closest to expiry; `None` if none has finished.
fn evict(entries: &mut HashMap<String, Arc<Run>>, which: impl Fn(&Run) -> bool) -> Option<()> {
    let first = entries
        .values()
        .filter(|run| which(run) && run.is_terminal())
        .min_by_key(|run| run.expires())
        .map(|run| run.id.clone())?;
    entries.remove(&first);
    Some(())
}

/// Drop the runs whose ttl has passed, cancelling those still working.
fn expire(entries: &mut HashMap<String, Arc<Run>>, now: Instant) {
    entries.retain(|_, run| {
        let live = run.expires() > now;
        if !live {
            run.cancel();
        }
        live
    });
}

#[cfg(test)]
mod tests;
