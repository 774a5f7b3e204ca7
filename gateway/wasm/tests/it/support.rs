//! Shared helpers: runtimes with a test cache, servers, and a deterministic random source.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use wardgate_policy::{ServerContext, TransportKind};
use wardgate_wasm::{Runtime, RuntimeConfig, WasmPolicy};

/// A compile cache that survives test runs, so only the first run compiles the guests.
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wardgate-wasm-cache")
}

/// The default limits (10 ms deadline, 64 MiB memory): for fault tests.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Runtime::new(RuntimeConfig {
            cache_dir: Some(cache_dir()),
            ..RuntimeConfig::default()
        })
        .expect("runtime starts")
    })
}

/// A generous deadline, so a busy test machine never turns a slow call into a fallback
/// that would hide a difference: for tests that compare answers.
pub fn generous_runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Runtime::new(RuntimeConfig {
            deadline: Duration::from_secs(2),
            cache_dir: Some(cache_dir()),
            ..RuntimeConfig::default()
        })
        .expect("runtime starts")
    })
}

pub fn load(runtime: &Runtime, path: &str) -> WasmPolicy {
    runtime
        .load(path, BTreeMap::new())
        .unwrap_or_else(|error| panic!("{error}"))
}

pub fn server(name: &str, transport: TransportKind, params: &[(&str, &str)]) -> ServerContext {
    let mut server = ServerContext::new(name, transport);
    server.params = params
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    server
}

/// SplitMix64: a reproducible stream of test inputs.
pub struct Random(u64);

impl Random {
    pub fn new(seed: u64) -> Random {
        Random(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}
