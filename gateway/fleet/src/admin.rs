//! What `wardgate fleet …` reads and writes: servers, commands, module rollouts, status.
//!
//! Why this file is long: each `wardgate fleet` subcommand's queries sit with the row type
//! they return; a split by subject (servers, modules, commands, status) is still to come.
//!
//! Every change to servers or modules is followed by a `configure` command to the members
//! it concerns, so they fetch, diff and apply at once (the seeds' flow).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::error::Doing;
use serde::Serialize;
use serde_json::Value;
use wardgate_config::Config;
use wardgate_engine::commands::{Command, CommandState, Priority};

use crate::db::Fleet;
pub use crate::db::COMMAND_EXPIRY;
use crate::db::{expiry_ms, sha256_hex};
use crate::error::{FleetError, Result};

/// A version put in force for some members, and the `configure` commands that tell them.
#[derive(Debug)]
pub struct Rollout {
    pub name: String,
    pub version: i32,
    /// The members told to apply it: every live member for a fleet-wide step; for a
    /// canary, each member it names, live or not (a gone one applies it when it is back).
    pub members: Vec<String>,
    /// The correlation id of their `configure` commands (none without live members).
    pub correlation: Option<String>,
}

/// The local check of a module file with its params (`Err`: why it cannot be used).
pub type ModuleCheck =
    dyn Fn(&std::path::Path, &BTreeMap<String, String>) -> Result<(), String> + Sync;

/// Which members a command or a rollout is for.
#[derive(Debug, Clone)]
pub enum Targets {
    /// Every live member (a heartbeat within the gone threshold).
    All,
    /// Members named here, or in a group named here, whatever their state: a gone or
    /// stopped member gets its row too, which it runs if it is back before the row expires.
    Some(Vec<String>),
}

/// Whether a member is serving, as its heartbeats tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberState {
    /// A heartbeat within the gone threshold.
    Live,
    /// No heartbeat within the gone threshold.
    Gone,
    /// It left cleanly.
    Stopped,
}

impl MemberState {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Live => "live",
            MemberState::Gone => "gone",
            MemberState::Stopped => "stopped",
        }
    }

    /// The state the members query computed (`CASE … END`).
    fn from_query(text: &str) -> MemberState {
        match text {
            "stopped" => MemberState::Stopped,
            "gone" => MemberState::Gone,
            _ => MemberState::Live,
        }
    }
}

impl std::fmt::Display for MemberState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Serialize)]
pub struct MemberRow {
    pub name: String,
    pub version: String,
    pub address: Option<String>,
    pub admin: Option<String>,
    pub groups: Vec<String>,
    pub started_at: String,
    pub heartbeat_at: String,
    /// Milliseconds since its last heartbeat, by the database's clock.
    pub since_heartbeat_ms: i64,
    pub state: MemberState,
    /// `state` is `live`. When false, the statuses of its servers are only what it
    /// reported last: `status` says `unknown`, and `last_status` keeps that report.
    pub live: bool,
    /// The digest of its `[gateway.auth]` and `[gateway.http]`; members whose digests
    /// differ do not hand each other client requests.
    pub access_digest: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct StatusRow {
    pub member: String,
    pub server: String,
    /// The server's status on the member; `unknown` when the member is gone or stopped
    /// (nobody knows what runs there now).
    pub status: String,
    /// The status a gone or stopped member reported last; `None` while the member is
    /// live, when `status` is current. The other fields are always the last report.
    pub last_status: Option<String>,
    pub degraded: bool,
    pub reason: Option<String>,
    pub last_error: Option<String>,
    pub next_retry_at: Option<String>,
    pub crashes: i32,
    pub tools: i64,
    pub updated_at: String,
}

#[derive(Debug, Serialize)]
pub struct CommandRow {
    pub id: i64,
    pub correlation_id: String,
    pub member: String,
    pub command: Value,
    pub priority: String,
    pub state: CommandState,
    /// Claims of the row by its member (a retry after a lost lease is another claim); at
    /// most `max_retries` + 1 = 4.
    pub attempts: i32,
    /// Runs on the member's local queue for the last claim (its own retries of a failure
    /// that could pass, 1 s, 2 s, 4 s apart); `None` until a claim's run has ended, and
    /// for a row whose `type` its member did not know.
    pub local_attempts: Option<i32>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub result: Option<Value>,
    pub error: Option<String>,
}

/// What a member reported of loading a policy module version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportOutcome {
    Loaded,
    Rejected,
}

impl ReportOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ReportOutcome::Loaded => "loaded",
            ReportOutcome::Rejected => "rejected",
        }
    }

    /// The outcome as the reports table keeps it (its check constraint allows these two).
    pub(crate) fn from_column(text: &str) -> ReportOutcome {
        if text == "rejected" {
            ReportOutcome::Rejected
        } else {
            ReportOutcome::Loaded
        }
    }
}

impl std::fmt::Display for ReportOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Serialize)]
pub struct PolicyReport {
    pub member: String,
    pub name: String,
    pub version: i32,
    pub sha256: String,
    pub outcome: ReportOutcome,
    pub reason: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct FleetStatus {
    pub members: Vec<MemberRow>,
    pub servers: Vec<StatusRow>,
}

fn shown(at: SystemTime) -> String {
    crate::timestamp(at)
}

impl Fleet {
    /// Every member, with whether it is live (a heartbeat within `gone_after`).
    pub async fn members(&self, gone_after: Duration) -> Result<Vec<MemberRow>> {
        let client = self.client().await?;
        let gone_ms = gone_after.as_millis() as i64;
        let rows = client
            .query(
                "SELECT name, version, address, admin, groups, started_at, heartbeat_at,
                        CASE WHEN stopped_at IS NOT NULL THEN 'stopped'
                             WHEN heartbeat_at < now() - $1::bigint * interval '1 millisecond' THEN 'gone'
                             ELSE 'live' END,
                        (extract(epoch FROM now() - heartbeat_at) * 1000)::bigint,
                        access_digest
                   FROM wardgate_members ORDER BY name",
                &[&gone_ms],
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| MemberRow {
                name: row.get(0),
                version: row.get(1),
                address: row.get(2),
                admin: row.get(3),
                groups: row.get(4),
                started_at: shown(row.get(5)),
                heartbeat_at: shown(row.get(6)),
                since_heartbeat_ms: row.get(8),
                live: MemberState::from_query(row.get(7)) == MemberState::Live,
                state: MemberState::from_query(row.get(7)),
                access_digest: row.get(9),
            })
            .collect())
    }

    /// Members × servers: the members, and each server's status on each. A server of a
    /// member that is not live has status `unknown`, its last report in `last_status`.
    pub async fn status(&self, gone_after: Duration) -> Result<FleetStatus> {
        let members = self.members(gone_after).await?;
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT s.member, s.server, s.status, s.degraded, s.reason, s.last_error,
                        s.next_retry_at, s.crashes,
                        coalesce(jsonb_array_length(t.tools), 0)::bigint, s.updated_at
                   FROM wardgate_server_status s
                   LEFT JOIN wardgate_tools t USING (member, server)
                  ORDER BY s.server, s.member",
                &[],
            )
            .await?;
        let servers = rows
            .into_iter()
            .map(|row| {
                let member: String = row.get(0);
                let reported: String = row.get(2);
                let live = members
                    .iter()
                    .any(|known| known.name == member && known.live);
                let (status, last_status) = if live {
                    (reported, None)
                } else {
                    ("unknown".to_owned(), Some(reported))
                };
                StatusRow {
                    member,
                    server: row.get(1),
                    status,
                    last_status,
                    degraded: row.get(3),
                    reason: row.get(4),
                    last_error: row.get(5),
                    next_retry_at: row.get::<_, Option<SystemTime>>(6).map(shown),
                    crashes: row.get(7),
                    tools: row.get(8),
                    updated_at: shown(row.get(9)),
                }
            })
            .collect();
        Ok(FleetStatus { members, servers })
    }

    /// The names `targets` means, among members that heartbeat.
    async fn resolve(&self, targets: &Targets, gone_after: Duration) -> Result<Vec<String>> {
        let all = self.members(gone_after).await?;
        let names: Vec<String> = match targets {
            Targets::All => all
                .iter()
                .filter(|member| member.state == MemberState::Live)
                .map(|member| member.name.clone())
                .collect(),
            Targets::Some(wanted) => {
                for name in wanted {
                    crate::error::ensure!(
                        all.iter().any(|member| &member.name == name || member.groups.contains(name)),
                        "no fleet member or group is named {name:?}; nothing was sent (see `wardgate fleet status` for the members and their groups)"
                    );
                }
                all.iter()
                    .filter(|member| {
                        wanted
                            .iter()
                            .any(|name| &member.name == name || member.groups.contains(name))
                    })
                    .map(|member| member.name.clone())
                    .collect()
            }
        };
        Ok(names)
    }

    /// Queue `command` for each member `targets` names: one row (and lifecycle) per member,
    /// sharing one correlation id. Returns the correlation id and the rows' ids and members.
    /// A row still pending `COMMAND_EXPIRY` after it was queued expires.
    pub async fn submit(
        &self,
        command: &Command,
        priority: Priority,
        targets: &Targets,
        correlation_id: Option<String>,
        gone_after: Duration,
    ) -> Result<(String, Vec<(i64, String)>)> {
        let members = self.resolve(targets, gone_after).await?;
        crate::error::ensure!(
            !members.is_empty(),
            "no live fleet member to send the command to; start a member, or see `wardgate fleet status`"
        );
        self.submit_to(
            &serde_json::to_value(command)?,
            priority,
            &members,
            correlation_id,
        )
        .await
    }

    /// Queue a command as JSON (any `type`, so a bad row can be made on purpose) for
    /// `members`.
    pub async fn submit_to(
        &self,
        command: &Value,
        priority: Priority,
        members: &[String],
        correlation_id: Option<String>,
    ) -> Result<(String, Vec<(i64, String)>)> {
        let correlation_id = correlation_id.unwrap_or_else(|| crate::new_correlation_id("fleet"));
        let client = self.client().await?;
        let rank = crate::priority_rank(priority);
        let rows = client
            .query(
                "INSERT INTO wardgate_commands (correlation_id, member, command, priority, expires_at)
                 SELECT $1, member, $2, $3, now() + $5::bigint * interval '1 millisecond'
                   FROM unnest($4::text[]) AS m(member)
                 RETURNING id, member",
                &[&correlation_id, command, &rank, &members, &expiry_ms()],
            )
            .await?;
        Ok((
            correlation_id,
            rows.into_iter()
                .map(|row| (row.get(0), row.get(1)))
                .collect(),
        ))
    }

    /// The rows of a correlation id, or the newest `limit` rows.
    pub async fn commands(
        &self,
        correlation_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<CommandRow>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, correlation_id, member, command, priority, state, attempts, created_at,
                        started_at, finished_at, result, error, local_attempts
                   FROM wardgate_commands
                  WHERE $1::text IS NULL OR correlation_id = $1
                  ORDER BY id DESC LIMIT $2",
                &[&correlation_id, &limit],
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| CommandRow {
                id: row.get(0),
                correlation_id: row.get(1),
                member: row.get(2),
                command: row.get(3),
                priority: format!("{:?}", crate::priority_of_rank(row.get(4))).to_lowercase(),
                // The table's check constraint allows exactly these states.
                state: CommandState::parse(row.get(5)).unwrap_or(CommandState::Pending),
                attempts: row.get(6),
                created_at: shown(row.get(7)),
                started_at: row.get::<_, Option<SystemTime>>(8).map(shown),
                finished_at: row.get::<_, Option<SystemTime>>(9).map(shown),
                result: row.get(10),
                error: row.get(11),
                local_attempts: row.get(12),
            })
            .collect())
    }

    /// Wait until every row of `correlation_id` has finished, or `limit` passes.
    pub async fn wait(&self, correlation_id: &str, limit: Duration) -> Result<Vec<CommandRow>> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let rows = self.commands(Some(correlation_id), 10_000).await?;
            let done = rows.iter().all(|row| row.state.is_finished());
            if done || tokio::time::Instant::now() >= deadline {
                return Ok(rows);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The fleet's servers: name and spec (TOML of its table).
    pub async fn servers(&self) -> Result<Vec<(String, String)>> {
        let client = self.client().await?;
        Ok(client
            .query("SELECT name, spec FROM wardgate_servers ORDER BY name", &[])
            .await?
            .into_iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect())
    }

    /// Add or replace a server, after checking its spec as a config would.
    pub async fn set_server(&self, name: &str, spec: &str) -> Result<()> {
        check_server(name, spec)?;
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO wardgate_servers (name, spec) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, updated_at = now()",
                &[&name, &spec],
            )
            .await?;
        Ok(())
    }

    /// Remove a server; false when there was none of that name.
    pub async fn remove_server(&self, name: &str) -> Result<bool> {
        let client = self.client().await?;
        Ok(client
            .execute("DELETE FROM wardgate_servers WHERE name = $1", &[&name])
            .await?
            > 0)
    }

    /// Import a config file: publish its policy modules fleet-wide (with their `params`),
    /// then add its servers (replacing those of the same name). A server that names no
    /// policy gets the file's `[gateway] policy`, so its binding lives in the database too.
    /// Every file is read and every server checked before anything is written. `${VAR}`s
    /// stay unexpanded: each member expands its own.
    /// `check` is the local check of each module with its params, as `policy publish` does.
    pub async fn import(
        &self,
        path: &std::path::Path,
        check: &ModuleCheck,
        gone_after: Duration,
    ) -> Result<(Vec<String>, Vec<Rollout>)> {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let text = std::fs::read_to_string(&path)
            .doing_with(|| format!("cannot read the config file {}", path.display()))?;
        let config = Config::parse(&path, &text, &placeholder_env)
            .map_err(|error| FleetError::Invalid(format!("{error}")))?;
        let table: toml::Table = toml::from_str(&text).doing_with(|| {
            format!(
                "{} is not TOML; the fleet imports TOML configs",
                path.display()
            )
        })?;
        let default_policy = config
            .gateway
            .default_policy
            .clone()
            .filter(|policy| policy != "builtin");
        let mut servers = Vec::new();
        if let Some(tables) = table.get("servers").and_then(toml::Value::as_table) {
            for (name, spec) in tables {
                let mut spec = spec.clone();
                if let (Some(policy), Some(spec)) = (&default_policy, spec.as_table_mut()) {
                    if !spec.contains_key("policy") {
                        spec.insert("policy".to_owned(), toml::Value::String(policy.clone()));
                    }
                }
                let spec = toml::to_string(&spec)?;
                check_server(name, &spec)?;
                servers.push((name.clone(), spec));
            }
        }
        let mut modules = Vec::new();
        for policy in config.policies.values() {
            let bytes = std::fs::read(&policy.path).doing_with(|| {
                format!(
                    "cannot read the module of policy {:?} at {}; nothing was imported",
                    policy.name,
                    policy.path.display()
                )
            })?;
            check(&policy.path, &policy.params).map_err(|error| {
                FleetError::Invalid(format!(
                    "policy {:?} ({}): {error}; nothing was imported",
                    policy.name,
                    policy.path.display()
                ))
            })?;
            modules.push((policy, bytes));
        }
        let mut rollouts = Vec::new();
        for (policy, bytes) in modules {
            rollouts.push(
                self.publish(
                    &policy.name,
                    &bytes,
                    Some(&policy.params),
                    &Targets::All,
                    gone_after,
                )
                .await?,
            );
        }
        let mut names = Vec::new();
        for (name, spec) in servers {
            self.set_server(&name, &spec).await?;
            names.push(name);
        }
        Ok((names, rollouts))
    }

    /// Publish a module as the next version of `name` and assign it to `targets` (a canary)
    /// or to the whole fleet. `params` are its policy-wide decision parameters; `None`
    /// keeps the previous version's.
    pub async fn publish(
        &self,
        name: &str,
        module: &[u8],
        params: Option<&BTreeMap<String, String>>,
        targets: &Targets,
        gone_after: Duration,
    ) -> Result<Rollout> {
        let members = self.resolve(targets, gone_after).await?;
        let mut client = self.client().await?;
        let transaction = client.transaction().await?;
        lock_policy(&transaction, name).await?;
        let version = insert_version(&transaction, name, module, params).await?;
        assign_in(&transaction, name, version, targets, &members, true).await?;
        transaction.commit().await?;
        self.tell(name, version, members).await
    }

    /// Publish a module as the next version of `name` and make it the fleet's shadow of
    /// `name`: every member serving `name` from the fleet asks it every question beside
    /// its live module, deciding nothing, and reports what it would have decided
    /// ([`Fleet::shadow_reports`]). `fleet policy promote NAME` then rolls it out.
    pub async fn publish_shadow(
        &self,
        name: &str,
        module: &[u8],
        params: Option<&BTreeMap<String, String>>,
        gone_after: Duration,
    ) -> Result<Rollout> {
        let members = self.resolve(&Targets::All, gone_after).await?;
        let mut client = self.client().await?;
        let transaction = client.transaction().await?;
        lock_policy(&transaction, name).await?;
        let serving: i64 = transaction
            .query_one(
                "SELECT count(*) FROM wardgate_policy_assignments WHERE name = $1",
                &[&name],
            )
            .await?
            .get(0);
        crate::error::ensure!(
            serving > 0,
            "policy {name:?} is not published in the fleet, so no member serves it from the fleet to shadow; publish its live module first (`wardgate fleet policy publish {name} FILE.wasm`)"
        );
        let version = insert_version(&transaction, name, module, params).await?;
        transaction
            .execute(
                "INSERT INTO wardgate_policy_shadows (name, version) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version, assigned_at = now()",
                &[&name, &version],
            )
            .await?;
        transaction.commit().await?;
        self.tell(name, version, members).await
    }

    /// Stop shadowing `name` on every member.
    pub async fn unshadow(&self, name: &str, gone_after: Duration) -> Result<Rollout> {
        let members = self.resolve(&Targets::All, gone_after).await?;
        let client = self.client().await?;
        let removed = client
            .query_opt(
                "DELETE FROM wardgate_policy_shadows WHERE name = $1 RETURNING version",
                &[&name],
            )
            .await?;
        let Some(row) = removed else {
            crate::error::invalid!("policy {name:?} has no shadow in the fleet");
        };
        self.tell(name, row.get(0), members).await
    }

    /// The fleet's shadow of `name` (its version) and each member's latest report on it:
    /// (member, report as `GET /policies/NAME/shadow` gives it, seconds since written).
    pub async fn shadow_reports(
        &self,
        name: &str,
    ) -> Result<(i32, Vec<(String, serde_json::Value, f64)>)> {
        let client = self.client().await?;
        let Some(row) = client
            .query_opt(
                "SELECT version FROM wardgate_policy_shadows WHERE name = $1",
                &[&name],
            )
            .await?
        else {
            crate::error::invalid!(
                "policy {name:?} has no shadow in the fleet; publish one with `wardgate fleet policy publish {name} FILE.wasm --shadow`"
            );
        };
        let version: i32 = row.get(0);
        let reports = client
            .query(
                "SELECT member, report, extract(epoch FROM now() - at)::float8 FROM wardgate_policy_shadow_reports
                  WHERE name = $1 AND version = $2 ORDER BY member",
                &[&name, &version],
            )
            .await?
            .into_iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        Ok((version, reports))
    }

    /// Point the whole fleet at `version` of `name` (a rollout), and tell it to apply it.
    async fn assign_fleet(
        &self,
        name: &str,
        version: i32,
        gone_after: Duration,
    ) -> Result<Rollout> {
        let members = self.resolve(&Targets::All, gone_after).await?;
        let mut client = self.client().await?;
        let transaction = client.transaction().await?;
        lock_policy(&transaction, name).await?;
        assign_in(&transaction, name, version, &Targets::All, &members, true).await?;
        transaction.commit().await?;
        self.tell(name, version, members).await
    }

    /// Send `configure` to `members`, which were pointed at `version` of `name`.
    async fn tell(&self, name: &str, version: i32, members: Vec<String>) -> Result<Rollout> {
        let correlation = if members.is_empty() {
            None
        } else {
            Some(
                self.submit_to(
                    &serde_json::to_value(Command::Configure)?,
                    Priority::High,
                    &members,
                    Some(crate::new_correlation_id(&format!(
                        "policy-{name}-v{version}"
                    ))),
                )
                .await?
                .0,
            )
        };
        Ok(Rollout {
            name: name.to_owned(),
            version,
            members,
            correlation,
        })
    }

    /// Roll the newest version of `name` (the canary's) out to the whole fleet. Refused when
    /// any member rejected it, or a canary member has not reported yet, unless `force`.
    pub async fn promote(&self, name: &str, force: bool, gone_after: Duration) -> Result<Rollout> {
        let version = self.latest(name).await?;
        let reports = self.reports(name, Some(version)).await?;
        if !force {
            if let Some(rejected) = reports
                .iter()
                .find(|report| report.outcome == ReportOutcome::Rejected)
            {
                crate::error::invalid!(
                    "policy {name:?} version {version} was rejected by member {}: {}; it is not rolled out to the fleet (fix the module and publish it again, or pass --force)",
                    rejected.member,
                    rejected.reason.as_deref().unwrap_or("no reason given")
                );
            }
            let client = self.client().await?;
            let waiting: Vec<String> = client
                .query(
                    "SELECT a.member FROM wardgate_policy_assignments a
                      WHERE a.name = $1 AND a.version = $2 AND a.member <> '*'
                        AND NOT EXISTS (SELECT 1 FROM wardgate_policy_reports r
                                         WHERE r.member = a.member AND r.name = a.name AND r.version = a.version)",
                    &[&name, &version],
                )
                .await?
                .into_iter()
                .map(|row| row.get(0))
                .collect();
            crate::error::ensure!(
                waiting.is_empty(),
                "policy {name:?} version {version} has no report yet from canary member(s) {}; wait for them (wardgate fleet policy status {name}) or pass --force",
                waiting.join(", ")
            );
        }
        self.assign_fleet(name, version, gone_after).await
    }

    /// Undo the last step of `name`: a canary goes back to the fleet's version; a
    /// fleet-wide version goes back to the one the fleet ran before it (never a version
    /// only a canary ran). Returns the version now in force. One transaction under the
    /// policy's lock: a failure changes nothing, and concurrent steps take turns.
    pub async fn rollback(&self, name: &str, gone_after: Duration) -> Result<Rollout> {
        let live = self.resolve(&Targets::All, gone_after).await?;
        let mut client = self.client().await?;
        let transaction = client.transaction().await?;
        lock_policy(&transaction, name).await?;
        let fleet_version: Option<i32> = transaction
            .query_opt(
                "SELECT version FROM wardgate_policy_assignments WHERE name = $1 AND member = '*'",
                &[&name],
            )
            .await?
            .map(|row| row.get(0));
        let canaries: Vec<String> = transaction
            .query(
                "SELECT member FROM wardgate_policy_assignments WHERE name = $1 AND member <> '*'",
                &[&name],
            )
            .await?
            .into_iter()
            .map(|row| row.get(0))
            .collect();
        if !canaries.is_empty() {
            let version = fleet_version.doing_with(|| {
                format!("policy {name:?} has only a canary and no fleet-wide version to go back to")
            })?;
            transaction
                .execute(
                    "DELETE FROM wardgate_policy_assignments WHERE name = $1 AND member <> '*'",
                    &[&name],
                )
                .await?;
            transaction.commit().await?;
            let canaries = canaries
                .into_iter()
                .filter(|member| live.contains(member))
                .collect();
            return self.tell(name, version, canaries).await;
        }
        let current =
            fleet_version.doing_with(|| format!("no version of policy {name:?} is published"))?;
        let rollouts: Vec<(i64, i32)> = transaction
            .query(
                "SELECT id, version FROM wardgate_policy_rollouts
                  WHERE name = $1 AND NOT rolled_back ORDER BY id DESC LIMIT 2",
                &[&name],
            )
            .await?
            .into_iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        let (undone, previous) = match rollouts.as_slice() {
            [(undone, _), (_, previous)] => (*undone, *previous),
            _ => crate::error::invalid!(
                "policy {name:?} version {current} is the first the fleet ran (as far as the fleet's rollouts record); there is nothing to roll back to"
            ),
        };
        transaction
            .execute(
                "UPDATE wardgate_policy_rollouts SET rolled_back = true WHERE id = $1",
                &[&undone],
            )
            .await?;
        assign_in(&transaction, name, previous, &Targets::All, &live, false).await?;
        transaction.commit().await?;
        self.tell(name, previous, live).await
    }

    async fn latest(&self, name: &str) -> Result<i32> {
        let client = self.client().await?;
        client
            .query_opt(
                "SELECT max(version) FROM wardgate_policy_versions WHERE name = $1 HAVING max(version) IS NOT NULL",
                &[&name],
            )
            .await?
            .map(|row| row.get(0))
            .doing_with(|| format!("no version of policy {name:?} is published; publish one with `wardgate fleet policy publish`"))
    }

    /// What members made of `name`'s versions (one version, or all).
    pub async fn reports(&self, name: &str, version: Option<i32>) -> Result<Vec<PolicyReport>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT member, name, version, sha256, outcome, reason FROM wardgate_policy_reports
                  WHERE name = $1 AND ($2::int IS NULL OR version = $2)
                  ORDER BY version DESC, member",
                &[&name, &version],
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| PolicyReport {
                member: row.get(0),
                name: row.get(1),
                version: row.get(2),
                sha256: row.get(3),
                outcome: ReportOutcome::from_column(row.get(4)),
                reason: row.get(5),
            })
            .collect())
    }

    /// Which version of `name` each member is assigned (`*`: the fleet's).
    pub async fn assignments(&self, name: &str) -> Result<Vec<(String, i32)>> {
        let client = self.client().await?;
        Ok(client
            .query(
                "SELECT member, version FROM wardgate_policy_assignments WHERE name = $1 ORDER BY member",
                &[&name],
            )
            .await?
            .into_iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect())
    }
}

/// Steps on policy `name` (publish, assign, rollback) take turns: a transaction-scoped
/// advisory lock.
async fn lock_policy(transaction: &tokio_postgres::Transaction<'_>, name: &str) -> Result<()> {
    transaction
        .execute(
            "SELECT pg_advisory_xact_lock(hashtext('wardgate-policy:' || $1))",
            &[&name],
        )
        .await?;
    Ok(())
}

/// Point `targets` (`members`, resolved) at `version` of `name`, within `transaction`; a
/// fleet-wide assignment is recorded as a rollout when `record`.
async fn assign_in(
    transaction: &tokio_postgres::Transaction<'_>,
    name: &str,
    version: i32,
    targets: &Targets,
    members: &[String],
    record: bool,
) -> Result<()> {
    match targets {
        Targets::All => {
            transaction
                .execute(
                    "DELETE FROM wardgate_policy_assignments WHERE name = $1",
                    &[&name],
                )
                .await?;
            transaction
                .execute(
                    "INSERT INTO wardgate_policy_assignments (name, member, version) VALUES ($1, '*', $2)",
                    &[&name, &version],
                )
                .await?;
            // A shadow rolled out (its version, or the same bytes published again) decides
            // now: it shadows no more.
            transaction
                .execute(
                    "DELETE FROM wardgate_policy_shadows s USING wardgate_policy_versions shadowed, wardgate_policy_versions live
                      WHERE s.name = $1 AND shadowed.name = s.name AND shadowed.version = s.version
                        AND live.name = $1 AND live.version = $2 AND live.sha256 = shadowed.sha256",
                    &[&name, &version],
                )
                .await?;
            if record {
                transaction
                    .execute(
                        "INSERT INTO wardgate_policy_rollouts (name, version) VALUES ($1, $2)",
                        &[&name, &version],
                    )
                    .await?;
            }
        }
        Targets::Some(_) => {
            transaction
                .execute(
                    "INSERT INTO wardgate_policy_assignments (name, member, version)
                     SELECT $1, member, $2 FROM unnest($3::text[]) AS m(member)
                     ON CONFLICT (name, member) DO UPDATE SET version = EXCLUDED.version, assigned_at = now()",
                    &[&name, &version, &members],
                )
                .await?;
        }
    }
    Ok(())
}

/// The caller's environment, with a placeholder for what it lacks: a config read here is
/// only checked, and each member expands `${VAR}`s from its own environment (and reads its
/// own `OTEL_*` variables).
fn placeholder_env(name: &str) -> Option<String> {
    // Telemetry is the member's own: a made-up `OTEL_*` value would only be an error.
    if name.starts_with("OTEL_") {
        return None;
    }
    std::env::var(name)
        .ok()
        .or_else(|| Some("http://placeholder.invalid".to_owned()))
}

/// A server spec checked as one `[servers.NAME]` table of a config would be. `${VAR}`s the
/// caller's environment lacks stand in as a placeholder: each member expands its own.
fn check_server(name: &str, spec: &str) -> Result<()> {
    let table: toml::Table = toml::from_str(spec).map_err(|error| {
        FleetError::Invalid(format!(
            "the spec of server {name:?} is not TOML: {}",
            error.message()
        ))
    })?;
    let policy = table
        .get("policy")
        .and_then(toml::Value::as_str)
        .map(str::to_owned);
    let mut servers = toml::Table::new();
    servers.insert(name.to_owned(), toml::Value::Table(table));
    let mut document = toml::Table::new();
    // Its policy comes from the fleet's modules, which a member adds as [policies.NAME].
    if let Some(policy) = policy.filter(|policy| policy != "builtin") {
        let mut module = toml::Table::new();
        module.insert(
            "path".to_owned(),
            toml::Value::String("fleet-module.wasm".to_owned()),
        );
        let mut policies = toml::Table::new();
        policies.insert(policy, toml::Value::Table(module));
        document.insert("policies".to_owned(), toml::Value::Table(policies));
    }
    document.insert("servers".to_owned(), toml::Value::Table(servers));
    let text = toml::to_string(&document)?;
    Config::parse(std::path::Path::new("fleet.toml"), &text, &placeholder_env).map_err(
        |error| {
            FleetError::Invalid(format!(
                "server {name:?} cannot be used: {} ({}){}",
                error.message,
                error.key,
                if error.fix.is_empty() {
                    String::new()
                } else {
                    format!("\n  fix: {}", error.fix)
                }
            ))
        },
    )?;
    Ok(())
}

/// Stores `module` as the next version of `name`, with `params` (given ones replace the
/// previous version's, none given: no params; `None` keeps them). Returns its number.
async fn insert_version(
    transaction: &tokio_postgres::Transaction<'_>,
    name: &str,
    module: &[u8],
    params: Option<&BTreeMap<String, String>>,
) -> Result<i32> {
    let sha256 = sha256_hex(module);
    let given = match params {
        Some(params) if params.is_empty() => Some(None),
        Some(params) => Some(Some(toml::to_string(params)?)),
        None => None,
    };
    let previous = transaction
        .query_opt(
            "SELECT version, params FROM wardgate_policy_versions WHERE name = $1 ORDER BY version DESC LIMIT 1",
            &[&name],
        )
        .await?;
    let version: i32 = previous.as_ref().map_or(0, |row| row.get(0)) + 1;
    let params: Option<String> = match given {
        Some(params) => params,
        None => previous.and_then(|row| row.get(1)),
    };
    transaction
        .execute(
            "INSERT INTO wardgate_policy_versions (name, version, sha256, module, params) VALUES ($1, $2, $3, $4, $5)",
            &[&name, &version, &sha256, &module, &params],
        )
        .await?;
    Ok(version)
}
