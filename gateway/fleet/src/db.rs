//! The connection pool, and the schema the gateway migrates itself.

use std::str::FromStr;
use std::time::Duration;

use crate::error::Doing;
use crate::error::{FleetError, Result};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

/// A fleet command row still pending this long after it was queued (never claimed, or put
/// back after a lost lease) expires: no member claims it any more, and the reaper of any
/// running member marks it `expired`.
pub const COMMAND_EXPIRY: Duration = Duration::from_secs(300);

/// `COMMAND_EXPIRY` in milliseconds, as the SQL takes it.
pub(crate) fn expiry_ms() -> i64 {
    COMMAND_EXPIRY.as_millis() as i64
}

/// A policy module's SHA-256 as the database keeps it: lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Versioned migrations, applied in order, each once. Append; never edit an applied one.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "fleet", include_str!("../migrations/0001_fleet.sql")),
    (
        2,
        "rollouts and params",
        include_str!("../migrations/0002_rollouts_and_params.sql"),
    ),
    (
        3,
        "access digest",
        include_str!("../migrations/0003_access_digest.sql"),
    ),
    (
        4,
        "policy shadows",
        include_str!("../migrations/0004_policy_shadows.sql"),
    ),
];

/// An arbitrary key: the advisory lock under which members migrate, one at a time.
const MIGRATION_LOCK: i64 = 0x7761_7264_6761_7465; // "wardgate"

/// A fleet database: a small pool of connections (opened on demand, replaced when broken).
/// Cloning shares the pool.
#[derive(Clone)]
pub struct Fleet {
    pool: Pool,
    /// For connections of their own (LISTEN): the driver's config (it holds the password;
    /// never shown) and the TLS connector.
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    /// The URL as it may be shown: no password.
    shown: String,
}

impl Fleet {
    /// A pool for `url`; no connection is made yet. Every statement has a 15 s timeout and
    /// every connection attempt 5 s, so nothing waits forever on a database that went away.
    pub fn open(url: &str) -> Result<Fleet> {
        let shown = wardgate_config::redact_url(url);
        let unusable = |error: &dyn std::fmt::Display| {
            FleetError::Invalid(format!("the fleet database URL {shown} cannot be used: {error}; write postgres://USER:PASSWORD@HOST:PORT/DATABASE, with ?sslmode=verify-full&sslrootcert=CA.pem for TLS that checks the server"))
        };
        let split = crate::tls::split(url).map_err(|error| unusable(&error))?;
        let mut config =
            tokio_postgres::Config::from_str(&split.url).map_err(|error| unusable(&error))?;
        config
            .ssl_mode(split.ssl_mode())
            .connect_timeout(Duration::from_secs(5))
            .keepalives_idle(Duration::from_secs(30));
        let tls = split.connector().map_err(|error| unusable(&error))?;
        let mut pooled = config.clone();
        pooled
            .application_name("wardgate")
            .options("-c statement_timeout=15000 -c lock_timeout=5000");
        let manager = Manager::from_config(
            pooled,
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(4)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(10)))
            .create_timeout(Some(Duration::from_secs(6)))
            .recycle_timeout(Some(Duration::from_secs(5)))
            .build()
            .doing("could not set up the fleet database pool")?;
        config.application_name("wardgate-listen");
        Ok(Fleet {
            pool,
            config,
            tls,
            shown,
        })
    }

    /// The database URL without its password.
    pub fn shown_url(&self) -> &str {
        &self.shown
    }

    /// One pooled connection.
    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(|error| {
            let hint = match &error {
                deadpool_postgres::PoolError::Backend(error) => crate::tls::hint(error),
                _ => "",
            };
            FleetError::Unreachable(format!(
                "the fleet database {} is unreachable: {}{hint}",
                self.shown,
                describe_pool_error(&error),
            ))
        })
    }

    /// A connection of its own (for LISTEN), with the task that drives it.
    pub(crate) async fn dedicated(
        &self,
    ) -> Result<(
        tokio_postgres::Client,
        tokio_postgres::Connection<
            tokio_postgres::Socket,
            <MakeRustlsConnect as MakeTlsConnect<tokio_postgres::Socket>>::Stream,
        >,
    )> {
        self.config
            .connect(self.tls.clone())
            .await
            .map_err(|error| {
                FleetError::Unreachable(format!(
                    "the fleet database {} is unreachable: {}{}",
                    self.shown,
                    describe(&error),
                    crate::tls::hint(&error)
                ))
            })
    }

    /// Create or upgrade the schema: every migration not yet applied, in one transaction,
    /// under an advisory lock. A schema newer than this binary knows is an error.
    pub async fn migrate(&self) -> Result<()> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await?;
        transaction
            .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        transaction
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS wardgate_schema (
                     version    integer PRIMARY KEY,
                     name       text NOT NULL,
                     applied_at timestamptz NOT NULL DEFAULT now())",
            )
            .await?;
        let current: i32 = transaction
            .query_one("SELECT coalesce(max(version), 0) FROM wardgate_schema", &[])
            .await?
            .get(0);
        let known = MIGRATIONS.last().map_or(0, |(version, _, _)| *version);
        crate::error::ensure!(
            current <= known,
            "the fleet database {} has schema version {current}, newer than this wardgate {} knows ({known}); upgrade this member",
            self.shown,
            env!("CARGO_PKG_VERSION")
        );
        for (version, name, sql) in MIGRATIONS.iter().filter(|(v, _, _)| *v > current) {
            transaction
                .batch_execute(sql)
                .await
                .doing_with(|| format!("fleet schema migration {version} ({name}) failed"))?;
            transaction
                .execute(
                    "INSERT INTO wardgate_schema (version, name) VALUES ($1, $2)",
                    &[version, name],
                )
                .await?;
            tracing::info!(version, name, "fleet database schema migrated");
        }
        transaction.commit().await?;
        Ok(())
    }
}

/// A pool error in words, without the URL (the driver never puts the password in its
/// messages; the pool's own wording is replaced so it stays short).
fn describe_pool_error(error: &deadpool_postgres::PoolError) -> String {
    match error {
        deadpool_postgres::PoolError::Backend(error) => describe(error),
        deadpool_postgres::PoolError::Timeout(_) => "timed out waiting for a connection".to_owned(),
        other => other.to_string(),
    }
}

/// A driver error with its causes: alone it says only "db error" or "error performing TLS
/// handshake"; the server's message (a refused login, a pg_hba rule) or the TLS failure is
/// its source.
fn describe(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(error) = cause {
        let more = error.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = error.source();
    }
    text
}
