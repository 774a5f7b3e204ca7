//! The policy registry of a serving gateway: loads the configured modules, watches their
//! files, binds each server to its policy, and reports what happens to the modules (gateway
//! events, and what the admin API's `/policies`, `/readyz` and `/metrics` show).
//!
//! The modules of the config the gateway started with are one book. A config reload that adds
//! or changes a `[policies.NAME]` loads (and watches) those modules into a book of their own,
//! which the servers of that config bind to and the admin API shows in place of the
//! start-time module of the same name.

use crate::AppError;
mod book;
mod counted;
pub mod decisions;
mod load;
mod report;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use wardgate_config::{Config, GatewaySettings, PolicyConfig, ServerConfig};
use wardgate_engine::Gateway;
use wardgate_policy::RecoveryPolicy;
use wardgate_wasm::{ManagedPolicy, PolicyWatcher};

use book::{PolicyBook, PolicyInfo};
use decisions::DecisionLog;

/// Every policy the gateway decides with, and the watchers of their files.
pub struct Policies {
    /// The book loaded from the config the gateway started with.
    base: Arc<PolicyBook>,
    base_definitions: BTreeMap<String, PolicyConfig>,
    /// Watches the base book's module files once the gateway runs (see [`Policies::attach`]).
    base_watcher: Mutex<Option<PolicyWatcher>>,
    /// The modules config reloads added or changed, when the current config has any.
    added: Mutex<Option<Arc<Added>>>,
    /// Every decision of every server's policy, recent ones kept.
    decisions: Arc<DecisionLog>,
}

/// Policies added or changed by config reloads, with the watcher of their files.
struct Added {
    definitions: BTreeMap<String, PolicyConfig>,
    book: Arc<PolicyBook>,
    _watcher: Option<PolicyWatcher>,
}

/// How the servers of one config bind to policies.
pub struct Binding {
    base: Arc<PolicyBook>,
    added: Option<Arc<Added>>,
    decisions: Arc<DecisionLog>,
}

impl Binding {
    /// The policy `server` decides with, counting its decisions: the one it names, else the
    /// `[gateway] policy` of `settings`, else `builtin`.
    pub fn policy_for(
        &self,
        server: &ServerConfig,
        settings: &GatewaySettings,
    ) -> Arc<dyn RecoveryPolicy> {
        match (&self.added, server.effective_policy(settings)) {
            (Some(added), Some(name)) if added.definitions.contains_key(name) => {
                added.book.policy_for(Some(name), &self.decisions)
            }
            (_, name) => self.base.policy_for(name, &self.decisions),
        }
    }
}

impl Policies {
    /// Load every policy `config` defines. Call before any server starts, so first decisions
    /// already come from the modules. A module that fails to load is logged, and `Builtin`
    /// decides for its servers until a reload succeeds.
    pub async fn load(config: &Config) -> Result<Arc<Policies>, AppError> {
        let base = load::first_load(&config.policies).await?;
        Ok(Arc::new(Policies {
            base,
            base_definitions: config.policies.clone(),
            base_watcher: Mutex::new(None),
            added: Mutex::new(None),
            decisions: DecisionLog::new(),
        }))
    }

    /// How servers bind to policies now: at start, to the modules [`Policies::load`] loaded.
    pub fn binding(&self) -> Binding {
        Binding {
            base: self.base.clone(),
            added: self.lock_added().clone(),
            decisions: self.decisions.clone(),
        }
    }

    /// Once the gateway runs: announce on `gateway` what happens to the modules, and watch
    /// their files (a change reloads the module). Files that cannot be watched are logged, and
    /// SIGHUP still reloads them.
    pub fn attach(&self, gateway: &Arc<Gateway>) {
        self.decisions.attach(gateway);
        report::report_events(gateway, &self.base);
        let managed = self.base.managed();
        if managed.is_empty() {
            return;
        }
        match wardgate_wasm::watch(managed, wardgate_wasm::DEFAULT_DEBOUNCE) {
            Ok(watcher) => *wardgate_engine::lock::lock(&self.base_watcher) = Some(watcher),
            Err(error) => {
                tracing::warn!(
                    "cannot watch policy files ({error}); reload them with SIGHUP instead"
                )
            }
        }
    }

    /// Make ready every policy `config` defines, for applying it to `gateway`: the start-time
    /// ones as they are, and the ones added or changed since loaded from their files (once
    /// per distinct definition), announced and watched. Returns how its servers bind.
    pub async fn prepare(
        &self,
        gateway: &Arc<Gateway>,
        config: &Config,
    ) -> Result<Binding, AppError> {
        let definitions: BTreeMap<String, PolicyConfig> = config
            .policies
            .iter()
            .filter(|(name, policy)| self.base_definitions.get(*name) != Some(*policy))
            .map(|(name, policy)| (name.clone(), policy.clone()))
            .collect();
        let current = self.lock_added().clone();
        let added = match current {
            _ if definitions.is_empty() => None,
            Some(added) if added.definitions == definitions => Some(added),
            _ => {
                let book = load::first_load(&definitions).await?;
                report::report_events(gateway, &book);
                report::announce_first_loads(gateway, &book);
                let managed = book.managed();
                let watcher = wardgate_wasm::watch(managed, wardgate_wasm::DEFAULT_DEBOUNCE)
                    .map_err(|error| {
                        tracing::warn!("cannot watch the added policy files ({error}); reload them with `wardgate policy reload`")
                    })
                    .ok();
                Some(Arc::new(Added {
                    definitions,
                    book,
                    _watcher: watcher,
                }))
            }
        };
        // From here the admin API reports the modules servers are bound to now.
        *self.lock_added() = added.clone();
        Ok(Binding {
            base: self.base.clone(),
            added,
            decisions: self.decisions.clone(),
        })
    }

    /// Reload every module in use (the start-time ones and those added since) from its file.
    /// `Err` says which were rejected; the previous module keeps deciding for each.
    pub async fn reload(&self) -> Result<Value, String> {
        load::reload(self.managed()).await
    }

    /// Reload the module of policy `name` from its file, if one is in use: `Err` says why it
    /// was rejected (the previous module keeps deciding).
    pub async fn reload_named(&self, name: &str) -> Option<Result<(), String>> {
        let module = self
            .managed()
            .into_iter()
            .rev()
            .find(|policy| policy.name() == name)?;
        Some(load::reload(vec![module]).await.map(|_| ()))
    }

    /// Whether policy `name` is deciding with the module whose sha256 is `sha256`; if not,
    /// why not.
    pub fn deciding_with(&self, name: &str, sha256: &str) -> Result<(), String> {
        let Some(info) = self.list().into_iter().find(|info| info.name == name) else {
            return Err(format!("no policy named {name:?} is in use"));
        };
        if info.loaded && info.sha256.as_deref() == Some(sha256) {
            return Ok(());
        }
        Err(info
            .record
            .last_rejection
            .map(|rejection| rejection.reason)
            .unwrap_or_else(|| "the module did not load".to_owned()))
    }

    /// Every policy, as `GET /policies` shows it: the modules loaded at start (unless a
    /// config reload replaced them), `builtin`, and the modules config reloads added.
    pub fn list(&self) -> Vec<PolicyInfo> {
        let added = self.lock_added().clone();
        self.base
            .list_with(added.as_ref().map(|added| &*added.book))
    }

    /// Why the gateway is not ready, as far as policies go: each module that is not loaded.
    pub fn not_ready(&self) -> Vec<String> {
        book::not_ready(self.list())
    }

    /// The decisions made so far, as the admin API serves them.
    pub fn decisions(&self) -> &DecisionLog {
        &self.decisions
    }

    /// Every policy module in use: the start-time ones and those added since.
    fn managed(&self) -> Vec<Arc<ManagedPolicy>> {
        let mut managed = self.base.managed();
        if let Some(added) = self.lock_added().as_ref() {
            managed.extend(added.book.managed());
        }
        managed
    }

    fn lock_added(&self) -> MutexGuard<'_, Option<Arc<Added>>> {
        wardgate_engine::lock::lock(&self.added)
    }
}
