//! `Config::summary`: what would run, for operators and the startup log.
//!
//! Built only from the `shown*` fields, the names of env variables and headers, and policy
//! paths and parameters (which are never secrets), so it is safe to print anywhere.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use super::{Config, PolicyConfig, ServerConfig, ShownCommand, TransportConfig, BUILTIN_POLICY};

pub(crate) fn render(config: &Config) -> String {
    let gateway = &config.gateway;
    let mut out = String::new();
    // `write!` into a String cannot fail; the results are ignored for that reason.
    let _ = writeln!(out, "config: {}", config.source.display());
    let _ = writeln!(
        out,
        "gateway: separator {:?}, request timeout {}, startup timeout {}, lists wait {} for starting servers, shutdown grace {}, \
         tools of unavailable servers {}, admin tools {}, default policy {}",
        gateway.separator,
        human(gateway.request_timeout),
        human(gateway.startup_timeout),
        human(gateway.startup_wait),
        human(gateway.shutdown_grace),
        if gateway.list_unavailable_tools {
            "listed"
        } else {
            "hidden"
        },
        if gateway.expose_admin_tools {
            "exposed"
        } else {
            "off"
        },
        gateway.default_policy.as_deref().unwrap_or(BUILTIN_POLICY),
    );
    for policy in config.policies.values() {
        render_policy(&mut out, policy);
    }
    for server in config.servers.values() {
        render_server(&mut out, server, config);
    }
    out
}

fn render_server(out: &mut String, server: &ServerConfig, config: &Config) {
    let state = if server.enabled { "" } else { ", disabled" };
    let _ = writeln!(
        out,
        "\nserver {} ({}{state})",
        server.name,
        server.transport.kind()
    );
    match &server.transport {
        TransportConfig::Stdio {
            env,
            shown,
            inherit_env,
            ..
        } => {
            let _ = writeln!(out, "  command: {}", command_line(shown));
            if let Some(shown_cwd) = &shown.cwd {
                let _ = writeln!(out, "  cwd: {shown_cwd}");
            }
            if *inherit_env {
                let _ = writeln!(
                    out,
                    "  inherits: the gateway's whole environment, less WARDGATE_*"
                );
            }
            names(out, "env", env.keys());
        }
        TransportConfig::StreamableHttp {
            headers, shown_url, ..
        }
        | TransportConfig::Sse {
            headers, shown_url, ..
        } => {
            let _ = writeln!(out, "  url: {shown_url}");
            names(out, "headers", headers.keys());
        }
    }
    let _ = writeln!(
        out,
        "  timeouts: startup {}{}, request {}{}",
        human(server.effective_startup_timeout(&config.gateway)),
        origin(server.startup_timeout),
        human(server.effective_request_timeout(&config.gateway)),
        origin(server.request_timeout),
    );
    let policy_origin = if server.policy.is_some() {
        ""
    } else {
        " (gateway default)"
    };
    let effective_policy = server.effective_policy(&config.gateway);
    let _ = writeln!(
        out,
        "  policy: {}{policy_origin}",
        effective_policy.unwrap_or(BUILTIN_POLICY)
    );
    // What the policy sees: its own params, overridden by the server's.
    let mut params: BTreeMap<&str, String> = BTreeMap::new();
    if let Some(policy) = effective_policy.and_then(|name| config.policies.get(name)) {
        for (name, value) in &policy.params {
            params.insert(name, format!("{} (policy default)", param(name, value)));
        }
    }
    for (name, value) in &server.params {
        params.insert(name, param(name, value));
    }
    if !params.is_empty() {
        let params: Vec<String> = params.into_values().collect();
        let _ = writeln!(out, "  params: {}", params.join(", "));
    }
}

fn render_policy(out: &mut String, policy: &PolicyConfig) {
    let _ = writeln!(out, "\npolicy {}", policy.name);
    let _ = writeln!(out, "  path: {}", policy.path.display());
    if !policy.params.is_empty() {
        let params: Vec<String> = policy
            .params
            .iter()
            .map(|(name, value)| param(name, value))
            .collect();
        let _ = writeln!(out, "  params: {}", params.join(", "));
    }
}

/// `name = value`, quoting values that would not read back as one word.
fn param(name: &str, value: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.+:/@%".contains(c);
    if !value.is_empty() && value.chars().all(plain) {
        format!("{name} = {value}")
    } else {
        format!("{name} = {value:?}")
    }
}

fn names<'a>(out: &mut String, label: &str, names: impl Iterator<Item = &'a String>) {
    let names: Vec<&str> = names.map(String::as_str).collect();
    if !names.is_empty() {
        let _ = writeln!(out, "  {label}: {} (values hidden)", names.join(", "));
    }
}

fn origin(own: Option<Duration>) -> &'static str {
    if own.is_some() {
        ""
    } else {
        " (gateway default)"
    }
}

fn human(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

/// The command and its arguments as one line, quoted so each argument stays recognisable.
pub(crate) fn command_line(shown: &ShownCommand) -> String {
    std::iter::once(&shown.command)
        .chain(&shown.args)
        .map(|part| quote(part))
        .collect::<Vec<_>>()
        .join(" ")
}

fn quote(part: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=@%+,${}".contains(c);
    if !part.is_empty() && part.chars().all(plain) {
        part.to_owned()
    } else {
        format!("'{}'", part.replace('\'', r"'\''"))
    }
}
