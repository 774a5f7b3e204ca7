//! `wardgate fleet …`: manage a fleet of gateways through its database.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use wardgate_config::Config;
use wardgate_engine::commands::{Command, Priority};
use wardgate_fleet::admin::{CommandRow, MemberRow, MemberState, Rollout, Targets, COMMAND_EXPIRY};
use wardgate_fleet::Fleet;

use crate::args::{FleetCommand, FleetPolicy, FleetServers};

/// How long a member may go without a heartbeat before it counts as gone (the default
/// heartbeat is 5 s). `WARDGATE_FLEET_GONE_MS` shortens it for tests.
pub fn gone_after() -> Duration {
    std::env::var("WARDGATE_FLEET_GONE_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(Duration::from_secs(15), Duration::from_millis)
}

/// The fleet database URL: the flag (or its variable), else `[fleet]` of the config.
pub fn database_url(flag: Option<String>, config: Option<&Path>) -> anyhow::Result<String> {
    if let Some(url) = flag {
        return Ok(url);
    }
    let path = config.context(
        "no fleet database given; pass --fleet-database-url postgres://… (or set WARDGATE_FLEET_DATABASE_URL), or --config with a [fleet] table",
    )?;
    let config = Config::load(path).map_err(|error| anyhow::anyhow!("{error}"))?;
    let fleet = config.fleet.with_context(|| {
        format!(
            "{} has no [fleet] table; pass --fleet-database-url postgres://…",
            path.display()
        )
    })?;
    Ok(fleet.database_url.expose().to_owned())
}

pub async fn run(command: FleetCommand, url: &str) -> anyhow::Result<ExitCode> {
    let fleet = Fleet::open(url)?;
    fleet.migrate().await?;
    let gone = gone_after();
    match command {
        FleetCommand::Status(output) => {
            let status = fleet.status(gone).await?;
            if output.json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print_status(&status);
            }
        }
        FleetCommand::Import { file } => {
            // Each module is checked here first, as `policy publish` does.
            let check = |path: &Path, params: &BTreeMap<String, String>| {
                wardgate_wasm::WasmPolicy::load(path, params.clone())
                    .map(|_| ())
                    .map_err(|error| error.to_string())
            };
            let (servers, rollouts) = fleet.import(&file, &check, gone).await?;
            println!(
                "imported {} server(s) ({}) and {} policy module(s) from {}",
                servers.len(),
                servers.join(", "),
                rollouts.len(),
                file.display()
            );
            // Each module went to the whole fleet: what each member made of it.
            let mut fine = true;
            for rollout in &rollouts {
                fine &= report_rollout(&fleet, rollout).await?;
            }
            configure_everyone(&fleet, gone).await;
            if !fine {
                return Ok(ExitCode::FAILURE);
            }
        }
        FleetCommand::Servers(servers) => return servers_command(&fleet, servers, gone).await,
        FleetCommand::Command {
            kind,
            server,
            members,
            priority,
            wait,
            output,
        } => {
            let mut value = serde_json::json!({ "type": kind });
            if let Some(server) = &server {
                value["server"] = serde_json::json!(server);
            }
            let command: Command = serde_json::from_value(value).map_err(|error| {
                anyhow::anyhow!("{kind:?} with {}: {error}; types: configure, spawn, kill, restart, reconnect, enable, disable, health_check, reload_policies (the server-level ones need SERVER)", server.as_deref().unwrap_or("no server"))
            })?;
            let priority: Priority = serde_json::from_value(serde_json::json!(priority))?;
            let named = !members.is_empty();
            let targets = if named {
                Targets::Some(members)
            } else {
                Targets::All
            };
            let (correlation, rows) = fleet
                .submit(&command, priority, &targets, None, gone)
                .await?;
            // Named members may be gone or stopped: their rows wait for them (every live
            // member is the default, so only named ones can be).
            if named {
                let states = fleet.members(gone).await?;
                for (id, member) in &rows {
                    if let Some(why) = not_live(&states, member) {
                        eprintln!(
                            "warning: {why}; command {id} is queued for it and runs when it is back, or expires if it is not back within {}",
                            short_duration(COMMAND_EXPIRY)
                        );
                    }
                }
            }
            if !wait {
                if output.json {
                    println!(
                        "{}",
                        serde_json::json!({"correlation_id": correlation, "commands": rows.iter().map(|(id, member)| serde_json::json!({"id": id, "member": member})).collect::<Vec<_>>()})
                    );
                } else {
                    for (id, member) in &rows {
                        println!("command {id} for {member} queued (correlation {correlation})");
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            let rows = fleet.wait(&correlation, Duration::from_secs(360)).await?;
            return Ok(print_commands(&rows, output.json));
        }
        FleetCommand::Commands {
            correlation,
            output,
        } => {
            let rows = fleet.commands(correlation.as_deref(), 50).await?;
            print_commands(&rows, output.json);
        }
        FleetCommand::Policy(policy) => return policy_command(&fleet, policy, gone).await,
    }
    Ok(ExitCode::SUCCESS)
}

async fn servers_command(
    fleet: &Fleet,
    command: FleetServers,
    gone: Duration,
) -> anyhow::Result<ExitCode> {
    match command {
        FleetServers::List(output) => {
            let servers = fleet.servers().await?;
            if output.json {
                let map: BTreeMap<String, String> = servers.into_iter().collect();
                println!("{}", serde_json::to_string_pretty(&map)?);
            } else if servers.is_empty() {
                println!("the fleet has no servers yet; add one with `wardgate fleet servers set NAME --command …` or `wardgate fleet import FILE`");
            } else {
                for (name, spec) in servers {
                    println!("[servers.{name}]\n{spec}");
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        FleetServers::Set {
            name,
            spec,
            command,
            args,
            url,
        } => {
            let spec = match (spec, command, url) {
                (Some(spec), _, _) => spec,
                (None, Some(command), None) => {
                    let mut table = toml::Table::new();
                    table.insert("command".into(), toml::Value::String(command));
                    if !args.is_empty() {
                        table.insert("args".into(), toml::Value::Array(args.into_iter().map(toml::Value::String).collect()));
                    }
                    toml::to_string(&table)?
                }
                (None, None, Some(url)) => {
                    let mut table = toml::Table::new();
                    table.insert("url".into(), toml::Value::String(url));
                    toml::to_string(&table)?
                }
                _ => anyhow::bail!("say what server {name:?} is: --spec TOML, --command PROGRAM [--arg ARG]…, or --url URL"),
            };
            fleet.set_server(&name, &spec).await?;
            println!("server {name} set");
        }
        FleetServers::Remove { name } => {
            if !fleet.remove_server(&name).await? {
                eprintln!(
                    "the fleet has no server named {name:?}; see `wardgate fleet servers list`"
                );
                return Ok(ExitCode::from(2));
            }
            println!("server {name} removed");
        }
    }
    configure_everyone(fleet, gone).await;
    Ok(ExitCode::SUCCESS)
}

/// After a change to the fleet's servers: every live member applies it now (the others do
/// when they start).
async fn configure_everyone(fleet: &Fleet, gone: Duration) {
    let sent = fleet
        .submit(
            &Command::Configure,
            Priority::Immediate,
            &Targets::All,
            None,
            gone,
        )
        .await;
    match sent {
        Ok((correlation, rows)) => println!(
            "configure sent to {} member(s) (correlation {correlation})",
            rows.len()
        ),
        Err(error) => println!("{error:#}; members apply it when they start"),
    }
}

async fn policy_command(
    fleet: &Fleet,
    command: FleetPolicy,
    gone: Duration,
) -> anyhow::Result<ExitCode> {
    let rollout = match command {
        FleetPolicy::Publish {
            name,
            module,
            canary,
            params,
            no_local_check,
            shadow,
        } => {
            let bytes = std::fs::read(&module)
                .with_context(|| format!("cannot read the policy module {}", module.display()))?;
            let params = if params.is_empty() {
                None
            } else {
                Some(parse_params(&params)?)
            };
            if !no_local_check {
                let path = module.clone();
                let check = params.clone().unwrap_or_default();
                tokio::task::spawn_blocking(move || wardgate_wasm::WasmPolicy::load(&path, check))
                    .await?
                    .map_err(|error| anyhow::anyhow!("{error}; it is not published"))?;
            }
            if shadow {
                let rollout = fleet
                    .publish_shadow(&name, &bytes, params.as_ref(), gone)
                    .await?;
                println!(
                    "published {name} version {} as the fleet's shadow of {name}; told {} live members to configure",
                    rollout.version,
                    rollout.members.len()
                );
                println!(
                    "each member asks it beside its live module and files what it would have decided every 5 s: `wardgate fleet policy shadow-report {name}`; `wardgate fleet policy promote {name}` rolls it out"
                );
                return Ok(ExitCode::SUCCESS);
            }
            let targets = if canary.is_empty() {
                Targets::All
            } else {
                Targets::Some(canary)
            };
            let rollout = fleet
                .publish(&name, &bytes, params.as_ref(), &targets, gone)
                .await?;
            // A canary may name a member that is gone or stopped: it is assigned the
            // version, which it applies when it is back, but it cannot report now.
            if matches!(targets, Targets::Some(_)) {
                let states = fleet.members(gone).await?;
                for member in &rollout.members {
                    if let Some(why) = not_live(&states, member) {
                        eprintln!(
                            "warning: {why}; it is assigned {name} version {} and applies it when it is back, so it cannot report on it now",
                            rollout.version
                        );
                    }
                }
            }
            rollout
        }
        FleetPolicy::Promote { name, force } => fleet.promote(&name, force, gone).await?,
        FleetPolicy::ShadowReport { name, output } => {
            let (version, reports) = fleet.shadow_reports(&name).await?;
            let live = fleet.members(gone).await?;
            crate::fleet_shadow::print(&name, version, &reports, &live, output.json)?;
            return Ok(ExitCode::SUCCESS);
        }
        FleetPolicy::Unshadow { name } => {
            let rollout = fleet.unshadow(&name, gone).await?;
            println!(
                "{name} has no shadow in the fleet now (it was version {}); told {} live members to configure",
                rollout.version,
                rollout.members.len()
            );
            return Ok(ExitCode::SUCCESS);
        }
        FleetPolicy::Rollback { name } => fleet.rollback(&name, gone).await?,
        FleetPolicy::Status { name, output } => {
            let assignments = fleet.assignments(&name).await?;
            let reports = fleet.reports(&name, None).await?;
            if output.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "assignments": assignments.iter().map(|(member, version)| serde_json::json!({"member": member, "version": version})).collect::<Vec<_>>(),
                        "reports": reports,
                    })
                );
            } else {
                for (member, version) in &assignments {
                    let who = if member == "*" {
                        "the fleet".to_owned()
                    } else {
                        format!("member {member}")
                    };
                    println!("{who}: version {version}");
                }
                print_reports(&reports);
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    Ok(if report_rollout(fleet, &rollout).await? {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Why `member` will not run a command now (gone or stopped, and since when), or `None`
/// when it is live.
fn not_live(states: &[MemberRow], member: &str) -> Option<String> {
    let state = states.iter().find(|state| state.name == member)?;
    let ago = short_duration(Duration::from_millis(state.since_heartbeat_ms.max(0) as u64));
    match state.state {
        MemberState::Live => None,
        MemberState::Stopped => Some(format!(
            "member {member} is stopped (it shut down; last heartbeat {ago} ago)"
        )),
        MemberState::Gone => Some(format!(
            "member {member} is gone (last heartbeat {ago} ago)"
        )),
    }
}

/// A duration as people say it: `45s`, `3m`, `5h`, `2d` (whole units, rounded down).
fn short_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match seconds {
        0..120 => format!("{seconds}s"),
        120..7200 => format!("{}m", seconds / 60),
        7200..172_800 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

/// `KEY=VALUE`s as a policy's params.
fn parse_params(pairs: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    pairs
        .iter()
        .map(|pair| {
            pair.split_once('=')
                .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
                .filter(|(key, _)| !key.is_empty())
                .with_context(|| format!("--param {pair:?} is not KEY=VALUE"))
        })
        .collect()
}

/// Wait (60 s at most) for the members told to apply `rollout` to finish their
/// `configure`, and print what each made of the version: only then is a report known to
/// be this rollout's, not an older one of the same version. False when a member rejected
/// it, could not apply it, or did not answer.
async fn report_rollout(fleet: &Fleet, rollout: &Rollout) -> anyhow::Result<bool> {
    let (name, version) = (&rollout.name, rollout.version);
    println!(
        "policy {name} version {version} → {}",
        if rollout.members.is_empty() {
            "no live member".to_owned()
        } else {
            rollout.members.join(", ")
        }
    );
    let Some(correlation) = &rollout.correlation else {
        return Ok(true);
    };
    let commands = fleet.wait(correlation, Duration::from_secs(60)).await?;
    let reports = fleet.reports(name, Some(version)).await?;
    let mut fine = true;
    for member in &rollout.members {
        let command = commands.iter().find(|command| &command.member == member);
        let report = reports.iter().find(|report| &report.member == member);
        let state = command.map_or("unknown", |command| command.state.as_str());
        match (state, report) {
            ("completed" | "failed", Some(report)) => {
                fine &= report.outcome != wardgate_fleet::admin::ReportOutcome::Rejected;
                print_reports(std::slice::from_ref(report));
            }
            ("completed", None) => {
                println!("  {name} v{version} on {member}: loaded (it already ran this module)")
            }
            ("failed" | "expired", None) => {
                fine = false;
                println!(
                    "  {name} v{version} on {member}: not applied — {}",
                    command
                        .and_then(|command| command.error.as_deref())
                        .unwrap_or("no reason given")
                );
            }
            (state, _) => {
                fine = false;
                println!(
                    "  {name} v{version} on {member}: no answer within 60 s (its configure is {state}; see wardgate fleet policy status {name})"
                )
            }
        }
    }
    Ok(fine)
}

fn print_reports(reports: &[wardgate_fleet::admin::PolicyReport]) {
    for report in reports {
        println!(
            "  {} v{} on {}: {}{}",
            report.name,
            report.version,
            report.member,
            report.outcome,
            report
                .reason
                .as_deref()
                .map(|reason| format!(" — {reason}"))
                .unwrap_or_default()
        );
    }
}

fn print_commands(rows: &[CommandRow], json: bool) -> ExitCode {
    if json {
        println!("{}", serde_json::to_string_pretty(rows).unwrap_or_default());
    } else {
        for row in rows {
            let kind = row
                .command
                .get("type")
                .and_then(|t| t.as_str())
                .unwrap_or("?");
            let server = row
                .command
                .get("server")
                .and_then(|t| t.as_str())
                .map(|s| format!(" {s}"))
                .unwrap_or_default();
            println!(
                "{} {kind}{server} on {}: {} (attempts {}){}",
                row.id,
                row.member,
                row.state.as_str(),
                row.attempts,
                row.error
                    .as_deref()
                    .map(|error| format!(" — {error}"))
                    .unwrap_or_default()
            );
        }
    }
    if rows
        .iter()
        .all(|row| row.state == wardgate_engine::commands::CommandState::Completed)
    {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_status(status: &wardgate_fleet::admin::FleetStatus) {
    println!("members:");
    for member in &status.members {
        println!(
            "  {:<16} {:<8} v{} {} (heartbeat {}{})",
            member.name,
            member.state,
            member.version,
            member.address.as_deref().unwrap_or("-"),
            member.heartbeat_at,
            if member.groups.is_empty() {
                String::new()
            } else {
                format!(", groups {}", member.groups.join(","))
            }
        );
    }
    // Members that admit clients differently do not hand each other sessions: say so.
    let digests: BTreeMap<&str, Vec<&str>> = status
        .members
        .iter()
        .filter(|member| member.live)
        .fold(BTreeMap::new(), |mut digests, member| {
            let digest = member.access_digest.as_deref().unwrap_or("none");
            digests.entry(digest).or_default().push(&member.name);
            digests
        });
    if digests.len() > 1 {
        println!("access settings differ ([gateway.auth] and [gateway.http]): members hand each other client sessions only when theirs match");
        for (digest, names) in &digests {
            println!(
                "  {}: {}",
                digest.get(..12).unwrap_or(digest),
                names.join(", ")
            );
        }
    }
    let members: Vec<&str> = status
        .members
        .iter()
        .map(|member| member.name.as_str())
        .collect();
    let mut servers: BTreeMap<&str, BTreeMap<&str, String>> = BTreeMap::new();
    for row in &status.servers {
        // A member that is not live: its last report (its `status` says unknown).
        let mut cell = row
            .last_status
            .clone()
            .unwrap_or_else(|| row.status.clone());
        if row.degraded {
            cell.push_str(" (degraded)");
        }
        // A member that is gone or stopped reported this last; say so in its cells.
        if let Some(member) = status
            .members
            .iter()
            .find(|member| member.name == row.member && !member.live)
        {
            cell = format!("{cell} ({}: last)", member.state);
        }
        servers
            .entry(&row.server)
            .or_default()
            .insert(&row.member, cell);
    }
    if servers.is_empty() {
        println!("no server status reported yet");
        return;
    }
    print!("{:<20}", "server");
    for member in &members {
        print!(" {member:<18}");
    }
    println!();
    for (server, cells) in servers {
        print!("{server:<20}");
        for member in &members {
            print!(
                " {:<18}",
                cells.get(member).map(String::as_str).unwrap_or("-")
            );
        }
        println!();
    }
}
