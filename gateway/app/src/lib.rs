//! The Wardgate application: a serving gateway composed from the libraries, for the binary
//! to start. [`serve::serve`] puts together the policy registry (`policies`), the engine,
//! the operator command queue and its target (`control`, with the config file's watcher),
//! fleet membership (`fleet_member`, behind the `fleet` feature), the admin API with the
//! status page (`admin`, fed by `feed`) and the downstream transport, and runs them until the
//! client ends the session or a [`serve::Signal`] its caller sends says stop. The binary is
//! its arguments, `main`, the CLI client and the subcommands.

pub mod admin;
pub mod control;
pub mod error;
pub mod feed;
pub mod policies;
pub mod serve;

// The fleet (cargo feature `fleet`, on by default): `wardgate_fleet`, or stand-ins that
// refuse fleet settings in a build without it (no_fleet.rs).
#[cfg(feature = "fleet")]
pub use wardgate_fleet as fleet;
#[cfg(not(feature = "fleet"))]
#[path = "no_fleet.rs"]
pub mod fleet;
#[cfg(feature = "fleet")]
pub mod fleet_member;
#[cfg(not(feature = "fleet"))]
pub use fleet as fleet_member;

pub use error::AppError;
