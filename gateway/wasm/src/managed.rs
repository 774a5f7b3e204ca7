//! `ManagedPolicy`: a named policy from the config — its module once one loads, `Builtin`
//! until then — swapped atomically when its file is reloaded or a shadow is promoted, with
//! the module it replaced kept for a rollback.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};

use arc_swap::ArcSwapOption;
use wardgate_policy::{
    Builtin, CrashReport, CrashVerdict, Description, FailedRequest, HealthVerdict, ProbeOutcome,
    ProbeSchedule, ReconnectVerdict, RecoveryPolicy, RetryVerdict, ServerContext,
};

use crate::error::PolicyLoadError;
use crate::fault::{FaultListener, PolicyFault};
use crate::policy::WasmPolicy;
use crate::runtime::Runtime;

/// What happened to a managed policy, for the gateway's event stream.
#[derive(Debug, Clone)]
pub enum PolicyEvent {
    Loaded {
        policy: String,
        path: PathBuf,
        description: Description,
        sha256: String,
    },
    Rejected {
        policy: String,
        path: PathBuf,
        reason: String,
    },
    Faulted {
        policy: String,
        fault: PolicyFault,
    },
}

type EventSink = Arc<dyn Fn(PolicyEvent) + Send + Sync>;

/// A named policy bound to a module file. Decisions go to the current module; before any
/// module has loaded (a missing or broken file at start), `Builtin` decides, with the
/// policy's parameters, so the gateway serves either way.
///
/// Each decision takes the current module for its whole duration, so a decision under way
/// when [`reload`](ManagedPolicy::reload) swaps finishes on the old module, and the old
/// module is dropped when its last decision ends. A failed reload changes nothing.
pub struct ManagedPolicy {
    name: String,
    path: PathBuf,
    params: BTreeMap<String, String>,
    runtime: Runtime,
    current: ArcSwapOption<WasmPolicy>,
    /// The module `current` replaced, kept for [`ManagedPolicy::rollback`].
    previous: ArcSwapOption<WasmPolicy>,
    /// Held while `current` and `previous` change together (a load, a rollback), so two
    /// at once never lose a module.
    swapping: std::sync::Mutex<()>,
    builtin: Builtin,
    events: RwLock<Option<EventSink>>,
    /// Successful loads so far: 1 after the first, +1 per swap.
    generation: AtomicU64,
    /// Itself, for the fault listener each module it loads reports through.
    me: Weak<ManagedPolicy>,
}

impl ManagedPolicy {
    /// A policy that has not loaded yet; call [`ManagedPolicy::reload`] to load it.
    pub fn new(
        name: &str,
        path: &Path,
        params: BTreeMap<String, String>,
        runtime: Runtime,
    ) -> Arc<ManagedPolicy> {
        Arc::new_cyclic(|me| ManagedPolicy {
            name: name.to_owned(),
            path: path.to_owned(),
            params,
            runtime,
            current: ArcSwapOption::empty(),
            previous: ArcSwapOption::empty(),
            swapping: std::sync::Mutex::new(()),
            builtin: Builtin::default(),
            events: RwLock::new(None),
            generation: AtomicU64::new(0),
            me: me.clone(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The policy-wide parameters (a server's own override them).
    pub fn params(&self) -> &BTreeMap<String, String> {
        &self.params
    }

    /// Where loads, rejections and faults are reported from now on.
    pub fn set_event_sink(&self, sink: impl Fn(PolicyEvent) + Send + Sync + 'static) {
        let sink: EventSink = Arc::new(sink);
        *wardgate_policy::lock::write(&self.events) = Some(sink);
    }

    /// The module deciding now, if one has loaded.
    pub fn current(&self) -> Option<Arc<WasmPolicy>> {
        self.current.load_full()
    }

    /// 0 before a module loads, 1 after the first, one more per successful reload.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Compile, validate and swap in the module at the policy's path. Blocking (milliseconds
    /// with a warm cache, seconds for a new large module): call it off the async runtime.
    /// On error nothing changes and the error is reported as `Rejected`.
    pub fn reload(&self) -> Result<Description, PolicyLoadError> {
        self.load_from(&self.path, None)
    }

    /// Compile, validate and swap in the module at `path` in place of the policy's own file
    /// (a shadow promoted to live), with the policy's parameters, if its content's SHA-256
    /// is `sha256` (the module that was shadowed, not whatever the file holds now). It
    /// decides until the policy's module is reloaded from its file, or
    /// [`ManagedPolicy::rollback`]. Blocking, as `reload`.
    pub fn promote(&self, path: &Path, sha256: &str) -> Result<Description, PolicyLoadError> {
        self.load_from(path, Some(sha256))
    }

    /// Swap back the module the last load replaced; the one deciding now is kept in its
    /// place, so a second rollback undoes the first. `Err` when no module was replaced.
    pub fn rollback(&self) -> Result<Description, String> {
        let _swapping = wardgate_policy::lock::lock(&self.swapping);
        let Some(previous) = self.previous.load_full() else {
            return Err(format!(
                "policy {:?} has no earlier module to roll back to: no load since the gateway started replaced one",
                self.name
            ));
        };
        let replaced = self.current.swap(Some(previous.clone()));
        self.previous.store(replaced);
        self.generation.fetch_add(1, Ordering::SeqCst);
        tracing::info!(
            policy = %self.name,
            version = %previous.module_version(),
            "policy module rolled back"
        );
        let description = previous.description().clone();
        self.report(PolicyEvent::Loaded {
            policy: self.name.clone(),
            path: previous.path().to_owned(),
            description: description.clone(),
            sha256: previous.module_sha256().to_owned(),
        });
        Ok(description)
    }

    fn load_from(&self, path: &Path, sha256: Option<&str>) -> Result<Description, PolicyLoadError> {
        let loaded = WasmPolicy::load_on(
            &self.runtime,
            path,
            self.params.clone(),
            Some(self.fault_listener()),
        )
        .and_then(|policy| match sha256 {
            Some(expected) if policy.module_sha256() != expected => Err(PolicyLoadError::Changed {
                path: path.to_owned(),
                expected: expected.to_owned(),
                found: policy.module_sha256().to_owned(),
            }),
            _ => Ok(policy),
        });
        match loaded {
            Ok(policy) => {
                let policy = Arc::new(policy);
                let _swapping = wardgate_policy::lock::lock(&self.swapping);
                let previous = self.current.swap(Some(policy.clone()));
                self.generation.fetch_add(1, Ordering::SeqCst);
                if let Some(previous) = previous {
                    tracing::info!(
                        module = %policy.path().display(),
                        version = %policy.module_version(),
                        previous = %previous.module_version(),
                        "policy module swapped in"
                    );
                    self.previous.store(Some(previous));
                }
                let description = policy.description().clone();
                self.report(PolicyEvent::Loaded {
                    policy: self.name.clone(),
                    path: path.to_owned(),
                    description: description.clone(),
                    sha256: policy.module_sha256().to_owned(),
                });
                Ok(description)
            }
            Err(error) => {
                self.report(PolicyEvent::Rejected {
                    policy: self.name.clone(),
                    path: path.to_owned(),
                    reason: error.to_string(),
                });
                Err(error)
            }
        }
    }

    /// Reports a module's faults as `Faulted`, to the sink set when the fault happens. It
    /// runs on the deciding thread and does not block.
    fn fault_listener(&self) -> FaultListener {
        let me = self.me.clone();
        Arc::new(move |fault: &PolicyFault| {
            if let Some(me) = me.upgrade() {
                me.report(PolicyEvent::Faulted {
                    policy: me.name.clone(),
                    fault: fault.clone(),
                });
            }
        })
    }

    fn report(&self, event: PolicyEvent) {
        let sink = wardgate_policy::lock::read(&self.events).clone();
        if let Some(sink) = sink {
            sink(event);
        }
    }

    /// The server context `Builtin` sees: the policy's parameters, then the server's own.
    fn with_params(&self, server: &ServerContext) -> ServerContext {
        let mut merged = server.clone();
        for (key, value) in &self.params {
            merged
                .params
                .entry(key.clone())
                .or_insert_with(|| value.clone());
        }
        merged
    }
}

macro_rules! decide {
    ($self:ident, $method:ident, $server:ident $(, $arg:expr)*) => {
        match $self.current.load().as_ref() {
            Some(policy) => policy.$method($server $(, $arg)*),
            None => $self.builtin.$method(&$self.with_params($server) $(, $arg)*),
        }
    };
}

impl RecoveryPolicy for ManagedPolicy {
    fn describe(&self) -> Description {
        match self.current.load().as_ref() {
            Some(policy) => policy.describe(),
            None => self.builtin.describe(),
        }
    }

    fn classify(&self, server: &ServerContext, failure: &FailedRequest) -> RetryVerdict {
        decide!(self, classify, server, failure)
    }

    fn reconnect_delay(
        &self,
        server: &ServerContext,
        attempt: u32,
        jitter_seed: u64,
    ) -> ReconnectVerdict {
        decide!(self, reconnect_delay, server, attempt, jitter_seed)
    }

    fn health(&self, server: &ServerContext, probe: &ProbeOutcome) -> HealthVerdict {
        decide!(self, health, server, probe)
    }

    fn probe_schedule(&self, server: &ServerContext, jitter_seed: u64) -> ProbeSchedule {
        decide!(self, probe_schedule, server, jitter_seed)
    }

    fn crash(&self, server: &ServerContext, crash: &CrashReport) -> CrashVerdict {
        decide!(self, crash, server, crash)
    }
}
