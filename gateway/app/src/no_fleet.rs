//! The fleet, in a binary built without the `fleet` feature: a gateway on its own, with
//! no PostgreSQL driver in it. A `[fleet]` table, `--fleet-database-url` or
//! `wardgate fleet …` is refused, saying so. [`Member`] has no values, so every path that
//! would need one is unreachable by its type, and the rest of the binary is the same code
//! as with the feature.

use crate::AppError;
use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use wardgate_config::Config;
use wardgate_engine::commands::{CommandQueue, CommandRecord, CommandRequest, Routed};
use wardgate_engine::downstream::http::Peers;
use wardgate_engine::Gateway;

/// Why a fleet setting is refused.
pub const ABSENT: &str = "this wardgate was built without fleet support (cargo feature `fleet`, on by default); remove [fleet] and --fleet-database-url (WARDGATE_FLEET_DATABASE_URL), or use a default build";

/// A fleet member: in this build there is none.
pub enum Member {}

/// A module version a fleet config brought (never, in this build).
pub struct PolicyUpdate {
    pub name: String,
    pub version: i32,
    pub sha256: String,
}

pub struct Composed {
    pub config: Config,
    pub policies: Vec<PolicyUpdate>,
}

/// Where a command of a member's own admin API went (never anywhere, in this build: the
/// variants are matched, never made).
#[allow(dead_code)]
pub enum Submitted {
    Fleet {
        fleet_id: i64,
        record: CommandRecord,
    },
    Local {
        record: CommandRecord,
        why: String,
    },
}

impl Submitted {
    pub fn routed(self, _member: &str) -> Routed {
        match self {
            Submitted::Fleet { record, .. } | Submitted::Local { record, .. } => {
                Routed { record, via: None }
            }
        }
    }
}

impl Member {
    pub fn name(&self) -> &str {
        match *self {}
    }

    pub async fn submit_here(
        self: &Arc<Member>,
        _request: CommandRequest,
        _queue: &Arc<CommandQueue>,
    ) -> Submitted {
        match **self {}
    }

    pub async fn compose(&self, _local: &Path) -> Result<Composed, FleetError> {
        match *self {}
    }

    pub async fn report_policy(&self, _update: &PolicyUpdate, _outcome: &Result<(), String>) {
        match *self {}
    }

    pub fn run(
        self: &Arc<Member>,
        _gateway: Arc<Gateway>,
        _queue: Arc<CommandQueue>,
        _stop: CancellationToken,
    ) {
        match **self {}
    }

    pub async fn leave(&self) {
        match *self {}
    }
}

/// What a fleet call fails with: nothing, in this build.
#[derive(Debug)]
pub enum FleetError {}

impl FleetError {
    pub fn is_unreachable(&self) -> bool {
        match *self {}
    }
}

impl std::fmt::Display for FleetError {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {}
    }
}

impl std::error::Error for FleetError {}

/// Other members, for sessions: none in this build.
pub enum SessionPeers {}

impl SessionPeers {
    pub fn new(member: Arc<Member>) -> Arc<SessionPeers> {
        match *member {}
    }
}

impl Peers for SessionPeers {
    fn name(&self) -> &str {
        match *self {}
    }

    fn locate<'a>(
        &'a self,
        _name: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send + 'a>>
    {
        match *self {}
    }
}

/// `config` unchanged, or the refusal when it asks for a fleet.
pub async fn join(
    config: Config,
    flag_url: Option<String>,
    _listener: Option<&tokio::net::TcpListener>,
    _tls: bool,
    _admin: Option<String>,
) -> Result<(Config, Option<Arc<Member>>, Vec<PolicyUpdate>), AppError> {
    Ok((with_cached_fleet(config, flag_url)?, None, Vec::new()))
}

/// `config` unchanged, or the refusal when it asks for a fleet.
pub fn with_cached_fleet(config: Config, flag_url: Option<String>) -> Result<Config, AppError> {
    if config.fleet.is_some() || flag_url.is_some() {
        return Err(AppError::new(ABSENT));
    }
    Ok(config)
}
