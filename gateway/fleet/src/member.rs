//! A member: joins the fleet, heartbeats, and keeps its connection — reconnecting with
//! backoff while serving on its last config when the database is away.

pub(crate) mod commands;
pub(crate) mod compose;
mod sync;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use wardgate_engine::commands::{Command, CommandQueue, CommandRequest, Priority};
use wardgate_engine::Gateway;

use self::sync::Outbox;
use crate::backoff::Backoff;
use crate::db::Fleet;
use crate::error::{FleetError, Result};

/// This machine, as members tell each other apart by it: `/etc/machine-id`, else the
/// host name. A member registered at a loopback address is reachable only from its own
/// machine.
pub(crate) fn machine_id() -> String {
    [
        "/etc/machine-id",
        "/var/lib/dbus/machine-id",
        "/proc/sys/kernel/hostname",
    ]
    .iter()
    .filter_map(|path| std::fs::read_to_string(path).ok())
    .map(|text| text.trim().to_owned())
    .find(|text| !text.is_empty())
    .unwrap_or_default()
}

/// Who a member is, and its timings.
#[derive(Debug, Clone)]
pub struct MemberOptions {
    /// Unique in the fleet; commands and status rows name it.
    pub name: String,
    pub groups: Vec<String>,
    /// Where clients and other members reach its `/mcp`.
    pub address: Option<String>,
    /// Where its admin API listens.
    pub admin: Option<String>,
    /// Its `GatewaySettings::access_digest`: members hand each other client requests only
    /// when theirs are equal.
    pub access_digest: Option<String>,
    /// Where it keeps module files and its last fleet config.
    pub state_dir: PathBuf,
    /// Default 5 s.
    pub heartbeat: Duration,
    /// A member whose last heartbeat is older than this is shown as gone. Default 15 s.
    pub gone_after: Duration,
    /// How long a claimed command may go without its member renewing the claim before any
    /// member retries or fails it. Default 30 s.
    pub lease: Duration,
    /// Between polls for commands of each priority, when no notification came (the
    /// seeds' 2, 10, 30 and 60 s for immediate, high, normal and low).
    pub poll: [Duration; 4],
    /// LISTEN for notifications (default); off, commands wait for polls (for benchmarks).
    pub listen: bool,
}

impl MemberOptions {
    pub fn new(name: String, state_dir: PathBuf) -> MemberOptions {
        MemberOptions {
            name,
            groups: Vec::new(),
            address: None,
            admin: None,
            access_digest: None,
            state_dir,
            heartbeat: Duration::from_secs(5),
            gone_after: Duration::from_secs(15),
            lease: Duration::from_secs(30),
            poll: [2, 10, 30, 60].map(Duration::from_secs),
            listen: true,
        }
    }
}

/// One gateway's membership.
pub struct Member {
    pub(crate) fleet: Fleet,
    pub(crate) options: MemberOptions,
    /// This process: a restarted member is a new instance, which fences the old one's
    /// late results.
    pub(crate) instance: String,
    started_at: SystemTime,
    /// Wakes the command claimer (a notification, or a reconnect).
    pub(crate) wake: Notify,
    pub(crate) outbox: Outbox,
    /// Between a successful join and the next database error: commands of the member's
    /// own admin API go through the fleet's table only then.
    pub(crate) connected: AtomicBool,
    /// It serves the fleet config cached in its state directory (the database did not
    /// answer at start): the first join applies the fleet's config, as a reconnect does.
    pub(crate) from_cache: AtomicBool,
    /// The fleet's shadows the last composed config bound: policy name → (version, sha256),
    /// what this member's shadow reports are filed under.
    pub(crate) shadows: std::sync::Mutex<std::collections::BTreeMap<String, (i32, String)>>,
}

impl Member {
    pub fn new(fleet: Fleet, options: MemberOptions) -> Arc<Member> {
        let started_at = SystemTime::now();
        let nanos = started_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        Arc::new(Member {
            fleet,
            instance: format!("{}-{}-{nanos:x}", options.name, std::process::id()),
            options,
            started_at,
            wake: Notify::new(),
            outbox: Outbox::default(),
            connected: AtomicBool::new(false),
            from_cache: AtomicBool::new(false),
            shadows: std::sync::Mutex::default(),
        })
    }

    pub fn name(&self) -> &str {
        &self.options.name
    }

    /// Migrate the schema and register (or re-register) this member. A member of the same
    /// name that still heartbeats is taken over, with a warning: two gateways must not
    /// share a name.
    pub async fn join(&self) -> Result<()> {
        self.fleet.migrate().await?;
        let client = self.fleet.client().await?;
        let previous = client
            .query_opt(
                "SELECT instance, extract(epoch FROM now() - heartbeat_at)::float8, stopped_at IS NOT NULL
                   FROM wardgate_members WHERE name = $1",
                &[&self.options.name],
            )
            .await?;
        if let Some(row) = previous {
            let instance: String = row.get(0);
            let ago: f64 = row.get(1);
            let stopped: bool = row.get(2);
            if instance != self.instance && !stopped && ago < self.options.gone_after.as_secs_f64()
            {
                tracing::warn!(
                    member = %self.options.name,
                    "another gateway heartbeated as fleet member {:?} {ago:.1} s ago; this one takes the name over (a restart looks like this; if that gateway still runs, give one of them another [fleet] member name)",
                    self.options.name
                );
            }
        }
        client
            .execute(
                "INSERT INTO wardgate_members
                     (name, instance, version, address, admin, groups, started_at, heartbeat_at, machine,
                      access_digest)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, now(), $8, $9)
                 ON CONFLICT (name) DO UPDATE SET
                     instance = EXCLUDED.instance, version = EXCLUDED.version,
                     address = EXCLUDED.address, admin = EXCLUDED.admin,
                     groups = EXCLUDED.groups, started_at = EXCLUDED.started_at,
                     heartbeat_at = now(), stopped_at = NULL, machine = EXCLUDED.machine,
                     access_digest = EXCLUDED.access_digest",
                &[
                    &self.options.name,
                    &self.instance,
                    &env!("CARGO_PKG_VERSION"),
                    &self.options.address,
                    &self.options.admin,
                    &self.options.groups,
                    &self.started_at,
                    &machine_id(),
                    &self.options.access_digest,
                ],
            )
            .await?;
        Ok(())
    }

    /// Run the member's loops until `stop`: heartbeats, commands (LISTEN/NOTIFY, polling,
    /// leases), and status sync. While the database is away it retries with backoff
    /// (0.5 s doubling to 10 s); when it is back, the member registers again, writes its
    /// whole status, and applies the fleet's config (`configure`), which may have changed.
    pub fn run(
        self: &Arc<Member>,
        gateway: Arc<Gateway>,
        queue: Arc<CommandQueue>,
        stop: CancellationToken,
    ) {
        sync::collect(self.clone(), &gateway, stop.clone());
        let member = self.clone();
        tokio::spawn(async move {
            let mut backoff = Backoff::new();
            let mut joined_before = false;
            let mut warned = false;
            loop {
                let session = async {
                    member.join().await?;
                    member.connected.store(true, Ordering::Relaxed);
                    if joined_before || member.from_cache.swap(false, Ordering::Relaxed) {
                        tracing::info!(member = %member.options.name, "the fleet database {} is back; reporting and applying the fleet's config", member.fleet.shown_url());
                        queue.submit(CommandRequest::new(Command::Configure, Priority::High));
                    }
                    joined_before = true;
                    // The next loss of the database is worth a warning again.
                    warned = false;
                    backoff.reset();
                    member.connected_session(&gateway, &queue).await
                };
                let error = tokio::select! {
                    _ = stop.cancelled() => break,
                    result = session => match result {
                        Ok(()) => continue,
                        Err(error) => error,
                    },
                };
                member.connected.store(false, Ordering::Relaxed);
                if !warned {
                    tracing::warn!(member = %member.options.name, "{error:#}; serving on the last config and retrying");
                    warned = true;
                }
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(backoff.next_wait()) => {}
                }
            }
        });
    }

    /// While connected: every loop, until the first database error.
    async fn connected_session(
        self: &Arc<Member>,
        gateway: &Arc<Gateway>,
        queue: &Arc<CommandQueue>,
    ) -> Result<()> {
        self.outbox.rewrite_all();
        tokio::try_join!(
            self.heartbeats(),
            async {
                if self.options.listen {
                    self.listen().await
                } else {
                    std::future::pending().await
                }
            },
            self.claim_loop(queue),
            self.reap_loop(),
            self.sync_loop(gateway),
        )?;
        Ok(())
    }

    async fn heartbeats(&self) -> Result<()> {
        loop {
            tokio::time::sleep(self.options.heartbeat).await;
            let client = self.fleet.client().await?;
            let updated = client
                .execute(
                    "UPDATE wardgate_members SET heartbeat_at = now(), stopped_at = NULL
                      WHERE name = $1 AND instance = $2",
                    &[&self.options.name, &self.instance],
                )
                .await?;
            if updated == 0 {
                crate::error::invalid!(
                    "another gateway took over the fleet member name {:?}; give one of them another [fleet] member name",
                    self.options.name
                );
            }
        }
    }

    /// On a clean shutdown: shown as stopped at once instead of gone after its heartbeats
    /// stop. Bounded by 2 s; a database that is away only delays nothing.
    pub async fn leave(&self) {
        let leave = async {
            let client = self.fleet.client().await?;
            client
                .execute(
                    "UPDATE wardgate_members SET stopped_at = now() WHERE name = $1 AND instance = $2",
                    &[&self.options.name, &self.instance],
                )
                .await?;
            Ok::<_, FleetError>(())
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), leave).await;
    }
}
