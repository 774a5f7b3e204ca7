//! The command polls' schedule, on the seeds' intervals, without a database or a clock.

use std::time::Duration;

use tokio::time::Instant;

use super::Polls;

const SEEDS: [u64; 4] = [2, 10, 30, 60];

#[test]
fn each_priority_is_looked_for_on_its_own_interval_and_a_notification_looks_for_all() {
    let start = Instant::now();
    let mut polls = Polls::new(SEEDS.map(Duration::from_secs), start);
    assert_eq!(polls.tick(), Duration::from_secs(2));
    let at = |seconds: u64| start + Duration::from_secs(seconds);
    // Every 2 s tick of the first minute: which priorities were due.
    let mut due = Vec::new();
    for second in (2..=60).step_by(2) {
        if let Some(rank) = polls.due(at(second), false) {
            due.push((second, rank));
        }
    }
    let when = |rank: i16| -> Vec<u64> {
        due.iter()
            .filter(|(_, up_to)| *up_to >= rank)
            .map(|(second, _)| *second)
            .collect()
    };
    assert_eq!(
        when(0),
        (2..=60).step_by(2).collect::<Vec<_>>(),
        "immediate: every 2 s"
    );
    assert_eq!(when(1), [10, 20, 30, 40, 50, 60], "high: every 10 s");
    assert_eq!(when(2), [30, 60], "normal: every 30 s");
    assert_eq!(when(3), [60], "low: every minute");
    // A notification: every priority at once, and each interval starts again from it.
    assert_eq!(polls.due(at(61), true), Some(3));
    assert_eq!(
        polls.due(at(62), false),
        None,
        "immediate was looked for at 61 s"
    );
    assert_eq!(polls.due(at(63), false), Some(0));
    assert_eq!(polls.due(at(71), false), Some(1));
}

#[test]
fn a_short_immediate_poll_sets_the_tick_and_nothing_is_due_between_ticks() {
    let start = Instant::now();
    let mut polls = Polls::new([300, 600, 900, 1200].map(Duration::from_millis), start);
    assert_eq!(polls.tick(), Duration::from_millis(300));
    assert_eq!(polls.due(start + Duration::from_millis(100), false), None);
    assert_eq!(
        polls.due(start + Duration::from_millis(300), false),
        Some(0)
    );
    assert_eq!(
        polls.due(start + Duration::from_millis(1200), false),
        Some(3)
    );
}
