//! `PolicyHandle`: the policy the engine holds, swapped atomically on reload; a failed reload changes nothing.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use arc_swap::ArcSwap;
use wardgate_policy::{
    CrashReport, CrashVerdict, Description, FailedRequest, HealthVerdict, ProbeOutcome,
    ProbeSchedule, ReconnectVerdict, RecoveryPolicy, RetryVerdict, ServerContext,
};

use crate::error::PolicyLoadError;
use crate::fault::{FaultListener, PolicyFault};
use crate::policy::WasmPolicy;
use crate::runtime::Runtime;

/// A [`WasmPolicy`] that can be replaced while decisions are being made.
///
/// Each decision takes the current module for its whole duration, so a decision under way
/// when [`reload`](PolicyHandle::reload) swaps finishes on the old module, and the old
/// module is dropped when its last decision ends. The fault listener set here follows
/// every module the handle serves.
pub struct PolicyHandle {
    runtime: Runtime,
    params: BTreeMap<String, String>,
    current: ArcSwap<WasmPolicy>,
    listener: RwLock<Option<FaultListener>>,
    /// Successful loads so far: 1 after the first, +1 per swap.
    generation: AtomicU64,
}

impl PolicyHandle {
    /// Loads the first module on the shared runtime.
    pub fn load(
        path: impl AsRef<Path>,
        params: BTreeMap<String, String>,
    ) -> Result<PolicyHandle, PolicyLoadError> {
        Self::load_on(&Runtime::shared()?, path, params)
    }

    pub fn load_on(
        runtime: &Runtime,
        path: impl AsRef<Path>,
        params: BTreeMap<String, String>,
    ) -> Result<PolicyHandle, PolicyLoadError> {
        let policy = WasmPolicy::load_on(runtime, path.as_ref(), params.clone(), None)?;
        Ok(PolicyHandle {
            runtime: runtime.clone(),
            params,
            current: ArcSwap::from_pointee(policy),
            listener: RwLock::new(None),
            generation: AtomicU64::new(1),
        })
    }

    /// Compiles and validates the module at `path` (call it off the hot path: this takes
    /// from a millisecond with a warm cache to seconds for a large new module), then swaps
    /// it in. On error nothing changes: the current module keeps serving.
    pub fn reload(&self, path: impl AsRef<Path>) -> Result<Arc<WasmPolicy>, PolicyLoadError> {
        let listener = wardgate_policy::lock::read(&self.listener).clone();
        let policy = Arc::new(WasmPolicy::load_on(
            &self.runtime,
            path.as_ref(),
            self.params.clone(),
            listener,
        )?);
        let previous = self.current.swap(policy.clone());
        // A listener set while the module was loading missed it: give it the latest one.
        policy.set_shared_fault_listener(wardgate_policy::lock::read(&self.listener).clone());
        self.generation.fetch_add(1, Ordering::SeqCst);
        tracing::info!(
            module = %policy.path().display(),
            version = %policy.module_version(),
            previous = %previous.module_version(),
            "policy module swapped in"
        );
        Ok(policy)
    }

    /// The module serving now.
    pub fn current(&self) -> Arc<WasmPolicy> {
        self.current.load_full()
    }

    /// 1 after the first load, one more per successful reload.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Calls `listener` with every fault of the current module and of every module swapped
    /// in later. It runs on the deciding thread: it must not block.
    pub fn set_fault_listener(&self, listener: impl Fn(&PolicyFault) + Send + Sync + 'static) {
        let listener: FaultListener = Arc::new(listener);
        *wardgate_policy::lock::write(&self.listener) = Some(listener.clone());
        // A reload racing with this re-applies the listener after its swap.
        self.current
            .load()
            .set_shared_fault_listener(Some(listener));
    }
}

impl RecoveryPolicy for PolicyHandle {
    fn describe(&self) -> Description {
        self.current.load().describe()
    }

    fn classify(&self, server: &ServerContext, failure: &FailedRequest) -> RetryVerdict {
        self.current.load().classify(server, failure)
    }

    fn reconnect_delay(
        &self,
        server: &ServerContext,
        attempt: u32,
        jitter_seed: u64,
    ) -> ReconnectVerdict {
        self.current
            .load()
            .reconnect_delay(server, attempt, jitter_seed)
    }

    fn health(&self, server: &ServerContext, probe: &ProbeOutcome) -> HealthVerdict {
        self.current.load().health(server, probe)
    }

    fn probe_schedule(&self, server: &ServerContext, jitter_seed: u64) -> ProbeSchedule {
        self.current.load().probe_schedule(server, jitter_seed)
    }

    fn crash(&self, server: &ServerContext, crash: &CrashReport) -> CrashVerdict {
        self.current.load().crash(server, crash)
    }
}
