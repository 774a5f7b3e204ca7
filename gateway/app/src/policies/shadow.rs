//! Shadow modules: a candidate policy that is asked every question the live policy is
//! asked, with the same inputs, after the live answer is given, and whose answers change
//! nothing. Agreements, disagreements and faults are counted by question and verdict pair;
//! each verdict is kept in a feed beside the decision log, by the decision's number, for
//! the status page and `wardgate policy shadow-report`.
//!
//! The live path only copies the question and pushes it on a bounded queue ([`QUEUE`]),
//! under a lock it only tries (taken, the question is dropped), and wakes no one: one thread of its own drains the
//! queue every [`POLL`], at the lowest scheduling class there is (`SCHED_IDLE`: it runs
//! on a core nothing else wants), and asks the shadows on a WebAssembly runtime of their
//! own (its own engine, deadline and memory cap). So a shadow that loops, traps or is slow
//! costs the deciding thread nothing; a full queue drops the question and counts it.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use arc_swap::ArcSwapOption;
use serde::Serialize;
use serde_json::{Map, Value};
use wardgate_policy::answer::AnsweredBy;
use wardgate_policy::{Answer, Asked, Question, ServerContext};
use wardgate_wasm::{Runtime, RuntimeConfig, WasmPolicy};

use super::decisions::{inputs, Replay, Verdict};
use crate::feed::{Feed, Item};

/// Questions waiting for the shadow thread; more are dropped (and counted).
pub const QUEUE: usize = 256;
/// How often the shadow thread looks at the queue while a shadow is bound (it sleeps
/// until one is bound otherwise).
pub const POLL: std::time::Duration = std::time::Duration::from_millis(50);
/// A shadow's deadline for one decision, on its own runtime. Wall time, and the shadow
/// thread runs at idle priority, so any busy thread pre-empts it mid-decision: the
/// deadline is a runaway bound, generous enough that a busy host does not turn a sound
/// shadow's slow moment into a fault.
pub const DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);
/// A shadow instance's memory cap.
pub const MEMORY_LIMIT_BYTES: usize = 64 << 20;
/// Disagreements kept whole in a report, the first ones since the shadow was bound.
pub const EXAMPLES: usize = 20;
/// Shadow verdicts kept for the status page, as many as decisions.
pub const KEPT: usize = super::decisions::KEPT;

/// One question for the shadow thread.
struct Job {
    shadow: Arc<Shadow>,
    decision: u64,
    server: ServerContext,
    asked: Asked,
    live: Answer,
}

/// The shadow modules of every policy, the thread that asks them, and their verdicts.
pub struct Shadows {
    slots: Mutex<BTreeMap<String, Arc<ShadowSlot>>>,
    queue: Arc<Queue>,
    runtime: OnceLock<Result<Runtime, String>>,
    seen: Arc<Feed<ShadowSeen>>,
    /// The shadow thread, started when the first shadow is bound (`None`: it could not be).
    thread: OnceLock<Option<std::thread::Thread>>,
}

/// Questions for the shadow thread, at most [`QUEUE`].
#[derive(Default)]
struct Queue {
    jobs: Mutex<VecDeque<Job>>,
}

/// Where one policy's shadow is, read by each of its decisions.
pub struct ShadowSlot {
    current: ArcSwapOption<Shadow>,
    queue: Arc<Queue>,
}

/// A module bound as a policy's shadow, with its tally since it was bound.
pub struct Shadow {
    policy: String,
    path: PathBuf,
    module: WasmPolicy,
    since: String,
    tally: Mutex<Tally>,
    /// The policy's parameters it was bound with (a server's own override them).
    params: BTreeMap<String, String>,
    /// Questions dropped because the queue was full, by [`Question::index`].
    dropped: [AtomicU64; Question::ALL.len()],
}

#[derive(Default)]
struct Tally {
    by_question: BTreeMap<&'static str, Counts>,
    /// (question, live kind, shadow kind, whether the answers were equal) → how often.
    pairs: BTreeMap<(&'static str, String, String, bool), u64>,
    examples: Vec<Example>,
}

/// How often a shadow agreed, disagreed and faulted.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Counts {
    pub agreed: u64,
    pub disagreed: u64,
    /// The shadow faulted (its answer is not its own, so it is not compared).
    pub faults: u64,
}

/// A disagreement, whole.
#[derive(Debug, Clone, Serialize)]
pub struct Example {
    pub decision: u64,
    pub at: String,
    pub server: String,
    pub question: &'static str,
    pub inputs: Map<String, Value>,
    pub live: String,
    pub shadow: String,
    /// The question and both answers as data (texts that may hold secrets masked).
    pub replay: Replay,
    pub shadow_answer: Answer,
}

/// One verdict pair and how often it was seen.
#[derive(Debug, Clone, Serialize)]
pub struct Pair {
    pub question: &'static str,
    pub live: String,
    pub shadow: String,
    /// The answers were equal; a pair of one kind that did not agree differs in a delay.
    pub agreed: bool,
    pub count: u64,
}

/// `wardgate policy shadow-report NAME`: what a policy's shadow would have decided.
#[derive(Debug, Clone, Serialize)]
pub struct ShadowReport {
    pub policy: String,
    pub path: String,
    /// The shadow module's name, version and content hash prefix.
    pub module: String,
    pub sha256: String,
    pub since: String,
    #[serde(flatten)]
    pub counts: Counts,
    /// Questions the shadow was not asked: the queue was full.
    pub dropped: u64,
    pub by_question: BTreeMap<&'static str, Counts>,
    /// Every verdict pair, most frequent first.
    pub pairs: Vec<Pair>,
    pub examples: Vec<Example>,
}

/// A shadow's verdict on one decision, as the status page shows it beside the live one.
#[derive(Debug, Clone, Serialize)]
pub struct ShadowSeen {
    /// The decision's number in the decision log.
    pub decision: u64,
    pub server: String,
    pub policy: String,
    pub module: String,
    /// The shadow's verdict in words.
    pub summary: String,
    pub agrees: bool,
    pub fault: Option<String>,
}

impl Item for ShadowSeen {
    fn kind(&self) -> String {
        "shadow".to_owned()
    }

    fn group(&self) -> Option<&str> {
        Some(&self.server)
    }
}

impl Shadows {
    /// No shadows yet (the thread that asks them starts with the first).
    pub fn new() -> Arc<Shadows> {
        Arc::new(Shadows {
            slots: Mutex::new(BTreeMap::new()),
            queue: Arc::default(),
            runtime: OnceLock::new(),
            seen: Arc::new(Feed::new("shadows", KEPT)),
            thread: OnceLock::new(),
        })
    }

    /// Starts the shadow thread once, and wakes it. If it cannot start, questions wait in
    /// the queue, and past it are dropped and counted.
    fn wake_thread(self: &Arc<Self>) {
        let thread = self.thread.get_or_init(|| {
            let queue = self.queue.clone();
            let seen = self.seen.clone();
            let shadows = Arc::downgrade(self);
            let started = std::thread::Builder::new()
                .name("wardgate-shadow".to_owned())
                .spawn(move || ask_shadows(&queue, &seen, &shadows));
            match started {
                Ok(handle) => Some(handle.thread().clone()),
                Err(error) => {
                    tracing::warn!("could not start the thread that asks shadow policies: {error}");
                    None
                }
            }
        });
        if let Some(thread) = thread {
            thread.unpark();
        }
    }

    /// Whether any policy has a shadow now.
    fn any_bound(&self) -> bool {
        wardgate_engine::lock::lock(&self.slots)
            .values()
            .any(|slot| slot.current.load().is_some())
    }

    /// The slot of policy `policy`'s shadow, made on first use.
    pub fn slot(&self, policy: &str) -> Arc<ShadowSlot> {
        wardgate_engine::lock::lock(&self.slots)
            .entry(policy.to_owned())
            .or_insert_with(|| {
                Arc::new(ShadowSlot {
                    current: ArcSwapOption::empty(),
                    queue: self.queue.clone(),
                })
            })
            .clone()
    }

    /// Loads the module at `path` as policy `policy`'s shadow, with the policy's `params`,
    /// in place of any shadow it had (whose tally goes with it). Blocking: compiles.
    pub fn bind(
        self: &Arc<Self>,
        policy: &str,
        path: &Path,
        params: BTreeMap<String, String>,
    ) -> Result<Arc<Shadow>, String> {
        let runtime = self
            .runtime
            .get_or_init(|| {
                Runtime::new(RuntimeConfig {
                    deadline: DEADLINE,
                    memory_limit_bytes: MEMORY_LIMIT_BYTES,
                    pool_size: 1,
                    ..RuntimeConfig::default()
                })
                .map_err(|error| error.to_string())
            })
            .clone()?;
        let module = runtime
            .load(path, params.clone())
            .map_err(|error| format!("shadow module {} rejected: {error}", path.display()))?;
        let shadow = Arc::new(Shadow {
            policy: policy.to_owned(),
            path: path.to_owned(),
            module,
            since: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            tally: Mutex::new(Tally::default()),
            params,
            dropped: Default::default(),
        });
        self.slot(policy).current.store(Some(shadow.clone()));
        self.wake_thread();
        tracing::info!(
            policy,
            shadow = %path.display(),
            version = shadow.module.module_version(),
            "shadow policy bound: it is asked every question beside the live policy and decides nothing"
        );
        Ok(shadow)
    }

    /// Binds again a shadow [`Shadows::clear`] unbound, with its tally.
    pub fn rebind(self: &Arc<Self>, shadow: Arc<Shadow>) {
        self.slot(&shadow.policy).current.store(Some(shadow));
        self.wake_thread();
    }

    /// Unbinds policy `policy`'s shadow; the one it had, if any.
    pub fn clear(&self, policy: &str) -> Option<Arc<Shadow>> {
        let slot = wardgate_engine::lock::lock(&self.slots)
            .get(policy)
            .cloned()?;
        slot.current.swap(None)
    }

    /// Policy `policy`'s shadow, if it has one.
    pub fn current(&self, policy: &str) -> Option<Arc<Shadow>> {
        let slot = wardgate_engine::lock::lock(&self.slots)
            .get(policy)
            .cloned()?;
        slot.current.load_full()
    }

    /// Every bound shadow, by policy.
    pub fn all(&self) -> Vec<Arc<Shadow>> {
        wardgate_engine::lock::lock(&self.slots)
            .values()
            .filter_map(|slot| slot.current.load_full())
            .collect()
    }

    /// Every shadow verdict kept, for the status page.
    pub fn seen(&self) -> &Feed<ShadowSeen> {
        &self.seen
    }
}

impl ShadowSlot {
    /// After the live policy answered decision `decision`: asks the shadow, if there is
    /// one, the same question later, on the shadow thread. Never waits: when the queue is
    /// full or its lock taken, the question is dropped and counted.
    pub fn after(&self, decision: u64, server: &ServerContext, asked: Asked, live: Answer) {
        let Some(shadow) = self.current.load_full() else {
            return;
        };
        let job = Job {
            shadow,
            decision,
            server: server.clone(),
            asked,
            live,
        };
        // Never waits: the queue's other user is the idle-priority thread, which a busy
        // host may pre-empt while it holds the lock (it only swaps the list out).
        let jobs = match self.queue.jobs.try_lock() {
            Ok(jobs) => Some(jobs),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        match jobs {
            Some(mut jobs) if jobs.len() < QUEUE => jobs.push_back(job),
            _ => {
                job.shadow.dropped[job.asked.question().index()].fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The shadow thread: every [`POLL`] while a shadow is bound, takes the questions queued
/// and asks each of its shadow, and records the verdict; parked while none is. A panic
/// while asking (a bug, not a module's fault, which the host answers for) is counted as a
/// fault and logged, and the thread goes on. It ends with the gateway's `Shadows`.
fn ask_shadows(queue: &Queue, seen: &Feed<ShadowSeen>, shadows: &std::sync::Weak<Shadows>) {
    lowest_priority();
    loop {
        let taken = std::mem::take(&mut *wardgate_engine::lock::lock(&queue.jobs));
        for job in taken {
            ask(job, seen);
        }
        match shadows.upgrade() {
            None => return,
            Some(shadows) if shadows.any_bound() => {
                drop(shadows);
                std::thread::sleep(POLL);
            }
            Some(shadows) => {
                drop(shadows);
                std::thread::park_timeout(std::time::Duration::from_secs(60));
            }
        }
    }
}

/// This thread runs only when a core is otherwise idle (Linux's `SCHED_IDLE`); elsewhere,
/// or if refused, at normal priority.
fn lowest_priority() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` outlives the call; pid 0 is the calling thread.
        let result = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
        if result != 0 {
            tracing::debug!(
                "the shadow thread keeps its normal priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// Asks one question of its shadow and records the verdict.
fn ask(job: Job, seen: &Feed<ShadowSeen>) {
    let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wardgate_policy::answer::observe(|| job.asked.ask(&job.shadow.module, &job.server))
    }));
    let (answer, fault) = match asked {
        Ok((answer, AnsweredBy::Fallback { fault, .. })) => (answer, Some(fault)),
        Ok((answer, AnsweredBy::Module { .. } | AnsweredBy::Builtin)) => (answer, None),
        Err(_) => {
            tracing::warn!(
                policy = %job.shadow.policy,
                "asking the shadow module panicked; counted as a fault"
            );
            (job.live, Some("the host panicked while asking".to_owned()))
        }
    };
    let fault = fault.map(|fault| wardgate_engine::secrets::mask(&fault).into_owned());
    let agrees = fault.is_none() && answer == job.live;
    let (_, summary) = answer.recorded();
    seen.record(ShadowSeen {
        decision: job.decision,
        server: job.server.name.clone(),
        policy: job.shadow.policy.clone(),
        module: job.shadow.module.module_version().to_owned(),
        // A verdict in words is numbers and fixed words: nothing to mask.
        summary: match &fault {
            Some(_) => "faulted".to_owned(),
            None => summary,
        },
        agrees,
        fault: fault.clone(),
    });
    job.shadow.count(&job, answer, fault.is_some());
}

impl Shadow {
    pub fn policy(&self) -> &str {
        &self.policy
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The module's name, version and content hash prefix.
    pub fn version(&self) -> &str {
        self.module.module_version()
    }

    /// The SHA-256 of the module's bytes.
    pub fn sha256(&self) -> &str {
        self.module.module_sha256()
    }

    fn count(&self, job: &Job, answer: Answer, faulted: bool) {
        let question = job.asked.question().wit_name();
        // Built before the tally's lock, which readers on the async threads take.
        let example = (!faulted && answer != job.live).then(|| {
            let replay = Replay::new(&job.server, &self.params, &job.asked, job.live);
            let mask = |text: String| wardgate_engine::secrets::mask(&text).into_owned();
            Example {
                decision: job.decision,
                at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
                server: job.server.name.clone(),
                question,
                inputs: inputs(&replay.asked),
                live: mask(job.live.recorded().1),
                shadow: mask(answer.recorded().1),
                replay,
                shadow_answer: answer,
            }
        });
        let (live_kind, shadow_kind) = (job.live.kind(), answer.kind());
        let mut tally = wardgate_engine::lock::lock(&self.tally);
        let counts = tally.by_question.entry(question).or_default();
        if faulted {
            counts.faults += 1;
            return;
        }
        if answer == job.live {
            counts.agreed += 1;
        } else {
            counts.disagreed += 1;
        }
        *tally
            .pairs
            .entry((question, live_kind, shadow_kind, answer == job.live))
            .or_default() += 1;
        if let Some(example) = example {
            if tally.examples.len() < EXAMPLES {
                tally.examples.push(example);
            }
        }
    }

    /// What it would have decided so far.
    pub fn report(&self) -> ShadowReport {
        let tally = wardgate_engine::lock::lock(&self.tally);
        let mut counts = Counts::default();
        for question in tally.by_question.values() {
            counts.agreed += question.agreed;
            counts.disagreed += question.disagreed;
            counts.faults += question.faults;
        }
        let mut pairs: Vec<Pair> = tally
            .pairs
            .iter()
            .map(|((question, live, shadow, agreed), count)| Pair {
                question,
                live: live.clone(),
                shadow: shadow.clone(),
                agreed: *agreed,
                count: *count,
            })
            .collect();
        pairs.sort_by_key(|pair| std::cmp::Reverse(pair.count));
        ShadowReport {
            policy: self.policy.clone(),
            path: self.path.display().to_string(),
            module: self.module.module_version().to_owned(),
            sha256: self.module.module_sha256().to_owned(),
            since: self.since.clone(),
            counts,
            dropped: self
                .dropped
                .iter()
                .map(|count| count.load(Ordering::Relaxed))
                .sum(),
            by_question: tally.by_question.clone(),
            pairs,
            examples: tally.examples.clone(),
        }
    }

    /// Counts by question, for `/metrics`: each question's counts and drops.
    pub fn counts(&self) -> Vec<(Question, Counts, u64)> {
        let tally = wardgate_engine::lock::lock(&self.tally);
        Question::ALL
            .iter()
            .map(|question| {
                let counts = tally
                    .by_question
                    .get(question.wit_name())
                    .copied()
                    .unwrap_or_default();
                let dropped = self.dropped[question.index()].load(Ordering::Relaxed);
                (*question, counts, dropped)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use wardgate_policy::{Builtin, TransportKind};

    use super::*;

    #[test]
    fn every_question_handed_over_is_answered_alike_or_counted_as_dropped() {
        let shadows = Shadows::new();
        let path = Path::new(wardgate_wasm::bundled::DEFAULT);
        let shadow = shadows.bind("p", path, BTreeMap::new()).unwrap();
        let slot = shadows.slot("p");
        let server = ServerContext::new("s", TransportKind::Stdio);
        // The bundled default module decides exactly as the built-in policy, jitter included.
        let live = Builtin::default();
        const ASKED: u64 = 2_000;
        for n in 1..=ASKED {
            let asked = Asked::ReconnectDelay {
                attempt: u32::try_from(n % 8 + 1).unwrap(),
                jitter_seed: n.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            };
            let answer = asked.ask(&live, &server);
            slot.after(n, &server, asked, answer);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let report = loop {
            let report = shadow.report();
            let counts = report.counts;
            if counts.agreed + counts.disagreed + counts.faults + report.dropped == ASKED {
                break report;
            }
            assert!(Instant::now() < deadline, "{report:?}");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(report.counts.disagreed, 0, "{report:?}");
        assert_eq!(report.counts.faults, 0, "{report:?}");
        assert!(report.counts.agreed >= 1, "{report:?}");
        // Each answer is kept for the page, by the decision it was asked about.
        let seen = shadows.seen().since(0);
        assert_eq!(seen.len() as u64, report.counts.agreed.min(KEPT as u64));
        assert!(seen.iter().all(|seen| seen.item.agrees));
        // Unbound, the slot hands nothing over.
        assert!(shadows.clear("p").is_some());
        slot.after(
            ASKED + 1,
            &server,
            Asked::ProbeSchedule { jitter_seed: 1 },
            Answer::Health(wardgate_policy::HealthVerdict::Healthy),
        );
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(shadows.seen().since(0).len(), seen.len());
    }
}
