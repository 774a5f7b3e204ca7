//! `WasmPolicy`: one loaded module serving `RecoveryPolicy` from a pool of instances, falling back to `Builtin` on any fault.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use wardgate_policy::answer::{self, AnsweredBy};
use wardgate_policy::{
    Builtin, CrashReport, CrashVerdict, Description, FailedRequest, HealthVerdict, ProbeOutcome,
    ProbeSchedule, Question, ReconnectVerdict, RecoveryPolicy, RetryVerdict, ServerContext,
};
use wasmtime::Store;

use crate::bindings as wit;
use crate::convert;
use crate::error::{chain, PolicyLoadError};
use crate::fault::{Decision, FaultKind, FaultListener, FaultLog, FaultStats, PolicyFault};
use crate::runtime::Runtime;
mod validate;
use crate::wasi::StoreState;

/// One instance of the module in its own store. Dropped, never reused, after a trap.
struct Instance {
    store: Store<StoreState>,
    policy: wit::RecoveryPolicy,
}

/// A compiled, validated policy module. Each decision runs on a pooled instance within the
/// runtime's deadline and memory cap; a decision whose call faults is answered by
/// [`Builtin`] (with the same parameters), and the fault is counted, logged and reported.
pub struct WasmPolicy {
    runtime: Runtime,
    path: PathBuf,
    /// The file name, tagging the guest's output in the log.
    module_name: Arc<str>,
    module_version: String,
    module_sha256: String,
    /// What the module imports (WASI interfaces only, or it would not have linked).
    imports: Vec<String>,
    description: Description,
    /// Policy-wide parameters; each server's own parameters override them.
    params: BTreeMap<String, String>,
    pre: wit::RecoveryPolicyPre<StoreState>,
    idle: Mutex<Vec<Instance>>,
    faults: FaultLog,
    fallback: Builtin,
}

impl WasmPolicy {
    /// Loads the module at `path` on the shared runtime: compile (or take from the cache),
    /// link, instantiate, `describe`, and a self-check calling every export once.
    /// `params` are policy-wide parameters that each server's own parameters override.
    pub fn load(
        path: impl AsRef<Path>,
        params: BTreeMap<String, String>,
    ) -> Result<WasmPolicy, PolicyLoadError> {
        Runtime::shared()?.load(path, params)
    }

    pub(crate) fn load_on(
        runtime: &Runtime,
        path: &Path,
        params: BTreeMap<String, String>,
        listener: Option<FaultListener>,
    ) -> Result<WasmPolicy, PolicyLoadError> {
        let bytes = std::fs::read(path).map_err(|source| PolicyLoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let (component, module_sha256) = runtime.compile(path, &bytes)?;
        let pre = validate::link(runtime, path, &component)?;
        let imports = validate::imports(runtime, &component);
        let module_name: Arc<str> = path
            .file_name()
            .map_or_else(
                || path.display().to_string(),
                |name| name.to_string_lossy().into_owned(),
            )
            .into();
        let mut policy = WasmPolicy {
            runtime: runtime.clone(),
            path: path.to_path_buf(),
            module_name,
            module_version: String::new(),
            module_sha256,
            imports,
            description: Description {
                name: String::new(),
                version: String::new(),
                intent: String::new(),
            },
            params,
            pre,
            idle: Mutex::new(Vec::new()),
            faults: FaultLog::new(listener),
            fallback: Builtin::default(),
        };
        policy.description = validate::describe(&policy)?;
        policy.module_version = format!(
            "{} {} sha256:{}",
            policy.description.name,
            policy.description.version,
            &policy.module_sha256[..12]
        );
        validate::self_check(&policy)?;
        tracing::info!(
            module = %policy.path.display(),
            version = %policy.module_version,
            intent = %policy.description.intent,
            "policy module loaded"
        );
        Ok(policy)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the module says about itself (checked at load).
    pub fn description(&self) -> &Description {
        &self.description
    }

    /// Name, version and content hash prefix: `default 0.1.0 sha256:0123456789ab`.
    pub fn module_version(&self) -> &str {
        &self.module_version
    }

    /// SHA-256 of the module file, in hex.
    pub fn module_sha256(&self) -> &str {
        &self.module_sha256
    }

    /// The interfaces the module imports, such as `wasi:cli/stderr@0.2.6`.
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    pub fn params(&self) -> &BTreeMap<String, String> {
        &self.params
    }

    /// The faults counted so far, by kind, and the last one.
    pub fn faults(&self) -> FaultStats {
        self.faults.stats()
    }

    /// Calls `listener` with every fault from now on (replacing any earlier listener). It
    /// runs on the deciding thread: it must not block.
    pub fn set_fault_listener(&self, listener: impl Fn(&PolicyFault) + Send + Sync + 'static) {
        self.faults.set_listener(Some(Arc::new(listener)));
    }

    pub fn clear_fault_listener(&self) {
        self.faults.set_listener(None);
    }

    /// Runs one call on an instance within the deadline. `Ok(Err(reason))` from `call` is
    /// an answer the host rejects.
    pub(crate) fn run<T: Send>(
        &self,
        call: impl FnOnce(
                &wit::RecoveryPolicy,
                &mut Store<StoreState>,
            ) -> wasmtime::Result<Result<T, String>>
            + Send,
    ) -> Result<T, FaultKind> {
        self.run_within(self.runtime.deadline_ticks(), call)
    }

    /// [`Self::run`] for load-time checks, off the hot path: a cold first instantiation on a
    /// busy machine can take longer than a decision may, and refusing a sound module for
    /// that would be wrong. A module that truly loops still fails, just later.
    pub(crate) fn run_at_load<T: Send>(
        &self,
        call: impl FnOnce(
                &wit::RecoveryPolicy,
                &mut Store<StoreState>,
            ) -> wasmtime::Result<Result<T, String>>
            + Send,
    ) -> Result<T, FaultKind> {
        self.run_within(
            self.runtime
                .deadline_ticks()
                .saturating_mul(LOAD_DEADLINE_FACTOR),
            call,
        )
    }

    fn run_within<T: Send>(
        &self,
        deadline_ticks: u64,
        call: impl FnOnce(
                &wit::RecoveryPolicy,
                &mut Store<StoreState>,
            ) -> wasmtime::Result<Result<T, String>>
            + Send,
    ) -> Result<T, FaultKind> {
        outside_async(|| {
            let _ticking = self.runtime.inner.ticker.enter();
            let mut instance = self.take_instance()?;
            // The decision's own deadline starts now, after any instantiation.
            instance.store.set_epoch_deadline(deadline_ticks);
            match call(&instance.policy, &mut instance.store) {
                Ok(Ok(answer)) => {
                    self.give_back(instance);
                    Ok(answer)
                }
                Ok(Err(reason)) => {
                    // The module answered badly but its store is sound: keep the instance.
                    self.give_back(instance);
                    Err(FaultKind::InvalidAnswer { reason })
                }
                // The store may be poisoned: `instance` is dropped here, never reused.
                Err(error) => Err(self.trap_kind(&instance.store, &error)),
            }
        })
    }

    fn take_instance(&self) -> Result<Instance, FaultKind> {
        let idle = wardgate_policy::lock::lock(&self.idle).pop();
        if let Some(instance) = idle {
            return Ok(instance);
        }
        let config = self.runtime.config();
        let state = StoreState::new(self.module_name.clone(), config.memory_limit_bytes);
        let mut store = Store::new(&self.runtime.inner.engine, state);
        store.limiter(|state| &mut state.memory);
        // Instantiation runs guest code too (start functions), so it has a deadline; but a
        // big language runtime (Python, JavaScript) needs milliseconds to start, which is
        // the pool's upkeep, not the decision's time: it gets the load-time budget.
        store.set_epoch_deadline(
            self.runtime
                .deadline_ticks()
                .saturating_mul(LOAD_DEADLINE_FACTOR),
        );
        match self.pre.instantiate(&mut store) {
            Ok(policy) => Ok(Instance { store, policy }),
            Err(error) => Err(match self.trap_kind(&store, &error) {
                FaultKind::Trap { message } => FaultKind::Instantiate { message },
                other => other,
            }),
        }
    }

    fn give_back(&self, instance: Instance) {
        // Some guest runtimes never give memory back (componentize-js grows by a few hundred
        // bytes a call): retire an instance past half the cap, before a decision would trap
        // on it; the next decision starts a fresh one.
        if instance.store.data().memory.largest_bytes > self.runtime.config().memory_limit_bytes / 2
        {
            return;
        }
        let mut idle = wardgate_policy::lock::lock(&self.idle);
        if idle.len() < self.runtime.config().pool_size {
            idle.push(instance);
        }
    }

    /// What a failed call or instantiation says about the module.
    fn trap_kind(&self, store: &Store<StoreState>, error: &wasmtime::Error) -> FaultKind {
        let config = self.runtime.config();
        if store.data().memory.exceeded {
            FaultKind::MemoryExceeded {
                limit_bytes: config.memory_limit_bytes,
            }
        } else if error.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) {
            FaultKind::Timeout {
                deadline: config.deadline,
            }
        } else {
            FaultKind::Trap {
                message: chain(error),
            }
        }
    }

    /// A decision: the module's answer, or on a fault `Builtin`'s with the same parameters.
    fn decide<T: Send>(
        &self,
        decision: Decision,
        server: &ServerContext,
        call: impl FnOnce(
                &wit::RecoveryPolicy,
                &mut Store<StoreState>,
            ) -> wasmtime::Result<Result<T, String>>
            + Send,
        fallback: impl FnOnce(&Builtin, &ServerContext) -> T,
    ) -> T {
        match self.run(call) {
            Ok(answer) => {
                answer::report(|| AnsweredBy::Module {
                    version: self.module_version.clone(),
                });
                answer
            }
            Err(kind) => {
                answer::report(|| AnsweredBy::Fallback {
                    version: self.module_version.clone(),
                    fault: kind.to_string(),
                });
                self.faults.record(PolicyFault {
                    module: self.path.clone(),
                    module_version: self.module_version.clone(),
                    decision,
                    server: server.name.clone(),
                    kind,
                });
                let mut server = server.clone();
                server.params = convert::merged_params(&server, &self.params);
                fallback(&self.fallback, &server)
            }
        }
    }

    pub(crate) fn wit_server(&self, server: &ServerContext) -> wit::ServerContext {
        convert::server_context(server, &self.params)
    }
}

/// Runs guest code where it may block. wasmtime-wasi's synchronous bindings run a guest's
/// blocking WASI calls (writing to stdout, for one) with `Handle::block_on` on the current
/// tokio runtime, which panics on an async worker thread, where the engine asks for its
/// decisions. So: on a multi-thread runtime's worker, in `block_in_place`; on a
/// current-thread runtime, on a scoped thread of its own; outside tokio, right here.
fn outside_async<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Err(_) => work(),
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        Ok(_) => std::thread::scope(|scope| {
            scope
                .spawn(work)
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        }),
    }
}

/// Load-time checks may run this many decision deadlines (1 s at the default 10 ms).
const LOAD_DEADLINE_FACTOR: u64 = 100;

impl RecoveryPolicy for WasmPolicy {
    fn describe(&self) -> Description {
        self.description.clone()
    }

    fn classify(&self, server: &ServerContext, failure: &FailedRequest) -> RetryVerdict {
        let (wit_server, wit_failure) = (self.wit_server(server), convert::failed_request(failure));
        self.decide(
            Decision::Question(Question::Classify),
            server,
            |policy, store| {
                let verdict = policy.call_classify(store, &wit_server, &wit_failure)?;
                Ok(convert::retry_verdict(verdict))
            },
            |builtin, server| builtin.classify(server, failure),
        )
    }

    fn reconnect_delay(
        &self,
        server: &ServerContext,
        attempt: u32,
        jitter_seed: u64,
    ) -> ReconnectVerdict {
        let wit_server = self.wit_server(server);
        self.decide(
            Decision::Question(Question::ReconnectDelay),
            server,
            |policy, store| {
                let verdict =
                    policy.call_reconnect_delay(store, &wit_server, attempt, jitter_seed)?;
                Ok(convert::reconnect_verdict(verdict))
            },
            |builtin, server| builtin.reconnect_delay(server, attempt, jitter_seed),
        )
    }

    fn health(&self, server: &ServerContext, probe: &ProbeOutcome) -> HealthVerdict {
        let (wit_server, wit_probe) = (self.wit_server(server), convert::probe_outcome(probe));
        self.decide(
            Decision::Question(Question::Health),
            server,
            |policy, store| {
                let verdict = policy.call_health(store, &wit_server, wit_probe)?;
                Ok(convert::health_verdict(verdict))
            },
            |builtin, server| builtin.health(server, probe),
        )
    }

    fn probe_schedule(&self, server: &ServerContext, jitter_seed: u64) -> ProbeSchedule {
        let wit_server = self.wit_server(server);
        self.decide(
            Decision::Question(Question::ProbeSchedule),
            server,
            |policy, store| {
                let plan = policy.call_probe_schedule(store, &wit_server, jitter_seed)?;
                Ok(convert::probe_plan(plan))
            },
            |builtin, server| builtin.probe_schedule(server, jitter_seed),
        )
    }

    fn crash(&self, server: &ServerContext, crash: &CrashReport) -> CrashVerdict {
        let (wit_server, wit_crash) = (self.wit_server(server), convert::crash_report(crash));
        self.decide(
            Decision::Question(Question::Crash),
            server,
            |policy, store| {
                let verdict = policy.call_crash(store, &wit_server, &wit_crash)?;
                Ok(convert::crash_verdict(verdict))
            },
            |builtin, server| builtin.crash(server, crash),
        )
    }
}
