//! The command queue on paused time against a scripted target.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::*;

/// Records what ran and when; answers from a script (default: success); commands on server
/// "slow" hold until `release` gets a permit.
#[derive(Default)]
struct Scripted {
    ran: Mutex<Vec<(String, Duration)>>,
    answers: Mutex<VecDeque<Result<Value, CommandError>>>,
    release: Option<Arc<Semaphore>>,
    started: Mutex<Option<Instant>>,
}

impl Scripted {
    fn ran(&self) -> Vec<String> {
        self.ran
            .lock()
            .unwrap()
            .iter()
            .map(|(name, _)| name.clone())
            .collect()
    }
}

impl CommandTarget for Scripted {
    fn execute<'a>(&'a self, command: &'a Command) -> BoxFuture<'a, Result<Value, CommandError>> {
        Box::pin(async move {
            let start = *self
                .started
                .lock()
                .unwrap()
                .get_or_insert_with(Instant::now);
            let label = match command.server() {
                Some(server) => format!("{}:{server}", command.kind()),
                None => command.kind().to_owned(),
            };
            self.ran.lock().unwrap().push((label, start.elapsed()));
            if command.server() == Some("slow") {
                if let Some(release) = &self.release {
                    let _ = release.acquire().await;
                }
            }
            self.answers
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Ok(json!({ "ok": true })))
        })
    }
}

fn fast() -> QueueSettings {
    QueueSettings {
        retry_base: Duration::from_millis(100),
        ..QueueSettings::default()
    }
}

fn restart(server: &str, priority: Priority) -> CommandRequest {
    CommandRequest::new(
        Command::Restart {
            server: server.into(),
        },
        priority,
    )
}

#[tokio::test(start_paused = true)]
async fn higher_priority_runs_first_and_fifo_within_a_priority() {
    let release = Arc::new(Semaphore::new(0));
    let target = Arc::new(Scripted {
        release: Some(release.clone()),
        ..Scripted::default()
    });
    let queue = CommandQueue::start(target.clone(), fast());
    let blocker = queue.submit(restart("slow", Priority::Normal));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut ids = Vec::new();
    for (server, priority) in [
        ("low", Priority::Low),
        ("normal-1", Priority::Normal),
        ("high", Priority::High),
        ("normal-2", Priority::Normal),
        ("now", Priority::Immediate),
    ] {
        ids.push(queue.submit(restart(server, priority)).id);
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The immediate one did not wait for the running command.
    assert_eq!(target.ran(), ["restart:slow", "restart:now"]);
    release.add_permits(1);
    queue.wait(&blocker.id).await.unwrap();
    for id in &ids {
        assert_eq!(queue.wait(id).await.unwrap().state, CommandState::Completed);
    }
    assert_eq!(
        target.ran(),
        [
            "restart:slow",
            "restart:now",
            "restart:high",
            "restart:normal-1",
            "restart:normal-2",
            "restart:low"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_retries_with_exponential_backoff_then_succeeds() {
    let target = Arc::new(Scripted::default());
    target.answers.lock().unwrap().extend([
        Err(CommandError::transient("connection refused")),
        Err(CommandError::transient("connection refused")),
        Ok(json!({ "reconnected": true })),
    ]);
    let queue = CommandQueue::start(target.clone(), fast());
    let id = queue
        .submit(CommandRequest::new(
            Command::Reconnect { server: "s".into() },
            Priority::High,
        ))
        .id;
    let done = queue.wait(&id).await.unwrap();
    assert_eq!(done.state, CommandState::Completed);
    assert_eq!(done.attempts, 3);
    assert_eq!(done.result, Some(json!({ "reconnected": true })));
    assert!(done.error.is_none());
    let times: Vec<Duration> = target
        .ran
        .lock()
        .unwrap()
        .iter()
        .map(|(_, at)| *at)
        .collect();
    // 100 ms, then 200 ms.
    assert_eq!(times[1] - times[0], Duration::from_millis(100));
    assert_eq!(times[2] - times[1], Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn retries_exhausted_leave_the_command_failed_with_the_last_error() {
    let target = Arc::new(Scripted::default());
    target
        .answers
        .lock()
        .unwrap()
        .extend((1..=4).map(|n| Err(CommandError::transient(format!("refused (try {n})")))));
    let queue = CommandQueue::start(target.clone(), fast());
    let id = queue
        .submit(CommandRequest::new(
            Command::Reconnect { server: "s".into() },
            Priority::Normal,
        ))
        .id;
    let done = queue.wait(&id).await.unwrap();
    assert_eq!(done.state, CommandState::Failed);
    assert_eq!(done.attempts, 4, "the first try and 3 retries");
    assert_eq!(done.error.as_deref(), Some("refused (try 4)"));
    assert!(done.finished_at.is_some());
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_is_not_retried() {
    let target = Arc::new(Scripted::default());
    target
        .answers
        .lock()
        .unwrap()
        .push_back(Err(CommandError::permanent("no server named \"x\"")));
    let queue = CommandQueue::start(target.clone(), fast());
    let id = queue.submit(restart("x", Priority::Normal)).id;
    let done = queue.wait(&id).await.unwrap();
    assert_eq!(done.state, CommandState::Failed);
    assert_eq!(done.attempts, 1);
}

#[tokio::test(start_paused = true)]
async fn a_command_not_started_within_the_ttl_expires() {
    let release = Arc::new(Semaphore::new(0));
    let target = Arc::new(Scripted {
        release: Some(release.clone()),
        ..Scripted::default()
    });
    let settings = QueueSettings {
        ttl: Duration::from_secs(5),
        ..fast()
    };
    let queue = CommandQueue::start(target.clone(), settings);
    let blocker = queue.submit(restart("slow", Priority::Normal));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let waiting = queue.submit(restart("late", Priority::Low));
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(queue.get(&waiting.id).unwrap().state, CommandState::Pending);
    let expired = queue.wait(&waiting.id).await.unwrap();
    assert_eq!(expired.state, CommandState::Expired);
    assert_eq!(expired.attempts, 0);
    assert!(expired.error.unwrap().contains("not started within 5s"));
    release.add_permits(1);
    assert_eq!(
        queue.wait(&blocker.id).await.unwrap().state,
        CommandState::Completed
    );
    assert_eq!(target.ran(), ["restart:slow"]);
}

#[tokio::test(start_paused = true)]
async fn history_keeps_only_the_newest_finished_commands() {
    let target = Arc::new(Scripted::default());
    let settings = QueueSettings {
        history: 3,
        ..fast()
    };
    let queue = CommandQueue::start(target, settings);
    let mut ids = Vec::new();
    for n in 0..5 {
        let id = queue.submit(restart(&format!("s{n}"), Priority::Normal)).id;
        queue.wait(&id).await.unwrap();
        ids.push(id);
    }
    let listed: Vec<String> = queue.list().into_iter().map(|record| record.id).collect();
    assert_eq!(listed, ["cmd-5", "cmd-4", "cmd-3"], "newest first, bounded");
    assert!(queue.get(&ids[0]).is_none());
    assert!(queue.wait(&ids[0]).await.is_none());
}

#[test]
fn requests_parse_with_the_command_flattened_beside_priority_and_correlation_id() {
    let request: CommandRequest = serde_json::from_value(json!({
        "type": "health_check", "server": "github", "priority": "immediate", "correlation_id": "abc"
    }))
    .unwrap();
    assert_eq!(
        request.command,
        Command::HealthCheck {
            server: "github".into()
        }
    );
    assert_eq!(request.priority, Priority::Immediate);
    assert_eq!(request.correlation_id.as_deref(), Some("abc"));
    let bare: CommandRequest = serde_json::from_value(json!({ "type": "configure" })).unwrap();
    assert_eq!(bare.command, Command::Configure);
    assert_eq!(bare.priority, Priority::Normal);
    assert!(serde_json::from_value::<CommandRequest>(json!({ "type": "restart" })).is_err());
}

#[tokio::test(start_paused = true)]
async fn every_state_change_is_observed_and_records_carry_timestamps() {
    #[derive(Default)]
    struct Watching(Mutex<Vec<CommandState>>);
    impl CommandTarget for Watching {
        fn execute<'a>(&'a self, _: &'a Command) -> BoxFuture<'a, Result<Value, CommandError>> {
            Box::pin(async { Ok(Value::Null) })
        }
        fn observe(&self, record: &CommandRecord) {
            self.0.lock().unwrap().push(record.state);
        }
    }
    let target = Arc::new(Watching::default());
    let queue = CommandQueue::start(target.clone(), fast());
    let mut request = CommandRequest::new(Command::ReloadPolicies, Priority::Low);
    request.correlation_id = Some("from-test".into());
    let id = queue.submit(request).id;
    let done = queue.wait(&id).await.unwrap();
    assert_eq!(done.correlation_id, "from-test");
    for stamp in [&done.acknowledged_at, &done.started_at, &done.finished_at] {
        assert!(
            stamp.as_deref().is_some_and(|s| s.ends_with('Z')),
            "{done:?}"
        );
    }
    assert_eq!(
        *target.0.lock().unwrap(),
        [
            CommandState::Pending,
            CommandState::Acknowledged,
            CommandState::Executing,
            CommandState::Completed
        ]
    );
}
