//! Recovery decisions: the vocabulary, the `RecoveryPolicy` trait and the native `Builtin` policy.
//!
//! This crate does no I/O and knows no runtime: every input of a decision is an
//! argument, so decisions can be replayed, unit-tested and simulated. The engine
//! owns every counter and clock; a policy only reads them and returns a verdict.

// stdout is MCP's in stdio mode: a print here would corrupt the protocol. Logs go
// through `tracing`, to stderr.
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod answer;
mod asked;
mod builtin;
pub mod lock;
mod question;
mod vocabulary;

pub use asked::{Answer, Asked};
pub use builtin::{Builtin, BuiltinParams};
pub use question::Question;
pub use vocabulary::*;

/// Makes every recovery decision of the gateway.
///
/// Implementations must be pure functions of their arguments and must not block:
/// they are called on the engine's hot path.
pub trait RecoveryPolicy: Send + Sync + 'static {
    /// Name, version and one-line intent of this policy.
    fn describe(&self) -> Description;
    /// Is this failed request worth another attempt, and if not, what does it say about the server?
    fn classify(&self, server: &ServerContext, failure: &FailedRequest) -> RetryVerdict;
    /// How long to wait before reconnection attempt `attempt` (1-based), or stop trying.
    fn reconnect_delay(
        &self,
        server: &ServerContext,
        attempt: u32,
        jitter_seed: u64,
    ) -> ReconnectVerdict;
    /// What one probe outcome, given the consecutive counts so far, says about health.
    fn health(&self, server: &ServerContext, probe: &ProbeOutcome) -> HealthVerdict;
    /// When to probe next and how long a probe may take.
    fn probe_schedule(&self, server: &ServerContext, jitter_seed: u64) -> ProbeSchedule;
    /// May this crashed stdio process restart?
    fn crash(&self, server: &ServerContext, crash: &CrashReport) -> CrashVerdict;
}
