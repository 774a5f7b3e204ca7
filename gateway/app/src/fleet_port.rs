//! The fleet as an optional port: what the application asks of fleet membership, as a
//! trait ([`FleetPort`]) the application holds as `Option<Arc<dyn FleetPort>>`. `None` is a
//! gateway on its own. The one implementation, on PostgreSQL, is `fleet_member`, compiled
//! only with the cargo feature `fleet` (on by default); a build without it has no
//! PostgreSQL driver and refuses fleet settings ([`ABSENT`]), with no stand-in types.

use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use wardgate_config::Config;
use wardgate_downstream::http::Peers;
use wardgate_engine::commands::{CommandQueue, CommandRequest, Routed};
use wardgate_engine::Gateway;

/// What joining gives the application: the config to serve, the membership (`None`
/// without a fleet), and the module versions the first config brought.
pub type Joined = (Config, Option<Arc<dyn FleetPort>>, Vec<ModuleUpdate>);

/// Why a fleet setting is refused by a build without the `fleet` feature.
pub const ABSENT: &str = "this wardgate was built without fleet support (cargo feature `fleet`, on by default); remove [fleet] and --fleet-database-url (WARDGATE_FLEET_DATABASE_URL), or use a default build";

/// A policy module version a fleet config brought, to load and report on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleUpdate {
    pub name: String,
    pub version: i32,
    pub sha256: String,
}

/// A config composed from the local file and the fleet's servers and modules.
pub struct Composed {
    pub config: Config,
    pub updates: Vec<ModuleUpdate>,
}

/// Why the fleet could not compose a config.
#[derive(Debug)]
pub struct PortError {
    pub message: String,
    /// The database could not be reached: worth trying again later.
    pub unreachable: bool,
}

impl std::fmt::Display for PortError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Membership of a fleet, as the application uses it.
pub trait FleetPort: Send + Sync + 'static {
    /// This gateway's member name.
    fn name(&self) -> &str;
    /// The config file at `local` with the fleet's servers and modules.
    fn compose<'a>(&'a self, local: &'a Path) -> BoxFuture<'a, Result<Composed, PortError>>;
    /// Tell the fleet whether a module version now decides (`Ok`) or was rejected (why);
    /// a rejected one's file is put back as it was.
    fn report_policy<'a>(
        &'a self,
        update: &'a ModuleUpdate,
        outcome: &'a Result<(), String>,
    ) -> BoxFuture<'a, ()>;
    /// File what this member's shadow modules would have decided so far: (policy, the
    /// shadow's sha256, its report). Only the shadows the fleet bound here are filed.
    fn report_shadows(
        &self,
        reports: Vec<(String, String, serde_json::Value)>,
    ) -> BoxFuture<'_, ()>;
    /// An operator command of this member's own interfaces: into the fleet's table (so
    /// `wardgate fleet commands` shows it), and on to `queue`.
    fn submit_here(
        self: Arc<Self>,
        request: CommandRequest,
        queue: Arc<CommandQueue>,
    ) -> BoxFuture<'static, Routed>;
    /// Heartbeats, the fleet's commands for this member, and config changes, until `stop`.
    fn run(
        self: Arc<Self>,
        gateway: Arc<Gateway>,
        queue: Arc<CommandQueue>,
        stop: CancellationToken,
    );
    /// Say this member stopped.
    fn leave(&self) -> BoxFuture<'_, ()>;
    /// The other members, for sessions that began on one of them.
    fn session_peers(self: Arc<Self>) -> Arc<dyn Peers>;
}
