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
pub mod shadow;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{json, Value};
use wardgate_config::{Config, GatewaySettings, PolicyConfig, ServerConfig};
use wardgate_engine::Gateway;
use wardgate_policy::RecoveryPolicy;
use wardgate_wasm::{ManagedPolicy, PolicyWatcher};

use book::{PolicyBook, PolicyInfo};
use decisions::DecisionLog;
use shadow::Shadows;

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
    /// Each policy's shadow module, if it has one.
    shadows: Arc<Shadows>,
    /// The shadows the current config names (`[policies.NAME] shadow`): a reload binds or
    /// clears only those whose line changed, so one bound by `wardgate policy shadow`
    /// stays through unrelated reloads.
    config_shadows: Mutex<BTreeMap<String, ConfigShadow>>,
}

/// A shadow the config names: its module, and its policy's params it decides with.
type ConfigShadow = (PathBuf, BTreeMap<String, String>);

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
    shadows: Arc<Shadows>,
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
            (Some(added), Some(name)) if added.definitions.contains_key(name) => added
                .book
                .policy_for(Some(name), &self.decisions, &self.shadows),
            (_, name) => self.base.policy_for(name, &self.decisions, &self.shadows),
        }
    }
}

impl Policies {
    /// Load every policy `config` defines. Call before any server starts, so first decisions
    /// already come from the modules. A module that fails to load is logged, and `Builtin`
    /// decides for its servers until a reload succeeds.
    pub async fn load(config: &Config) -> Result<Arc<Policies>, AppError> {
        let base = load::first_load(&config.policies).await?;
        let policies = Arc::new(Policies {
            base,
            base_definitions: config.policies.clone(),
            base_watcher: Mutex::new(None),
            added: Mutex::new(None),
            decisions: DecisionLog::new(),
            shadows: Shadows::new(),
            config_shadows: Mutex::new(BTreeMap::new()),
        });
        policies.apply_shadows(config).await;
        Ok(policies)
    }

    /// How servers bind to policies now: at start, to the modules [`Policies::load`] loaded.
    pub fn binding(&self) -> Binding {
        Binding {
            base: self.base.clone(),
            added: self.lock_added().clone(),
            decisions: self.decisions.clone(),
            shadows: self.shadows.clone(),
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
        self.apply_shadows(config).await;
        Ok(Binding {
            base: self.base.clone(),
            added,
            decisions: self.decisions.clone(),
            shadows: self.shadows.clone(),
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
        let mut list = self
            .base
            .list_with(added.as_ref().map(|added| &*added.book));
        for info in &mut list {
            // Its totals only (a report would copy its examples too).
            info.shadow = self.shadows.current(&info.name).map(|shadow| {
                let mut brief = book::ShadowBrief {
                    path: shadow.path().display().to_string(),
                    module: shadow.version().to_owned(),
                    counts: shadow::Counts::default(),
                    dropped: 0,
                };
                for (_, counts, dropped) in shadow.counts() {
                    brief.counts.agreed += counts.agreed;
                    brief.counts.disagreed += counts.disagreed;
                    brief.counts.faults += counts.faults;
                    brief.dropped += dropped;
                }
                brief
            });
        }
        list
    }

    /// Why the gateway is not ready, as far as policies go: each module that is not loaded.
    pub fn not_ready(&self) -> Vec<String> {
        book::not_ready(self.list())
    }

    /// The decisions made so far, as the admin API serves them.
    pub fn decisions(&self) -> &DecisionLog {
        &self.decisions
    }

    /// Binds or clears each shadow whose `[policies.NAME] shadow` line `config` changed, or
    /// whose policy's params changed (a shadow decides with its policy's params). A shadow
    /// that does not load is logged, the policy decides as before, and the next config
    /// that names it tries again.
    async fn apply_shadows(&self, config: &Config) {
        let before = wardgate_engine::lock::lock(&self.config_shadows).clone();
        let wanted: BTreeMap<String, ConfigShadow> = config
            .shadows
            .iter()
            .map(|(name, path)| {
                let params = config
                    .policies
                    .get(name)
                    .map(|policy| policy.params.clone())
                    .unwrap_or_default();
                (name.clone(), (path.clone(), params))
            })
            .collect();
        let mut bound = BTreeMap::new();
        let names: std::collections::BTreeSet<&String> =
            before.keys().chain(wanted.keys()).collect();
        for name in names {
            match (before.get(name), wanted.get(name)) {
                (was, Some(now)) if was == Some(now) => {
                    bound.insert(name.clone(), now.clone());
                }
                (_, Some((path, _))) => match self.shadow(name, Some(path.clone())).await {
                    Ok(_) => {
                        bound.insert(name.clone(), wanted[name].clone());
                    }
                    Err(error) => {
                        tracing::warn!(
                            "[policies.{name}] shadow: {error}; the shadow bound before (if any) stays, and the next config that changes the line tries again"
                        );
                        // What is bound is still the line before: a later config without
                        // the line clears it.
                        if let Some(was) = before.get(name) {
                            bound.insert(name.clone(), was.clone());
                        }
                    }
                },
                (Some(_), None) => {
                    self.shadows.clear(name);
                }
                (None, None) => {}
            }
        }
        *wardgate_engine::lock::lock(&self.config_shadows) = bound;
    }

    /// Binds the module at `path` as policy `name`'s shadow (in place of the one it has),
    /// or with `None` unbinds it. The answer says what was done.
    pub async fn shadow(&self, name: &str, path: Option<PathBuf>) -> Result<Value, String> {
        let params = self.params_of(name)?;
        let Some(path) = path else {
            let cleared = self.shadows.clear(name);
            return Ok(json!({
                "policy": name,
                "cleared": cleared.map(|shadow| shadow.path().display().to_string()),
            }));
        };
        let shadows = self.shadows.clone();
        let policy = name.to_owned();
        let shadow = tokio::task::spawn_blocking(move || shadows.bind(&policy, &path, params))
            .await
            .map_err(|error| format!("loading the shadow module failed: {error}"))??;
        Ok(json!({
            "policy": name,
            "shadow": shadow.path().display().to_string(),
            "module": shadow.version(),
        }))
    }

    /// What policy `name`'s shadow would have decided so far.
    pub fn shadow_report(&self, name: &str) -> Result<shadow::ShadowReport, String> {
        self.params_of(name)?;
        self.shadows
            .current(name)
            .map(|shadow| shadow.report())
            .ok_or_else(|| no_shadow(name))
    }

    /// Every shadow bound now.
    pub fn shadows(&self) -> &Arc<Shadows> {
        &self.shadows
    }

    /// Makes policy `name`'s shadow its live module, in one swap; the module it replaces
    /// is kept for [`Policies::rollback`], and the shadow is unbound (it decides now).
    pub async fn promote_shadow(&self, name: &str) -> Result<Value, String> {
        let shadow = self.shadows.current(name).ok_or_else(|| no_shadow(name))?;
        let managed = self.managed_named(name)?;
        let before = managed
            .current()
            .map(|module| module.module_version().to_owned());
        let path = shadow.path().to_owned();
        let sha256 = shadow.sha256().to_owned();
        let promoted = managed.clone();
        tokio::task::spawn_blocking(move || promoted.promote(&path, &sha256))
            .await
            .map_err(|error| format!("loading the shadow module failed: {error}"))?
            .map_err(|error| format!("the shadow module could not be made live: {error}; the module before keeps deciding"))?;
        // Unbound only if it is still the one promoted.
        if self
            .shadows
            .current(name)
            .is_some_and(|current| Arc::ptr_eq(&current, &shadow))
        {
            self.shadows.clear(name);
        }
        Ok(json!({
            "policy": name,
            "live": managed.current().map(|module| module.module_version().to_owned()),
            "from": shadow.path().display().to_string(),
            "previous": before,
            "note": format!(
                "the promoted module decides until the policy's module is loaded from its file ({}) again (the file changes, `wardgate policy reload`, SIGHUP, a config reload that changes the policy) or the gateway restarts; to keep it, point [policies.{name}] path at {}; `wardgate policy rollback {name}` swaps the previous module back",
                managed.path().display(),
                shadow.path().display()
            ),
        }))
    }

    /// Swaps policy `name`'s previous module back in (the one the last load or promotion
    /// replaced).
    pub fn rollback(&self, name: &str) -> Result<Value, String> {
        let managed = self.managed_named(name)?;
        let replaced = managed
            .current()
            .map(|module| module.module_version().to_owned());
        managed.rollback()?;
        Ok(json!({
            "policy": name,
            "live": managed.current().map(|module| module.module_version().to_owned()),
            "replaced": replaced,
        }))
    }

    /// The params of policy `name` (none for `builtin`); `Err` names the policies there are.
    fn params_of(&self, name: &str) -> Result<BTreeMap<String, String>, String> {
        if name == wardgate_config::BUILTIN_POLICY {
            return Ok(BTreeMap::new());
        }
        let added = self.lock_added().clone();
        let definition = added
            .as_ref()
            .and_then(|added| added.definitions.get(name).cloned())
            .or_else(|| self.base_definitions.get(name).cloned());
        match definition {
            Some(definition) => Ok(definition.params),
            None => {
                let known: Vec<String> = self.list().into_iter().map(|info| info.name).collect();
                Err(format!(
                    "no policy named {name:?} is in use; the policies are: {}",
                    known.join(", ")
                ))
            }
        }
    }

    /// The module of policy `name`; `Err` says why there is none.
    fn managed_named(&self, name: &str) -> Result<Arc<ManagedPolicy>, String> {
        self.params_of(name)?;
        self.managed()
            .into_iter()
            .rev()
            .find(|policy| policy.name() == name)
            .ok_or_else(|| {
                format!(
                    "policy {name:?} is the native policy and has no module to replace or roll back; define a [policies.NAME] with the candidate as its path and bind the servers to it"
                )
            })
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

fn no_shadow(name: &str) -> String {
    format!(
        "policy {name:?} has no shadow; bind one with `wardgate policy shadow {name} FILE.wasm` or [policies.{name}] shadow = \"FILE.wasm\""
    )
}
