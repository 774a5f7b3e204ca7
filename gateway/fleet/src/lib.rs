//! A gateway as a member of a fleet: many gateways sharing one PostgreSQL database.
//!
//! What the database owns: the fleet's servers and policy modules (and which member runs
//! which module version), the command queue, and what members report — their heartbeats,
//! each server's status, events and tools, and each module's load outcome. What a member
//! owns: its processes, upstream connections, client sessions, its local command queue and
//! its config file (`[gateway]`, `[fleet]`, and servers of its own). A member keeps serving
//! on its last config while the database is away, and reports everything when it is back.
//!
//! Nothing here runs without `[fleet]` in the config: a gateway on its own never opens a
//! database connection. The `wardgate` binary is the only crate that depends on this one.
//!
//! - `db`: the connection pool, and the schema, migrated by the gateway itself.
//! - `member`: `Member`, its one home: joining, heartbeats, and the loop that keeps a
//!   member connected; in its submodules, `commands` (claiming rows, `FOR UPDATE SKIP
//!   LOCKED`, LISTEN/NOTIFY and polling, leases, retries and expiry), `compose` (a member's
//!   config, its file plus the fleet's servers and modules) and `sync` (status, events and
//!   tools, written back).
//! - `peers`: where other members are, for the client sessions they hold.
//! - `backoff`: the one backoff between attempts at the database.
//! - `tls`: TLS to the database, with libpq's `sslmode` meanings.
//! - `admin`: what `wardgate fleet …` reads and writes.

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod admin;
mod backoff;
mod db;
mod error;
// Entry points for the fuzz targets in fuzz/; not an API.
#[doc(hidden)]
pub mod fuzzing;
mod member;
mod peers;
mod tls;

pub use db::Fleet;
pub use error::{FleetError, Result};
pub use member::commands::Submitted;
pub use member::compose::{Composed, PolicyUpdate};
pub use member::{Member, MemberOptions};
pub use peers::SessionPeers;

/// How a priority is stored: 0 immediate … 3 low (lower first).
pub fn priority_rank(priority: wardgate_engine::commands::Priority) -> i16 {
    use wardgate_engine::commands::Priority;
    match priority {
        Priority::Immediate => 0,
        Priority::High => 1,
        Priority::Normal => 2,
        Priority::Low => 3,
    }
}

pub fn priority_of_rank(rank: i16) -> wardgate_engine::commands::Priority {
    use wardgate_engine::commands::Priority;
    match rank {
        0 => Priority::Immediate,
        1 => Priority::High,
        3 => Priority::Low,
        _ => Priority::Normal,
    }
}

/// A fresh correlation id: `PREFIX-` and the time in nanoseconds, in hex.
pub(crate) fn new_correlation_id(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{prefix}-{nanos:x}")
}

/// RFC 3339 with milliseconds, UTC.
pub(crate) fn timestamp(at: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}
