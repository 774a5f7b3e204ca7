//! The server lifecycle as one state machine: (status, event) → status, nothing else.
//!
//! The [`crate::Machine`] decides *which* event happened (with the policy's help); this
//! module alone decides what status follows. A pair that has no transition is refused, so an
//! impossible sequence (say, "initialized" while disabled) can never corrupt a status.

use wardgate_policy::{ExitInfo, FailureStatus};

use crate::status::ServerStatus;

/// Something that happened to a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LifecycleEvent {
    /// A connection attempt begins (first start, restart, reconnect, or enable).
    Connect,
    /// `initialize` succeeded; discovery follows.
    Initialized,
    /// The server serves: discovery finished, or a known snapshot is reused while it refreshes.
    Ready,
    /// A connection attempt failed.
    ConnectFailed {
        status: FailureStatus,
        reason: String,
    },
    /// A live connection was lost (a call's failure, a closed transport).
    ConnectionLost {
        status: FailureStatus,
        reason: String,
    },
    /// The policy scheduled reconnection attempt `attempt` after `delay_ms`.
    ReconnectScheduled { attempt: u32, delay_ms: u64 },
    /// The policy stopped reconnecting.
    ReconnectStopped { attempts: u32, reason: String },
    /// A stdio process exited; the policy allows a restart.
    Crashed { exit: ExitInfo, crashes: u32 },
    /// A stdio process exited; the policy's crash budget is spent. `reason` says how it
    /// ended, in its own last words where it said any.
    CrashBudgetSpent {
        exit: ExitInfo,
        crashes: u32,
        reason: String,
    },
    /// The server and the gateway have no protocol revision in common: no retry can help
    /// until one of them changes.
    Incompatible { reason: String },
    /// A health verdict on a live connection.
    Health { degraded: bool },
    /// An operator asked for a restart (the connection, and a stdio server's process).
    Restart,
    /// An operator disabled the server.
    Disable,
    /// An operator enabled it again.
    Enable,
}

/// A transition the state machine refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub from: String,
    pub event: LifecycleEvent,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no transition from {} on {:?}", self.from, self.event)
    }
}

impl std::error::Error for Refused {}

fn failed(status: FailureStatus, reason: &str) -> ServerStatus {
    let reason = reason.to_owned();
    match status {
        FailureStatus::Offline => ServerStatus::Offline { reason },
        FailureStatus::Error => ServerStatus::Error { reason },
        FailureStatus::RequiresReauth => ServerStatus::RequiresReauth { reason },
    }
}

/// The status that follows `event` in `status`.
pub fn transition(status: &ServerStatus, event: &LifecycleEvent) -> Result<ServerStatus, Refused> {
    use LifecycleEvent as E;
    use ServerStatus as S;
    let next = match (status, event) {
        // Disabled is left only by Enable; Disable works from anywhere.
        (S::Disabled, E::Enable) => S::Provisioning,
        (S::Disabled, _) => return Err(refused(status, event)),
        (_, E::Disable) => S::Disabled,
        (_, E::Enable) => return Err(refused(status, event)),

        // Starting up.
        (
            S::Provisioning
            | S::Restarting { .. }
            | S::Reconnecting { .. }
            | S::Offline { .. }
            | S::Error { .. }
            | S::RequiresReauth { .. }
            | S::PermanentlyFailed { .. }
            | S::Online { .. }
            | S::Connecting,
            E::Connect,
        ) => S::Connecting,
        (S::Connecting, E::Initialized) => S::DiscoveringTools,
        // An operator's restart: announced as such, then a connection attempt follows.
        (_, E::Restart) => S::Restarting { attempt: 0 },
        (S::Connecting | S::DiscoveringTools, E::Ready) => S::Online { degraded: false },
        (S::Connecting | S::DiscoveringTools, E::ConnectFailed { status, reason }) => {
            failed(*status, reason)
        }

        // Serving.
        (S::Online { .. }, E::Health { degraded }) => S::Online {
            degraded: *degraded,
        },
        (S::Online { .. }, E::ConnectionLost { status, reason }) => failed(*status, reason),

        // Recovering. A server in `error` answers but fails: it stays `error` (its tools
        // hidden) while the next attempt is scheduled, and the first success ends it. A
        // crash can happen while connecting or discovering too.
        (S::Error { reason }, E::ReconnectScheduled { .. }) => S::Error {
            reason: reason.clone(),
        },
        (S::Offline { .. }, E::ReconnectScheduled { attempt, delay_ms }) => S::Reconnecting {
            attempt: *attempt,
            next_try_in_ms: *delay_ms,
        },
        (S::Offline { .. } | S::Error { .. }, E::ReconnectStopped { attempts, reason }) => {
            S::PermanentlyFailed {
                reason: format!("gave up reconnecting after {attempts} attempts: {reason}"),
            }
        }
        (S::Online { .. } | S::Connecting | S::DiscoveringTools, E::Crashed { crashes, .. }) => {
            S::Restarting { attempt: *crashes }
        }
        (
            S::Online { .. } | S::Connecting | S::DiscoveringTools,
            E::CrashBudgetSpent {
                crashes, reason, ..
            },
        ) => S::PermanentlyFailed {
            reason: format!("{crashes} crashes spent the crash budget; the last: {reason}"),
        },
        (S::Connecting | S::DiscoveringTools, E::Incompatible { reason }) => S::PermanentlyFailed {
            reason: reason.clone(),
        },
        _ => return Err(refused(status, event)),
    };
    Ok(next)
}

fn refused(status: &ServerStatus, event: &LifecycleEvent) -> Refused {
    Refused {
        from: status.name().to_owned(),
        event: event.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LifecycleEvent as E;
    use ServerStatus as S;

    fn exit() -> ExitInfo {
        ExitInfo {
            code: None,
            signal: Some(9),
        }
    }

    fn lost() -> E {
        E::ConnectionLost {
            status: FailureStatus::Offline,
            reason: "closed".into(),
        }
    }

    fn run(events: &[E]) -> Vec<&'static str> {
        let mut status = S::Provisioning;
        let mut names = vec![status.name()];
        for event in events {
            status = transition(&status, event).unwrap_or_else(|refused| panic!("{refused}"));
            names.push(status.name());
        }
        names
    }

    #[test]
    fn first_start_goes_online() {
        assert_eq!(
            run(&[E::Connect, E::Initialized, E::Ready]),
            ["provisioning", "connecting", "discovering_tools", "online"]
        );
    }

    #[test]
    fn http_outage_reconnects() {
        let names = run(&[
            E::Connect,
            E::Initialized,
            E::Ready,
            lost(),
            E::ReconnectScheduled {
                attempt: 1,
                delay_ms: 1000,
            },
            E::Connect,
            E::ConnectFailed {
                status: FailureStatus::Offline,
                reason: "refused".into(),
            },
            E::ReconnectScheduled {
                attempt: 2,
                delay_ms: 2000,
            },
            E::Connect,
            E::Initialized,
            E::Ready,
        ]);
        assert_eq!(
            names,
            [
                "provisioning",
                "connecting",
                "discovering_tools",
                "online",
                "offline",
                "reconnecting",
                "connecting",
                "offline",
                "reconnecting",
                "connecting",
                "discovering_tools",
                "online"
            ]
        );
    }

    #[test]
    fn a_failing_server_stays_in_error_until_an_attempt_succeeds() {
        let failing = E::ConnectionLost {
            status: FailureStatus::Error,
            reason: "5 calls or probes in a row failed".into(),
        };
        let scheduled = E::ReconnectScheduled {
            attempt: 1,
            delay_ms: 1000,
        };
        let names = run(&[
            E::Connect,
            E::Initialized,
            E::Ready,
            failing,
            scheduled.clone(),
            E::Connect,
            E::ConnectFailed {
                status: FailureStatus::Error,
                reason: "tools/list: internal error".into(),
            },
            scheduled,
            E::Connect,
            E::Initialized,
            E::Ready,
        ]);
        assert_eq!(
            names,
            [
                "provisioning",
                "connecting",
                "discovering_tools",
                "online",
                "error",
                "error",
                "connecting",
                "error",
                "error",
                "connecting",
                "discovering_tools",
                "online"
            ]
        );
    }

    #[test]
    fn crash_during_discovery_restarts_or_fails_permanently() {
        let restart = run(&[
            E::Connect,
            E::Initialized,
            E::Crashed {
                exit: exit(),
                crashes: 1,
            },
        ]);
        assert_eq!(restart.last(), Some(&"restarting"));
        let spent = run(&[
            E::Connect,
            E::Initialized,
            E::CrashBudgetSpent {
                exit: exit(),
                crashes: 3,
                reason: "the process exited with code 1".into(),
            },
        ]);
        assert_eq!(spent.last(), Some(&"permanently_failed"));
    }

    #[test]
    fn no_revision_in_common_fails_permanently() {
        let names = run(&[
            E::Connect,
            E::Incompatible {
                reason: "no protocol revision in common".into(),
            },
        ]);
        assert_eq!(names.last(), Some(&"permanently_failed"));
    }

    #[test]
    fn stdio_crash_loop_ends_permanently_failed() {
        let names = run(&[
            E::Connect,
            E::Initialized,
            E::Ready,
            E::Crashed {
                exit: exit(),
                crashes: 1,
            },
            E::Connect,
            E::Initialized,
            E::Ready,
            E::Crashed {
                exit: exit(),
                crashes: 2,
            },
            E::Connect,
            E::Initialized,
            E::Ready,
            E::CrashBudgetSpent {
                exit: exit(),
                crashes: 3,
                reason: "the process exited with code 1".into(),
            },
        ]);
        assert_eq!(names.last(), Some(&"permanently_failed"));
        assert_eq!(names.iter().filter(|n| **n == "restarting").count(), 2);
    }

    #[test]
    fn auth_failure_parks_until_an_operator_reconnects() {
        let mut status = S::Connecting;
        status = transition(
            &status,
            &E::ConnectFailed {
                status: FailureStatus::RequiresReauth,
                reason: "401".into(),
            },
        )
        .unwrap();
        assert_eq!(status.name(), "requires_reauth");
        assert!(transition(
            &status,
            &E::ReconnectScheduled {
                attempt: 1,
                delay_ms: 1
            }
        )
        .is_err());
        assert_eq!(transition(&status, &E::Connect).unwrap(), S::Connecting);
    }

    #[test]
    fn disable_works_everywhere_and_only_enable_leaves_it() {
        for status in [
            S::Provisioning,
            S::Connecting,
            S::DiscoveringTools,
            S::Online { degraded: true },
            S::Restarting { attempt: 1 },
            S::Reconnecting {
                attempt: 1,
                next_try_in_ms: 5,
            },
            S::Offline { reason: "x".into() },
            S::Error { reason: "x".into() },
            S::RequiresReauth { reason: "x".into() },
            S::PermanentlyFailed { reason: "x".into() },
        ] {
            assert_eq!(transition(&status, &E::Disable).unwrap(), S::Disabled);
        }
        for event in [
            E::Connect,
            E::Initialized,
            E::Ready,
            lost(),
            E::Health { degraded: true },
        ] {
            assert!(
                transition(&S::Disabled, &event).is_err(),
                "{event:?} left disabled"
            );
        }
        assert_eq!(
            transition(&S::Disabled, &E::Enable).unwrap(),
            S::Provisioning
        );
    }

    #[test]
    fn health_only_flags_an_online_server() {
        let degraded = transition(
            &S::Online { degraded: false },
            &E::Health { degraded: true },
        )
        .unwrap();
        assert_eq!(degraded, S::Online { degraded: true });
        assert_eq!(
            transition(&degraded, &E::Health { degraded: false }).unwrap(),
            S::Online { degraded: false }
        );
        assert!(transition(
            &S::Reconnecting {
                attempt: 1,
                next_try_in_ms: 1
            },
            &E::Health { degraded: true }
        )
        .is_err());
    }

    #[test]
    fn a_stale_loss_cannot_take_down_a_connecting_server() {
        // The supervisor filters losses by generation; the machine refuses them too.
        assert!(transition(&S::Connecting, &lost()).is_err());
        assert!(transition(
            &S::Reconnecting {
                attempt: 1,
                next_try_in_ms: 1
            },
            &lost()
        )
        .is_err());
    }
}
