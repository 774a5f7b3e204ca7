//! Policies for a reloaded config: the book loaded at start, plus a second book for every
//! `[policies.NAME]` the config has added or changed since, loaded (and watched) when applied.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use wardgate_engine::config::{Config, PolicyConfig};
use wardgate_engine::events::GatewayEvent;
use wardgate_engine::Gateway;
use wardgate_policy::RecoveryPolicy;
use wardgate_wasm::{ManagedPolicy, PolicyWatcher};

use crate::admin::PolicyBook;

/// Policies added or changed by config reloads, with the watcher of their files.
struct Added {
    definitions: BTreeMap<String, PolicyConfig>,
    book: Arc<PolicyBook>,
    _watcher: Option<PolicyWatcher>,
}

pub(super) struct Policies {
    /// The book serve.rs built from the config the gateway started with.
    base: Arc<PolicyBook>,
    base_definitions: BTreeMap<String, PolicyConfig>,
    added: Mutex<Option<Arc<Added>>>,
}

/// How servers of one config bind to policies.
pub(super) struct Binding {
    base: Arc<PolicyBook>,
    added: Option<Arc<Added>>,
}

impl Binding {
    pub(super) fn policy_for(&self, name: Option<&str>) -> Arc<dyn RecoveryPolicy> {
        match (&self.added, name) {
            (Some(added), Some(name)) if added.definitions.contains_key(name) => {
                added.book.policy_for(Some(name))
            }
            _ => self.base.policy_for(name),
        }
    }
}

impl Policies {
    pub(super) fn new(base: Arc<PolicyBook>, started_with: &Config) -> Policies {
        Policies {
            base,
            base_definitions: started_with.policies.clone(),
            added: Mutex::new(None),
        }
    }

    /// Make ready every policy `config` defines: the start-time ones as they are, and the
    /// ones added or changed since loaded from their files (once per distinct definition).
    pub(super) async fn prepare(
        &self,
        gateway: &Arc<Gateway>,
        config: &Config,
    ) -> anyhow::Result<Binding> {
        let definitions: BTreeMap<String, PolicyConfig> = config
            .policies
            .iter()
            .filter(|(name, policy)| self.base_definitions.get(*name) != Some(*policy))
            .map(|(name, policy)| (name.clone(), policy.clone()))
            .collect();
        let current = self.lock().clone();
        let added = match current {
            _ if definitions.is_empty() => None,
            Some(added) if added.definitions == definitions => Some(added),
            _ => {
                let mut only_added = config.clone();
                only_added.policies = definitions.clone();
                let book = crate::serve::load_policies(&only_added).await?;
                crate::serve::report_policy_events(gateway, &book);
                announce_first_loads(gateway, &book);
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
        *self.lock() = added.clone();
        // The admin API reports the modules servers are bound to now.
        self.base
            .show_reloaded(added.as_ref().map(|added| added.book.clone()));
        Ok(Binding {
            base: self.base.clone(),
            added,
        })
    }

    /// Every policy module in use: the start-time ones and those added since.
    pub(super) fn managed(&self) -> Vec<Arc<ManagedPolicy>> {
        let mut managed = self.base.managed();
        if let Some(added) = self.lock().as_ref() {
            managed.extend(added.book.managed());
        }
        managed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Added>>> {
        self.added.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The first load happens before events are wired (as at start): say how it went.
fn announce_first_loads(gateway: &Gateway, book: &PolicyBook) {
    for policy in book.list() {
        let Some(path) = policy.path.clone() else {
            continue; // builtin
        };
        let event = if policy.loaded {
            GatewayEvent::PolicyLoaded {
                policy: policy.name,
                path,
                module: policy.module.unwrap_or_default(),
                version: policy.version.unwrap_or_default(),
            }
        } else {
            GatewayEvent::PolicyRejected {
                policy: policy.name,
                path,
                reason: policy
                    .record
                    .last_rejection
                    .map(|rejection| rejection.reason)
                    .unwrap_or_else(|| "the module did not load".to_owned()),
            }
        };
        gateway.emit(event);
    }
}
