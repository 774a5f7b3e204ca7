//! `wardgate policy simulate`: the simulator is `wardgate_recovery::simulate`, which drives
//! the same recovery machine as the gateway's supervisors; this module reads traces and
//! recorded decision logs into its scripts and renders its timelines.

mod render;
pub mod replay;
mod trace;

pub use render::{
    backoff_chart, curve_json, print_pair, print_single, script_json, timeline_json, Column,
};
pub use trace::{load_trace, TraceError, TRACE_HELP};
pub use wardgate_recovery::simulate::*;
