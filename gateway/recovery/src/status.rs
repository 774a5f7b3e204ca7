//! Per-server status: what is true of a server now, as clients and operators see it.

use std::fmt;

/// The lifecycle state of one configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerStatus {
    Provisioning,
    Connecting,
    DiscoveringTools,
    Online {
        degraded: bool,
    },
    /// After a crash (`attempt`: the crashes in the policy's window), or an operator's
    /// restart (`attempt: 0`).
    Restarting {
        attempt: u32,
    },
    Reconnecting {
        attempt: u32,
        next_try_in_ms: u64,
    },
    Offline {
        reason: String,
    },
    Error {
        reason: String,
    },
    RequiresReauth {
        reason: String,
    },
    PermanentlyFailed {
        reason: String,
    },
    Disabled,
}

/// Which status a server has, without what it carries: what status reports, rows and
/// comparisons use instead of the status's name as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusName {
    Provisioning,
    Connecting,
    DiscoveringTools,
    Online,
    Restarting,
    Reconnecting,
    Offline,
    Error,
    RequiresReauth,
    PermanentlyFailed,
    Disabled,
}

impl StatusName {
    /// The name clients, operators and metric labels see.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusName::Provisioning => "provisioning",
            StatusName::Connecting => "connecting",
            StatusName::DiscoveringTools => "discovering_tools",
            StatusName::Online => "online",
            StatusName::Restarting => "restarting",
            StatusName::Reconnecting => "reconnecting",
            StatusName::Offline => "offline",
            StatusName::Error => "error",
            StatusName::RequiresReauth => "requires_reauth",
            StatusName::PermanentlyFailed => "permanently_failed",
            StatusName::Disabled => "disabled",
        }
    }
}

impl std::fmt::Display for StatusName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ServerStatus {
    /// Which status this is.
    pub fn kind(&self) -> StatusName {
        match self {
            ServerStatus::Provisioning => StatusName::Provisioning,
            ServerStatus::Connecting => StatusName::Connecting,
            ServerStatus::DiscoveringTools => StatusName::DiscoveringTools,
            ServerStatus::Online { .. } => StatusName::Online,
            ServerStatus::Restarting { .. } => StatusName::Restarting,
            ServerStatus::Reconnecting { .. } => StatusName::Reconnecting,
            ServerStatus::Offline { .. } => StatusName::Offline,
            ServerStatus::Error { .. } => StatusName::Error,
            ServerStatus::RequiresReauth { .. } => StatusName::RequiresReauth,
            ServerStatus::PermanentlyFailed { .. } => StatusName::PermanentlyFailed,
            ServerStatus::Disabled => StatusName::Disabled,
        }
    }

    /// Every status's [`name`](Self::name), in the order of the variants: what the
    /// `server_status` metric has a series for, and the status page a colour for.
    pub const NAMES: [&'static str; 11] = [
        "provisioning",
        "connecting",
        "discovering_tools",
        "online",
        "restarting",
        "reconnecting",
        "offline",
        "error",
        "requires_reauth",
        "permanently_failed",
        "disabled",
    ];

    pub fn name(&self) -> &'static str {
        self.kind().as_str()
    }

    pub fn is_online(&self) -> bool {
        matches!(self, ServerStatus::Online { .. })
    }

    /// States a call cannot change: it fails at once with the action that fixes it.
    pub fn refuses_calls(&self) -> bool {
        matches!(
            self,
            ServerStatus::RequiresReauth { .. }
                | ServerStatus::PermanentlyFailed { .. }
                | ServerStatus::Disabled
        )
    }

    /// States on the way to online: a call waits for them to settle.
    pub fn is_transitional(&self) -> bool {
        matches!(
            self,
            ServerStatus::Provisioning
                | ServerStatus::Connecting
                | ServerStatus::DiscoveringTools
                | ServerStatus::Restarting { .. }
        )
    }

    /// What an operator or user should do about a server in this state.
    pub fn remedy(&self, server: &str) -> String {
        match self {
            ServerStatus::RequiresReauth { .. } => format!(
                "sign in again with `wardgate auth login {server}` if it uses OAuth (it reconnects by itself), or update its credentials in the config and run `wardgate reconnect {server}`"
            ),
            ServerStatus::PermanentlyFailed { .. } => format!(
                "fix the cause it names (the server's whole output is in the gateway's log, target wardgate::upstream::stderr), then run `wardgate reconnect {server}`"
            ),
            ServerStatus::Disabled => format!("enable it with `wardgate enable {server}`"),
            ServerStatus::Offline { .. } | ServerStatus::Reconnecting { .. } => {
                "the gateway keeps reconnecting; check that the server is running and reachable".into()
            }
            ServerStatus::Error { .. } => "check the gateway log for the server's last error".into(),
            _ => "wait for the server to come online".into(),
        }
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            ServerStatus::Offline { reason }
            | ServerStatus::Error { reason }
            | ServerStatus::RequiresReauth { reason }
            | ServerStatus::PermanentlyFailed { reason } => Some(reason),
            _ => None,
        }
    }
}

impl fmt::Display for ServerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match self {
            ServerStatus::Online { degraded: true } => f.write_str(" (degraded)"),
            // Attempt 0: an operator's restart, not a crash.
            ServerStatus::Restarting { attempt: 0 } => Ok(()),
            ServerStatus::Restarting { attempt } => write!(f, " (attempt {attempt})"),
            ServerStatus::Reconnecting {
                attempt,
                next_try_in_ms,
            } => {
                write!(f, " (attempt {attempt}, next try in {next_try_in_ms} ms)")
            }
            _ => match self.reason() {
                Some(reason) => write!(f, ": {reason}"),
                None => Ok(()),
            },
        }
    }
}

#[cfg(test)]
mod names_tests {
    use super::ServerStatus;

    /// One of each variant, in order: a new variant must be added here (the match makes it
    /// a compile error to forget), and so to `NAMES`.
    fn one_of_each() -> Vec<ServerStatus> {
        let reason = String::new;
        let all = vec![
            ServerStatus::Provisioning,
            ServerStatus::Connecting,
            ServerStatus::DiscoveringTools,
            ServerStatus::Online { degraded: false },
            ServerStatus::Restarting { attempt: 0 },
            ServerStatus::Reconnecting {
                attempt: 0,
                next_try_in_ms: 0,
            },
            ServerStatus::Offline { reason: reason() },
            ServerStatus::Error { reason: reason() },
            ServerStatus::RequiresReauth { reason: reason() },
            ServerStatus::PermanentlyFailed { reason: reason() },
            ServerStatus::Disabled,
        ];
        for status in &all {
            match status {
                ServerStatus::Provisioning
                | ServerStatus::Connecting
                | ServerStatus::DiscoveringTools
                | ServerStatus::Online { .. }
                | ServerStatus::Restarting { .. }
                | ServerStatus::Reconnecting { .. }
                | ServerStatus::Offline { .. }
                | ServerStatus::Error { .. }
                | ServerStatus::RequiresReauth { .. }
                | ServerStatus::PermanentlyFailed { .. }
                | ServerStatus::Disabled => {}
            }
        }
        all
    }

    #[test]
    fn names_lists_every_status_s_name_in_order() {
        let names: Vec<&str> = one_of_each().iter().map(ServerStatus::name).collect();
        assert_eq!(names, ServerStatus::NAMES);
    }
}
