//! The config as written: keys and types checked, nothing else. `validate.rs` does the rest.
//!
//! TOML and JSON differ only here. JSON files are the ones other MCP clients already keep, so
//! their spellings are accepted: `mcpServers` (Claude Desktop, Cursor, Claude Code) or
//! `servers` (VS Code), `type` as well as `transport`, `disabled`, and these client-specific
//! keys, which are skipped without effect:
//!
//! - `autoApprove`, `alwaysAllow`: a client's own permission lists; the gateway asks nothing.
//! - `timeout`: Cline counts it in seconds, Gemini CLI in milliseconds, so it cannot be
//!   translated safely; set `request_timeout` for the gateway's own timeout.
//! - `description`: free text.
//!
//! Wardgate's own server keys (`enabled`, `startup_timeout`, `policy`, ...), a `"gateway"`
//! object and a `"policies"` object work in JSON too, so moving from JSON to TOML is never
//! required.
//!
//! `envFile` (VS Code) is *not* skipped: ignoring it would start the server without the
//! variables the user expects, so it is an error that says to move them into `env`.

use std::time::Duration;

use super::error::{child_key, ConfigError, Errors};
use super::fields::{suggest, Fields, ListMap, Located, StringList, StringMap};
use super::tree::Node;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Toml,
    Json,
}

/// Client-specific server keys in JSON files that are read and dropped (see the module doc).
const IGNORED_CLIENT_KEYS: &[&str] = &["autoApprove", "alwaysAllow", "timeout", "description"];

#[derive(Debug)]
pub(crate) struct RawConfig {
    pub dialect: Dialect,
    pub gateway: RawGateway,
    /// In file order; names are unique because both parsers reject duplicate keys.
    pub policies: Vec<RawPolicy>,
    /// In file order, unique like `policies`.
    pub servers: Vec<RawServer>,
    /// `[fleet]`, TOML only.
    pub fleet: super::fleet::RawFleet,
}

#[derive(Debug, Default)]
pub(crate) struct RawGateway {
    pub separator: Option<Located<String>>,
    pub request_timeout: Option<Located<Duration>>,
    pub startup_timeout: Option<Located<Duration>>,
    pub startup_wait: Option<Located<Duration>>,
    pub shutdown_grace: Option<Located<Duration>>,
    pub kill_grace: Option<Located<Duration>>,
    pub list_unavailable_tools: Option<Located<bool>>,
    pub tool_discovery: Option<Located<String>>,
    pub expose_admin_tools: Option<Located<bool>>,
    pub policy: Option<Located<String>>,
    pub max_instances: Option<Located<u64>>,
    pub http: RawHttp,
    pub auth: RawAuth,
    pub telemetry: super::telemetry::RawTelemetry,
}

/// `[gateway.http]`.
#[derive(Debug, Default)]
pub(crate) struct RawHttp {
    pub allowed_hosts: Option<StringList>,
    pub allowed_origins: Option<StringList>,
    pub max_body_bytes: Option<Located<u64>>,
    pub session_idle: Option<Located<Duration>>,
    pub max_sessions: Option<Located<u64>>,
    pub max_sessions_per_client: Option<Located<u64>>,
    pub rate_limit: Option<Located<u64>>,
    pub rate_burst: Option<Located<u64>>,
    pub allow_anonymous: Option<Located<bool>>,
    pub max_connections_per_address: Option<Located<u64>>,
}

/// `[gateway.auth]`.
#[derive(Debug, Default)]
pub(crate) struct RawAuth {
    /// `[gateway.auth]` itself, where "this needs ..." errors point.
    pub at: Option<Located<()>>,
    pub clients: Vec<RawTokenClient>,
    pub oauth: Option<RawOAuth>,
}

/// `[gateway.auth.clients.NAME]`.
#[derive(Debug)]
pub(crate) struct RawTokenClient {
    pub name: Located<String>,
    pub token: Option<Located<String>>,
    pub token_file: Option<Located<String>>,
    pub allow: Option<StringList>,
    pub tool_discovery: Option<Located<String>>,
}

/// `[gateway.auth.oauth]`.
#[derive(Debug)]
pub(crate) struct RawOAuth {
    pub at: Located<()>,
    pub issuer: Option<Located<String>>,
    pub resource: Option<Located<String>>,
    pub jwks_url: Option<Located<String>>,
    pub client_claim: Option<Located<String>>,
    pub allow: Option<StringList>,
    pub scopes: Option<ListMap>,
    pub tool_discovery: Option<Located<String>>,
}

/// `[servers.NAME.tools]`.
#[derive(Debug)]
pub(crate) struct RawToolFilter {
    pub allow: Option<StringList>,
    pub deny: Option<StringList>,
}

/// One `[policies.NAME]` table.
#[derive(Debug)]
pub(crate) struct RawPolicy {
    /// Located at the policy's own table, where "this policy is wrong" errors point.
    pub name: Located<String>,
    pub path: Option<Located<String>>,
    pub shadow: Option<Located<String>>,
    pub params: Option<StringMap>,
}

#[derive(Debug)]
pub(crate) struct RawServer {
    /// Located at the server's own table, where "this server is wrong" errors point.
    pub name: Located<String>,
    pub command: Option<Located<String>>,
    pub args: Option<StringList>,
    pub env: Option<StringMap>,
    pub inherit_env: Option<Located<bool>>,
    pub cwd: Option<Located<String>>,
    pub url: Option<Located<String>>,
    pub headers: Option<StringMap>,
    pub oauth: Option<RawServerOAuth>,
    pub transport: Option<Located<TransportKind>>,
    pub startup_timeout: Option<Located<Duration>>,
    pub request_timeout: Option<Located<Duration>>,
    pub relist_interval: Option<Located<Duration>>,
    pub enabled: Option<Located<bool>>,
    pub policy: Option<Located<String>>,
    pub params: Option<StringMap>,
    pub tools: Option<RawToolFilter>,
    pub prefix: Option<Located<String>>,
    pub rename: Option<StringMap>,
    pub instances: Option<Located<String>>,
    pub instance_owner: Option<Located<String>>,
    pub max_instances: Option<Located<u64>>,
    pub instance_idle_timeout: Option<Located<Duration>>,
}

/// `[servers.NAME.oauth]`: the server signs in with OAuth (`wardgate auth login NAME`).
#[derive(Debug)]
pub(crate) struct RawServerOAuth {
    pub at: Located<()>,
    pub client_id: Option<Located<String>>,
    pub client_secret: Option<Located<String>>,
    pub client_key_file: Option<Located<String>>,
    pub client_key_algorithm: Option<Located<String>>,
    pub idp_issuer: Option<Located<String>>,
    pub idp_token_endpoint: Option<Located<String>>,
    pub idp_client_id: Option<Located<String>>,
    pub idp_client_secret: Option<Located<String>>,
    pub id_token_file: Option<Located<String>>,
    pub scopes: Option<StringList>,
    pub grant: Option<Located<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TransportKind {
    Stdio,
    StreamableHttp,
    Sse,
}

/// Reads on past a faulty table: every server, policy and section is read, and the errors
/// come back beside what could be read, for validation to add its own to (an `Err` only
/// when nothing can be read at all).
pub(crate) fn read(root: &Node, dialect: Dialect) -> Result<(RawConfig, Errors), ConfigError> {
    let table_word = match dialect {
        Dialect::Toml => "a table",
        Dialect::Json => "an object",
    };
    let mut errors = Errors::default();
    let mut top = Fields::new(root, "", table_word)?;
    let gateway = errors
        .take(top.table("gateway").and_then(|fields| match fields {
            Some(fields) => read_gateway(fields),
            None => Ok(RawGateway::default()),
        }))
        .unwrap_or_default();
    let mut policies = Vec::new();
    if let Some(table) = errors.take(top.table("policies")).flatten() {
        for entry in table.entries() {
            let key = child_key(table.key(), &entry.key);
            let policy = Fields::new(&entry.node, &key, table_word)
                .and_then(|fields| read_policy(entry.key.clone(), fields));
            policies.extend(errors.take(policy));
        }
    }
    let mut fleet = super::fleet::RawFleet::default();
    let servers = match dialect {
        Dialect::Toml => {
            let servers = errors.take(top.table("servers")).flatten();
            if let Some(fields) = errors.take(top.table("fleet")).flatten() {
                fleet = errors.take(super::fleet::read(fields)).unwrap_or_default();
            }
            // Every other top-level key is a mistake in wardgate's own file.
            errors.take(top.finish());
            servers
        }
        // JSON files hold other settings of their app too: only these keys are ours.
        Dialect::Json => match (top.table("mcpServers")?, top.table("servers")?) {
            (Some(_), Some(vscode)) => {
                return Err(vscode.located(()).error(
                    "both \"mcpServers\" and \"servers\" are present",
                    "keep one of the two objects and move every server into it",
                ))
            }
            (claude, vscode) => claude.or(vscode),
        },
    };
    let mut raw_servers = Vec::new();
    if let Some(servers) = servers {
        for entry in servers.entries() {
            let key = child_key(servers.key(), &entry.key);
            let server = Fields::new(&entry.node, &key, table_word)
                .and_then(|fields| read_server(entry.key.clone(), fields, dialect));
            raw_servers.extend(errors.take(server));
        }
    }
    let raw = RawConfig {
        dialect,
        gateway,
        policies,
        servers: raw_servers,
        fleet,
    };
    Ok((raw, errors))
}

fn read_gateway(mut fields: Fields<'_>) -> Result<RawGateway, ConfigError> {
    let gateway = RawGateway {
        separator: fields.string("separator")?,
        request_timeout: fields.duration("request_timeout")?,
        startup_timeout: fields.duration("startup_timeout")?,
        startup_wait: fields.duration_or_zero("startup_wait")?,
        shutdown_grace: fields.duration("shutdown_grace")?,
        kill_grace: fields.duration("kill_grace")?,
        list_unavailable_tools: fields.boolean("list_unavailable_tools")?,
        tool_discovery: fields.string("tool_discovery")?,
        expose_admin_tools: fields.boolean("expose_admin_tools")?,
        policy: fields.string("policy")?,
        max_instances: fields.integer("max_instances")?,
        http: match fields.table("http")? {
            Some(http) => read_http(http)?,
            None => RawHttp::default(),
        },
        auth: match fields.table("auth")? {
            Some(auth) => read_auth(auth)?,
            None => RawAuth::default(),
        },
        telemetry: match fields.table("telemetry")? {
            Some(telemetry) => super::telemetry::read(telemetry)?,
            None => Default::default(),
        },
    };
    fields.finish()?;
    Ok(gateway)
}

fn read_http(mut fields: Fields<'_>) -> Result<RawHttp, ConfigError> {
    let http = RawHttp {
        allowed_hosts: fields.string_list("allowed_hosts")?,
        allowed_origins: fields.string_list("allowed_origins")?,
        max_body_bytes: fields.integer("max_body_bytes")?,
        session_idle: fields.duration("session_idle")?,
        max_sessions: fields.integer("max_sessions")?,
        max_sessions_per_client: fields.integer("max_sessions_per_client")?,
        rate_limit: fields.integer("rate_limit")?,
        rate_burst: fields.integer("rate_burst")?,
        allow_anonymous: fields.boolean("allow_anonymous")?,
        max_connections_per_address: fields.integer("max_connections_per_address")?,
    };
    fields.finish()?;
    Ok(http)
}

fn read_auth(mut fields: Fields<'_>) -> Result<RawAuth, ConfigError> {
    let at = Some(fields.located(()));
    let clients = match fields.table("clients")? {
        Some(clients) => clients
            .entries()
            .iter()
            .map(|entry| {
                let key = child_key(clients.key(), &entry.key);
                let mut client = Fields::new(&entry.node, &key, clients.table_word())?;
                let read = RawTokenClient {
                    name: client.located(entry.key.clone()),
                    token: client.string("token")?,
                    token_file: client.string("token_file")?,
                    allow: client.string_list("allow")?,
                    tool_discovery: client.string("tool_discovery")?,
                };
                client.finish()?;
                Ok(read)
            })
            .collect::<Result<_, ConfigError>>()?,
        None => Vec::new(),
    };
    let oauth = match fields.table("oauth")? {
        Some(mut oauth) => {
            let read = RawOAuth {
                at: oauth.located(()),
                issuer: oauth.string("issuer")?,
                resource: oauth.string("resource")?,
                jwks_url: oauth.string("jwks_url")?,
                client_claim: oauth.string("client_claim")?,
                allow: oauth.string_list("allow")?,
                scopes: oauth.list_map("scopes")?,
                tool_discovery: oauth.string("tool_discovery")?,
            };
            oauth.finish()?;
            Some(read)
        }
        None => None,
    };
    fields.finish()?;
    Ok(RawAuth { at, clients, oauth })
}

fn read_policy(name: String, mut fields: Fields<'_>) -> Result<RawPolicy, ConfigError> {
    let policy = RawPolicy {
        name: fields.located(name),
        path: fields.string("path")?,
        shadow: fields.string("shadow")?,
        params: fields.scalar_map("params")?,
    };
    fields.finish()?;
    Ok(policy)
}

fn read_server(
    name: String,
    mut fields: Fields<'_>,
    dialect: Dialect,
) -> Result<RawServer, ConfigError> {
    let server = RawServer {
        name: fields.located(name),
        command: fields.string("command")?,
        args: fields.string_list("args")?,
        env: fields.string_map("env")?,
        inherit_env: fields.boolean("inherit_env")?,
        cwd: fields.string("cwd")?,
        url: fields.string("url")?,
        headers: fields.string_map("headers")?,
        oauth: match fields.table("oauth")? {
            Some(mut oauth) => {
                let read = RawServerOAuth {
                    at: oauth.located(()),
                    client_id: oauth.string("client_id")?,
                    client_secret: oauth.string("client_secret")?,
                    client_key_file: oauth.string("client_key_file")?,
                    client_key_algorithm: oauth.string("client_key_algorithm")?,
                    idp_issuer: oauth.string("idp_issuer")?,
                    idp_token_endpoint: oauth.string("idp_token_endpoint")?,
                    idp_client_id: oauth.string("idp_client_id")?,
                    idp_client_secret: oauth.string("idp_client_secret")?,
                    id_token_file: oauth.string("id_token_file")?,
                    scopes: oauth.string_list("scopes")?,
                    grant: oauth.string("grant")?,
                };
                oauth.finish()?;
                Some(read)
            }
            None => None,
        },
        transport: read_transport(&mut fields, dialect)?,
        startup_timeout: fields.duration("startup_timeout")?,
        request_timeout: fields.duration("request_timeout")?,
        relist_interval: fields.duration_or_zero("relist_interval")?,
        enabled: read_enabled(&mut fields, dialect)?,
        policy: fields.string("policy")?,
        params: fields.scalar_map("params")?,
        tools: match fields.table("tools")? {
            Some(mut tools) => {
                let filter = RawToolFilter {
                    allow: tools.string_list("allow")?,
                    deny: tools.string_list("deny")?,
                };
                tools.finish()?;
                Some(filter)
            }
            None => None,
        },
        prefix: fields.string("prefix")?,
        rename: fields.string_map("rename")?,
        instances: fields.string("instances")?,
        instance_owner: fields.string("instance_owner")?,
        max_instances: fields.integer("max_instances")?,
        instance_idle_timeout: fields.duration("instance_idle_timeout")?,
    };
    if dialect == Dialect::Json {
        fields.ignore(IGNORED_CLIENT_KEYS);
        if let Some(env_file) = fields.string("envFile")? {
            return Err(env_file.error(
                "`envFile` is not supported: the gateway does not read .env files",
                "move its variables into \"env\" as \"NAME\": \"${NAME}\" and export them",
            ));
        }
    }
    fields.finish()?;
    Ok(server)
}

/// TOML: `transport`, canonical names only. JSON: `transport` or `type`, with the spellings
/// other clients use (`http`, `streamableHttp`).
fn read_transport(
    fields: &mut Fields<'_>,
    dialect: Dialect,
) -> Result<Option<Located<TransportKind>>, ConfigError> {
    let written = match dialect {
        Dialect::Toml => fields.string("transport")?,
        Dialect::Json => match (fields.string("transport")?, fields.string("type")?) {
            (Some(_), Some(kind)) => {
                return Err(kind.error(
                    "both \"type\" and \"transport\" are set",
                    "keep one of them",
                ))
            }
            (transport, kind) => transport.or(kind),
        },
    };
    let Some(written) = written else {
        return Ok(None);
    };
    let mut names: Vec<(&'static str, TransportKind)> = vec![
        ("stdio", TransportKind::Stdio),
        ("streamable-http", TransportKind::StreamableHttp),
        ("sse", TransportKind::Sse),
    ];
    if dialect == Dialect::Json {
        names.push(("http", TransportKind::StreamableHttp));
        names.push(("streamableHttp", TransportKind::StreamableHttp));
    }
    if let Some(&(_, kind)) = names.iter().find(|(name, _)| *name == written.value) {
        return Ok(Some(Located {
            value: kind,
            key: written.key,
            line: written.line,
        }));
    }
    let known: Vec<&'static str> = names.iter().map(|(name, _)| *name).collect();
    let message = format!("unknown transport {:?}", written.value);
    Err(match suggest(&written.value, &known) {
        Some(close) => written.error(
            format!("{message}; did you mean {close:?}?"),
            format!("write {close:?}"),
        ),
        None => written.error(message, format!("use one of: {}", known.join(", "))),
    })
}

/// TOML: `enabled`. JSON: `enabled` or the clients' `disabled` (not both).
fn read_enabled(
    fields: &mut Fields<'_>,
    dialect: Dialect,
) -> Result<Option<Located<bool>>, ConfigError> {
    let enabled = fields.boolean("enabled")?;
    if dialect == Dialect::Toml {
        return Ok(enabled);
    }
    match (enabled, fields.boolean("disabled")?) {
        (Some(_), Some(disabled)) => Err(disabled.error(
            "both \"enabled\" and \"disabled\" are set",
            "keep one of them",
        )),
        (None, Some(disabled)) => Ok(Some(Located {
            value: !disabled.value,
            key: disabled.key,
            line: disabled.line,
        })),
        (enabled, None) => Ok(enabled),
    }
}
