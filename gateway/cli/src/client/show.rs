//! What the operator subcommands print: the admin API's answers as tables or JSON.

use serde_json::Value;

use super::table::{status_tone, Paint, Table, Tone};
use super::{print_json, AdminClient};
use crate::args::Output;

/// `wardgate status`: readiness, a line per concern, and the servers in brief.
pub async fn status(client: &AdminClient, output: Output) -> anyhow::Result<()> {
    let (_, ready) = client.get_any("/readyz").await?;
    let servers = client.get("/servers").await?;
    let policies = client.get("/policies").await?;
    if output.json {
        print_json(&serde_json::json!({
            "ready": ready.get("ready").cloned().unwrap_or(Value::Bool(false)),
            "reasons": ready.get("reasons").cloned().unwrap_or(Value::Array(Vec::new())),
            "servers": servers["servers"],
            "policies": policies["policies"],
        }))?;
        return Ok(());
    }
    let paint = Paint::detect();
    let servers = list(&servers, "servers");
    let is_ready = ready.get("ready").and_then(Value::as_bool) == Some(true);
    let readiness = if is_ready {
        paint.paint(Tone::Good, "ready")
    } else {
        paint.paint(Tone::Bad, "not ready")
    };
    outln!("gateway   {readiness}  ({})", client.base);
    for reason in list(&ready, "reasons") {
        outln!("          {}", reason.as_str().unwrap_or_default());
    }
    let mut by_status = std::collections::BTreeMap::<String, usize>::new();
    for server in &servers {
        *by_status.entry(text(server, "status")).or_default() += 1;
    }
    let counts: Vec<String> = by_status
        .iter()
        .map(|(status, n)| paint.paint(status_tone(status, false), &format!("{n} {status}")))
        .collect();
    outln!("servers   {}: {}", servers.len(), counts.join(", "));
    let policies: Vec<String> = list(&policies, "policies")
        .iter()
        .map(|policy| {
            let name = text(policy, "name");
            match (
                policy["loaded"].as_bool(),
                policy["faults"]["total"].as_u64(),
            ) {
                (Some(false), _) => paint.paint(Tone::Bad, &format!("{name} (not loaded)")),
                (_, Some(faults)) if faults > 0 => {
                    paint.paint(Tone::Warn, &format!("{name} ({faults} faults)"))
                }
                _ => name,
            }
        })
        .collect();
    outln!("policies  {}", policies.join(", "));
    if !servers.is_empty() {
        outln!();
        let mut table = Table::new(&["NAME", "STATUS", "TOOLS", "RETRY", "LAST ERROR"]);
        for server in &servers {
            table.row(vec![
                (text(server, "name"), Tone::Plain),
                status_cell(server),
                (text(server, "tools"), Tone::Plain),
                (retry(server), Tone::Plain),
                (last_error(server), Tone::Dim),
            ]);
        }
        out!("{}", table.render(paint));
    }
    Ok(())
}

/// `wardgate servers`: every server, one row each.
pub async fn servers(client: &AdminClient, output: Output) -> anyhow::Result<()> {
    let answer = client.get("/servers").await?;
    if output.json {
        print_json(&answer)?;
        return Ok(());
    }
    let mut table = Table::new(&[
        "NAME",
        "STATUS",
        "TRANSPORT",
        "PID",
        "UPTIME",
        "FAILURES",
        "RETRY",
        "CRASHES",
        "TOOLS",
        "PROMPTS",
        "RESOURCES",
        "POLICY",
        "LAST ERROR",
    ]);
    for server in list(&answer, "servers") {
        // A server with an instance per client says how many run.
        let name = match server["instances"].as_u64() {
            Some(1) => format!("{} (1 instance)", text(&server, "name")),
            Some(count) => format!("{} ({count} instances)", text(&server, "name")),
            None => text(&server, "name"),
        };
        table.row(vec![
            (name, Tone::Plain),
            status_cell(&server),
            (text(&server, "transport"), Tone::Plain),
            (text(&server, "pid"), Tone::Plain),
            (duration(&server["uptime_ms"]), Tone::Plain),
            (text(&server, "consecutive_failures"), Tone::Plain),
            (retry(&server), Tone::Plain),
            (text(&server, "crashes_in_window"), Tone::Plain),
            (text(&server, "tools"), Tone::Plain),
            (text(&server, "prompts"), Tone::Plain),
            (text(&server, "resources"), Tone::Plain),
            (text(&server, "policy"), Tone::Plain),
            (last_error(&server), Tone::Dim),
        ]);
    }
    out!("{}", table.render(Paint::detect()));
    Ok(())
}

/// `wardgate servers NAME`: one server in full, then its tools.
pub async fn server(client: &AdminClient, name: &str, output: Output) -> anyhow::Result<()> {
    let server = client
        .get(&format!("/servers/{}", super::encode_segment(name)))
        .await?;
    if output.json {
        print_json(&server)?;
        return Ok(());
    }
    let paint = Paint::detect();
    let (status, tone) = status_cell(&server);
    let fields = [
        ("name", text(&server, "name")),
        ("status", paint.paint(tone, &status)),
        ("since", text(&server, "status_since")),
        ("reason", text(&server, "reason")),
        ("sign-in", sign_in(&server)),
        ("credentials", credentials(&server)),
        ("transport", text(&server, "transport")),
        ("protocol", text(&server, "protocol_version")),
        ("generation", text(&server, "generation")),
        ("pid", text(&server, "pid")),
        ("uptime", duration(&server["uptime_ms"])),
        ("failures", text(&server, "consecutive_failures")),
        ("retry", retry(&server)),
        ("crashes", text(&server, "crashes_in_window")),
        ("prompts", text(&server, "prompts")),
        ("resources", text(&server, "resources")),
        ("policy", text(&server, "policy")),
        ("last error", text(&server, "last_error")),
    ];
    for (label, value) in fields {
        // Only a server that signs in with OAuth has a sign-in, and only one with
        // credentials a check can exercise has a credential check.
        if (label == "sign-in" || label == "credentials") && value.is_empty() {
            continue;
        }
        outln!("{label:<11} {value}");
    }
    let tools = list(&server, "tools");
    outln!("tools       {}", tools.len());
    if !tools.is_empty() {
        let mut table = Table::new(&["TOOL", "UPSTREAM NAME", "DESCRIPTION"]);
        for tool in &tools {
            table.row(vec![
                (text(tool, "name"), Tone::Plain),
                (text(tool, "original_name"), Tone::Plain),
                (truncate(&text(tool, "description"), 70), Tone::Dim),
            ]);
        }
        outln!();
        out!("{}", table.render(paint));
    }
    if let Some(instances) = server["instances"].as_array() {
        outln!();
        outln!("instances   {} (one per client)", instances.len());
        if !instances.is_empty() {
            let mut table = Table::new(&[
                "INSTANCE",
                "STATUS",
                "OWNER",
                "PID",
                "AGE",
                "IDLE",
                "CRASHES",
                "LAST ERROR",
            ]);
            for instance in instances {
                table.row(vec![
                    (text(instance, "name"), Tone::Plain),
                    status_cell(instance),
                    (text(instance, "owner"), Tone::Plain),
                    (text(instance, "pid"), Tone::Plain),
                    (duration(&instance["age_ms"]), Tone::Plain),
                    (duration(&instance["idle_ms"]), Tone::Plain),
                    (text(instance, "crashes_in_window"), Tone::Plain),
                    (last_error(instance), Tone::Dim),
                ]);
            }
            outln!();
            out!("{}", table.render(paint));
        }
    }
    Ok(())
}

/// When the server's credentials were last checked, and what the check found.
fn credentials(server: &Value) -> String {
    let Some(at) = server["last_credential_check_at"].as_str() else {
        return String::new();
    };
    let verdict = match server["credentials_accepted"].as_bool() {
        Some(true) => "accepted",
        Some(false) => "refused",
        None => "not told (the check failed otherwise)",
    };
    format!("{verdict}, checked {at}")
}

/// An operator action (`reconnect NAME`, `policy reload`, ...): POST it and report how it ended.
pub async fn command_done(client: &AdminClient, path: &str, output: Output) -> anyhow::Result<()> {
    let record = client.post(path).await?;
    print_done(&record, output)
}

/// A finished command's record: one line, or the JSON.
pub fn print_done(record: &Value, output: Output) -> anyhow::Result<()> {
    if output.json {
        print_json(record)?;
        return Ok(());
    }
    let paint = Paint::detect();
    let mut line = format!(
        "{} {}",
        describe_command(&record["command"]),
        paint.paint(Tone::Good, &text(record, "state"))
    );
    let result = fields(&record["result"], &["server", "policy", "note"]);
    if !result.is_empty() {
        line.push_str(&format!(": {result}"));
    }
    // In a fleet: which row it is in `wardgate fleet commands`, or why it is in none.
    match (&record["fleet"]["command"], &record["fleet"]["why"]) {
        (Value::Number(row), _) => line.push_str(&format!(" (fleet command {row})")),
        (_, Value::String(why)) => eprintln!("note: {why}"),
        _ => {}
    }
    outln!("{line}");
    if let Some(note) = record["result"]["note"].as_str() {
        outln!("note: {note}");
    }
    Ok(())
}

/// `wardgate commands`: the queue, newest last.
pub async fn commands(client: &AdminClient, output: Output) -> anyhow::Result<()> {
    let answer = client.get("/commands").await?;
    if output.json {
        print_json(&answer)?;
        return Ok(());
    }
    let mut table = Table::new(&[
        "ID", "STATE", "COMMAND", "PRIORITY", "ATTEMPTS", "CREATED", "RESULT",
    ]);
    for record in list(&answer, "commands") {
        let state = text(&record, "state");
        let tone = match state.as_str() {
            "completed" => Tone::Good,
            "failed" | "expired" => Tone::Bad,
            _ => Tone::Warn,
        };
        let outcome = match (&record["error"], &record["result"]) {
            (Value::String(error), _) => error.clone(),
            (_, Value::Null) => "-".to_owned(),
            (_, result) => fields(result, &["server"]),
        };
        table.row(vec![
            (text(&record, "id"), Tone::Plain),
            (state, tone),
            (describe_command(&record["command"]), Tone::Plain),
            (text(&record, "priority"), Tone::Plain),
            (text(&record, "attempts"), Tone::Plain),
            (text(&record, "created_at"), Tone::Plain),
            (truncate(&outcome, 60), Tone::Dim),
        ]);
    }
    out!("{}", table.render(Paint::detect()));
    Ok(())
}

/// An object as `key=value` pairs (nulls and `skip` left out); anything else as JSON text.
pub fn fields(value: &Value, skip: &[&str]) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        Value::Object(object) => object
            .iter()
            .filter(|(key, value)| !value.is_null() && !skip.contains(&key.as_str()))
            .map(|(key, value)| match value {
                Value::String(text) => format!("{key}={text}"),
                other => format!("{key}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// `reconnect github`, `reload_policies`, `promote_shadow default`.
fn describe_command(command: &Value) -> String {
    let kind = text(command, "type");
    match command
        .get("server")
        .or_else(|| command.get("policy"))
        .and_then(Value::as_str)
    {
        Some(about) => format!("{kind} {about}"),
        None => kind,
    }
}

fn list(value: &Value, key: &str) -> Vec<Value> {
    value
        .get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// A string field, or `-` when absent.
pub fn text(value: &Value, key: &str) -> String {
    match value.get(key) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => "-".to_owned(),
        Some(other) => other.to_string(),
    }
}

fn status_cell(server: &Value) -> (String, Tone) {
    let status = text(server, "status");
    let degraded = server["degraded"].as_bool() == Some(true);
    let shown = if degraded {
        format!("{status} (degraded)")
    } else {
        status.clone()
    };
    (shown, status_tone(&status, degraded))
}

/// `#3 in 4s`: the reconnect attempt scheduled and when it is due.
/// An OAuth server's sign-in: the command when it waits for one.
fn sign_in(server: &Value) -> String {
    let sign_in = &server["sign_in"];
    if !sign_in.is_object() {
        String::new()
    } else if sign_in["needed"] == true {
        format!("needed: run `{}`", text(sign_in, "command"))
    } else {
        "signed in".to_owned()
    }
}

fn retry(server: &Value) -> String {
    match (
        server["reconnect_attempt"].as_u64(),
        server["next_retry_in_ms"].as_u64(),
    ) {
        (Some(attempt), Some(ms)) => format!("#{attempt} in {}", short_duration(ms)),
        (Some(attempt), None) => format!("#{attempt}"),
        (None, Some(ms)) => format!("in {}", short_duration(ms)),
        (None, None) => "-".to_owned(),
    }
}

fn last_error(server: &Value) -> String {
    let error = match server.get("reason").and_then(Value::as_str) {
        Some(reason) => reason.to_owned(),
        None => text(server, "last_error"),
    };
    truncate(&error, 60)
}

fn duration(value: &Value) -> String {
    value
        .as_u64()
        .map_or_else(|| "-".to_owned(), short_duration)
}

/// `850ms`, `12s`, `3m12s`, `2h05m`, `3d04h`.
pub fn short_duration(ms: u64) -> String {
    let seconds = ms / 1000;
    match seconds {
        0 => format!("{ms}ms"),
        1..=59 => format!("{seconds}s"),
        60..=3599 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        3600..=86399 => format!("{}h{:02}m", seconds / 3600, seconds % 3600 / 60),
        _ => format!("{}d{:02}h", seconds / 86400, seconds % 86400 / 3600),
    }
}

fn truncate(text: &str, limit: usize) -> String {
    let single_line = text.replace('\n', " ");
    if single_line.chars().count() <= limit {
        single_line
    } else {
        let kept: String = single_line.chars().take(limit.saturating_sub(1)).collect();
        format!("{kept}…")
    }
}
