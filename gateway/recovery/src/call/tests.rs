//! The call machine, step by step: sends, wakes, retries, deadlines and a health check's one attempt.

use wardgate_policy::{Builtin, TransportKind};

use super::*;

fn server() -> ServerContext {
    ServerContext::new("s", TransportKind::StreamableHttp)
}

fn seen(status: &ServerStatus, live: bool, finished: u64) -> CallInput<'_> {
    CallInput::Seen(Sight {
        status,
        live,
        attempts_finished: finished,
        last_failure: None,
    })
}

fn reset() -> AttemptFailure {
    AttemptFailure {
        kind: FailureKind::ConnectionReset,
        message: "reset".into(),
        reached: false,
    }
}

#[test]
fn a_call_on_a_live_server_sends_and_succeeds_quietly() {
    let policy = Builtin::default();
    let mut call = CallMachine::call(Operation::Call, CallHints::default(), 0, 60_000);
    let online = ServerStatus::Online { degraded: false };
    let step = call.on(0, seen(&online, true, 0), &policy, &server());
    assert_eq!(step.next, CallNext::Send);
    let answered = CallInput::Answered {
        failure: None,
        failures_counted: false,
    };
    let step = call.on(5, answered, &policy, &server());
    assert_eq!(step.next, CallNext::Succeeded);
    assert_eq!(
        step.evidence, None,
        "a success is news only while failures count"
    );
    assert!(call.is_over());
}

#[test]
fn a_call_wakes_a_down_server_and_its_failed_reconnection_is_a_failed_attempt() {
    let policy = Builtin::default();
    let mut call = CallMachine::call(Operation::Call, CallHints::default(), 0, 60_000);
    let offline = ServerStatus::Offline {
        reason: "refused".into(),
    };
    assert_eq!(
        call.on(0, seen(&offline, false, 3), &policy, &server())
            .next,
        CallNext::Wake
    );
    let connecting = ServerStatus::Connecting;
    assert_eq!(
        call.on(1, seen(&connecting, false, 3), &policy, &server())
            .next,
        CallNext::Watch
    );
    let failure = Failure::new(FailureKind::ConnectRefused, "refused");
    let sight = Sight {
        status: &offline,
        live: false,
        attempts_finished: 4,
        last_failure: Some(&failure),
    };
    let step = call.on(2, CallInput::Seen(sight), &policy, &server());
    let (judged, _) = step.judged.expect("the failed reconnection is judged");
    assert_eq!(judged.kind, FailureKind::ConnectRefused);
    assert_eq!(judged.message, "reconnecting failed: refused");
    assert_eq!(
        step.tell, None,
        "a reconnection's failure is the supervisor's own news"
    );
    assert_eq!(step.evidence, None);
}

#[test]
fn a_broken_connection_is_replaced_quietly_and_the_retry_waits_for_the_next_one() {
    let policy = Builtin::default();
    let hints = CallHints {
        idempotent: true,
        read_only: true,
    };
    let mut call = CallMachine::call(Operation::Call, hints, 0, 60_000);
    let online = ServerStatus::Online { degraded: false };
    call.on(0, seen(&online, true, 0), &policy, &server());
    let answered = CallInput::Answered {
        failure: Some(reset()),
        failures_counted: false,
    };
    let step = call.on(10, answered, &policy, &server());
    let CallNext::Sleep { .. } = step.next else {
        panic!("the builtin policy retries a reset read: {step:?}");
    };
    assert_eq!(step.tell, None, "a blip the call rides through is not told");
    assert!(
        step.replace,
        "the connection is replaced while the call sleeps"
    );
    assert_eq!(
        step.evidence, None,
        "a lost connection is replaced, not counted"
    );
    assert_eq!(
        call.on(500, CallInput::RetryDue, &policy, &server()).next,
        CallNext::Watch
    );
    assert_eq!(call.attempt(), 2);
    assert!(call.is_waiting());
}

#[test]
fn a_retry_past_the_deadline_gives_up() {
    let policy = Builtin::default();
    let hints = CallHints {
        idempotent: true,
        read_only: true,
    };
    let mut call = CallMachine::call(Operation::Call, hints, 0, 100);
    let online = ServerStatus::Online { degraded: false };
    call.on(0, seen(&online, true, 0), &policy, &server());
    let answered = CallInput::Answered {
        failure: Some(reset()),
        failures_counted: false,
    };
    let step = call.on(99, answered, &policy, &server());
    assert_eq!(
        step.next,
        CallNext::Fail(Ending::GaveUp {
            status: FailureStatus::Offline,
            past_deadline: true
        })
    );
    assert_eq!(step.tell, Some(FailureStatus::Offline));
}

#[test]
fn a_health_check_makes_one_attempt_and_every_answer_is_news() {
    let policy = Builtin::default();
    let mut check = CallMachine::check(0, 5_000);
    let online = ServerStatus::Online { degraded: false };
    check.on(0, seen(&online, true, 0), &policy, &server());
    let error = AttemptFailure {
        kind: FailureKind::JsonRpc { code: -32603 },
        message: "down".into(),
        reached: true,
    };
    let answered = CallInput::Answered {
        failure: Some(error),
        failures_counted: false,
    };
    let step = check.on(1, answered, &policy, &server());
    assert!(matches!(step.next, CallNext::Fail(Ending::GaveUp { .. })));
    assert_eq!(step.evidence, Some(false), "a ping's error answer counts");

    let mut check = CallMachine::check(0, 5_000);
    check.on(0, seen(&online, true, 0), &policy, &server());
    let answered = CallInput::Answered {
        failure: Some(reset()),
        failures_counted: false,
    };
    let step = check.on(1, answered, &policy, &server());
    assert!(matches!(step.next, CallNext::Fail(Ending::GaveUp { .. })));
    assert_eq!(step.tell, Some(FailureStatus::Offline));
}

#[test]
fn a_status_only_an_operator_can_change_refuses_at_once() {
    let policy = Builtin::default();
    let mut call = CallMachine::call(Operation::Call, CallHints::default(), 0, 60_000);
    let step = call.on(
        0,
        seen(&ServerStatus::Disabled, false, 0),
        &policy,
        &server(),
    );
    assert_eq!(step.next, CallNext::Fail(Ending::Refused));
    let later = call.on(
        1,
        seen(&ServerStatus::Disabled, false, 0),
        &policy,
        &server(),
    );
    assert_eq!(later.next, CallNext::Watch, "an ended call changes nothing");
}

#[test]
fn a_call_still_waiting_at_its_deadline_fails() {
    let policy = Builtin::default();
    let mut call = CallMachine::call(Operation::Call, CallHints::default(), 0, 1_000);
    call.on(
        0,
        seen(&ServerStatus::Connecting, false, 0),
        &policy,
        &server(),
    );
    let step = call.on(1_000, CallInput::DeadlinePassed, &policy, &server());
    assert_eq!(step.next, CallNext::Fail(Ending::NotOnlineInTime));
}
