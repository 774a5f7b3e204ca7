//! `GET /servers`, `GET /servers/NAME` and the per-server action shorthands.

use hyper::StatusCode;
use serde_json::Value;
use wardgate_config::Config;

use super::commands;
use super::reply::{self, Response};
use super::Admin;

pub fn list(admin: &Admin) -> Response {
    let config = admin.gateway.config();
    let servers: Vec<Value> = admin
        .gateway
        .servers()
        .into_iter()
        .map(|info| with_target(&config, &info.name, &info))
        .collect();
    reply::ok(&serde_json::json!({ "servers": servers }))
}

pub fn detail(admin: &Admin, name: &str) -> Response {
    match admin.gateway.server(name) {
        // Through a `Value`, so the tool list replaces the tool count of the flattened info.
        Some(detail) => reply::ok(&with_target(&admin.gateway.config(), name, &detail)),
        None => unknown_server(admin, name),
    }
}

/// A server's answer with `target` added: the command line or URL it is reached at, as the
/// config wrote it (`TransportConfig::describe`: a `${VAR}` is shown as written, never its
/// value, and a stdio server's `env` is not shown at all). `null` for a server the config
/// no longer names (a reload raced this answer).
fn with_target(config: &Config, name: &str, answer: &impl serde::Serialize) -> Value {
    let mut value = serde_json::to_value(answer).unwrap_or_default();
    if let Value::Object(fields) = &mut value {
        let target = config
            .servers
            .get(name)
            .map(|server| server.transport.describe());
        fields.insert("target".to_owned(), target.into());
    }
    value
}

/// `POST /servers/NAME/ACTION`: the command at priority high, answered when it is done.
pub async fn act(admin: &Admin, name: &str, action: &str) -> Response {
    if admin.gateway.server(name).is_none() {
        return unknown_server(admin, name);
    }
    let Some(command) = commands::for_action(action, name) else {
        return reply::not_found(&format!(
            "no action {action:?} on servers; use reconnect, restart, enable, disable or health-check, as in POST /servers/{name}/reconnect"
        ));
    };
    commands::run_now(admin, command).await
}

pub fn unknown_server(admin: &Admin, name: &str) -> Response {
    let names: Vec<String> = admin
        .gateway
        .servers()
        .into_iter()
        .map(|server| server.name)
        .collect();
    let known = if names.is_empty() {
        "no servers are configured".to_owned()
    } else {
        format!("the servers are {}", names.join(", "))
    };
    reply::error(
        StatusCode::NOT_FOUND,
        &format!("no server named {name:?} is configured; {known} (GET /servers lists them)"),
    )
}
