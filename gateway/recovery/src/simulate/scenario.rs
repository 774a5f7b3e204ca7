//! The built-in scenarios: a flapping HTTP server, a crash loop, an auth failure, a slow
//! server, and one whose tools fail while it answers everything else.

use wardgate_policy::{ExitInfo, FailureKind, TransportKind};

use super::{CallHints, Happening, Script, WorldEvent};

const SECOND: u64 = 1_000;
const MINUTE: u64 = 60 * SECOND;

/// The scenario names `--scenario` accepts, in the order `all` runs them.
pub const NAMES: [&str; 6] = [
    "flapping-http",
    "crash-loop",
    "failed-start",
    "auth-failure",
    "slow-server",
    "failing-tools",
];

/// The scenario called `name` (one of [`NAMES`]).
pub fn builtin_scenario(name: &str) -> Option<Script> {
    match name {
        "flapping-http" => Some(flapping_http()),
        "crash-loop" => Some(crash_loop()),
        "failed-start" => Some(failed_start()),
        "auth-failure" => Some(auth_failure()),
        "slow-server" => Some(slow_server()),
        "failing-tools" => Some(failing_tools()),
        _ => None,
    }
}

fn happen(at_ms: u64, event: WorldEvent) -> Happening {
    Happening { at_ms, event }
}

fn call() -> WorldEvent {
    WorldEvent::Call {
        hints: CallHints::default(),
        fails_with: None,
    }
}

/// Tool calls every `every_ms` from `from_ms` up to and including `to_ms`.
fn calls(from_ms: u64, every_ms: u64, to_ms: u64) -> impl Iterator<Item = Happening> {
    (from_ms..=to_ms)
        .step_by(every_ms as usize)
        .map(|at_ms| happen(at_ms, call()))
}

/// Events in time order; at equal times, world changes come before the calls they affect.
fn script(
    name: &str,
    summary: &str,
    transport: TransportKind,
    mut events: Vec<Happening>,
    end_ms: u64,
) -> Script {
    events.sort_by_key(|happening| {
        (
            happening.at_ms,
            matches!(happening.event, WorldEvent::Call { .. }),
        )
    });
    Script {
        name: name.into(),
        summary: summary.into(),
        transport,
        events,
        end_ms,
    }
}

fn flapping_http() -> Script {
    let refused = || WorldEvent::Down {
        kind: FailureKind::ConnectRefused,
    };
    let mut events = vec![
        happen(5 * SECOND, refused()),
        happen(65 * SECOND, WorldEvent::Up),
        happen(95 * SECOND, refused()),
        happen(395 * SECOND, WorldEvent::Up),
    ];
    events.extend(calls(10 * SECOND, 10 * SECOND, 8 * MINUTE));
    script(
        "flapping-http",
        "a Streamable HTTP server down 60 s, up 30 s, down 5 min, then up; a tool call every 10 s",
        TransportKind::StreamableHttp,
        events,
        8 * MINUTE,
    )
}

fn crash_loop() -> Script {
    let exit = ExitInfo {
        code: Some(1),
        signal: None,
    };
    let events = vec![
        happen(
            0,
            WorldEvent::CrashLoop {
                every_ms: 20 * SECOND,
                exit,
            },
        ),
        happen(10 * MINUTE, WorldEvent::Up),
    ];
    script(
        "crash-loop",
        "a stdio server that exits with code 1 20 s after every start, for 10 minutes",
        TransportKind::Stdio,
        events,
        12 * MINUTE,
    )
}

fn failed_start() -> Script {
    let exits = || WorldEvent::Down {
        kind: FailureKind::ProcessExited {
            code: Some(1),
            signal: None,
        },
    };
    let events = vec![
        happen(0, exits()),
        happen(MINUTE, WorldEvent::Up),
        happen(MINUTE, WorldEvent::OperatorReconnect),
    ];
    script(
        "failed-start",
        "a stdio server that exits at every start (a key not set) until an operator fixes it and reconnects at 60 s",
        TransportKind::Stdio,
        events,
        2 * MINUTE,
    )
}

fn auth_failure() -> Script {
    let rejected = || WorldEvent::AuthRejected { status: 401 };
    let mut events = vec![
        happen(0, rejected()),
        happen(30 * SECOND, WorldEvent::Up),
        happen(30 * SECOND, WorldEvent::OperatorReconnect),
        happen(90 * SECOND, rejected()),
        happen(150 * SECOND, WorldEvent::Up),
        happen(150 * SECOND, WorldEvent::OperatorReconnect),
    ];
    events.extend(calls(45 * SECOND, 15 * SECOND, 165 * SECOND));
    script(
        "auth-failure",
        "HTTP 401 on connect until an operator fixes the token, then 401 on a call when it expires",
        TransportKind::StreamableHttp,
        events,
        3 * MINUTE,
    )
}

fn slow_server() -> Script {
    let read_only = WorldEvent::Call {
        hints: CallHints {
            idempotent: false,
            read_only: true,
        },
        fails_with: None,
    };
    let events = vec![
        happen(5 * SECOND, WorldEvent::Slow),
        happen(30 * SECOND, read_only),
        happen(12 * MINUTE + 5 * SECOND, WorldEvent::Up),
        happen(13 * MINUTE, call()),
        happen(14 * MINUTE, call()),
    ];
    script(
        "slow-server",
        "an HTTP server whose calls time out and probes fail for 12 minutes, then recovers",
        TransportKind::StreamableHttp,
        events,
        15 * MINUTE,
    )
}

/// Every call from 10 s to 2 min answers HTTP 500, while connections, listings and pings
/// succeed: the builtin puts the server in `error` at the fifth failure in a row, and the
/// reconnections that bring it back come ever more slowly until a call succeeds.
fn failing_tools() -> Script {
    let fails = || WorldEvent::Call {
        hints: CallHints::default(),
        fails_with: Some((FailureKind::HttpStatus(500), true)),
    };
    let mut events: Vec<Happening> = (10 * SECOND..=2 * MINUTE)
        .step_by(10 * SECOND as usize)
        .map(|at_ms| happen(at_ms, fails()))
        .collect();
    events.extend(calls(2 * MINUTE + 10 * SECOND, 10 * SECOND, 3 * MINUTE));
    script(
        "failing-tools",
        "an HTTP server that answers pings but fails every tool call with HTTP 500 for 2 minutes; a call every 10 s",
        TransportKind::StreamableHttp,
        events,
        4 * MINUTE,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_scenario_exists_and_is_in_time_order() {
        for name in NAMES {
            let script = builtin_scenario(name).expect(name);
            assert!(script
                .events
                .windows(2)
                .all(|pair| pair[0].at_ms <= pair[1].at_ms));
            assert!(script
                .events
                .iter()
                .all(|happening| happening.at_ms <= script.end_ms));
        }
    }
}
