//! Wardgate's engine: config, upstream transports and supervisors, catalogue, router, downstream server.
//!
//! Knows `dyn RecoveryPolicy`, never WebAssembly.

// stdout is MCP's in stdio mode: a print here would corrupt the protocol. Logs go
// through `tracing`, to stderr.
#![deny(clippy::print_stdout, clippy::print_stderr)]
// In tests a poisoned lock means another test thread panicked: unwrapping is right there.
// The library itself is checked without this (clippy's non-test pass).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod announce;
pub mod catalogue;
pub mod commands;
pub use wardgate_config as config;
pub mod events;
pub mod failure;
// Entry points for the fuzz targets in fuzz/; not an API.
#[doc(hidden)]
pub mod fuzzing;
pub mod gateway;
pub mod health;
pub mod info;
pub mod line_pipe;
pub use wardgate_policy::lock;
pub mod log_text;
pub mod metrics;
pub mod router;
pub mod runs;
pub use wardgate_config::secrets;
pub mod sessions;
pub mod slot;
pub use wardgate_recovery::status;
pub mod supervisor;
pub mod tasks;
pub mod telemetry;
pub mod upstream;

pub use gateway::Gateway;

/// Where the gateway keeps what outlives it (OAuth tokens, a fleet member's cache):
/// `WARDGATE_STATE_DIR`, else `$XDG_STATE_HOME/wardgate`, else `~/.local/state/wardgate`.
pub fn state_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(dir) = std::env::var_os("WARDGATE_STATE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(dir).join("wardgate");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".local/state/wardgate"),
        None => std::env::temp_dir().join("wardgate-state"),
    }
}
