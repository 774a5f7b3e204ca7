//! A book of policies: each module's load history, faults and decision counts (what the
//! admin API's `/policies`, `/readyz` and `/metrics` report), and `builtin`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;
use wardgate_policy::{Builtin, Question, RecoveryPolicy};
use wardgate_wasm::{FaultKind, ManagedPolicy, PolicyEvent};

use super::counted::{Counted, Tally};
use super::decisions::DecisionLog;
use super::shadow::Shadows;

/// Every policy the gateway can decide with: the configured modules and `builtin`.
pub struct PolicyBook {
    entries: BTreeMap<String, Arc<Entry>>,
}

/// One policy's record. Shared by its [`Counted`] wrapper, which counts decisions.
pub struct Entry {
    pub name: String,
    managed: Option<Arc<ManagedPolicy>>,
    record: Mutex<Record>,
    decisions: Arc<Tally>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Record {
    pub loaded_at: Option<String>,
    pub loads: u64,
    pub rejections: u64,
    pub last_rejection: Option<Rejection>,
    pub faults: Faults,
}

#[derive(Debug, Clone, Serialize)]
pub struct Rejection {
    pub reason: String,
    pub at: String,
}

/// Faults of every version of the module since the gateway started.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Faults {
    pub total: u64,
    pub timeouts: u64,
    pub memory_exceeded: u64,
    pub traps: u64,
    pub invalid_answers: u64,
    pub instantiation_failures: u64,
    pub last: Option<String>,
}

/// `GET /policies`: one policy.
#[derive(Debug, Serialize)]
pub struct PolicyInfo {
    pub name: String,
    /// The module file; none for `builtin`.
    pub path: Option<String>,
    /// A module is deciding (always true for `builtin`); if false, `builtin` decides for it.
    pub loaded: bool,
    pub module: Option<String>,
    pub version: Option<String>,
    pub sha256: Option<String>,
    pub intent: String,
    #[serde(flatten)]
    pub record: Record,
    pub decisions: BTreeMap<&'static str, u64>,
    /// The file the deciding module came from, when it is not `path`: a promoted shadow
    /// (until the policy's file is reloaded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deciding_from: Option<String>,
    /// The policy's shadow module and its tally, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowBrief>,
}

/// A policy's shadow, as `GET /policies` shows it.
#[derive(Debug, Serialize)]
pub struct ShadowBrief {
    pub path: String,
    pub module: String,
    #[serde(flatten)]
    pub counts: super::shadow::Counts,
    pub dropped: u64,
}

fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

impl PolicyBook {
    pub fn new<'a>(policies: impl IntoIterator<Item = &'a Arc<ManagedPolicy>>) -> Arc<PolicyBook> {
        let mut entries: BTreeMap<String, Arc<Entry>> = policies
            .into_iter()
            .map(|managed| {
                (
                    managed.name().to_owned(),
                    Entry::new(managed.name(), Some(managed.clone())),
                )
            })
            .collect();
        entries.insert(
            wardgate_config::BUILTIN_POLICY.to_owned(),
            Entry::new(wardgate_config::BUILTIN_POLICY, None),
        );
        Arc::new(PolicyBook { entries })
    }

    /// The policy a server decides with, counting its decisions and recording them in `log`: the named module, or
    /// `builtin` for none (or a name the book does not know).
    pub fn policy_for(
        &self,
        name: Option<&str>,
        log: &Arc<DecisionLog>,
        shadows: &Shadows,
    ) -> Arc<dyn RecoveryPolicy> {
        let entries = &self.entries;
        let entry = name
            .and_then(|name| entries.get(name))
            .unwrap_or_else(|| &entries[wardgate_config::BUILTIN_POLICY]);
        let (inner, params): (Arc<dyn RecoveryPolicy>, _) = match &entry.managed {
            Some(managed) => (managed.clone(), managed.params().clone()),
            None => (Arc::new(Builtin::default()), BTreeMap::new()),
        };
        Arc::new(Counted::new(
            Arc::from(entry.name.as_str()),
            entry.decisions.clone(),
            inner,
            log.clone(),
            shadows.slot(&entry.name),
            Arc::new(params),
        ))
    }

    /// Record what happened to a policy (a load, a rejection, a fault).
    pub fn observe(&self, event: &PolicyEvent) {
        let name = match event {
            PolicyEvent::Loaded { policy, .. }
            | PolicyEvent::Rejected { policy, .. }
            | PolicyEvent::Faulted { policy, .. } => policy,
        };
        let Some(entry) = self.entries.get(name) else {
            return;
        };
        let mut record = wardgate_engine::lock::lock(&entry.record);
        match event {
            PolicyEvent::Loaded { .. } => {
                record.loaded_at = Some(now());
                record.loads += 1;
            }
            PolicyEvent::Rejected { reason, .. } => {
                record.rejections += 1;
                record.last_rejection = Some(Rejection {
                    reason: reason.clone(),
                    at: now(),
                });
            }
            PolicyEvent::Faulted { fault, .. } => {
                let faults = &mut record.faults;
                faults.total += 1;
                match fault.kind {
                    FaultKind::Timeout { .. } => faults.timeouts += 1,
                    FaultKind::MemoryExceeded { .. } => faults.memory_exceeded += 1,
                    FaultKind::Trap { .. } => faults.traps += 1,
                    FaultKind::InvalidAnswer { .. } => faults.invalid_answers += 1,
                    FaultKind::Instantiate { .. } => faults.instantiation_failures += 1,
                }
                faults.last = Some(fault.to_string());
            }
        }
    }

    /// Record the outcome of a load made before events were wired (the first load at start).
    pub fn observe_first_load(&self, name: &str, result: Result<(), String>) {
        let Some(entry) = self.entries.get(name) else {
            return;
        };
        let mut record = wardgate_engine::lock::lock(&entry.record);
        match result {
            Ok(()) => {
                record.loaded_at = Some(now());
                record.loads += 1;
            }
            Err(reason) => {
                record.rejections += 1;
                record.last_rejection = Some(Rejection { reason, at: now() });
            }
        }
    }

    /// Every policy in this book: its modules and `builtin`.
    pub fn list(&self) -> Vec<PolicyInfo> {
        self.list_with(None)
    }

    /// Every policy in this book, with the modules of `added` (the book a config reload
    /// loaded the modules it added or changed into) in place of those of the same name.
    pub fn list_with(&self, added: Option<&PolicyBook>) -> Vec<PolicyInfo> {
        let mut shown: BTreeMap<&str, &Arc<Entry>> = self
            .entries
            .iter()
            .map(|(name, entry)| (name.as_str(), entry))
            .collect();
        if let Some(added) = added {
            shown.extend(
                added
                    .entries
                    .iter()
                    .filter(|(_, entry)| entry.managed.is_some())
                    .map(|(name, entry)| (name.as_str(), entry)),
            );
        }
        shown.values().map(|entry| entry.info()).collect()
    }

    /// The configured modules (to reload, watch and report on).
    pub fn managed(&self) -> Vec<Arc<ManagedPolicy>> {
        self.entries
            .values()
            .filter_map(|entry| entry.managed.clone())
            .collect()
    }
}

/// Why the gateway is not ready, as far as `policies` go: each module that is not loaded.
pub fn not_ready(policies: Vec<PolicyInfo>) -> Vec<String> {
    policies
        .into_iter()
        .filter(|policy| !policy.loaded)
        .map(|policy| {
            let why = policy
                .record
                .last_rejection
                .map(|rejection| rejection.reason)
                .unwrap_or_else(|| "it has not loaded yet".to_owned());
            format!(
                "policy \"{}\" is not loaded ({why}); the builtin policy decides for its servers until {} loads; fix the module and run `wardgate policy reload`",
                policy.name,
                policy.path.unwrap_or_default()
            )
        })
        .collect()
}

impl Entry {
    fn new(name: &str, managed: Option<Arc<ManagedPolicy>>) -> Arc<Entry> {
        Arc::new(Entry {
            name: name.to_owned(),
            managed,
            record: Mutex::default(),
            decisions: Default::default(),
        })
    }

    fn info(&self) -> PolicyInfo {
        let record = wardgate_engine::lock::lock(&self.record).clone();
        let decisions = Question::ALL
            .iter()
            .zip(self.decisions.iter())
            .map(|(question, count)| {
                (
                    question.name(),
                    count.load(std::sync::atomic::Ordering::Relaxed),
                )
            })
            .collect();
        let Some(managed) = &self.managed else {
            return PolicyInfo {
                name: self.name.clone(),
                path: None,
                loaded: true,
                module: Some("builtin".to_owned()),
                version: Some(env!("CARGO_PKG_VERSION").to_owned()),
                sha256: None,
                intent: Builtin::default().describe().intent,
                record,
                decisions,
                deciding_from: None,
                shadow: None,
            };
        };
        let current = managed.current();
        PolicyInfo {
            name: self.name.clone(),
            path: Some(managed.path().display().to_string()),
            loaded: current.is_some(),
            module: current
                .as_ref()
                .map(|module| module.description().name.clone()),
            version: current
                .as_ref()
                .map(|module| module.description().version.clone()),
            sha256: current
                .as_ref()
                .map(|module| module.module_sha256().to_owned()),
            intent: current
                .as_ref()
                .map(|module| module.description().intent.clone())
                .unwrap_or_default(),
            record,
            decisions,
            deciding_from: current
                .as_ref()
                .filter(|module| module.path() != managed.path())
                .map(|module| module.path().display().to_string()),
            shadow: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use wardgate_policy::{ServerContext, TransportKind};

    use super::*;

    #[test]
    fn builtin_is_always_listed_and_ready_and_its_decisions_are_counted() {
        let book = PolicyBook::new(std::iter::empty());
        // A name the book does not know decides with the builtin.
        let log = DecisionLog::new();
        let policy = book.policy_for(Some("unknown"), &log, &Shadows::new());
        let server = ServerContext::new("s", TransportKind::Stdio);
        policy.probe_schedule(&server, 1);
        policy.probe_schedule(&server, 2);
        // Each decision is recorded too, answered by the builtin.
        let recorded = log.feed().since(0);
        assert_eq!(recorded.len(), 2);
        assert_eq!(
            (
                recorded[1].item.decision,
                recorded[1].item.answered_by,
                &*recorded[1].item.policy
            ),
            ("probe-schedule", "builtin", "builtin")
        );
        let list = book.list();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].name, "builtin");
        assert!(list[0].loaded);
        assert_eq!(list[0].decisions["probe_schedule"], 2);
        assert_eq!(list[0].decisions["classify"], 0);
        assert!(not_ready(book.list()).is_empty());
    }
}
