//! A member's config: its own file, plus the fleet's servers and the policy modules assigned
//! to it, written as `[servers.NAME]` and `[policies.NAME]` tables and validated by the same
//! parser as any config file. Module bytes land in the member's state directory, one file per
//! policy name, so a new version reloads exactly as an edited module file does.
//!
//! Nothing is written until the whole config validates: a bad server row fails `configure`
//! and changes nothing. The fleet's part is cached in the state directory, so a member that
//! starts while the database is away serves the fleet's last config.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::db::sha256_hex;
use crate::error::Doing;
use wardgate_config::Config;

use super::Member;
use crate::admin::ReportOutcome;
use crate::error::{FleetError, Result};

/// A composed config, and the modules it brought that differ from the files on disk.
pub struct Composed {
    pub config: Config,
    pub policies: Vec<PolicyUpdate>,
}

/// A module version written for a policy name.
pub struct PolicyUpdate {
    pub name: String,
    pub version: i32,
    pub sha256: String,
    pub path: PathBuf,
    /// The file's bytes before (to put back if the new module is rejected).
    previous: Option<Vec<u8>>,
}

const CACHE: &str = "fleet-config.toml";

impl Member {
    fn policy_dir(&self) -> PathBuf {
        self.options.state_dir.join("policies")
    }

    /// The config from the database: `local`'s file and the fleet's servers and modules.
    pub async fn compose(&self, local: &Path) -> Result<Composed> {
        let local_text = std::fs::read_to_string(local)
            .doing_with(|| format!("cannot read the config file {}", local.display()))?;
        let client = self.fleet.client().await?;
        let servers: Vec<(String, String)> = client
            .query("SELECT name, spec FROM wardgate_servers ORDER BY name", &[])
            .await?
            .into_iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        let assigned: Vec<(String, i32, String, Option<String>)> = client
            .query(
                "SELECT DISTINCT ON (a.name) a.name, a.version, v.sha256, v.params
                   FROM wardgate_policy_assignments a
                   JOIN wardgate_policy_versions v USING (name, version)
                  WHERE a.member = $1 OR a.member = '*'
                  ORDER BY a.name, a.member = '*'",
                &[&self.options.name],
            )
            .await?
            .into_iter()
            .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
            .collect();
        let policy_dir = self.policy_dir();
        let mut modules = BTreeMap::new();
        let mut updates = Vec::new();
        let mut fetched = Vec::new();
        for (name, version, sha256, params) in &assigned {
            let path = policy_dir.join(format!("{name}.wasm"));
            let previous = std::fs::read(&path).ok();
            let params = match params {
                Some(text) => Some(toml::from_str::<toml::Table>(text).map_err(|error| {
                    FleetError::Invalid(format!("the params of policy {name:?} version {version} in the fleet database are not a TOML table ({}); publish it again", error.message()))
                })?),
                None => None,
            };
            modules.insert(name.clone(), (path.clone(), params));
            if previous.as_deref().map(sha256_hex).as_deref() == Some(sha256.as_str()) {
                continue;
            }
            let bytes: Vec<u8> = client
                .query_one(
                    "SELECT module FROM wardgate_policy_versions WHERE name = $1 AND version = $2",
                    &[name, version],
                )
                .await?
                .get(0);
            crate::error::ensure!(
                sha256_hex(&bytes) == *sha256,
                "policy {name:?} version {version} in the fleet database does not match its recorded sha256; publish it again"
            );
            fetched.push(bytes);
            updates.push(PolicyUpdate {
                name: name.clone(),
                version: *version,
                sha256: sha256.clone(),
                path,
                previous,
            });
        }
        // The fleet's shadows of the policies this member serves from the fleet, each in a
        // file named by its version (a new version is a new `shadow` line, so it rebinds).
        let shadow_rows: Vec<(String, i32, String)> = client
            .query(
                "SELECT s.name, s.version, v.sha256 FROM wardgate_policy_shadows s
                   JOIN wardgate_policy_versions v USING (name, version) ORDER BY s.name",
                &[],
            )
            .await?
            .into_iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        let mut shadows = BTreeMap::new();
        let mut shadow_versions = BTreeMap::new();
        let mut shadow_files = Vec::new();
        for (name, version, sha256) in shadow_rows {
            if !modules.contains_key(&name) {
                continue;
            }
            let path = policy_dir.join(format!("{name}.shadow-v{version}.wasm"));
            let current = std::fs::read(&path).ok();
            if current.as_deref().map(sha256_hex).as_deref() != Some(sha256.as_str()) {
                let bytes: Vec<u8> = client
                    .query_one(
                        "SELECT module FROM wardgate_policy_versions WHERE name = $1 AND version = $2",
                        &[&name, &version],
                    )
                    .await?
                    .get(0);
                crate::error::ensure!(
                    sha256_hex(&bytes) == sha256,
                    "policy {name:?} version {version} in the fleet database does not match its recorded sha256; publish it again"
                );
                shadow_files.push((path.clone(), bytes));
            }
            shadows.insert(name.clone(), path);
            shadow_versions.insert(name, (version, sha256));
        }
        let fleet_part = fleet_part(&servers, &modules, &shadows)?;
        let config = self.parse(local, &local_text, &fleet_part)?;
        // Valid: now write the modules, then the cache.
        std::fs::create_dir_all(&policy_dir).doing_with(|| {
            format!(
                "cannot create the fleet state directory {}",
                policy_dir.display()
            )
        })?;
        for (update, bytes) in updates.iter().zip(&fetched) {
            write_atomically(&update.path, bytes)?;
        }
        for (path, bytes) in &shadow_files {
            write_atomically(path, bytes)?;
        }
        forget_old_shadows(&policy_dir, &shadows);
        *wardgate_engine::lock::lock(&self.shadows) = shadow_versions;
        write_atomically(&self.options.state_dir.join(CACHE), fleet_part.as_bytes())?;
        Ok(Composed {
            config,
            policies: updates,
        })
    }

    /// The config from the last one cached (the database is away): `local`'s file and the
    /// fleet part last applied, or the file alone when there is none.
    pub fn compose_cached(&self, local: &Path) -> Result<Config> {
        self.from_cache
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let local_text = std::fs::read_to_string(local)
            .doing_with(|| format!("cannot read the config file {}", local.display()))?;
        let fleet_part =
            std::fs::read_to_string(self.options.state_dir.join(CACHE)).unwrap_or_default();
        self.parse(local, &local_text, &fleet_part)
    }

    fn parse(&self, local: &Path, local_text: &str, fleet_part: &str) -> Result<Config> {
        let env = |name: &str| std::env::var(name).ok();
        let own = Config::parse(local, local_text, &env)
            .map_err(|error| FleetError::Invalid(format!("{error}")))?;
        if let Ok(table) = toml::from_str::<toml::Table>(fleet_part) {
            for key in ["servers", "policies"] {
                let names = table.get(key).and_then(toml::Value::as_table);
                let own_names: Vec<&String> = match key {
                    "servers" => own.servers.keys().collect(),
                    _ => own.policies.keys().collect(),
                };
                if let Some(name) = names
                    .and_then(|names| own_names.into_iter().find(|name| names.contains_key(*name)))
                {
                    crate::error::invalid!(
                        "[{key}.{name}] is both in {} and in the fleet database; remove it from one of them",
                        local.display()
                    );
                }
            }
        }
        let text = format!("{local_text}\n\n# --- from the fleet database ---\n{fleet_part}");
        let composed = Config::parse(local, &text, &env).map_err(|error| {
            FleetError::Invalid(format!(
                "the fleet's config cannot be applied on member {:?}: {} ({}{}); fix the server with `wardgate fleet servers set`; the member keeps its current config",
                self.options.name,
                error.message,
                error.key,
                if error.fix.is_empty() { String::new() } else { format!("; {}", error.fix) }
            ))
        })?;
        // A grant may name a server the fleet adds later; one that names none now is said.
        for unmatched in composed.unmatched_grants() {
            tracing::warn!(member = %self.options.name, "{unmatched}; it allows nothing until a server of that name is added");
        }
        Ok(composed)
    }

    /// Files this member's shadow reports (policy name, the shadow module's sha256, the
    /// report) under the fleet shadow version they are about; a report of a shadow the
    /// fleet did not bind here (a local one) is not the fleet's.
    pub async fn report_shadows(&self, reports: &[(String, String, serde_json::Value)]) {
        let known = wardgate_engine::lock::lock(&self.shadows).clone();
        for (name, sha256, report) in reports {
            let Some((version, expected)) = known.get(name) else {
                continue;
            };
            if expected != sha256 {
                continue;
            }
            let written = async {
                let client = self.fleet.client().await?;
                client
                    .execute(
                        "INSERT INTO wardgate_policy_shadow_reports (member, name, version, report)
                         VALUES ($1, $2, $3, $4)
                         ON CONFLICT (member, name, version) DO UPDATE SET report = EXCLUDED.report, at = now()",
                        &[&self.options.name, name, version, report],
                    )
                    .await?;
                Ok::<_, FleetError>(())
            };
            if let Err(error) = written.await {
                tracing::debug!(policy = %name, "could not write the shadow report to the fleet: {error:#}");
            }
        }
    }

    /// Record what this member made of a module version; and when it was rejected, put the
    /// previous file back so a restart does not load the rejected module.
    pub async fn report_policy(&self, update: &PolicyUpdate, outcome: &Result<(), String>) {
        if outcome.is_err() {
            match &update.previous {
                Some(bytes) => {
                    let _ = write_atomically(&update.path, bytes);
                }
                None => {
                    let _ = std::fs::remove_file(&update.path);
                }
            }
        }
        let (state, reason) = match outcome {
            Ok(()) => (ReportOutcome::Loaded.as_str(), None),
            Err(reason) => (ReportOutcome::Rejected.as_str(), Some(reason.clone())),
        };
        let report = async {
            let client = self.fleet.client().await?;
            client
                .execute(
                    "INSERT INTO wardgate_policy_reports (member, name, version, sha256, outcome, reason)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (member, name, version) DO UPDATE SET
                        sha256 = EXCLUDED.sha256, outcome = EXCLUDED.outcome,
                        reason = EXCLUDED.reason, at = now()",
                    &[&self.options.name, &update.name, &update.version, &update.sha256, &state, &reason],
                )
                .await?;
            Ok::<_, FleetError>(())
        };
        if let Err(error) = report.await {
            tracing::warn!(policy = %update.name, "could not report the module's load to the fleet: {error:#}");
        }
    }
}

/// Removes shadow module files no shadow of `shadows` uses any more.
fn forget_old_shadows(policy_dir: &Path, shadows: &BTreeMap<String, PathBuf>) {
    let Ok(entries) = std::fs::read_dir(policy_dir) else {
        return;
    };
    let kept: Vec<&PathBuf> = shadows.values().collect();
    for entry in entries.flatten() {
        let path = entry.path();
        let is_shadow = path
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| name.contains(".shadow-v") && name.ends_with(".wasm"));
        if is_shadow && !kept.contains(&&path) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The fleet's servers and modules as TOML tables.
fn fleet_part(
    servers: &[(String, String)],
    modules: &BTreeMap<String, (PathBuf, Option<toml::Table>)>,
    shadows: &BTreeMap<String, PathBuf>,
) -> Result<String> {
    let mut server_tables = toml::Table::new();
    for (name, spec) in servers {
        let table: toml::Table = toml::from_str(spec).map_err(|error| {
            FleetError::Invalid(format!("the fleet's server {name:?} is not valid TOML ({}); fix it with `wardgate fleet servers set {name} ...`", error.message()))
        })?;
        server_tables.insert(name.clone(), toml::Value::Table(table));
    }
    let mut policy_tables = toml::Table::new();
    for (name, (path, params)) in modules {
        let mut table = toml::Table::new();
        table.insert(
            "path".to_owned(),
            toml::Value::String(path.display().to_string()),
        );
        if let Some(params) = params {
            table.insert("params".to_owned(), toml::Value::Table(params.clone()));
        }
        if let Some(shadow) = shadows.get(name) {
            table.insert(
                "shadow".to_owned(),
                toml::Value::String(shadow.display().to_string()),
            );
        }
        policy_tables.insert(name.clone(), toml::Value::Table(table));
    }
    let mut document = toml::Table::new();
    if !policy_tables.is_empty() {
        document.insert("policies".to_owned(), toml::Value::Table(policy_tables));
    }
    if !server_tables.is_empty() {
        document.insert("servers".to_owned(), toml::Value::Table(server_tables));
    }
    Ok(toml::to_string(&document)?)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).doing_with(|| format!("cannot create {}", dir.display()))?;
    }
    let temporary = path.with_extension("partial");
    std::fs::write(&temporary, bytes)
        .and_then(|()| std::fs::rename(&temporary, path))
        .doing_with(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_server_tables_stay_under_their_server() {
        let text = fleet_part(
            &[(
                "a".to_owned(),
                "command = \"x\"\n[tools]\ndeny = [\"y\"]\n".to_owned(),
            )],
            &BTreeMap::from([(
                "p".to_owned(),
                (
                    PathBuf::from("/s/p.wasm"),
                    Some(toml::from_str("max_attempts = \"7\"").unwrap()),
                ),
            )]),
            &BTreeMap::from([("p".to_owned(), PathBuf::from("/s/p.shadow-v2.wasm"))]),
        )
        .unwrap();
        let local = "[gateway]\nseparator = \"__\"\n[servers.own]\ncommand = \"z\"\n";
        let parsed: toml::Table = toml::from_str(&format!("{local}\n{text}")).unwrap();
        assert_eq!(
            parsed["servers"]["a"]["tools"]["deny"][0].as_str(),
            Some("y")
        );
        assert_eq!(parsed["servers"]["own"]["command"].as_str(), Some("z"));
        assert_eq!(parsed["policies"]["p"]["path"].as_str(), Some("/s/p.wasm"));
        assert_eq!(
            parsed["policies"]["p"]["shadow"].as_str(),
            Some("/s/p.shadow-v2.wasm")
        );
        assert_eq!(
            parsed["policies"]["p"]["params"]["max_attempts"].as_str(),
            Some("7")
        );
    }
}
