//! The Wardgate application: a serving gateway composed from the libraries, for the binary
//! to start. [`serve::serve`] puts together the policy registry (`policies`), the engine,
//! the operator command queue and its target (`control`, with the config file's watcher),
//! fleet membership (an optional port, `fleet_port`, implemented behind the `fleet` feature), the admin API with the
//! status page (`admin`, fed by `feed`) and the downstream transport, and runs them until the
//! client ends the session or a [`serve::Signal`] its caller sends says stop. The binary is
//! its arguments, `main`, the CLI client and the subcommands.

pub mod admin;
pub mod control;
pub mod error;
pub mod feed;
pub mod policies;
pub mod serve;

pub mod fleet_port;
pub mod membership;
// The fleet port's one implementation, on PostgreSQL (cargo feature `fleet`, on by default).
#[cfg(feature = "fleet")]
mod fleet_member;

pub use error::AppError;
