//! `Config::summary`: what would run, for operators and the startup log.
//!
//! Built only from the `shown*` fields, the names of env variables and headers, and policy
//! paths and parameters (which are never secrets), so it is safe to print anywhere.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use super::{
    AuthSettings, Config, Glob, Grant, HttpSettings, PolicyConfig, ServerConfig, ShownCommand,
    TransportConfig, BUILTIN_POLICY,
};

pub(crate) fn render(config: &Config) -> String {
    let gateway = &config.gateway;
    let mut out = String::new();
    // `write!` into a String cannot fail; the results are ignored for that reason.
    let _ = writeln!(out, "config: {}", config.source.display());
    let _ = writeln!(
        out,
        "gateway: separator {:?}, request timeout {}, startup timeout {}, lists wait {} for starting servers, shutdown grace {} (then SIGTERM, and SIGKILL {} later), \
         tools of unavailable servers {}, tools found by {}, admin tools {}, default policy {}",
        gateway.separator,
        human(gateway.request_timeout),
        human(gateway.startup_timeout),
        human(gateway.startup_wait),
        human(gateway.shutdown_grace),
        human(gateway.kill_grace),
        if gateway.list_unavailable_tools {
            "listed"
        } else {
            "hidden"
        },
        match gateway.tool_discovery {
            super::ToolDiscovery::List => "tools/list",
            super::ToolDiscovery::Search => "search (discover_tools, call_tool)",
        },
        if gateway.expose_admin_tools {
            "exposed"
        } else {
            "off"
        },
        gateway.default_policy.as_deref().unwrap_or(BUILTIN_POLICY),
    );
    if config
        .servers
        .values()
        .any(|server| server.instances != crate::Instances::Shared)
    {
        let _ = writeln!(
            out,
            "instances: at most {} per-client instances of all servers at once",
            gateway.max_instances
        );
    }
    render_http(&mut out, &gateway.http);
    render_auth(&mut out, &gateway.auth, gateway.http.allow_anonymous);
    if let Some(telemetry) = &gateway.telemetry {
        let _ = writeln!(out, "telemetry: {}", telemetry.describe());
    }
    if let Some(fleet) = &config.fleet {
        let _ = writeln!(
            out,
            "fleet: member {}, database {}{}; servers and policy modules also come from the database",
            fleet.member.as_deref().unwrap_or("(the host name)"),
            fleet.shown_url(),
            if fleet.groups.is_empty() {
                String::new()
            } else {
                format!(", groups {}", fleet.groups.join(", "))
            },
        );
    }
    for policy in config.policies.values() {
        render_policy(&mut out, policy, config.shadows.get(&policy.name));
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
            headers,
            shown_url,
            oauth,
            ..
        } => {
            let _ = writeln!(out, "  url: {shown_url}");
            names(out, "headers", headers.keys());
            if let Some(oauth) = oauth {
                let client = match &oauth.shown_client_id {
                    Some(id) => format!("client {id}"),
                    None => "a client registered at sign-in".to_owned(),
                };
                let key = oauth.client_key.as_ref().map_or(String::new(), |key| {
                    format!(
                        ", authenticated by {} assertions signed with the key in {} (value hidden)",
                        key.algorithm.as_str(),
                        key.path.display()
                    )
                });
                if let Some(idp) = &oauth.enterprise {
                    let _ = writeln!(
                        out,
                        "  oauth: {client}, enterprise-managed (the ID token in {} is exchanged at {} for an identity assertion, and that for a token here)",
                        idp.id_token_file.display(),
                        idp.issuer
                    );
                } else if oauth.client_credentials {
                    let _ = writeln!(
                        out,
                        "  oauth: {client}, client credentials grant (the gateway gets its tokens itself){key}"
                    );
                } else {
                    let _ = writeln!(out, "  oauth: {client}; sign in with `{}`", oauth.login);
                }
            }
        }
        TransportConfig::Sse {
            headers, shown_url, ..
        } => {
            let _ = writeln!(out, "  url: {shown_url}");
            names(out, "headers", headers.keys());
        }
    }
    let names_line = if server.prefix.is_empty() {
        "its own names and URIs (prefix \"\")".to_owned()
    } else if server.prefix == server.name {
        format!("{}{}NAME", server.prefix, config.gateway.separator)
    } else {
        format!(
            "{}{}NAME (prefix {:?})",
            server.prefix, config.gateway.separator, server.prefix
        )
    };
    let renamed: Vec<String> = server
        .rename
        .iter()
        .map(|(from, to)| format!("{from} as {to}"))
        .collect();
    let renamed = if renamed.is_empty() {
        String::new()
    } else {
        format!("; renamed: {}", renamed.join(", "))
    };
    // The default (prefixed with the name, nothing renamed) goes without saying.
    if server.prefix != server.name || !server.rename.is_empty() {
        let _ = writeln!(out, "  listed as: {names_line}{renamed}");
    }
    let _ = writeln!(
        out,
        "  timeouts: startup {}{}, request {}{}",
        human(server.effective_startup_timeout(&config.gateway)),
        origin(server.startup_timeout),
        human(server.effective_request_timeout(&config.gateway)),
        origin(server.request_timeout),
    );
    // One process for every client goes without saying.
    if let crate::Instances::PerClient(per_client) = &server.instances {
        let _ = writeln!(
            out,
            "  instances: one per client {} (at most {} at once, stopped after {} unused)",
            per_client.owner.as_str(),
            per_client.max,
            human(per_client.idle_timeout),
        );
    }
    // The default (every 5 minutes unless the server announces its list changes) goes
    // without saying.
    match server.relist_interval {
        None => {}
        Some(interval) if interval.is_zero() => {
            let _ = writeln!(out, "  re-list: never");
        }
        Some(interval) => {
            let _ = writeln!(
                out,
                "  re-list: every {}, whether or not the server announces its list changes",
                human(interval)
            );
        }
    }
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
    let globs = |globs: &[Glob]| {
        globs
            .iter()
            .map(Glob::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(allow) = &server.tools.allow {
        let _ = writeln!(out, "  tools shown: only {}", globs(allow));
    }
    if !server.tools.deny.is_empty() {
        let _ = writeln!(out, "  tools hidden: {}", globs(&server.tools.deny));
    }
}

/// What `--listen` accepts, in the words an operator needs to reach it from elsewhere.
fn render_http(out: &mut String, http: &HttpSettings) {
    let _ = writeln!(out, "http (with --listen):");
    let hosts = if http.allowed_hosts.is_empty() {
        "nothing".to_owned()
    } else {
        http.allowed_hosts.join(", ")
    };
    let _ = writeln!(
        out,
        "  hosts: the listener's address, localhost, 127.0.0.1 and [::1]; allowed_hosts adds: {hosts} \
         (a request naming another Host is refused with 403: add the DNS name clients use)"
    );
    let origins = if http.allowed_origins.is_empty() {
        "nothing".to_owned()
    } else {
        http.allowed_origins.join(", ")
    };
    let _ = writeln!(
        out,
        "  origins: requests without Origin (not from a web page) pass; loopback pages (http://localhost:*, http://127.0.0.1:*) pass on a loopback listener only; allowed_origins adds: {origins} \
         (any other Origin is refused with 403)"
    );
    let rate = if http.rate_limit == 0 {
        "off".to_owned()
    } else {
        format!(
            "{}/s per client, bursts of {}",
            http.rate_limit, http.rate_burst
        )
    };
    let _ = writeln!(
        out,
        "  limits: bodies up to {} bytes, sessions idle {} are closed, {} sessions at most ({} per client), rate {rate}",
        http.max_body_bytes,
        human(http.session_idle),
        http.max_sessions,
        http.max_sessions_per_client,
    );
    if let Some(max) = http.max_connections_per_address {
        let _ = writeln!(out, "  connections: {max} per address at most");
    }
}

/// A client's own `tool_discovery`, where it has one.
fn discovery(mode: Option<super::ToolDiscovery>) -> &'static str {
    match mode {
        None => "",
        Some(super::ToolDiscovery::List) => ", finds tools by tools/list",
        Some(super::ToolDiscovery::Search) => ", finds tools by search (discover_tools, call_tool)",
    }
}

fn render_auth(out: &mut String, auth: &AuthSettings, allow_anonymous: bool) {
    if !auth.required() {
        let _ = if allow_anonymous {
            writeln!(
                out,
                "auth: none, allow_anonymous = true (every client of --listen may use every server, from other machines too; add [gateway.auth] before exposing it beyond this machine)"
            )
        } else {
            writeln!(
                out,
                "auth: none (every client of --listen may use every server; a listener other machines can reach refuses to start: add [gateway.auth], or allow_anonymous = true if that is meant)"
            )
        };
        return;
    }
    let ignored = if allow_anonymous {
        " (allow_anonymous = true changes nothing with [gateway.auth])"
    } else {
        ""
    };
    let _ = writeln!(out, "auth: clients must present a bearer token{ignored}");
    for client in &auth.clients {
        let _ = writeln!(
            out,
            "  client {}: token from {} (value hidden), may use {}{}",
            client.name,
            client.source,
            grant(&client.grant),
            discovery(client.tool_discovery)
        );
    }
    if let Some(oauth) = &auth.oauth {
        let _ = writeln!(
            out,
            "  oauth: JWT access tokens from {} for {}, keys from {}, client named by claim {:?} (else \"azp\"); sessions and limits count per issuer, subject and client (a token without sub: per client)",
            oauth.issuer,
            oauth.resource,
            oauth.jwks_url.as_deref().unwrap_or("the issuer's metadata"),
            oauth.client_claim
        );
        if oauth.scopes.is_empty() {
            let _ = writeln!(out, "    any valid token may use {}", grant(&oauth.grant));
        }
        for (scope, scope_grant) in &oauth.scopes {
            let _ = writeln!(out, "    scope {scope}: may use {}", grant(scope_grant));
        }
        if let Some(mode) = oauth.tool_discovery {
            let _ = writeln!(
                out,
                "    clients with access tokens find tools by {}",
                match mode {
                    super::ToolDiscovery::List => "tools/list",
                    super::ToolDiscovery::Search => "search (discover_tools, call_tool)",
                }
            );
        }
    }
}

fn grant(grant: &Grant) -> String {
    match grant {
        Grant::All => "everything".to_owned(),
        Grant::Only(patterns) if patterns.is_empty() => "nothing".to_owned(),
        Grant::Only(patterns) => patterns
            .iter()
            .map(|pattern| pattern.written.as_str())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn render_policy(out: &mut String, policy: &PolicyConfig, shadow: Option<&std::path::PathBuf>) {
    let _ = writeln!(out, "\npolicy {}", policy.name);
    let _ = writeln!(out, "  path: {}", policy.path.display());
    if let Some(shadow) = shadow {
        let _ = writeln!(
            out,
            "  shadow: {} (asked every question beside the module; decides nothing)",
            shadow.display()
        );
    }
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

/// A duration as people write it (`10m`, `1h 30m`).
pub fn human(duration: Duration) -> String {
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
