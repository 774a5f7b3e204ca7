//! The fleet port on PostgreSQL (cargo feature `fleet`): [`FleetMember`] implements
//! [`FleetPort`] with `wardgate_fleet`'s `Member`, and joining at start says who this member
//! is and gives its first config — from the database, or, while the database is away, the
//! fleet's last config cached in the state directory.

use crate::fleet_port::{Composed, FleetPort, Joined, ModuleUpdate, PortError};
use crate::AppError;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use wardgate_config::Config;
use wardgate_downstream::http::Peers;
use wardgate_engine::commands::{CommandQueue, CommandRequest, Routed};
use wardgate_engine::lock::lock;
use wardgate_engine::Gateway;
use wardgate_fleet::{Fleet, Member, MemberOptions, PolicyUpdate, SessionPeers};

impl From<wardgate_fleet::FleetError> for AppError {
    fn from(error: wardgate_fleet::FleetError) -> AppError {
        AppError::new(error.to_string())
    }
}

/// A member of a fleet on PostgreSQL.
pub struct FleetMember {
    member: Arc<Member>,
    /// Module versions composed and not yet reported: the fleet's own record of each keeps
    /// the file's previous bytes, to put back if the version is rejected.
    pending: Mutex<Vec<PolicyUpdate>>,
}

impl FleetMember {
    fn new(member: Arc<Member>) -> Arc<FleetMember> {
        Arc::new(FleetMember {
            member,
            pending: Mutex::new(Vec::new()),
        })
    }

    /// The fleet's module versions as the port's, kept until they are reported.
    fn hold(&self, updates: Vec<PolicyUpdate>) -> Vec<ModuleUpdate> {
        let listed = updates
            .iter()
            .map(|update| ModuleUpdate {
                name: update.name.clone(),
                version: update.version,
                sha256: update.sha256.clone(),
            })
            .collect();
        let mut pending = lock(&self.pending);
        for update in updates {
            pending.retain(|held| held.name != update.name);
            pending.push(update);
        }
        listed
    }
}

impl FleetPort for FleetMember {
    fn name(&self) -> &str {
        self.member.name()
    }

    fn compose<'a>(&'a self, local: &'a Path) -> BoxFuture<'a, Result<Composed, PortError>> {
        Box::pin(async move {
            match self.member.compose(local).await {
                Ok(composed) => Ok(Composed {
                    config: composed.config,
                    updates: self.hold(composed.policies),
                }),
                Err(error) => Err(PortError {
                    unreachable: error.is_unreachable(),
                    message: format!("{error:#}"),
                }),
            }
        })
    }

    fn report_policy<'a>(
        &'a self,
        update: &'a ModuleUpdate,
        outcome: &'a Result<(), String>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let held = {
                let mut pending = lock(&self.pending);
                let found = pending.iter().position(|held| {
                    held.name == update.name
                        && held.version == update.version
                        && held.sha256 == update.sha256
                });
                found.map(|index| pending.remove(index))
            };
            match held {
                Some(held) => self.member.report_policy(&held, outcome).await,
                None => {
                    tracing::debug!(policy = %update.name, version = update.version, "no composed module version to report")
                }
            }
        })
    }

    fn report_shadows(
        &self,
        reports: Vec<(String, String, serde_json::Value)>,
    ) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.member.report_shadows(&reports).await })
    }

    fn submit_here(
        self: Arc<Self>,
        request: CommandRequest,
        queue: Arc<CommandQueue>,
    ) -> BoxFuture<'static, Routed> {
        Box::pin(async move {
            let name = self.member.name().to_owned();
            self.member.submit_here(request, &queue).await.routed(&name)
        })
    }

    fn run(
        self: Arc<Self>,
        gateway: Arc<Gateway>,
        queue: Arc<CommandQueue>,
        stop: CancellationToken,
    ) {
        self.member.run(gateway, queue, stop);
    }

    fn leave(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.member.leave())
    }

    fn session_peers(self: Arc<Self>) -> Arc<dyn Peers> {
        SessionPeers::new(self.member.clone())
    }
}

/// How long a starting member waits for the database before serving the cached config.
const FIRST_CONTACT: Duration = Duration::from_secs(10);

/// `config` as this gateway serves it: unchanged without a fleet; with one (`[fleet]` or
/// `--fleet-database-url`), composed with the fleet's servers and modules, with the
/// membership and the module versions to report once policies are loaded.
pub async fn join(
    config: Config,
    flag_url: Option<String>,
    listener: Option<&tokio::net::TcpListener>,
    tls: bool,
    admin: Option<String>,
) -> Result<Joined, AppError> {
    let Some((url, mut options)) = membership(&config, flag_url) else {
        return Ok((config, None, Vec::new()));
    };
    let settings = config.fleet.clone();
    let name = options.name.clone();
    options.admin = admin;
    options.access_digest = Some(config.gateway.access_digest());
    options.address = settings
        .as_ref()
        .and_then(|settings| settings.advertise.clone())
        .or_else(|| {
            listener
                .and_then(|listener| listener.local_addr().ok())
                .map(|local| format!("{}://{local}", if tls { "https" } else { "http" }))
        });
    test_knobs(&mut options);
    let fleet = Fleet::open(&url)?;
    tracing::info!(member = %name, database = %fleet.shown_url(), "joining the fleet");
    let member = Member::new(fleet, options);
    let first = async {
        member.join().await?;
        member.compose(&config.source).await
    };
    let port = FleetMember::new(member.clone());
    match tokio::time::timeout(FIRST_CONTACT, first).await {
        Ok(Ok(composed)) => {
            let updates = port.hold(composed.policies);
            Ok((composed.config, Some(port), updates))
        }
        outcome => {
            let why = match outcome {
                Ok(Err(error)) => format!("{error:#}"),
                _ => format!(
                    "the fleet database did not answer within {} s",
                    FIRST_CONTACT.as_secs()
                ),
            };
            let config = member.compose_cached(&config.source)?;
            tracing::warn!(member = %name, "{why}; serving the fleet's last config known here ({} servers) until it answers", config.servers.len());
            Ok((config, Some(port), Vec::new()))
        }
    }
}

/// The fleet database's URL and who this gateway is in the fleet, or `None` without a fleet.
fn membership(config: &Config, flag_url: Option<String>) -> Option<(String, MemberOptions)> {
    let settings = config.fleet.as_ref();
    let url = match (flag_url, settings) {
        (Some(url), _) => url,
        (None, Some(settings)) => settings.database_url.expose().to_owned(),
        (None, None) => return None,
    };
    let name = settings
        .and_then(|settings| settings.member.clone())
        .unwrap_or_else(host_name);
    let mut options = MemberOptions::new(
        name.clone(),
        wardgate_engine::state_dir().join("fleet").join(&name),
    );
    options.groups = settings.map(|s| s.groups.clone()).unwrap_or_default();
    Some((url, options))
}

/// `config` with the fleet's servers as this machine's member last applied them, read from
/// its cache without touching the database or the member's files: what `wardgate auth`
/// needs to sign in to a server that comes from the fleet. Unchanged without a fleet.
pub fn with_cached_fleet(config: Config, flag_url: Option<String>) -> Result<Config, AppError> {
    let Some((url, options)) = membership(&config, flag_url) else {
        return Ok(config);
    };
    Ok(Member::new(Fleet::open(&url)?, options).compose_cached(&config.source)?)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "wardgate".to_owned())
}

/// Shorter timings for tests: `WARDGATE_FLEET_HEARTBEAT_MS`, `WARDGATE_FLEET_GONE_MS`,
/// `WARDGATE_FLEET_LEASE_MS`, and `WARDGATE_FLEET_POLL_MS` (every priority's poll
/// interval, or four of them, immediate to low, comma-separated). Test knobs, not operator settings.
fn test_knobs(options: &mut MemberOptions) {
    let millis = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse::<u64>().ok())
            .map(Duration::from_millis)
    };
    if let Some(heartbeat) = millis("WARDGATE_FLEET_HEARTBEAT_MS") {
        options.heartbeat = heartbeat;
    }
    if let Some(gone) = millis("WARDGATE_FLEET_GONE_MS") {
        options.gone_after = gone;
    }
    if let Some(lease) = millis("WARDGATE_FLEET_LEASE_MS") {
        options.lease = lease;
    }
    // One interval for every priority, or four (immediate, high, normal, low).
    if let Ok(polls) = std::env::var("WARDGATE_FLEET_POLL_MS") {
        let polls: Vec<Duration> = polls
            .split(',')
            .filter_map(|value| value.trim().parse::<u64>().ok())
            .map(Duration::from_millis)
            .collect();
        match polls.as_slice() {
            [every] => options.poll = [*every; 4],
            [immediate, high, normal, low] => options.poll = [*immediate, *high, *normal, *low],
            _ => {}
        }
    }
    options.listen = std::env::var_os("WARDGATE_FLEET_NO_LISTEN").is_none();
}
