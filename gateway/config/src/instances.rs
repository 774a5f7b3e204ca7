//! `instances`: one process (or connection) of a server for every client, or one per client.

use std::time::Duration;

/// `instances`: how many processes (or connections) of a server run, and for whom.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Instances {
    /// One, shared by every client (`instances = "shared"`, the default).
    #[default]
    Shared,
    /// One per client, started on that client's first use (`instances = "per-client"`).
    PerClient(PerClient),
}

/// The settings of a server with an instance per client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerClient {
    /// `instance_owner`: what one client is.
    pub owner: InstanceOwner,
    /// `max_instances`: at most this many of the server's instances at once.
    pub max: usize,
    /// `instance_idle_timeout`: an instance no call has used for this long is stopped.
    pub idle_timeout: Duration,
}

/// Instances of a server at most, unless its `max_instances` says otherwise.
pub const DEFAULT_MAX_INSTANCES: usize = 16;
/// How long an instance may go unused, unless `instance_idle_timeout` says otherwise.
pub const DEFAULT_INSTANCE_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// `instance_owner`: whose an instance is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceOwner {
    /// Each client session (`"session"`, the default); the instance ends with the session.
    Session,
    /// Each authenticated client (`"identity"`), across its sessions; an anonymous client
    /// by its session.
    Identity,
}

impl InstanceOwner {
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceOwner::Session => "session",
            InstanceOwner::Identity => "identity",
        }
    }
}
