//! `Config::summary`: what would run, for operators and the startup log.
//!
//! Built only from the `shown*` fields and the names of env variables and headers, so it is
//! safe to print anywhere.

use std::fmt::Write;
use std::time::Duration;

use super::{Config, ServerConfig, ShownCommand, TransportConfig};

pub(crate) fn render(config: &Config) -> String {
    let gateway = &config.gateway;
    let mut out = String::new();
    // `write!` into a String cannot fail; the results are ignored for that reason.
    let _ = writeln!(out, "config: {}", config.source.display());
    let _ = writeln!(
        out,
        "gateway: separator {:?}, request timeout {}, startup timeout {}, shutdown grace {}, \
         tools of unavailable servers {}",
        gateway.separator,
        human(gateway.request_timeout),
        human(gateway.startup_timeout),
        human(gateway.shutdown_grace),
        if gateway.list_unavailable_tools {
            "listed"
        } else {
            "hidden"
        },
    );
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
        TransportConfig::Stdio { env, shown, .. } => {
            let _ = writeln!(out, "  command: {}", command_line(shown));
            if let Some(shown_cwd) = &shown.cwd {
                let _ = writeln!(out, "  cwd: {shown_cwd}");
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
