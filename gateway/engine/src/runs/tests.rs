//! The runs' table, their bounds and their states.

use super::*;

fn origin(owner: Owner) -> Listing<'static> {
    Listing {
        server: "a",
        prefix: "a",
        separator: "__",
        owner,
    }
}

#[tokio::test]
async fn a_run_is_listed_under_its_server_s_prefix_and_found_only_by_its_owner() {
    let runs = Runs::default();
    let alice = Owner::Client(Arc::from("token:alice"));
    let run = runs.start(origin(alice.clone()), None).unwrap();
    assert!(run.id.starts_with("a__") && run.id.len() == "a__".len() + 32);
    assert!(runs.find(&run.id, &alice).is_some());
    assert!(runs
        .find(&run.id, &Owner::Client(Arc::from("token:bob")))
        .is_none());
    assert!(runs.find(&run.id, &Owner::Anyone).is_none());
    assert_eq!(runs.list(&alice).len(), 1);
    assert!(runs.list(&Owner::Anyone).is_empty());
    runs.forget(&Owner::Anyone);
    assert!(
        runs.find(&run.id, &alice).is_some(),
        "another owner's runs stay"
    );
    let snapshot = run.snapshot();
    assert_eq!(snapshot.ttl_ms, DEFAULT_TTL.as_millis() as u64);
    assert!(matches!(snapshot.status, Status::Working));
    runs.forget(&alice);
    assert!(runs.find(&run.id, &alice).is_none());
    assert!(
        run.cancel.is_cancelled(),
        "a forgotten run's call is stopped"
    );
}

#[tokio::test]
async fn a_cancelled_run_stays_cancelled_and_an_ended_one_cannot_be_cancelled() {
    let runs = Runs::default();
    let run = runs.start(origin(Owner::Anyone), Some(60_000)).unwrap();
    assert!(run.cancel());
    assert!(run.cancel.is_cancelled());
    run.end(Outcome::Answered(JsonObject::new()));
    assert!(matches!(run.ended().await.status, Status::Cancelled));
    assert!(!run.cancel(), "a terminal run cannot be cancelled again");

    let other = runs.start(origin(Owner::Anyone), Some(60_000)).unwrap();
    other.end(Outcome::Failed(ErrorData::internal_error("boom", None)));
    assert!(!other.cancel());
    assert!(matches!(other.ended().await.status, Status::Ended(_)));
}

#[tokio::test]
async fn waiting_for_a_run_ends_when_its_call_does() {
    let runs = Runs::default();
    let run = runs.start(origin(Owner::Anyone), None).unwrap();
    let waiter = tokio::spawn({
        let run = run.clone();
        async move { run.ended().await }
    });
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    run.end(Outcome::Answered(JsonObject::new()));
    let ended = waiter.await.unwrap();
    assert!(
        matches!(ended.status, Status::Ended(outcome) if matches!(*outcome, Outcome::Answered(_)))
    );
}

#[tokio::test]
async fn a_run_reads_input_required_while_its_server_waits_on_the_client() {
    let runs = Runs::default();
    let run = runs.start(origin(Owner::Anyone), None).unwrap();
    let first = run.asking();
    let second = run.asking();
    assert!(matches!(run.snapshot().status, Status::InputRequired));
    assert!(!run.is_terminal());
    drop(first);
    assert!(
        matches!(run.snapshot().status, Status::InputRequired),
        "until every question is answered"
    );
    drop(second);
    assert!(matches!(run.snapshot().status, Status::Working));

    let waiting = run.awaiting_result(7, RequestId::Number(3));
    let newer = run.awaiting_result(7, RequestId::Number(4));
    assert_eq!(run.result_request(7), Some(RequestId::Number(4)));
    assert_eq!(run.result_request(8), None, "only that session's");
    drop(newer);
    assert_eq!(run.result_request(7), Some(RequestId::Number(3)));
    drop(waiting);
    assert_eq!(run.result_request(7), None);

    let late = run.asking();
    run.end(Outcome::Answered(JsonObject::new()));
    drop(late);
    assert!(
        matches!(run.snapshot().status, Status::Ended(_)),
        "an ended run stays ended"
    );
}

fn answer_of(bytes: usize) -> Outcome {
    let mut result = JsonObject::new();
    result.insert("text".into(), "x".repeat(bytes).into());
    Outcome::Answered(result)
}

#[tokio::test(start_paused = true)]
async fn the_results_kept_are_bounded_in_bytes_the_client_s_own_going_first() {
    // The bounds scaled down, in proportion.
    const PER_CLIENT: usize = 32 * 1024;
    const ALL: usize = 256 * 1024;
    let runs = Runs {
        kept_limits: (PER_CLIENT, ALL),
        ..Runs::default()
    };
    let greedy = Owner::Client(Arc::from("token:greedy"));
    let other = Owner::Client(Arc::from("token:other"));
    let theirs = runs.start(origin(other.clone()), None).unwrap();
    runs.end(&theirs, answer_of(1024));
    let big = PER_CLIENT / 3;
    // Each started a moment after the one before, so none expire together.
    let mut mine = Vec::new();
    for _ in 0..3 {
        tokio::time::advance(Duration::from_millis(1)).await;
        mine.push(runs.start(origin(greedy.clone()), None).unwrap());
    }
    for run in &mine {
        runs.end(run, answer_of(big));
    }
    assert!(
        runs.find(&mine[0].id, &greedy).is_none(),
        "past the client's share, its oldest finished result went"
    );
    assert!(runs.find(&mine[1].id, &greedy).is_some());
    assert!(runs.find(&mine[2].id, &greedy).is_some());
    assert!(
        runs.find(&theirs.id, &other).is_some(),
        "another client's result stays"
    );
    assert!(matches!(mine[2].snapshot().status, Status::Ended(_)));

    // Across clients, the gateway's bound: anyone's finished results, closest to expiry.
    let many = ALL / big + 1;
    let mut all = Vec::new();
    for n in 0..many {
        tokio::time::advance(Duration::from_millis(1)).await;
        let owner = Owner::Client(Arc::from(format!("token:{n}")));
        let run = runs.start(origin(owner), None).unwrap();
        runs.end(&run, answer_of(big));
        all.push(run);
    }
    let kept: usize = lock(&runs.entries).values().map(|run| run.kept()).sum();
    assert!(kept <= ALL, "{kept} bytes kept");
    assert!(
        runs.find(&theirs.id, &other).is_none(),
        "the oldest went first"
    );
    let last = all.last().unwrap();
    assert!(matches!(last.snapshot().status, Status::Ended(_)));

    // A run cancelled before its call ended keeps nothing, and makes no room.
    let cancelled = runs.start(origin(other.clone()), None).unwrap();
    cancelled.cancel();
    runs.end(&cancelled, answer_of(big));
    assert_eq!(cancelled.kept(), 0);
    assert!(matches!(cancelled.snapshot().status, Status::Cancelled));
}

#[tokio::test(start_paused = true)]
async fn runs_expire_with_their_ttl_and_a_table_full_of_working_runs_refuses() {
    let runs = Runs::default();
    let short = runs.start(origin(Owner::Anyone), Some(0)).unwrap();
    assert_eq!(short.snapshot().ttl_ms, MIN_TTL.as_millis() as u64);
    tokio::time::advance(MIN_TTL + Duration::from_secs(1)).await;
    assert!(runs.find(&short.id, &Owner::Anyone).is_none());
    assert!(
        short.cancel.is_cancelled(),
        "an expired working run's call is stopped"
    );
    let mut first = None;
    for n in 0..MAX_RUNS {
        let owner = Owner::Client(Arc::from(format!("token:{}", n % 10)));
        let run = runs.start(origin(owner), None).unwrap();
        first.get_or_insert(run);
    }
    let eleventh = Owner::Client(Arc::from("token:eleventh"));
    assert_eq!(
        runs.start(origin(eleventh.clone()), None).unwrap_err(),
        Full::Gateway
    );
    first.unwrap().end(Outcome::Answered(JsonObject::new()));
    assert!(runs.start(origin(eleventh), None).is_ok());
}

#[tokio::test]
async fn one_client_holds_at_most_its_share_and_makes_room_from_its_own_finished_runs() {
    let runs = Runs::default();
    let greedy = Owner::Client(Arc::from("token:greedy"));
    let mine: Vec<Arc<Run>> = (0..MAX_RUNS_PER_CLIENT)
        .map(|_| runs.start(origin(greedy.clone()), None).unwrap())
        .collect();
    assert_eq!(
        runs.start(origin(greedy.clone()), None).unwrap_err(),
        Full::Client
    );
    let other = Owner::Client(Arc::from("token:other"));
    let theirs = runs.start(origin(other.clone()), None).unwrap();
    theirs.end(Outcome::Answered(JsonObject::new()));
    assert_eq!(
        runs.start(origin(greedy.clone()), None).unwrap_err(),
        Full::Client,
        "another client's finished run is not taken"
    );
    assert!(runs.find(&theirs.id, &other).is_some());
    mine[0].end(Outcome::Answered(JsonObject::new()));
    assert!(runs.start(origin(greedy.clone()), None).is_ok());
    assert!(runs.find(&mine[0].id, &greedy).is_none());
    assert_eq!(runs.list(&greedy).len(), MAX_RUNS_PER_CLIENT);
}
