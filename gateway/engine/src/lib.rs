//! Wardgate's engine: config, upstream transports and supervisors, catalogue, router, downstream server.
//!
//! Knows `dyn RecoveryPolicy`, never WebAssembly.

// rmcp marks logging, sampling and roots deprecated for 2026-07-28 (SEP-2577); the
// protocol versions the gateway speaks (up to 2025-11-25) still have them all.
#![allow(deprecated)]

pub mod catalogue;
pub mod commands;
pub mod config;
pub mod downstream;
pub mod events;
pub mod failure;
pub mod gateway;
pub mod health;
pub mod info;
pub mod lifecycle;
mod lock;
pub mod log_text;
pub mod metrics;
pub mod router;
pub mod sessions;
pub mod status;
mod supervisor;
pub mod upstream;

pub use gateway::Gateway;
