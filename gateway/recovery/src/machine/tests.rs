//! The machine on its own: inputs in, steps out, against `Builtin` and small scripted policies.
//!
//! Why this file is long: one unit test per rule of the machine, each a short story of
//! inputs, sharing the scripted policies above them.

use wardgate_policy::{
    Builtin, CrashReport, CrashVerdict, Description, ExitInfo, FailedRequest, FailureKind,
    FailureStatus, HealthVerdict, ProbeOutcome, ProbeSchedule, ReconnectVerdict, RecoveryPolicy,
    RetryVerdict, ServerContext, TransportKind,
};

use super::*;

fn machine(transport: TransportKind) -> Machine {
    Machine::new(ServerContext::new("s", transport), true, 7)
}

fn refused() -> Failure {
    Failure::new(FailureKind::ConnectRefused, "connection refused")
}

fn closed() -> Input {
    Input::Lost {
        failure: Failure::new(FailureKind::ConnectionClosed, "closed"),
        status: FailureStatus::Offline,
    }
}

fn exit() -> ExitInfo {
    ExitInfo {
        code: Some(1),
        signal: None,
    }
}

/// Start and come online at `now_ms`.
fn online(machine: &mut Machine, policy: &dyn RecoveryPolicy, now_ms: u64) {
    assert_eq!(machine.on(now_ms, Input::Start, policy).next, Next::Connect);
    machine.on(now_ms, Input::Initialized, policy);
    let step = machine.on(now_ms, Input::Ready, policy);
    assert!(matches!(step.next, Next::Serve { .. }), "{step:?}");
}

fn statuses(step: &Step) -> Vec<&'static str> {
    step.announcements
        .iter()
        .filter_map(|announcement| match announcement {
            Announcement::Status { to, .. } => Some(to.name()),
            _ => None,
        })
        .collect()
}

/// A policy with fixed answers, for the paths `Builtin` does not take.
struct Fixed {
    reconnect: ReconnectVerdict,
    health: HealthVerdict,
}

impl RecoveryPolicy for Fixed {
    fn describe(&self) -> Description {
        Builtin::default().describe()
    }
    fn classify(&self, server: &ServerContext, failure: &FailedRequest) -> RetryVerdict {
        Builtin::default().classify(server, failure)
    }
    fn reconnect_delay(&self, _: &ServerContext, _: u32, _: u64) -> ReconnectVerdict {
        self.reconnect
    }
    fn health(&self, _: &ServerContext, _: &ProbeOutcome) -> HealthVerdict {
        self.health
    }
    fn probe_schedule(&self, _: &ServerContext, _: u64) -> ProbeSchedule {
        ProbeSchedule {
            interval_ms: 0,
            timeout_ms: 0,
        }
    }
    fn crash(&self, _: &ServerContext, _: &CrashReport) -> CrashVerdict {
        CrashVerdict::RestartAfter { delay_ms: 5 }
    }
}

#[test]
fn a_first_start_goes_online_and_plans_its_first_probe() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::StreamableHttp);
    let start = machine.on(0, Input::Start, &policy);
    assert_eq!(statuses(&start), ["connecting"]);
    let initialized = machine.on(3, Input::Initialized, &policy);
    assert_eq!(statuses(&initialized), ["discovering_tools"]);
    let ready = machine.on(5, Input::Ready, &policy);
    assert_eq!(statuses(&ready), ["online"]);
    assert!(matches!(
        ready.decisions.as_slice(),
        [Decision::FirstProbe { .. }]
    ));
    assert_eq!(machine.view().online_since_ms, Some(5));
}

#[test]
fn a_disabled_server_waits_for_enable_and_refuses_everything_else() {
    let policy = Builtin::default();
    let mut machine = Machine::new(ServerContext::new("s", TransportKind::Stdio), false, 0);
    assert_eq!(machine.on(0, Input::Start, &policy).next, Next::Disabled);
    let refused = machine.on(1, Input::Operator(OperatorAction::Reconnect), &policy);
    assert!(refused
        .reply
        .unwrap()
        .unwrap_err()
        .contains("wardgate enable s"));
    assert_eq!(machine.on(2, Input::WakeUp, &policy).next, Next::Continue);
    let enabled = machine.on(3, Input::Operator(OperatorAction::Enable), &policy);
    assert_eq!(enabled.reply, Some(Ok(())));
    assert_eq!(enabled.next, Next::Connect);
    assert_eq!(statuses(&enabled), ["provisioning", "connecting"]);
}

#[test]
fn a_lost_connection_reconnects_with_growing_delays_and_resets_once_back() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::StreamableHttp);
    online(&mut machine, &policy, 0);
    let lost = machine.on(1_000, closed(), &policy);
    assert_eq!(statuses(&lost), ["offline", "reconnecting"]);
    assert!(lost.ends_connection() && !lost.intentional());
    let Next::Wait { delay_ms: first } = lost.next else {
        panic!("{lost:?}")
    };
    assert_eq!(machine.view().reconnect_attempt, Some(1));
    assert_eq!(machine.view().next_retry_at_ms, Some(1_000 + first));
    machine.on(1_000 + first, Input::RetryDue, &policy);
    let failed = machine.on(1_000 + first, Input::ConnectFailed(refused()), &policy);
    let Next::Wait { delay_ms: second } = failed.next else {
        panic!("{failed:?}")
    };
    assert!(second > first, "{first} then {second}");
    assert_eq!(machine.view().reconnect_attempt, Some(2));
    assert_eq!(machine.view().consecutive_failures, 1);
    machine.on(99_000, Input::RetryDue, &policy);
    machine.on(99_000, Input::Initialized, &policy);
    let back = machine.on(99_000, Input::Ready, &policy);
    assert!(back
        .announcements
        .contains(&Announcement::Reconnected { attempts: 2 }));
    assert_eq!(
        machine.view(),
        View {
            online_since_ms: Some(99_000),
            last_error: Some("connection refused".into()),
            // The last failure: the refused reconnection at 1000 + first.
            last_error_at_ms: Some(1_000 + first),
            last_failure: Some(FailureKind::ConnectRefused),
            attempts_finished: 3,
            // Online again since 99 000.
            status_since_ms: 99_000,
            ..View::default()
        }
    );
}

#[test]
fn attempts_a_call_asks_for_leave_the_backoff_schedule_as_it_was() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::StreamableHttp);
    online(&mut machine, &policy, 0);
    let lost = machine.on(10, closed(), &policy);
    let Next::Wait { delay_ms } = lost.next else {
        panic!("{lost:?}")
    };
    let due = 10 + delay_ms;
    for now in [20, 30, 40, 50] {
        assert_eq!(machine.on(now, Input::WakeUp, &policy).next, Next::Connect);
        let failed = machine.on(now, Input::ConnectFailed(refused()), &policy);
        assert!(failed.decisions.is_empty(), "no new decision: {failed:?}");
        assert!(failed.quiet);
        assert_eq!(
            failed.next,
            Next::Wait {
                delay_ms: due - now
            }
        );
        assert_eq!(machine.view().reconnect_attempt, Some(1));
        assert_eq!(machine.view().next_retry_at_ms, Some(due));
    }
    // The scheduled attempt still comes when it was due, and its failure advances the backoff.
    machine.on(due, Input::RetryDue, &policy);
    let failed = machine.on(due, Input::ConnectFailed(refused()), &policy);
    assert!(matches!(
        failed.decisions.as_slice(),
        [Decision::Reconnect { attempt: 2, .. }]
    ));
    // A wake-up while an attempt is under way changes nothing.
    machine.on(60, Input::WakeUp, &policy);
    assert_eq!(machine.on(60, Input::WakeUp, &policy).next, Next::Continue);
}

#[test]
fn refused_credentials_park_the_server_until_an_operator_reconnects() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::StreamableHttp);
    machine.on(0, Input::Start, &policy);
    let failure = Failure::new(FailureKind::HttpStatus(401), "HTTP 401");
    let parked = machine.on(1, Input::ConnectFailed(failure), &policy);
    assert_eq!(parked.next, Next::Park);
    assert_eq!(parked.decisions, [Decision::AwaitOperator]);
    assert_eq!(machine.status().name(), "requires_reauth");
    assert_eq!(machine.on(2, Input::WakeUp, &policy).next, Next::Continue);
    assert_eq!(machine.on(3, Input::RetryDue, &policy).next, Next::Continue);
    let reconnect = machine.on(4, Input::Operator(OperatorAction::Reconnect), &policy);
    assert_eq!(
        (reconnect.next, reconnect.reply),
        (Next::Connect, Some(Ok(())))
    );
}

#[test]
fn a_stopping_policy_fails_the_server_permanently() {
    let policy = Fixed {
        reconnect: ReconnectVerdict::Stop,
        health: HealthVerdict::Healthy,
    };
    let mut machine = machine(TransportKind::Sse);
    online(&mut machine, &policy, 0);
    let stopped = machine.on(5, closed(), &policy);
    assert_eq!(stopped.next, Next::Park);
    assert_eq!(machine.status().name(), "permanently_failed");
    assert!(stopped
        .announcements
        .iter()
        .any(|a| matches!(a, Announcement::PermanentlyFailed { .. })));
}

#[test]
fn the_third_crash_within_the_window_spends_the_builtin_budget_and_old_ones_are_forgotten() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::Stdio);
    online(&mut machine, &policy, 0);
    let mut now = 0;
    for crash in 1..=2u32 {
        now += 1_000;
        let step = machine.on(
            now,
            Input::Exited {
                exit: exit(),
                reason: None,
            },
            &policy,
        );
        assert!(matches!(step.next, Next::Wait { .. }), "{step:?}");
        assert_eq!(machine.status().name(), "restarting");
        assert_eq!(machine.view().crashes_in_window, crash);
        machine.on(now, Input::RetryDue, &policy);
        machine.on(now, Input::Initialized, &policy);
        machine.on(now, Input::Ready, &policy);
    }
    // An hour later the first two crashes no longer count.
    now += CRASH_MEMORY_MS;
    let step = machine.on(
        now,
        Input::Exited {
            exit: exit(),
            reason: None,
        },
        &policy,
    );
    assert!(matches!(step.next, Next::Wait { .. }));
    assert_eq!(machine.view().crashes_in_window, 1);
    let Decision::Crash { report, .. } = &step.decisions[0] else {
        panic!("{step:?}")
    };
    assert_eq!(report.recent_crashes_ms, [1_000, 2_000]);
    assert_eq!(report.uptime_ms, CRASH_MEMORY_MS);
    for _ in 0..2 {
        machine.on(now, Input::RetryDue, &policy);
        let died = Failure::new(
            FailureKind::ProcessExited {
                code: Some(1),
                signal: None,
            },
            "exited with code 1 at start",
        );
        machine.on(now, Input::ConnectFailed(died), &policy);
    }
    assert_eq!(machine.status().name(), "permanently_failed");
}

#[test]
fn probes_mark_degraded_then_restored_and_an_unhealthy_verdict_is_an_error() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::StreamableHttp);
    online(&mut machine, &policy, 0);
    let fail = Input::Probed {
        succeeded: false,
        latency_ms: 5,
    };
    let mut degraded_at = None;
    for n in 1..=4u32 {
        let step = machine.on(n.into(), fail.clone(), &policy);
        if step
            .announcements
            .iter()
            .any(|a| matches!(a, Announcement::HealthDegraded { .. }))
        {
            degraded_at.get_or_insert(n);
        }
    }
    assert!(degraded_at.is_some(), "builtin never degraded");
    assert_eq!(machine.status().to_string(), "online (degraded)");
    assert_eq!(machine.view().consecutive_failures, 4);
    let ok = Input::Probed {
        succeeded: true,
        latency_ms: 1,
    };
    let restored = machine.on(10, ok, &policy);
    assert!(restored
        .announcements
        .contains(&Announcement::HealthRestored));

    let unhealthy = Fixed {
        reconnect: ReconnectVerdict::RetryAfter { delay_ms: 30 },
        health: HealthVerdict::Unhealthy,
    };
    let step = machine.on(20, fail, &unhealthy);
    assert_eq!(step.next, Next::Wait { delay_ms: 30 });
    assert!(matches!(
        step.decisions.as_slice(),
        [
            Decision::Health { .. },
            Decision::Reconnect { attempt: 1, .. }
        ]
    ));
    // The server answers but fails: `error` while the next attempt waits.
    assert_eq!(statuses(&step), ["error"]);
}

#[test]
fn a_probe_plan_is_floored_so_a_policy_cannot_spin_the_driver() {
    let policy = Fixed {
        reconnect: ReconnectVerdict::Stop,
        health: HealthVerdict::Healthy,
    };
    let mut machine = machine(TransportKind::Stdio);
    machine.on(0, Input::Start, &policy);
    let ready = machine.on(0, Input::Ready, &policy);
    assert_eq!(
        ready.next,
        Next::Serve {
            probe_in_ms: MIN_PROBE_INTERVAL_MS,
            probe_timeout_ms: 1
        }
    );
}

#[test]
fn operator_actions_close_a_live_connection_politely_and_reset_the_budget() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::Stdio);
    online(&mut machine, &policy, 0);
    machine.on(
        1,
        Input::Exited {
            exit: exit(),
            reason: None,
        },
        &policy,
    );
    machine.on(2, Input::RetryDue, &policy);
    machine.on(2, Input::Ready, &policy);
    let restart = machine.on(3, Input::Operator(OperatorAction::Restart), &policy);
    assert!(restart.ends_connection() && restart.intentional());
    assert_eq!(restart.next, Next::Connect);
    assert_eq!(machine.view().crashes_in_window, 0);
    let enable = machine.on(4, Input::Operator(OperatorAction::Enable), &policy);
    assert_eq!(enable.next, Next::Continue, "an attempt under way goes on");
    assert!(enable.reply.unwrap().is_err());
    let disable = machine.on(5, Input::Operator(OperatorAction::Disable), &policy);
    assert_eq!(disable.next, Next::Disabled);
    assert_eq!(machine.status().name(), "disabled");
}

#[test]
fn news_of_an_older_connection_changes_nothing() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::StreamableHttp);
    machine.on(0, Input::Start, &policy);
    for input in [
        closed(),
        Input::Exited {
            exit: exit(),
            reason: None,
        },
        Input::RetryDue,
        Input::Probed {
            succeeded: false,
            latency_ms: 1,
        },
    ] {
        let step = machine.on(1, input, &policy);
        assert_eq!(step, Step::new(), "connecting");
    }
    assert_eq!(machine.status().name(), "connecting");
}

#[test]
fn the_same_inputs_at_the_same_times_give_the_same_steps() {
    let policy = Builtin::default();
    let inputs = [
        (0, Input::Start),
        (1, Input::Ready),
        (5, closed()),
        (900, Input::RetryDue),
        (900, Input::ConnectFailed(refused())),
        (2_000, Input::WakeUp),
        (2_000, Input::ConnectFailed(refused())),
    ];
    let play = || {
        let mut machine = machine(TransportKind::StreamableHttp);
        inputs
            .iter()
            .map(|(now, input)| machine.on(*now, input.clone(), &policy))
            .collect::<Vec<_>>()
    };
    assert_eq!(play(), play());
}

#[test]
fn a_reconnection_that_keeps_failing_goes_quiet_between_powers_of_two() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::StreamableHttp);
    online(&mut machine, &policy, 0);
    let mut now = 10;
    let mut step = machine.on(now, closed(), &policy);
    let (mut heard, mut loud_connects) = (vec![], vec![]);
    for attempt in 1..=20u32 {
        if !step.quiet {
            heard.push(attempt);
        }
        let Next::Wait { delay_ms } = step.next else {
            panic!("{step:?}")
        };
        now += delay_ms;
        if !machine.on(now, Input::RetryDue, &policy).quiet {
            loud_connects.push(attempt);
        }
        step = machine.on(now, Input::ConnectFailed(refused()), &policy);
    }
    assert_eq!(heard, [1, 2, 3, 4, 8, 16]);
    assert_eq!(loud_connects, [1, 2, 3, 4, 8, 16]);
}

#[test]
fn coming_back_after_an_operator_reconnect_is_announced_as_a_reconnection() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::StreamableHttp);
    online(&mut machine, &policy, 0);
    let reconnect = machine.on(5, Input::Operator(OperatorAction::Reconnect), &policy);
    assert!(reconnect.intentional());
    machine.on(6, Input::Initialized, &policy);
    let back = machine.on(6, Input::Ready, &policy);
    assert!(back
        .announcements
        .contains(&Announcement::Reconnected { attempts: 0 }));
    let restart = machine.on(7, Input::Operator(OperatorAction::Restart), &policy);
    assert_eq!(statuses(&restart), ["restarting", "connecting"]);
}

#[test]
fn calls_that_keep_failing_degrade_a_connected_server_and_a_success_restores_it() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::StreamableHttp);
    online(&mut machine, &policy, 0);
    let failed = Input::Served {
        succeeded: false,
        latency_ms: 60_000,
    };
    let mut degraded = false;
    for now in 1..=4 {
        let step = machine.on(now, failed.clone(), &policy);
        assert_eq!(
            step.next,
            Next::Continue,
            "the probe schedule is the probes'"
        );
        degraded |= step
            .announcements
            .iter()
            .any(|a| matches!(a, Announcement::HealthDegraded { .. }));
    }
    assert!(degraded && machine.status().to_string() == "online (degraded)");
    let ok = Input::Served {
        succeeded: true,
        latency_ms: 3,
    };
    let restored = machine.on(9, ok, &policy);
    assert!(restored
        .announcements
        .contains(&Announcement::HealthRestored));
}

#[test]
fn calls_that_keep_failing_put_the_server_in_error_until_one_succeeds_with_the_backoff_kept() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::StreamableHttp);
    online(&mut machine, &policy, 0);
    let failed = Input::Served {
        succeeded: false,
        latency_ms: 60_000,
    };
    let fail_five = |machine: &mut Machine, from: u64| {
        let mut last = None;
        for now in from..from + 5 {
            machine.note_failure(now, "tools/call: timed out after 60 s".into());
            last = Some(machine.on(now, failed.clone(), &policy));
        }
        last.expect("five steps")
    };
    // The builtin's threshold (`error_after`, 5): the fifth failure in a row is `error`.
    let fifth = fail_five(&mut machine, 1);
    assert_eq!(statuses(&fifth), ["error"]);
    assert!(fifth.ends_connection() && !fifth.intentional());
    let Next::Wait { delay_ms: first } = fifth.next else {
        panic!("{fifth:?}")
    };
    let view = machine.view();
    assert!(view.probation);
    assert_eq!(
        view.last_error.as_deref(),
        Some("tools/call: timed out after 60 s"),
        "the last error is the failure's own"
    );
    assert_eq!(
        machine.status().to_string(),
        "error: 5 calls or probes in a row failed"
    );
    // Its attempt answers `initialize` and lists tools: online, on probation.
    assert_eq!(
        machine.on(first + 5, Input::RetryDue, &policy).next,
        Next::Connect
    );
    machine.on(first + 5, Input::Initialized, &policy);
    let back = machine.on(first + 5, Input::Ready, &policy);
    assert_eq!(statuses(&back), ["online"]);
    assert!(machine.view().probation);
    // Failing again, it waits longer: the backoff was kept.
    let again = fail_five(&mut machine, first + 10);
    let Next::Wait { delay_ms: second } = again.next else {
        panic!("{again:?}")
    };
    assert!(second > first, "{second} after {first}");
    let at = first + second + 20;
    machine.on(at, Input::RetryDue, &policy);
    machine.on(at, Input::Ready, &policy);
    // One success ends the probation, and the backoff starts over.
    machine.on(
        at + 1,
        Input::Served {
            succeeded: true,
            latency_ms: 3,
        },
        &policy,
    );
    assert!(!machine.view().probation);
    let third = fail_five(&mut machine, at + 2);
    assert_eq!(
        third.decisions.last(),
        Some(&Decision::Reconnect {
            attempt: 1,
            verdict: match third.next {
                Next::Wait { delay_ms } => ReconnectVerdict::RetryAfter { delay_ms },
                next => panic!("{next:?}"),
            }
        })
    );
}

fn broken() -> Input {
    Input::Broken {
        failure: Failure::new(FailureKind::ConnectionReset, "connection reset"),
    }
}

#[test]
fn a_broken_connection_a_call_rides_through_is_replaced_without_a_word() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::StreamableHttp);
    online(&mut machine, &policy, 0);
    let broken = machine.on(1_000, broken(), &policy);
    assert_eq!(broken.next, Next::Connect);
    assert!(broken.announcements.is_empty(), "{broken:?}");
    assert!(machine.status().is_online(), "{}", machine.status());
    assert!(machine
        .on(1_001, Input::Initialized, &policy)
        .announcements
        .is_empty());
    let back = machine.on(1_002, Input::Ready, &policy);
    assert!(
        back.announcements.is_empty(),
        "no reconnection to tell: {back:?}"
    );
    assert!(matches!(back.next, Next::Serve { .. }));
    assert!(machine.status().is_online());
    assert_eq!(machine.view().online_since_ms, Some(1_002));
}

#[test]
fn a_quiet_replacement_is_told_once_when_its_second_attempt_fails() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::StreamableHttp);
    online(&mut machine, &policy, 0);
    machine.on(1_000, broken(), &policy);
    // The first attempt fails: a quiet wait, as the policy's first reconnect delay says.
    let first = machine.on(1_000, Input::ConnectFailed(refused()), &policy);
    assert!(first.announcements.is_empty(), "{first:?}");
    assert!(matches!(first.next, Next::Wait { .. }), "{first:?}");
    assert!(matches!(
        first.decisions.as_slice(),
        [Decision::Reconnect { attempt: 1, .. }]
    ));
    assert!(machine.status().is_online());
    // A call's retry wakes it; this attempt failing is told, once.
    assert_eq!(
        machine.on(1_500, Input::WakeUp, &policy).next,
        Next::Connect
    );
    let second = machine.on(1_500, Input::ConnectFailed(refused()), &policy);
    assert_eq!(statuses(&second), ["offline", "reconnecting"]);
    assert!(second.announcements.contains(&Announcement::Disconnected {
        intentional: false,
        reason: "connection refused".into()
    }));
    assert_eq!(machine.view().reconnect_attempt, Some(2));
    assert_eq!(machine.view().attempts_finished, 3);
}

#[test]
fn a_quiet_replacement_refused_credentials_is_told_at_once() {
    let policy = Builtin::default();
    let mut machine = machine(TransportKind::StreamableHttp);
    online(&mut machine, &policy, 0);
    machine.on(1_000, broken(), &policy);
    let refused = Failure::new(FailureKind::HttpStatus(401), "HTTP 401 Unauthorized");
    let step = machine.on(1_000, Input::ConnectFailed(refused), &policy);
    assert_eq!(statuses(&step), ["requires_reauth"]);
    assert_eq!(step.next, Next::Park);
}
