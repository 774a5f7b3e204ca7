//! WebAssembly recovery policies: `wardgate:policy` components serving as `RecoveryPolicy`.
//!
//! The only crate of the gateway that knows wasmtime. A [`Runtime`] holds the engine, its
//! limits (an epoch deadline per decision, a memory cap per instance) and a cache of
//! compiled modules; a [`WasmPolicy`] is one validated module answering every decision
//! from a small pool of instances, with `Builtin` answering whenever the module faults;
//! a [`ManagedPolicy`] is a named policy of the config, swapping its module atomically on
//! reload.

// stdout is MCP's in stdio mode: a print here would corrupt the protocol. Logs go
// through `tracing`, to stderr.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod bindings;
mod cache;
mod convert;
mod error;
mod fault;
mod managed;
mod policy;
mod runtime;
mod wasi;
mod watch;

pub use convert::MAX_DELAY_MS;
pub use error::{PolicyLoadError, WORLD};
pub use fault::{Decision, FaultKind, FaultListener, FaultStats, PolicyFault};
pub use managed::{ManagedPolicy, PolicyEvent};
pub use policy::WasmPolicy;
pub use runtime::{default_cache_dir, Runtime, RuntimeConfig};
pub use watch::{reload_all, watch, PolicyWatcher, DEFAULT_DEBOUNCE};

impl Runtime {
    /// Loads the module at `path` on this runtime (see [`WasmPolicy::load`]).
    pub fn load(
        &self,
        path: impl AsRef<std::path::Path>,
        params: std::collections::BTreeMap<String, String>,
    ) -> Result<WasmPolicy, PolicyLoadError> {
        WasmPolicy::load_on(self, path.as_ref(), params, None)
    }
}

/// The guest policies of `policies/`, as built by this crate's build script for this build
/// tree: for tests, benchmarks and tooling run from the source tree, not for deployment.
pub mod bundled {
    /// `policies/default`: the documented defaults, equal to `Builtin`.
    pub const DEFAULT: &str = env!("WARDGATE_POLICY_DEFAULT_WASM");
    /// `policies/patient`: never gives up.
    pub const PATIENT: &str = env!("WARDGATE_POLICY_PATIENT_WASM");
    /// `policies/strict`: fails fast.
    pub const STRICT: &str = env!("WARDGATE_POLICY_STRICT_WASM");
    /// `policies/faulty`: a test fixture that misbehaves on demand.
    pub const FAULTY: &str = env!("WARDGATE_POLICY_FAULTY_WASM");
}
