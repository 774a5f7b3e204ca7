//! Operator control of a running gateway: the command queue's target (`Control`), and the
//! config file watcher that turns an edit into a `configure` command.

mod watch;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{json, Value};
use wardgate_config::Config;
use wardgate_engine::commands::{
    Command, CommandError, CommandQueue, CommandRecord, CommandTarget, QueueSettings,
};
use wardgate_engine::events::GatewayEvent;
use wardgate_engine::gateway::ActionError;
use wardgate_engine::status::ServerStatus;
use wardgate_engine::Gateway;

use crate::fleet_port::{FleetPort, ModuleUpdate};
use crate::policies::Policies;

pub use watch::ConfigWatcher;

/// Start the command queue with a [`Control`] as its target, and watch the config file.
///
/// - `gateway`: the running gateway the commands act on.
/// - `config_path`: the file the gateway was started with; `configure` re-reads it, and an
///   edit to it (create, modify, rename over, remove — debounced 200 ms) submits `configure`
///   at priority high. A removed or invalid file is rejected and changes nothing.
/// - `policies`: the policy registry, loaded from the start config. `configure` has it load
///   (and watch) the policies a reloaded config adds or changes, and binds the config's
///   servers through it; `reload_policies` reloads every module in use.
/// - `settings`: queue timings; `QueueSettings::default()` for the documented ones.
///
/// Returns the queue (for the admin API: `submit`, `get`, `list`, `wait`) and the watcher,
/// which watches until dropped (`None` when the file cannot be watched: the reason is
/// logged, and `configure` still works on demand). Call inside the tokio runtime.
/// - `member`: in a fleet, the membership: `configure` then composes the file with the
///   fleet's servers and modules, and reports what each new module did.
pub fn start_control(
    gateway: Arc<Gateway>,
    config_path: PathBuf,
    policies: Arc<Policies>,
    settings: QueueSettings,
    member: Option<Arc<dyn FleetPort>>,
) -> (Arc<CommandQueue>, Vec<ConfigWatcher>) {
    let control = Arc::new(Control {
        policies,
        gateway: gateway.clone(),
        config_path: config_path.clone(),
        member,
        queue: OnceLock::new(),
        sign_ins: OnceLock::new(),
    });
    let queue = CommandQueue::start(control.clone(), settings);
    let _ = control.queue.set(Arc::downgrade(&queue));
    let mut watchers = Vec::new();
    // The built-in demo config has no file to watch.
    let watched = config_path
        .exists()
        .then(|| watch::watch(&config_path, Arc::downgrade(&queue)));
    match watched {
        None => tracing::debug!(config = %config_path.display(), "no config file to watch"),
        Some(Ok(watcher)) => watchers.push(watcher),
        Some(Err(error)) => {
            tracing::warn!(
                config = %config_path.display(),
                "cannot watch the config file ({error}); apply edits with `wardgate` commands (configure) instead"
            );
        }
    }
    control.watch_sign_ins();
    (queue, watchers)
}

/// Carries out commands on the real gateway.
///
/// `spawn` starts a server that is not running: enables a disabled one, reconnects one that
/// is offline, in error or permanently failed; `kill` stops a server's process (with its
/// process group, politely: stdin, SIGTERM, SIGKILL) and leaves it `disabled` — the same
/// mechanism as `disable`, but it reports the pid it stopped and succeeds on a server that is
/// already stopped.
pub struct Control {
    gateway: Arc<Gateway>,
    config_path: PathBuf,
    policies: Arc<Policies>,
    member: Option<Arc<dyn FleetPort>>,
    /// The queue that runs these commands (set once it exists), for the watchers' commands.
    queue: OnceLock<Weak<CommandQueue>>,
    /// The watcher of new sign-ins, started by the first config with an OAuth server (at
    /// start or by a reload), so no state directory is made for a config without one.
    sign_ins: OnceLock<ConfigWatcher>,
}

impl Control {
    fn watch_sign_ins(&self) {
        let signs_in = self.gateway.config().servers.values().any(|server| {
            matches!(
                server.transport,
                wardgate_config::TransportConfig::StreamableHttp { oauth: Some(_), .. }
            )
        });
        let Some(queue) = self.queue.get() else {
            return;
        };
        if !signs_in || self.sign_ins.get().is_some() {
            return;
        }
        let tokens = wardgate_engine::upstream::oauth::token_dir();
        match watch::watch_sign_ins(&tokens, queue.clone(), Arc::downgrade(&self.gateway)) {
            Ok(watcher) => {
                let _ = self.sign_ins.set(watcher);
            }
            Err(error) => {
                tracing::warn!(
                    "cannot watch {} for new sign-ins ({error}); after `wardgate auth login NAME`, run `wardgate reconnect NAME`",
                    tokens.display()
                );
            }
        }
    }
}

impl CommandTarget for Control {
    fn execute<'a>(&'a self, command: &'a Command) -> BoxFuture<'a, Result<Value, CommandError>> {
        Box::pin(async move {
            match command {
                Command::Configure => self.configure().await,
                Command::ReloadPolicies => self.reload_policies().await,
                Command::ShadowPolicy { policy, path } => self
                    .policies
                    .shadow(policy, path.as_ref().map(std::path::PathBuf::from))
                    .await
                    .map_err(CommandError::permanent),
                Command::PromoteShadow { policy } => self
                    .policies
                    .promote_shadow(policy)
                    .await
                    .map_err(CommandError::permanent),
                Command::RollbackPolicy { policy } => self
                    .policies
                    .rollback(policy)
                    .map_err(CommandError::permanent),
                Command::Restart { server } => {
                    let since = tokio::time::Instant::now();
                    self.gateway.restart(server).await.map_err(refused)?;
                    self.settled(server, "restart", since).await
                }
                Command::Reconnect { server } => {
                    let since = tokio::time::Instant::now();
                    self.gateway.reconnect(server).await.map_err(refused)?;
                    self.settled(server, "reconnect", since).await
                }
                Command::Enable { server } => {
                    let since = tokio::time::Instant::now();
                    self.gateway.enable(server).await.map_err(refused)?;
                    self.settled(server, "enable", since).await
                }
                Command::Disable { server } => {
                    self.gateway.disable(server).await.map_err(refused)?;
                    Ok(json!({ "server": server, "status": "disabled" }))
                }
                Command::Spawn { server } => self.spawn(server).await,
                Command::Kill { server } => self.kill(server).await,
                Command::HealthCheck { server } => self.health_check(server).await,
            }
        })
    }

    fn observe(&self, record: &CommandRecord) {
        self.gateway.emit(GatewayEvent::Command {
            id: record.id.clone(),
            correlation_id: record.correlation_id.clone(),
            command: record.command.kind().to_owned(),
            server: record.command.server().map(str::to_owned),
            state: record.state.as_str().to_owned(),
            attempts: record.attempts,
            error: record.error.clone(),
        });
    }
}

impl Control {
    /// Re-read the config file (in a fleet: with the fleet's servers and modules); apply it,
    /// or reject it and change nothing.
    async fn configure(&self) -> Result<Value, CommandError> {
        let path = self.config_path.display().to_string();
        let (loaded, updates) = match &self.member {
            Some(member) => match member.compose(&self.config_path).await {
                Ok(composed) => (Ok(composed.config), composed.updates),
                Err(error) if error.unreachable => {
                    return Err(CommandError::transient(error.message))
                }
                Err(error) => (Err(error.message), Vec::new()),
            },
            None => (
                Config::load(&self.config_path).map_err(|error| error.to_string()),
                Vec::new(),
            ),
        };
        let config = match loaded {
            Ok(config) => config,
            Err(reason) => {
                self.gateway.emit(GatewayEvent::ConfigRejected {
                    path,
                    reason: reason.clone(),
                });
                return Err(CommandError::permanent(format!(
                    "{reason}\nthe gateway keeps serving its current config; fix the file and save it again"
                )));
            }
        };
        let binding = self
            .policies
            .prepare(&self.gateway, &config)
            .await
            .map_err(|error| CommandError::permanent(format!("{error:#}")))?;
        let change = self
            .gateway
            .apply_config(&config, |server| {
                binding.policy_for(server, &config.gateway)
            })
            .await;
        self.gateway.emit(GatewayEvent::ConfigApplied {
            path: path.clone(),
            added: change.added.clone(),
            removed: change.removed.clone(),
            modified: change.modified.clone(),
            not_applied: change.not_applied.clone(),
        });
        // A server given `oauth` by this config gets its sign-ins watched from now on.
        self.watch_sign_ins();
        let mut result = serde_json::to_value(&change).unwrap_or_default();
        result["path"] = json!(path);
        if let Some(member) = &self.member {
            let rejected = report_policies(member.as_ref(), &self.policies, &updates).await;
            result["policies"] = json!(updates
                .iter()
                .map(|update| json!({"policy": update.name, "version": update.version}))
                .collect::<Vec<_>>());
            if !rejected.is_empty() {
                return Err(CommandError::permanent(format!(
                    "{}; the servers' changes were applied, and the previous module keeps deciding",
                    rejected.join("; ")
                )));
            }
        }
        Ok(result)
    }

    async fn reload_policies(&self) -> Result<Value, CommandError> {
        self.policies
            .reload()
            .await
            .map_err(CommandError::permanent)
    }

    async fn spawn(&self, server: &str) -> Result<Value, CommandError> {
        let slot = self.gateway.slot(server).ok_or_else(|| unknown(server))?;
        let since = tokio::time::Instant::now();
        match slot.status() {
            ServerStatus::Disabled => self.gateway.enable(server).await.map_err(refused)?,
            status if status.is_online() || status.is_transitional() => {
                return Ok(
                    json!({ "server": server, "status": status.name(), "already_running": true }),
                )
            }
            _ => self.gateway.reconnect(server).await.map_err(refused)?,
        }
        self.settled(server, "start", since).await
    }

    async fn kill(&self, server: &str) -> Result<Value, CommandError> {
        let pid = self
            .gateway
            .server(server)
            .ok_or_else(|| unknown(server))?
            .info
            .pid;
        match self.gateway.disable(server).await {
            Ok(()) | Err(ActionError::Refused(_)) => {}
            Err(error) => return Err(refused(error)),
        }
        Ok(json!({ "server": server, "status": "disabled", "stopped_pid": pid }))
    }

    async fn health_check(&self, server: &str) -> Result<Value, CommandError> {
        let timeout = self
            .gateway
            .settings
            .request_timeout
            .min(Duration::from_secs(60));
        let report = self
            .gateway
            .health_check(server, timeout)
            .await
            .map_err(refused)?;
        if report.ok {
            return Ok(serde_json::to_value(&report).unwrap_or_default());
        }
        let failed = format!(
            "server \"{server}\" failed its health check ({}): {}",
            report.method,
            report.error.unwrap_or_default()
        );
        if report.credentials_validated == Some(false) {
            // Refused credentials stay refused: another try cannot change that.
            return Err(CommandError::permanent(format!(
                "{failed}; the server refused the configured credentials, so it is now requires_reauth: update them in the config and run `wardgate reconnect {server}`"
            )));
        }
        Err(CommandError::transient(failed))
    }

    /// Wait for a (re)started server to settle: online is success; a failure to come back is
    /// transient (worth retrying) unless only an operator can fix it. The answer says what
    /// the action (`done`: restart, reconnect, ...) just did since `since`, so its advice
    /// never asks for that again.
    async fn settled(
        &self,
        server: &str,
        done: &str,
        since: tokio::time::Instant,
    ) -> Result<Value, CommandError> {
        let slot = self.gateway.slot(server).ok_or_else(|| unknown(server))?;
        let limit = slot
            .config
            .effective_startup_timeout(&self.gateway.settings)
            + Duration::from_secs(1);
        let mut status = slot.watch_status();
        let _ =
            tokio::time::timeout(limit, status.wait_for(|status| !status.is_transitional())).await;
        let now = slot.status();
        let detail = self.gateway.server(server).map(|detail| detail.info);
        if now.is_online() {
            return Ok(
                json!({ "server": server, "status": now.name(), "pid": detail.and_then(|d| d.pid) }),
            );
        }
        let elapsed = humantime::format_duration(Duration::from_millis(
            u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
        ));
        // The action reset the crash budget: every crash counted now was a start it made.
        let starts = detail.as_ref().map_or(0, |detail| detail.crashes_in_window);
        let what_happened = if starts > 0 {
            format!(
                "server \"{server}\": the {done} made {starts} start{} in {elapsed}, {}; it is {now}",
                if starts == 1 { "" } else { "s" },
                if starts == 1 { "which failed" } else { "each failed" },
            )
        } else {
            format!(
                "server \"{server}\": after the {done} ({elapsed}) it is {now}{}",
                detail
                    .and_then(|d| d.last_error)
                    .filter(|error| Some(error.as_str()) != now.reason())
                    .map(|error| format!(" (last error: {error})"))
                    .unwrap_or_default(),
            )
        };
        let message = if now.refuses_calls() && !matches!(now, ServerStatus::Disabled) {
            format!("{what_happened}; fix the cause, then run `wardgate reconnect {server}` again")
        } else {
            format!("{what_happened}; {}", now.remedy(server))
        };
        if now.refuses_calls() {
            Err(CommandError::permanent(message))
        } else {
            Err(CommandError::transient(message))
        }
    }
}

/// Load each module version a fleet config brought, and report to the fleet whether it now
/// decides or was rejected (and why). Returns the rejections, in words.
pub async fn report_policies(
    member: &dyn FleetPort,
    policies: &Policies,
    updates: &[ModuleUpdate],
) -> Vec<String> {
    let mut rejected = Vec::new();
    for update in updates {
        if let Some(Err(reason)) = policies.reload_named(&update.name).await {
            tracing::debug!(policy = %update.name, "{reason}");
        }
        let outcome = policies.deciding_with(&update.name, &update.sha256);
        if let Err(reason) = &outcome {
            rejected.push(format!(
                "policy {:?} version {} was rejected on member {:?}: {reason}",
                update.name,
                update.version,
                member.name()
            ));
        }
        member.report_policy(update, &outcome).await;
    }
    rejected
}

fn unknown(server: &str) -> CommandError {
    CommandError::permanent(format!(
        "no server named \"{server}\" is configured; see `wardgate servers` for the names, or add [servers.{server}] to the config"
    ))
}

/// An operator action the gateway refused: no retry can change that.
fn refused(error: ActionError) -> CommandError {
    match error {
        ActionError::UnknownServer(server) => unknown(&server),
        other => CommandError::permanent(other.to_string()),
    }
}
