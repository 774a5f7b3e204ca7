//! Gateway events: what operators and clients are told happened, as one closed enum.

use serde::Serialize;

use crate::catalogue::Counts;
use crate::config::Grant;

/// Something worth telling: logged, sent to clients as `notifications/message` (logger
/// `wardgate`), and published to subscribers (the admin API).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum GatewayEvent {
    StatusChanged {
        server: String,
        from: String,
        to: String,
        reason: String,
    },
    /// The server was disconnected on purpose (`intentional`): disabled or removed from the
    /// config, in whatever state it was, or reconnected or restarted by an operator while
    /// it served. A connection lost by accident is a `status_changed` instead.
    Disconnected {
        server: String,
        intentional: bool,
        reason: String,
    },
    /// Reconnection attempt `attempt` is due in `next_delay_ms`; `reason` says why the
    /// attempt before it failed (absent after a lost connection, which `status_changed` said).
    Reconnecting {
        server: String,
        attempt: u32,
        next_delay_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The server's status while the attempt waits: `reconnecting`, or `error` for a
        /// server that answers but fails (no `status_changed` says it again).
        status: String,
    },
    /// Online again after an outage, a crash, or an operator's reconnect or restart.
    Reconnected {
        server: String,
        /// Scheduled reconnection attempts it took (0: the first attempt succeeded).
        attempts: u32,
        /// What the server declared it can do on this connection.
        capabilities: serde_json::Value,
    },
    HealthDegraded {
        server: String,
        consecutive_failures: u32,
        /// The last probe's, call's or check's failure.
        last_error: Option<String>,
    },
    HealthRestored {
        server: String,
    },
    PermanentlyFailed {
        server: String,
        crashes: u32,
        reason: String,
    },
    /// What clients can list changed: the counts of the whole catalogue (to a client that
    /// may use only some servers, of what it can list), and the servers whose entries changed.
    ToolsChanged {
        tools: usize,
        prompts: usize,
        resources: usize,
        servers: Vec<String>,
    },
    /// A policy module was loaded or swapped in.
    PolicyLoaded {
        policy: String,
        path: String,
        module: String,
        version: String,
    },
    /// A policy module was refused; the previous one (or the builtin) keeps deciding.
    PolicyRejected {
        policy: String,
        path: String,
        reason: String,
    },
    /// A policy module failed a decision; the builtin answered it.
    PolicyFaulted {
        policy: String,
        decision: String,
        fault: String,
    },
    /// A changed config file was applied: these servers started, stopped or restarted.
    ConfigApplied {
        path: String,
        added: Vec<String>,
        removed: Vec<String>,
        modified: Vec<String>,
        /// `[gateway]` settings that changed but need a gateway restart.
        not_applied: Vec<String>,
    },
    /// A config file was refused; the gateway keeps serving the config it had.
    ConfigRejected {
        path: String,
        reason: String,
    },
    /// Two servers' items would be listed under one name, where either server is unprefixed
    /// or the name is a rename: the first keeps it, the second is not listed or routed.
    NameCollision {
        /// "tool", "prompt", "resource" or "resource template".
        kind: String,
        listed: String,
        server: String,
        item: String,
        left_out_server: String,
        left_out_item: String,
        /// What to change, in words.
        reason: String,
    },
    /// A server with an instance per client started one (`instance`, `SERVER#N`: the name
    /// its statuses, journal and decisions go by) for a client (`owner`: `session N` or
    /// `client NAME`). Operators' news only, like everything an instance does.
    InstanceStarted {
        server: String,
        instance: String,
        owner: String,
    },
    /// An instance stopped: it was idle, its session ended, its server's config changed or
    /// was removed, or the gateway stopped.
    InstanceStopped {
        server: String,
        instance: String,
        reason: String,
    },
    /// An operator command changed state (see `commands::CommandRecord`).
    Command {
        /// `cmd-N`; named apart from the number an event log gives each event.
        #[serde(rename = "command_id")]
        id: String,
        correlation_id: String,
        command: String,
        server: Option<String>,
        state: String,
        attempts: u32,
        error: Option<String>,
    },
}

impl GatewayEvent {
    /// This event as a client that may use only what `grant` allows hears it, or `None`
    /// when it is about nothing that client may use: an event about one server only if the
    /// grant reaches that server; `tools_changed` only if the change touched such a server,
    /// with its servers narrowed to them and its counts (`counts`) of what the client can
    /// list; `config_applied` with its server lists narrowed (and no `[gateway]` settings),
    /// if any server is left; the gateway's own news (policies, a rejected config, a
    /// command on no server) not at all.
    pub fn as_heard_by(
        &self,
        grant: &Grant,
        counts: impl FnOnce() -> Counts,
    ) -> Option<GatewayEvent> {
        if matches!(grant, Grant::All) {
            return Some(self.clone());
        }
        let may_use = |server: &String| grant.allows_server_any(server);
        let narrow = |servers: &[String]| -> Vec<String> {
            servers
                .iter()
                .filter(|server| may_use(server))
                .cloned()
                .collect()
        };
        match self {
            GatewayEvent::StatusChanged { server, .. }
            | GatewayEvent::Disconnected { server, .. }
            | GatewayEvent::Reconnecting { server, .. }
            | GatewayEvent::Reconnected { server, .. }
            | GatewayEvent::HealthDegraded { server, .. }
            | GatewayEvent::HealthRestored { server }
            | GatewayEvent::PermanentlyFailed { server, .. }
            | GatewayEvent::Command {
                server: Some(server),
                ..
            } => may_use(server).then(|| self.clone()),
            GatewayEvent::ToolsChanged { servers, .. } => {
                let servers = narrow(servers);
                if servers.is_empty() {
                    return None;
                }
                let counts = counts();
                Some(GatewayEvent::ToolsChanged {
                    tools: counts.tools,
                    prompts: counts.prompts,
                    resources: counts.resources,
                    servers,
                })
            }
            GatewayEvent::ConfigApplied {
                path,
                added,
                removed,
                modified,
                not_applied: _,
            } => {
                let (added, removed, modified) = (narrow(added), narrow(removed), narrow(modified));
                if added.is_empty() && removed.is_empty() && modified.is_empty() {
                    return None;
                }
                Some(GatewayEvent::ConfigApplied {
                    path: path.clone(),
                    added,
                    removed,
                    modified,
                    not_applied: Vec::new(),
                })
            }
            GatewayEvent::PolicyLoaded { .. }
            | GatewayEvent::PolicyRejected { .. }
            | GatewayEvent::PolicyFaulted { .. }
            | GatewayEvent::ConfigRejected { .. }
            | GatewayEvent::NameCollision { .. }
            | GatewayEvent::InstanceStarted { .. }
            | GatewayEvent::InstanceStopped { .. }
            | GatewayEvent::Command { server: None, .. } => None,
        }
    }

    /// Events that call for attention are warnings; the rest are information.
    pub fn is_warning(&self) -> bool {
        match self {
            GatewayEvent::StatusChanged { to, .. } => {
                matches!(
                    to.as_str(),
                    "offline" | "error" | "requires_reauth" | "permanently_failed"
                )
            }
            GatewayEvent::Command { state, .. } => state == "failed" || state == "expired",
            GatewayEvent::HealthDegraded { .. }
            | GatewayEvent::PermanentlyFailed { .. }
            | GatewayEvent::PolicyRejected { .. }
            | GatewayEvent::PolicyFaulted { .. }
            | GatewayEvent::ConfigRejected { .. }
            | GatewayEvent::NameCollision { .. } => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NamePattern;

    fn only(patterns: &[&str]) -> Grant {
        Grant::Only(
            patterns
                .iter()
                .map(|pattern| NamePattern::parse_known(pattern, "__", &["alpha", "beta"]))
                .collect(),
        )
    }

    fn status(server: &str) -> GatewayEvent {
        GatewayEvent::StatusChanged {
            server: server.into(),
            from: "online".into(),
            to: "offline".into(),
            reason: "connection refused".into(),
        }
    }

    const OWN: Counts = Counts {
        tools: 2,
        prompts: 1,
        resources: 0,
    };

    #[test]
    fn a_restricted_client_hears_of_its_own_servers_only() {
        let alpha = only(&["alpha__echo"]);
        let heard = |event: &GatewayEvent| event.as_heard_by(&alpha, || OWN);
        assert_eq!(heard(&status("alpha")), Some(status("alpha")));
        assert_eq!(heard(&status("beta")), None);
        let policy = GatewayEvent::PolicyFaulted {
            policy: "p".into(),
            decision: "classify".into(),
            fault: "trap".into(),
        };
        assert_eq!(heard(&policy), None);
        // Told everything, a client allowed everything hears the event as it is.
        assert_eq!(
            status("beta").as_heard_by(&Grant::All, || OWN),
            Some(status("beta"))
        );
    }

    #[test]
    fn tools_changed_counts_what_the_client_lists_and_only_its_servers_changes() {
        let alpha = only(&["alpha"]);
        let changed = |servers: &[&str]| GatewayEvent::ToolsChanged {
            tools: 40,
            prompts: 4,
            resources: 9,
            servers: servers.iter().map(|server| server.to_string()).collect(),
        };
        assert_eq!(changed(&["beta"]).as_heard_by(&alpha, || OWN), None);
        assert_eq!(
            changed(&["alpha", "beta"]).as_heard_by(&alpha, || OWN),
            Some(GatewayEvent::ToolsChanged {
                tools: 2,
                prompts: 1,
                resources: 0,
                servers: vec!["alpha".into()],
            })
        );
    }

    #[test]
    fn a_config_change_names_only_the_clients_servers() {
        let alpha = only(&["alpha"]);
        let applied = |added: &[&str], removed: &[&str]| GatewayEvent::ConfigApplied {
            path: "/etc/wardgate.toml".into(),
            added: added.iter().map(|server| server.to_string()).collect(),
            removed: removed.iter().map(|server| server.to_string()).collect(),
            modified: Vec::new(),
            not_applied: vec!["separator".into()],
        };
        assert_eq!(applied(&["beta"], &[]).as_heard_by(&alpha, || OWN), None);
        assert_eq!(
            applied(&["beta"], &["alpha"]).as_heard_by(&alpha, || OWN),
            Some(GatewayEvent::ConfigApplied {
                path: "/etc/wardgate.toml".into(),
                added: Vec::new(),
                removed: vec!["alpha".into()],
                modified: Vec::new(),
                not_applied: Vec::new(),
            })
        );
    }
}
