//! Policy faults: what went wrong in one decision, the counters, and the listener the engine subscribes with.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use wardgate_policy::Question;

/// The call a fault happened in: `describe`, or one of the policy's questions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    Describe,
    Question(Question),
}

impl Decision {
    /// The export's name in the WIT world.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Describe => "describe",
            Decision::Question(question) => question.wit_name(),
        }
    }
}

impl From<Question> for Decision {
    fn from(question: Question) -> Decision {
        Decision::Question(question)
    }
}

/// What a module did wrong. The decision was answered by `Builtin` instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultKind {
    /// The call ran past the epoch deadline.
    Timeout { deadline: Duration },
    /// The module tried to grow its memory past the cap.
    MemoryExceeded { limit_bytes: usize },
    /// The module trapped (`unreachable`, a Rust panic, an out-of-bounds access, ...).
    Trap { message: String },
    /// The module answered, but with something the host rejects.
    InvalidAnswer { reason: String },
    /// A fresh instance could not be created.
    Instantiate { message: String },
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FaultKind::Timeout { deadline } => write!(f, "ran past its {deadline:?} deadline"),
            FaultKind::MemoryExceeded { limit_bytes } => {
                write!(f, "exceeded its memory cap of {limit_bytes} bytes")
            }
            FaultKind::Trap { message } => write!(f, "trapped: {message}"),
            FaultKind::InvalidAnswer { reason } => write!(f, "gave an invalid answer: {reason}"),
            FaultKind::Instantiate { message } => write!(f, "could not be instantiated: {message}"),
        }
    }
}

/// One faulted decision, as logged, counted and sent to the fault listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyFault {
    /// The module file.
    pub module: PathBuf,
    /// The module version: its self-described name and version and a content hash prefix.
    pub module_version: String,
    pub decision: Decision,
    /// The server the decision was about (empty for `describe`).
    pub server: String,
    pub kind: FaultKind,
}

impl std::fmt::Display for PolicyFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "policy module {} ({}) {} in `{}` for server \"{}\"; answered by the built-in policy",
            self.module.display(),
            self.module_version,
            self.kind,
            self.decision.as_str(),
            self.server
        )
    }
}

/// How many decisions of one module faulted, by kind, and the last fault.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultStats {
    pub total: u64,
    pub timeouts: u64,
    pub memory_exceeded: u64,
    pub traps: u64,
    pub invalid_answers: u64,
    pub instantiation_failures: u64,
    pub last: Option<PolicyFault>,
}

/// Called synchronously on the deciding thread for every fault: it must not block
/// (send the fault to a channel and return).
pub type FaultListener = Arc<dyn Fn(&PolicyFault) + Send + Sync>;

/// The fault bookkeeping of one module version. Faults are rare, so plain locks do.
#[derive(Default)]
pub(crate) struct FaultLog {
    stats: Mutex<FaultStats>,
    listener: RwLock<Option<FaultListener>>,
}

impl FaultLog {
    pub(crate) fn new(listener: Option<FaultListener>) -> FaultLog {
        FaultLog {
            stats: Mutex::default(),
            listener: RwLock::new(listener),
        }
    }

    pub(crate) fn set_listener(&self, listener: Option<FaultListener>) {
        *wardgate_policy::lock::write(&self.listener) = listener;
    }

    pub(crate) fn stats(&self) -> FaultStats {
        wardgate_policy::lock::lock(&self.stats).clone()
    }

    /// Counts the fault, logs it (a warning for the first of this module version, debug
    /// after that, so a module that faults on every call cannot flood the log) and tells
    /// the listener.
    pub(crate) fn record(&self, fault: PolicyFault) {
        let first = {
            let mut stats = wardgate_policy::lock::lock(&self.stats);
            stats.total += 1;
            match fault.kind {
                FaultKind::Timeout { .. } => stats.timeouts += 1,
                FaultKind::MemoryExceeded { .. } => stats.memory_exceeded += 1,
                FaultKind::Trap { .. } => stats.traps += 1,
                FaultKind::InvalidAnswer { .. } => stats.invalid_answers += 1,
                FaultKind::Instantiate { .. } => stats.instantiation_failures += 1,
            }
            stats.last = Some(fault.clone());
            stats.total == 1
        };
        if first {
            tracing::warn!(
                module = %fault.module.display(),
                version = %fault.module_version,
                decision = fault.decision.as_str(),
                server = %fault.server,
                "{fault} (further faults of this module version are logged at debug level)"
            );
        } else {
            tracing::debug!(
                module = %fault.module.display(),
                decision = fault.decision.as_str(),
                server = %fault.server,
                "{fault}"
            );
        }
        let listener = wardgate_policy::lock::read(&self.listener).clone();
        if let Some(listener) = listener {
            listener(&fault);
        }
    }
}
