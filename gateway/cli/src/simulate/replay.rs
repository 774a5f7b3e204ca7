//! `--replay FILE.jsonl`: a gateway's recorded decisions (`wardgate decisions export`) asked
//! again of a module, and what the differences would have meant.
//!
//! Two parts. Decision by decision: every recorded question, with all of its inputs, is
//! asked of the module and compared with the verdict the gateway gave (or, with
//! `--against`, with the other module's). Then downstream: for each server, the failures
//! the log saw (crashes, failed calls, outages) become a world [`Script`], played through
//! the recovery machine by the module and by the other side (the other module, or
//! [`Recorded`]: the log's own verdicts, in the order they were given), and the two runs
//! are summed up: retries, restarts, reconnect delays, when the server failed for good.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Mutex;

use serde::Deserialize;
use wardgate_policy::{
    Answer, Asked, Builtin, CrashReport, CrashVerdict, Description, FailedRequest, FailureKind,
    HealthVerdict, Operation, ProbeOutcome, ProbeSchedule, Question, ReconnectVerdict,
    RecoveryPolicy, RetryVerdict, ServerContext, TransportKind,
};

use super::{CallHints, Happening, Script, Timeline, TraceError, WorldEvent};

/// Larger logs are not what `decisions export` writes (it keeps 1024 decisions).
const MAX_BYTES: u64 = 64 << 20;
/// How long the replayed world runs past the last recorded decision.
const TAIL_MS: u64 = 60_000;

/// One line of an exported log, as far as a replay reads it.
#[derive(Deserialize)]
struct Line {
    id: u64,
    at: String,
    server: String,
    replay: Option<Recording>,
}

#[derive(Deserialize)]
struct Recording {
    transport: TransportKind,
    #[serde(default)]
    params: BTreeMap<String, String>,
    asked: Asked,
    answer: Answer,
}

/// One recorded decision.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Its number in the gateway's decision log.
    pub id: u64,
    /// Milliseconds after the log's first decision.
    pub at_ms: u64,
    pub server: ServerContext,
    pub asked: Asked,
    pub answer: Answer,
}

/// Reads an exported decision log; an error names the file, the line and the fix.
pub fn load_log(path: &Path) -> Result<Vec<Decision>, TraceError> {
    let error = |message: String| TraceError {
        path: path.to_path_buf(),
        message,
    };
    let size = std::fs::metadata(path)
        .map_err(|source| error(format!("cannot read it ({source}); pass the file `wardgate decisions export -o FILE` wrote")))?
        .len();
    if size > MAX_BYTES {
        return Err(error(format!("{size} bytes is over the 64 MiB limit")));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|source| error(format!("cannot read it ({source}); pass a UTF-8 file")))?;
    let mut decisions = Vec::new();
    let mut times = Vec::new();
    for (index, text) in text.lines().enumerate() {
        if text.trim().is_empty() {
            continue;
        }
        let number = index + 1;
        let line: Line = serde_json::from_str(text).map_err(|source| {
            error(format!(
                "line {number} is not a recorded decision ({source}); export one with `wardgate decisions export` or GET /decisions?format=jsonl"
            ))
        })?;
        let Some(recording) = line.replay else {
            return Err(error(format!(
                "line {number} (decision {}) has no \"replay\": it was exported by an older gateway; export the log again from this version",
                line.id
            )));
        };
        let at = humantime::parse_rfc3339(&line.at).map_err(|source| {
            error(format!(
                "line {number}: \"at\" {:?} is not an RFC 3339 time ({source})",
                line.at
            ))
        })?;
        times.push(at);
        decisions.push(Decision {
            id: line.id,
            at_ms: 0,
            server: ServerContext {
                name: line.server,
                transport: recording.transport,
                params: recording.params,
            },
            asked: recording.asked,
            answer: recording.answer,
        });
    }
    if decisions.is_empty() {
        return Err(error(
            "it holds no decisions; export a gateway's log with `wardgate decisions export -o FILE` once it has made some".into(),
        ));
    }
    // Milliseconds after the earliest, whatever order the lines came in.
    let start = times.iter().min().copied().unwrap_or(std::time::UNIX_EPOCH);
    for (decision, at) in decisions.iter_mut().zip(&times) {
        decision.at_ms = at
            .duration_since(start)
            .map(|since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
    }
    decisions.sort_by_key(|decision| (decision.at_ms, decision.id));
    Ok(decisions)
}

/// How often two sides agreed on one question.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Counts {
    pub agreed: u64,
    pub disagreed: u64,
}

/// One decision the two sides answered differently.
#[derive(Debug, Clone)]
pub struct Difference {
    pub decision: Decision,
    /// The other side's answer: the recorded one, or the `--against` module's.
    pub before: Answer,
    /// The module's.
    pub after: Answer,
}

/// Decision by decision: where the module would have decided differently.
#[derive(Debug, Clone, Default)]
pub struct Comparison {
    pub by_question: BTreeMap<&'static str, Counts>,
    /// The differences by (question, before's kind, after's kind) → how often; a pair of
    /// one kind differs in a delay.
    pub pairs: BTreeMap<(&'static str, String, String), u64>,
    pub differences: Vec<Difference>,
}

/// Asks `module` every recorded question, and `against` too when given (else the recorded
/// answer stands for the other side), with the recorded params and `overrides` over them.
pub fn compare(
    decisions: &[Decision],
    module: &dyn RecoveryPolicy,
    against: Option<&dyn RecoveryPolicy>,
    overrides: &BTreeMap<String, String>,
) -> Comparison {
    let mut comparison = Comparison::default();
    for decision in decisions {
        let question = decision.asked.question().wit_name();
        let mut server = decision.server.clone();
        server.params.extend(overrides.clone());
        let after = decision.asked.ask(module, &server);
        let before = match against {
            Some(other) => decision.asked.ask(other, &server),
            None => decision.answer,
        };
        let counts = comparison.by_question.entry(question).or_default();
        if before == after {
            counts.agreed += 1;
            continue;
        }
        counts.disagreed += 1;
        *comparison
            .pairs
            .entry((question, before.kind(), after.kind()))
            .or_default() += 1;
        comparison.differences.push(Difference {
            decision: decision.clone(),
            before,
            after,
        });
    }
    comparison
}

/// The servers of the log, each with its decisions in time order.
pub fn by_server(decisions: &[Decision]) -> BTreeMap<String, Vec<Decision>> {
    let mut servers: BTreeMap<String, Vec<Decision>> = BTreeMap::new();
    for decision in decisions {
        servers
            .entry(decision.server.name.clone())
            .or_default()
            .push(decision.clone());
    }
    servers
}

/// The world one server's decisions saw, as a script: each crash, each call whose first
/// attempt failed, and each outage (from its first reconnect decision until the reconnect
/// the log last scheduled, or the end when the gateway stopped trying).
pub fn world(server: &str, decisions: &[Decision], path: &Path) -> Script {
    let mut events = Vec::new();
    let mut outage: Option<(u64, FailureKind)> = None;
    // The kind of the last failure that was not a call's, for an outage's `down`.
    let mut last_kind = FailureKind::ConnectRefused;
    let mut last_ms = 0;
    for (index, decision) in decisions.iter().enumerate() {
        last_ms = last_ms.max(decision.at_ms);
        match (&decision.asked, decision.answer) {
            (Asked::Crash { crash }, _) => events.push(Happening {
                at_ms: decision.at_ms,
                event: WorldEvent::Crash { exit: crash.exit },
            }),
            (Asked::Classify { failure }, _)
                if failure.operation == Operation::Call && failure.attempt == 1 =>
            {
                events.push(Happening {
                    at_ms: decision.at_ms,
                    event: WorldEvent::Call {
                        hints: CallHints {
                            idempotent: failure.idempotent,
                            read_only: failure.read_only,
                        },
                        fails_with: Some((failure.kind.clone(), failure.may_have_reached_server)),
                    },
                });
            }
            // A call's later attempts follow from its first.
            (Asked::Classify { failure }, _) if failure.operation == Operation::Call => {}
            (Asked::Classify { failure }, _) => last_kind = failure.kind.clone(),
            (Asked::ReconnectDelay { attempt, .. }, verdict) => {
                if *attempt == 1 || outage.is_none() {
                    if let Some((since, kind)) = outage.take() {
                        events.push(down(since, kind));
                    }
                    outage = Some((decision.at_ms, last_kind.clone()));
                }
                if let Answer::Reconnect(ReconnectVerdict::RetryAfter { delay_ms }) = verdict {
                    // Up again when this reconnect is due, unless a later decision says
                    // the outage went on.
                    if let Some((since, kind)) = &outage {
                        let up_at = decision.at_ms.saturating_add(delay_ms);
                        // In time order: only the decisions up to a second past the reconnect.
                        let soon = up_at.saturating_add(1_000);
                        if decisions[index + 1..]
                            .iter()
                            .take_while(|later| later.at_ms <= soon)
                            .any(|later| {
                                later.at_ms > decision.at_ms
                                    && matches!(later.asked, Asked::ReconnectDelay { .. })
                            })
                        {
                            continue;
                        }
                        events.push(down(*since, kind.clone()));
                        events.push(Happening {
                            at_ms: up_at,
                            event: WorldEvent::Up,
                        });
                        last_ms = last_ms.max(up_at);
                        outage = None;
                    }
                }
            }
            _ => {}
        }
    }
    if let Some((since, kind)) = outage {
        events.push(down(since, kind));
    }
    events.sort_by_key(|happening| happening.at_ms);
    let transport = decisions
        .first()
        .map_or(TransportKind::Stdio, |decision| decision.server.transport);
    let count = |what: fn(&WorldEvent) -> bool| events.iter().filter(|h| what(&h.event)).count();
    let summary = format!(
        "the failures {} recorded for {server}: {} crashes, {} failed calls, {} outages",
        path.display(),
        count(|event| matches!(event, WorldEvent::Crash { .. })),
        count(|event| matches!(event, WorldEvent::Call { .. })),
        count(|event| matches!(event, WorldEvent::Down { .. })),
    );
    Script {
        name: format!("replay of {server}"),
        summary,
        transport,
        events,
        end_ms: last_ms.saturating_add(TAIL_MS),
    }
}

fn down(at_ms: u64, kind: FailureKind) -> Happening {
    Happening {
        at_ms,
        event: WorldEvent::Down { kind },
    }
}

/// What a run of the recovery machine did, summed up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    pub retries: usize,
    pub calls_failed: usize,
    pub restarts: usize,
    pub reconnects: usize,
    pub reconnect_wait_ms: u64,
    /// When the server became permanently failed, if it did.
    pub failed_at_ms: Option<u64>,
}

pub fn outcome(timeline: &Timeline) -> Outcome {
    let mut outcome = Outcome::default();
    for entry in &timeline.entries {
        let asked = |question| entry.asked.contains(&question);
        if asked(Question::Classify) && entry.decision.starts_with("retry in") {
            outcome.retries += 1;
        }
        if asked(Question::Classify) && entry.decision.contains("give up") {
            outcome.calls_failed += 1;
        }
        if asked(Question::Crash) && entry.decision.starts_with("restart") {
            outcome.restarts += 1;
        }
        if asked(Question::ReconnectDelay) {
            if let Some(delay) = entry.delay_ms {
                outcome.reconnects += 1;
                outcome.reconnect_wait_ms += delay;
            }
        }
        if outcome.failed_at_ms.is_none() && entry.status == "permanently_failed" {
            outcome.failed_at_ms = Some(entry.at_ms);
        }
    }
    outcome
}

/// The recorded side of a replay without `--against`: the log's verdicts for one server,
/// given in the order they were recorded, question by question; past the last recorded
/// verdict of a question, that verdict again; for a question never recorded, the built-in
/// policy's answer.
pub struct Recorded {
    answers: Mutex<BTreeMap<Question, Queued>>,
    builtin: Builtin,
}

/// One question's recorded verdicts not given yet, and the last one given.
type Queued = (VecDeque<Answer>, Option<Answer>);

impl Recorded {
    pub fn new(decisions: &[Decision]) -> Recorded {
        let mut answers: BTreeMap<Question, (VecDeque<Answer>, Option<Answer>)> = BTreeMap::new();
        for decision in decisions {
            answers
                .entry(decision.asked.question())
                .or_default()
                .0
                .push_back(decision.answer);
        }
        Recorded {
            answers: Mutex::new(answers),
            builtin: Builtin::default(),
        }
    }

    fn next(&self, question: Question) -> Option<Answer> {
        let mut answers = wardgate_policy::lock::lock(&self.answers);
        let (queue, last) = answers.get_mut(&question)?;
        if let Some(answer) = queue.pop_front() {
            *last = Some(answer);
        }
        *last
    }
}

impl RecoveryPolicy for Recorded {
    fn describe(&self) -> Description {
        Description {
            name: "recorded".into(),
            version: String::new(),
            intent: "the verdicts the gateway gave, in the order it gave them".into(),
        }
    }

    fn classify(&self, server: &ServerContext, failure: &FailedRequest) -> RetryVerdict {
        match self.next(Question::Classify) {
            Some(Answer::Retry(verdict)) => verdict,
            _ => self.builtin.classify(server, failure),
        }
    }

    fn reconnect_delay(
        &self,
        server: &ServerContext,
        attempt: u32,
        jitter_seed: u64,
    ) -> ReconnectVerdict {
        match self.next(Question::ReconnectDelay) {
            Some(Answer::Reconnect(verdict)) => verdict,
            _ => self.builtin.reconnect_delay(server, attempt, jitter_seed),
        }
    }

    fn health(&self, server: &ServerContext, probe: &ProbeOutcome) -> HealthVerdict {
        match self.next(Question::Health) {
            Some(Answer::Health(verdict)) => verdict,
            _ => self.builtin.health(server, probe),
        }
    }

    fn probe_schedule(&self, server: &ServerContext, jitter_seed: u64) -> ProbeSchedule {
        match self.next(Question::ProbeSchedule) {
            Some(Answer::Schedule(schedule)) => schedule,
            _ => self.builtin.probe_schedule(server, jitter_seed),
        }
    }

    fn crash(&self, server: &ServerContext, crash: &CrashReport) -> CrashVerdict {
        match self.next(Question::Crash) {
            Some(Answer::Crash(verdict)) => verdict,
            _ => self.builtin.crash(server, crash),
        }
    }
}
