//! Why a policy module could not be loaded: every error names the file and the fix.

use std::path::PathBuf;

/// The world every policy module must implement.
pub const WORLD: &str = "wardgate:policy/recovery-policy@0.1.0";

/// A policy module that cannot serve. Loading it changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum PolicyLoadError {
    #[error("cannot read policy module {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "policy module {} is a core WebAssembly module, not a component; build it for \
         wasm32-wasip2 (or wrap it with `wasm-tools component new`)",
        path.display()
    )]
    NotAComponent { path: PathBuf },
    #[error("policy module {} does not compile: {reason}", path.display())]
    Compile { path: PathBuf, reason: String },
    #[error(
        "policy module {} imports `{import}`, which the gateway does not provide; a policy may \
         import only WASI 0.2 interfaces ({reason})",
        path.display()
    )]
    MissingImport {
        path: PathBuf,
        import: String,
        reason: String,
    },
    #[error(
        "policy module {} does not export `{export}`: it does not implement the world {WORLD}",
        path.display()
    )]
    MissingExport { path: PathBuf, export: String },
    #[error(
        "policy module {} does not implement the world {WORLD}: {reason}",
        path.display()
    )]
    WrongWorld { path: PathBuf, reason: String },
    #[error("policy module {} could not be instantiated: {reason}", path.display())]
    Instantiate { path: PathBuf, reason: String },
    #[error("policy module {} describes itself badly: {reason}", path.display())]
    InvalidDescription { path: PathBuf, reason: String },
    #[error("policy module {} failed its self-check in `{decision}`: {reason}", path.display())]
    SelfCheck {
        path: PathBuf,
        decision: &'static str,
        reason: String,
    },
    #[error("the WebAssembly runtime could not start: {reason}")]
    Runtime { reason: String },
    #[error(
        "policy module {} changed since it was shadowed (sha256 {expected}, now {found}); bind the new file as the shadow first, and promote it once its report is what you want",
        path.display()
    )]
    Changed {
        path: PathBuf,
        expected: String,
        found: String,
    },
}

impl PolicyLoadError {
    /// The module file this error is about, when it is about one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            PolicyLoadError::Read { path, .. }
            | PolicyLoadError::NotAComponent { path }
            | PolicyLoadError::Compile { path, .. }
            | PolicyLoadError::MissingImport { path, .. }
            | PolicyLoadError::MissingExport { path, .. }
            | PolicyLoadError::WrongWorld { path, .. }
            | PolicyLoadError::Instantiate { path, .. }
            | PolicyLoadError::InvalidDescription { path, .. }
            | PolicyLoadError::SelfCheck { path, .. }
            | PolicyLoadError::Changed { path, .. } => Some(path),
            PolicyLoadError::Runtime { .. } => None,
        }
    }
}

/// The whole cause chain of a wasmtime error on one line.
pub(crate) fn chain(error: &wasmtime::Error) -> String {
    format!("{error:#}")
}
