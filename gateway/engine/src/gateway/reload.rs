//! Applying a new config to a running gateway: start added servers, stop removed ones,
//! restart modified ones, and leave every other server alone.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use wardgate_policy::RecoveryPolicy;

use super::{Gateway, Slot, Supervised};
use crate::config::{Config, GatewaySettings, PolicyConfig, ServerConfig};
use crate::lock::write;
use crate::slot::SlotWriter;

/// What [`Gateway::apply_config`] did, by server name (each list sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ConfigChange {
    /// New servers, now starting (provisioning → … → online).
    pub added: Vec<String>,
    /// Servers no longer configured: stopped (no process left) and out of the catalogue.
    pub removed: Vec<String>,
    /// Servers whose config or bound policy changed: stopped and started with the new config.
    pub modified: Vec<String>,
    /// Servers left running as they were: connections and in-flight calls untouched.
    pub unchanged: Vec<String>,
    /// `[gateway]` settings that differ from the running ones but take effect only when the
    /// gateway restarts (each named as in the config file).
    pub not_applied: Vec<String>,
}

impl ConfigChange {
    /// Nothing was started, stopped or restarted.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.modified.is_empty()
    }
}

impl Gateway {
    /// Make the running server set match `new`. Added servers start; removed servers stop by
    /// the gateway's shutdown path (close stdin → grace → SIGTERM → grace → SIGKILL of the
    /// process group) and leave the catalogue; modified servers — any change of their
    /// `ServerConfig`, of the policy they are bound to, or of that policy's definition — stop
    /// and start again with the new config; every other server is not touched. Clients get
    /// list_changed only for lists whose content changed. `policy_for` is asked only for the
    /// servers that (re)start. Returns once removed and modified servers have stopped (new
    /// ones are then starting); after shutdown it changes nothing.
    pub async fn apply_config(
        self: &Arc<Self>,
        new: &Config,
        policy_for: impl Fn(&ServerConfig) -> Arc<dyn RecoveryPolicy>,
    ) -> ConfigChange {
        let mut supervisors = self.supervisors.lock().await;
        let old = self.config();
        let mut change = diff(&old, new);
        if self.shutdown.is_cancelled() {
            return ConfigChange::default();
        }
        let stopping: Vec<String> = change
            .removed
            .iter()
            .chain(&change.modified)
            .cloned()
            .collect();
        let stopped: Vec<Supervised> = stopping
            .iter()
            .filter_map(|name| supervisors.remove(name))
            .collect();
        for supervised in &stopped {
            supervised.stop.cancel();
        }

        let writers =
            futures::future::join_all(stopped.into_iter().map(|supervised| supervised.task)).await;
        let old_slots = self.announcer.slot_map();
        let mut slots: BTreeMap<String, Arc<Slot>> = (*old_slots).clone();
        for name in &change.removed {
            slots.remove(name);
        }
        let mut starting = Vec::new();
        for name in change.added.iter().chain(&change.modified) {
            let Some(server) = new.servers.get(name) else {
                continue;
            };
            let (writer, receiver) =
                Slot::create(server, policy_for(server), self.settings.startup_wait);
            slots.insert(name.clone(), writer.slot().clone());
            starting.push((writer, receiver));
        }
        self.announcer.set_slots(slots);
        // Per-client instances of changed servers stop once the new slots are in the map:
        // `Gateway::route` checks the map under the same lock, so none starts from the old
        // config after this.
        for name in &change.removed {
            self.stop_server_instances(name, "its server was removed from the config");
        }
        for name in &change.modified {
            self.stop_server_instances(name, "its server's config changed");
        }
        // Retired once their replacements are in the map: a call still holding an old slot
        // must not wait for a supervisor that is gone, and when it wakes it finds the new
        // slot of a modified server, not the old one again.
        for writer in writers.into_iter().flatten() {
            let replaced = !change.removed.contains(&writer.slot().name);
            self.retire(writer, replaced);
        }
        // Started once they are in the map, so their first catalogue rebuild includes them.
        for (writer, receiver) in starting {
            let name = writer.slot().name.clone();
            supervisors.insert(name, self.supervise(writer, receiver));
        }
        *write(&self.config) = Arc::new(new.clone());
        self.rebuild_catalogue();
        change.not_applied = settings_not_applied(&self.settings, &new.gateway);
        tracing::info!(
            added = ?change.added, removed = ?change.removed, modified = ?change.modified,
            "config applied"
        );
        change
    }

    /// A slot whose supervisor has stopped for good (its writer handed back): its status
    /// refuses calls from now on.
    fn retire(&self, writer: SlotWriter, replaced: bool) {
        let name = writer.slot().name.clone();
        let reason = if replaced {
            "its config changed; restarting with the new one"
        } else {
            "removed from the config"
        };
        if let Some((from, to)) = writer.retire(replaced) {
            // A removed server is gone on purpose, whatever state it was in (one that was
            // disabled said so then).
            if !replaced {
                self.announcer.disconnected(&name, reason);
            }
            self.announcer.status_changed(&name, &from, &to, reason);
            if from.is_online() {
                self.announcer.rebuild_catalogue();
            }
        }
    }
}

/// Which servers were added, removed, modified or left as they were.
fn diff(old: &Config, new: &Config) -> ConfigChange {
    let mut change = ConfigChange::default();
    for (name, server) in &new.servers {
        match old.servers.get(name) {
            None => change.added.push(name.clone()),
            Some(previous)
                if previous != server || binding(old, previous) != binding(new, server) =>
            {
                change.modified.push(name.clone())
            }
            Some(_) => change.unchanged.push(name.clone()),
        }
    }
    change.removed = old
        .servers
        .keys()
        .filter(|name| !new.servers.contains_key(*name))
        .cloned()
        .collect();
    change
}

/// The policy a server is bound to, with its definition (`None`: the builtin).
fn binding<'a>(
    config: &'a Config,
    server: &'a ServerConfig,
) -> Option<(&'a str, Option<&'a PolicyConfig>)> {
    server
        .effective_policy(&config.gateway)
        .map(|name| (name, config.policies.get(name)))
}

/// `[gateway]` settings that differ; the running gateway keeps its own.
fn settings_not_applied(running: &GatewaySettings, new: &GatewaySettings) -> Vec<String> {
    let mut names = Vec::new();
    let mut check = |name: &str, differs: bool| {
        if differs {
            names.push(name.to_owned());
        }
    };
    check("separator", running.separator != new.separator);
    check(
        "request_timeout",
        running.request_timeout != new.request_timeout,
    );
    check(
        "startup_timeout",
        running.startup_timeout != new.startup_timeout,
    );
    check("startup_wait", running.startup_wait != new.startup_wait);
    check(
        "shutdown_grace",
        running.shutdown_grace != new.shutdown_grace,
    );
    check("kill_grace", running.kill_grace != new.kill_grace);
    check(
        "list_unavailable_tools",
        running.list_unavailable_tools != new.list_unavailable_tools,
    );
    check(
        "tool_discovery",
        running.tool_discovery != new.tool_discovery,
    );
    check(
        "expose_admin_tools",
        running.expose_admin_tools != new.expose_admin_tools,
    );
    check("max_instances", running.max_instances != new.max_instances);
    check("http", running.http != new.http);
    check("auth", running.auth != new.auth);
    // The exporters are set up once, at start; only the status page's `trace_url` (read
    // from the config as it is now) follows a reload.
    let exported = |telemetry: &Option<crate::config::Telemetry>| {
        telemetry.clone().map(|mut telemetry| {
            telemetry.trace_url = None;
            telemetry
        })
    };
    check(
        "telemetry",
        exported(&running.telemetry) != exported(&new.telemetry),
    );
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> Config {
        Config::parse(Path::new("/tmp/wardgate.toml"), text, &|_| None).expect("valid config")
    }

    #[test]
    fn diff_sorts_servers_into_added_removed_modified_and_unchanged() {
        let old = parse(
            "[servers.keep]\ncommand = \"a\"\n[servers.gone]\ncommand = \"b\"\n\
             [servers.edit]\ncommand = \"c\"\n",
        );
        let new = parse(
            "[servers.keep]\ncommand = \"a\"\n[servers.edit]\ncommand = \"c\"\nargs = [\"x\"]\n\
             [servers.fresh]\ncommand = \"d\"\n",
        );
        let change = diff(&old, &new);
        assert_eq!(change.added, ["fresh"]);
        assert_eq!(change.removed, ["gone"]);
        assert_eq!(change.modified, ["edit"]);
        assert_eq!(change.unchanged, ["keep"]);
    }

    #[test]
    fn a_changed_policy_definition_modifies_the_servers_bound_to_it() {
        let old = parse(
            "[policies.p]\npath = \"/p.wasm\"\n[servers.bound]\ncommand = \"a\"\npolicy = \"p\"\n\
             [servers.free]\ncommand = \"b\"\n",
        );
        let new = parse(
            "[policies.p]\npath = \"/p.wasm\"\nparams = { max_crashes = \"9\" }\n\
             [servers.bound]\ncommand = \"a\"\npolicy = \"p\"\n[servers.free]\ncommand = \"b\"\n",
        );
        let change = diff(&old, &new);
        assert_eq!(change.modified, ["bound"]);
        assert_eq!(change.unchanged, ["free"]);
    }
}
