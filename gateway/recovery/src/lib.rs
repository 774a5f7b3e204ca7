//! One server's recovery, as a pure state machine, and the policy simulator that drives it.
//!
//! [`Machine::on`] takes the time, one [`Input`] (a connection outcome, a process exit, a
//! probe result, a call's wake-up, an operator action) and the server's policy, and returns
//! the [`Step`] that follows: what to do next, the status changes and events to announce,
//! and the decision the policy made. Nothing here sleeps, spawns, reads a clock or draws a
//! random number, so the same inputs at the same times give the same steps: the gateway's
//! supervisor (`wardgate-engine`) and `wardgate policy simulate` ([`simulate`]) drive this
//! one machine, and cannot disagree about what recovery does.
//!
//! [`call`] is one call's attempts, a second pure machine that the router, the health check
//! and the simulator drive alike; [`lifecycle`] holds the status transitions.

// stdout is MCP's in stdio mode: a print here would corrupt the protocol. Logs go
// through `tracing`, to stderr.
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod call;
pub mod lifecycle;
mod machine;
pub mod simulate;
pub mod status;

pub use machine::{
    jitter_seed, Announcement, Decision, Failure, Input, Machine, Next, OperatorAction, Record,
    Step, View, CRASH_MEMORY_MS, MIN_PROBE_INTERVAL_MS, UNSUPPORTED_PROTOCOL_VERSION,
};
pub use status::ServerStatus;
