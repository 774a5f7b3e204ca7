//! The model against `Builtin` and a runaway policy: statuses, attempt numbers, bounds.

use wardgate_policy::{
    Builtin, CrashReport, CrashVerdict, Description, FailedRequest, HealthVerdict, ProbeOutcome,
    ProbeSchedule, ReconnectVerdict, RecoveryPolicy, RetryVerdict, ServerContext, TransportKind,
};

use crate::simulate::{builtin_scenario, run, CallHints, Happening, Script, WorldEvent};

fn server(transport: TransportKind) -> ServerContext {
    ServerContext::new("simulated", transport)
}

fn script(transport: TransportKind, events: Vec<(u64, WorldEvent)>, end_ms: u64) -> Script {
    Script {
        name: "test".into(),
        summary: String::new(),
        transport,
        events: events
            .into_iter()
            .map(|(at_ms, event)| Happening { at_ms, event })
            .collect(),
        end_ms,
    }
}

fn call() -> WorldEvent {
    WorldEvent::Call {
        hints: CallHints::default(),
        fails_with: None,
    }
}

#[test]
fn builtin_gives_up_at_the_third_crash_of_the_loop() {
    let script = builtin_scenario("crash-loop").unwrap();
    let timeline = run(&Builtin::default(), &server(script.transport), &script, 0);
    let decisions: Vec<(u64, &str)> = timeline
        .entries
        .iter()
        .filter(|entry| entry.event.starts_with("process"))
        .map(|entry| (entry.at_ms, entry.decision.as_str()))
        .collect();
    assert_eq!(
        decisions,
        [
            (20_000, "restart now"),
            (40_000, "restart now"),
            (60_000, "give up → permanently_failed")
        ]
    );
    assert_eq!(
        timeline.entries.last().unwrap().status,
        "permanently_failed"
    );
}

#[test]
fn builtin_spaces_failed_starts_2_then_4_seconds_and_gives_up_at_the_third() {
    let script = builtin_scenario("failed-start").unwrap();
    let timeline = run(&Builtin::default(), &server(script.transport), &script, 0);
    let decisions: Vec<(u64, &str)> = timeline
        .entries
        .iter()
        .filter(|entry| entry.decision.contains("restart") || entry.decision.contains("give up"))
        .map(|entry| (entry.at_ms, entry.decision.as_str()))
        .collect();
    assert_eq!(
        decisions,
        [
            (0, "restart in 2 s"),
            (2_000, "restart in 4 s"),
            (6_000, "give up → permanently_failed")
        ],
        "{timeline:#?}"
    );
    // The operator's reconnect at 60 s, after the fix, brings it online.
    assert_eq!(timeline.entries.last().unwrap().status, "online");
}

#[test]
fn a_call_rejected_with_401_parks_the_server_and_later_calls_fail_at_once() {
    let events = vec![
        (1_000, WorldEvent::AuthRejected { status: 401 }),
        (2_000, call()),
        (3_000, call()),
    ];
    let script = script(TransportKind::StreamableHttp, events, 10_000);
    let timeline = run(&Builtin::default(), &server(script.transport), &script, 0);
    let rejected = timeline
        .entries
        .iter()
        .find(|entry| entry.event == "tool call #1 (attempt 1): HTTP 401 Unauthorized")
        .unwrap();
    assert_eq!(rejected.decision, "give up → requires_reauth");
    let last = timeline.entries.last().unwrap();
    assert!(last.event.contains("#2 fails at once"), "{last:?}");
    assert_eq!(last.status, "requires_reauth");
}

#[test]
fn a_call_retries_through_failed_reconnections_within_its_budget_then_fails() {
    let refused = WorldEvent::Down {
        kind: wardgate_policy::FailureKind::ConnectRefused,
    };
    let events = vec![(1_000, refused), (2_000, call()), (20_000, WorldEvent::Up)];
    let script = script(TransportKind::StreamableHttp, events, 120_000);
    let timeline = run(&Builtin::default(), &server(script.transport), &script, 0);
    let attempts: Vec<(u64, &str)> = timeline
        .entries
        .iter()
        .filter(|entry| entry.event.starts_with("tool call #1 (attempt"))
        .map(|entry| (entry.at_ms, entry.decision.as_str()))
        .collect();
    // The builtin's promise: 3 attempts, 500 ms then 1 s apart, through failed reconnections.
    assert_eq!(
        attempts,
        [
            (2_000, "retry in 500 ms"),
            (2_500, "retry in 1 s"),
            (3_500, "give up → offline")
        ]
    );
}

#[test]
fn an_outage_shorter_than_the_retry_budget_is_invisible_to_a_call() {
    let refused = WorldEvent::Down {
        kind: wardgate_policy::FailureKind::ConnectRefused,
    };
    let events = vec![(1_000, refused), (2_000, call()), (3_000, WorldEvent::Up)];
    let script = script(TransportKind::StreamableHttp, events, 60_000);
    let timeline = run(&Builtin::default(), &server(script.transport), &script, 0);
    assert!(
        timeline
            .entries
            .iter()
            .any(|entry| entry.event.contains("tool call #1 ok") && entry.at_ms == 3_500),
        "{:#?}",
        timeline.entries
    );
    assert!(!timeline
        .entries
        .iter()
        .any(|entry| entry.decision.contains("give up")));
}

#[test]
fn calls_during_an_outage_do_not_advance_the_backoff() {
    let refused = WorldEvent::Down {
        kind: wardgate_policy::FailureKind::ConnectRefused,
    };
    let mut events = vec![(1_000, refused)];
    events.extend((2..60).map(|n| (n * 1_000, call())));
    let script = script(TransportKind::StreamableHttp, events, 60_000);
    let timeline = run(&Builtin::default(), &server(script.transport), &script, 0);
    let attempts: Vec<&str> = timeline
        .entries
        .iter()
        .map(|entry| entry.status.as_str())
        .filter(|status| status.starts_with("reconnecting #"))
        .collect();
    let highest = attempts
        .iter()
        .filter_map(|status| status["reconnecting #".len()..].parse::<u32>().ok())
        .max()
        .unwrap();
    // Scheduled attempts only (about 1, 2, 4, 8, 16 s apart within a minute), never one per
    // call, and never held back by the calls' own attempts either.
    assert!((4..=7).contains(&highest), "{highest}: {attempts:?}");
}

/// Reconnects at once, forever: the kind of module the step limit exists for.
struct Eager;

impl RecoveryPolicy for Eager {
    fn describe(&self) -> Description {
        Builtin::default().describe()
    }
    fn classify(&self, server: &ServerContext, failure: &FailedRequest) -> RetryVerdict {
        Builtin::default().classify(server, failure)
    }
    fn reconnect_delay(&self, _: &ServerContext, _: u32, _: u64) -> ReconnectVerdict {
        ReconnectVerdict::RetryAfter { delay_ms: 0 }
    }
    fn health(&self, server: &ServerContext, probe: &ProbeOutcome) -> HealthVerdict {
        Builtin::default().health(server, probe)
    }
    fn probe_schedule(&self, server: &ServerContext, seed: u64) -> ProbeSchedule {
        Builtin::default().probe_schedule(server, seed)
    }
    fn crash(&self, _: &ServerContext, _: &CrashReport) -> CrashVerdict {
        CrashVerdict::RestartAfter { delay_ms: 0 }
    }
}

#[test]
fn a_policy_that_never_waits_is_cut_short_instead_of_hanging() {
    let refused = WorldEvent::Down {
        kind: wardgate_policy::FailureKind::ConnectRefused,
    };
    let events = vec![(0, refused)];
    let script = script(TransportKind::StreamableHttp, events, 60_000);
    let timeline = run(&Eager, &server(script.transport), &script, 0);
    assert!(timeline.truncated);
    assert!(timeline.entries.iter().all(|entry| entry.at_ms == 0));
}

/// `Builtin`, counting every question put to it, by [`wardgate_policy::Question`].
#[derive(Default)]
struct Counting {
    inner: Builtin,
    asked: [std::sync::atomic::AtomicUsize; 5],
}

impl Counting {
    fn ask(&self, question: wardgate_policy::Question) {
        self.asked[question.index()].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn asked(&self) -> std::collections::BTreeMap<wardgate_policy::Question, usize> {
        wardgate_policy::Question::ALL
            .into_iter()
            .map(|question| {
                let count = self.asked[question.index()].load(std::sync::atomic::Ordering::Relaxed);
                (question, count)
            })
            .filter(|(_, count)| *count > 0)
            .collect()
    }
}

impl RecoveryPolicy for Counting {
    fn describe(&self) -> Description {
        self.inner.describe()
    }
    fn classify(&self, server: &ServerContext, failure: &FailedRequest) -> RetryVerdict {
        self.ask(wardgate_policy::Question::Classify);
        self.inner.classify(server, failure)
    }
    fn reconnect_delay(&self, server: &ServerContext, attempt: u32, seed: u64) -> ReconnectVerdict {
        self.ask(wardgate_policy::Question::ReconnectDelay);
        self.inner.reconnect_delay(server, attempt, seed)
    }
    fn health(&self, server: &ServerContext, probe: &ProbeOutcome) -> HealthVerdict {
        self.ask(wardgate_policy::Question::Health);
        self.inner.health(server, probe)
    }
    fn probe_schedule(&self, server: &ServerContext, seed: u64) -> ProbeSchedule {
        self.ask(wardgate_policy::Question::ProbeSchedule);
        self.inner.probe_schedule(server, seed)
    }
    fn crash(&self, server: &ServerContext, crash: &CrashReport) -> CrashVerdict {
        self.ask(wardgate_policy::Question::Crash);
        self.inner.crash(server, crash)
    }
}

#[test]
fn each_line_names_the_questions_its_decision_put_to_the_policy() {
    use wardgate_policy::Question;
    for name in ["crash-loop", "failed-start", "failing-tools"] {
        let script = builtin_scenario(name).unwrap();
        let policy = Counting::default();
        let timeline = run(&policy, &server(script.transport), &script, 0);
        let mut shown = std::collections::BTreeMap::<Question, usize>::new();
        for entry in &timeline.entries {
            for question in &entry.asked {
                *shown.entry(*question).or_default() += 1;
            }
            if entry.decision.starts_with("restart")
                || entry.decision.starts_with("give up →") && entry.event.starts_with("process")
            {
                assert_eq!(entry.asked, [Question::Crash], "{name}: {entry:?}");
            }
            if entry.decision.starts_with("reconnect in") {
                assert_eq!(entry.asked, [Question::ReconnectDelay], "{name}: {entry:?}");
            }
            if entry.decision.starts_with("retry in") {
                assert_eq!(entry.asked, [Question::Classify], "{name}: {entry:?}");
            }
        }
        let counted = policy.asked();
        // Crashes, reconnect delays and call failures each make a line; healthy probes fold
        // into quiet lines, so the timeline shows at most what the policy was asked.
        for question in [
            Question::Crash,
            Question::ReconnectDelay,
            Question::Classify,
        ] {
            assert_eq!(
                shown.get(&question),
                counted.get(&question),
                "{name}: {} shown {shown:?}, asked {counted:?}",
                question.name()
            );
        }
        for question in [Question::Health, Question::ProbeSchedule] {
            assert!(
                shown.get(&question).unwrap_or(&0) <= counted.get(&question).unwrap_or(&0),
                "{name}: {} shown {shown:?}, asked {counted:?}",
                question.name()
            );
        }
        assert!(!shown.is_empty(), "{name}: no line asked anything");
    }
}
