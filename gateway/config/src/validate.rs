//! Turns a `RawConfig` into a `Config`, checking every rule that spans keys or needs `${VAR}`s.
//!
//! Why this file is long: one pass over a raw config, in the order keys appear, so every
//! error is reported with its line; the gateway and team rules are already in submodules.

mod policies;
mod team;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::env::{self, ExpandError, Expanded};
use super::error::{ConfigError, Errors};
use super::fields::{Located, StringMap};
use super::raw::{Dialect, RawConfig, RawGateway, RawServer, TransportKind};
use super::{
    Config, GatewaySettings, PolicyConfig, Secret, ServerConfig, ShownCommand, ToolDiscovery,
    TransportConfig,
};

type Env<'e> = &'e dyn Fn(&str) -> Option<String>;

/// Validates everything it can, adding each error to those `read` found: one run reports
/// every mistake in the file.
pub(crate) fn validate(
    raw: RawConfig,
    mut errors: Errors,
    source: &Path,
    env: Env<'_>,
) -> Result<Config, ConfigError> {
    let default_policy = raw.gateway.policy.clone();
    let mut raw_gateway = raw.gateway;
    let raw_auth = std::mem::take(&mut raw_gateway.auth);
    let raw_telemetry = std::mem::take(&mut raw_gateway.telemetry);
    let telemetry = errors.take(super::telemetry::validate(raw_telemetry, env));
    let gateway = errors.take(gateway_settings(raw_gateway));
    let fleet = errors
        .take(super::fleet::validate(raw.fleet, env))
        .flatten();
    // A fleet member's servers may all come from the fleet's database.
    if raw.servers.is_empty() && fleet.is_none() && errors.is_empty() {
        return Err(match raw.dialect {
            Dialect::Toml => ConfigError::at(
                "servers",
                None,
                "no servers are configured",
                "add a [servers.NAME] table with `command` (a program to start) \
                 or `url` (a server to connect to)",
            ),
            Dialect::Json => ConfigError::at(
                "mcpServers",
                None,
                "no servers are configured",
                "add an \"mcpServers\" object, such as \
                 {\"mcpServers\": {\"NAME\": {\"command\": \"...\"}}}",
            ),
        });
    }
    // Relative `cwd`s and policy paths mean "relative to this file", wherever the gateway was
    // started from.
    let base_dir = source.parent().unwrap_or(Path::new(""));
    let mut policies = BTreeMap::new();
    let mut shadows = BTreeMap::new();
    for raw_policy in raw.policies {
        if let Some((policy, shadow)) = errors.take(policies::policy(raw_policy, base_dir, env)) {
            if let Some(shadow) = shadow {
                shadows.insert(policy.name.clone(), shadow);
            }
            policies.insert(policy.name.clone(), policy);
        }
    }
    if let Some(default_policy) = &default_policy {
        errors.take(policies::check_reference(default_policy, &policies));
    }
    let separator = gateway
        .as_ref()
        .map(|gateway| gateway.separator.clone())
        .unwrap_or_else(|| GatewaySettings::default().separator);
    let mut servers = BTreeMap::new();
    // Each non-empty prefix names one server's namespace.
    let mut prefixes: BTreeMap<String, String> = BTreeMap::new();
    for raw_server in raw.servers {
        let at = match &raw_server.prefix {
            Some(prefix) => (prefix.key.clone(), prefix.line),
            None => (raw_server.name.key.clone(), raw_server.name.line),
        };
        if let Some(server) = errors.take(server(raw_server, &separator, &policies, source, env)) {
            if !server.prefix.is_empty() {
                if let Some(first) = prefixes.insert(server.prefix.clone(), server.name.clone()) {
                    errors.take::<()>(Err(ConfigError::at(
                        at.0,
                        Some(at.1),
                        format!(
                            "servers {first:?} and {:?} both list their tools, prompts and resources under the prefix {:?}",
                            server.name, server.prefix
                        ),
                        "give each server a prefix of its own (`prefix = \"...\"`, which defaults to the server's name)",
                    )));
                }
            }
            servers.insert(server.name.clone(), server);
        }
    }
    let known = team::Known {
        servers: &servers,
        more_from_fleet: fleet.is_some(),
    };
    let auth = errors.take(team::auth(raw_auth, &separator, &known, base_dir, env));
    errors.finish()?;
    let (Some(mut gateway), Some(auth), Some(telemetry)) = (gateway, auth, telemetry) else {
        unreachable!("an error was recorded for each part that did not validate");
    };
    gateway.auth = auth;
    gateway.telemetry = telemetry;
    Ok(Config {
        source: source.to_owned(),
        gateway,
        servers,
        policies,
        shadows,
        fleet,
    })
}

fn gateway_settings(raw: RawGateway) -> Result<GatewaySettings, ConfigError> {
    let defaults = GatewaySettings::default();
    if let Some(separator) = &raw.separator {
        // Namespaced names must stay valid MCP tool names, which clients restrict to these.
        let usable = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
        if separator.value.is_empty() || !separator.value.chars().all(usable) {
            return Err(separator.error(
                format!("separator {:?} cannot join tool names", separator.value),
                "use \"__\" (the default) or other letters, digits, '_', '-' or '.'",
            ));
        }
    }
    Ok(GatewaySettings {
        separator: raw.separator.map_or(defaults.separator, |s| s.value),
        request_timeout: raw
            .request_timeout
            .map_or(defaults.request_timeout, |d| d.value),
        startup_timeout: raw
            .startup_timeout
            .map_or(defaults.startup_timeout, |d| d.value),
        startup_wait: raw.startup_wait.map_or(defaults.startup_wait, |d| d.value),
        shutdown_grace: raw
            .shutdown_grace
            .map_or(defaults.shutdown_grace, |d| d.value),
        kill_grace: raw.kill_grace.map_or(defaults.kill_grace, |d| d.value),
        list_unavailable_tools: raw
            .list_unavailable_tools
            .map_or(defaults.list_unavailable_tools, |b| b.value),
        tool_discovery: tool_discovery(raw.tool_discovery.as_ref())?
            .unwrap_or(defaults.tool_discovery),
        expose_admin_tools: raw
            .expose_admin_tools
            .map_or(defaults.expose_admin_tools, |b| b.value),
        default_policy: raw.policy.map(|name| name.value),
        max_instances: match raw.max_instances {
            Some(max) if max.value == 0 => {
                return Err(max.error(
                    "max_instances = 0 leaves no room for any per-client instance",
                    "set it to 1 or more (the default is 64), or give no server `instances = \"per-client\"`",
                ))
            }
            Some(max) => usize::try_from(max.value).unwrap_or(usize::MAX),
            None => defaults.max_instances,
        },
        http: team::http(raw.http)?,
        auth: Default::default(),
        telemetry: None,
    })
}

/// The IdP of `grant = "enterprise_managed"`: its issuer, token endpoint and client, and
/// the file with the user's ID token.
fn enterprise_idp(
    oauth: &crate::raw::RawServerOAuth,
    grant: &Located<String>,
    has_client_id: bool,
    context: &Context<'_>,
) -> Result<crate::EnterpriseIdp, ConfigError> {
    let required = |value: &Option<Located<String>>, key: &str| -> Result<String, ConfigError> {
        match value {
            Some(value) => Ok(expand(value, context)?.value),
            None => Err(grant.error(
                format!("server {:?} gets its tokens from an enterprise IdP, which needs `{key}`", context.server),
                "add idp_issuer, idp_token_endpoint, idp_client_id and id_token_file (the file an SSO helper keeps the user's ID token in) to the [oauth] table",
            )),
        }
    };
    if !has_client_id {
        return Err(grant.error(
            format!("server {:?} gets its tokens from an enterprise IdP, which needs `client_id` (the gateway's client at the server's authorization server)", context.server),
            "add the `client_id` (and `client_secret`) registered for the gateway at the server's authorization server",
        ));
    }
    let issuer = required(&oauth.idp_issuer, "idp_issuer")?;
    let token_endpoint = required(&oauth.idp_token_endpoint, "idp_token_endpoint")?;
    let client_id = required(&oauth.idp_client_id, "idp_client_id")?;
    let file = oauth.id_token_file.as_ref().ok_or_else(|| {
        grant.error(
            format!("server {:?} gets its tokens from an enterprise IdP, which needs `id_token_file`", context.server),
            "add id_token_file, the file an SSO helper keeps the user's ID token in (read at every exchange)",
        )
    })?;
    let client_secret = match &oauth.idp_client_secret {
        Some(secret) => Some(Secret::new(expand(secret, context)?.value)),
        None => None,
    };
    let base_dir = context.source.parent().unwrap_or(Path::new(""));
    Ok(crate::EnterpriseIdp {
        issuer,
        token_endpoint,
        client_id,
        client_secret,
        id_token_file: base_dir.join(&file.value),
    })
}

/// `client_key_file` (and `client_key_algorithm`): the private key a client authenticates
/// with (`private_key_jwt`), read now so a bad file is an error of the config.
fn client_key(
    file: &Located<String>,
    algorithm: Option<&Located<String>>,
    has_id: bool,
    has_secret: bool,
    context: &Context<'_>,
) -> Result<crate::ClientKey, ConfigError> {
    if !has_id {
        return Err(file.error(
            "a `client_key_file` without a `client_id`",
            "add the `client_id` the key belongs to",
        ));
    }
    if has_secret {
        return Err(file.error(
            "both `client_secret` and `client_key_file`",
            "keep one: the client authenticates with its secret, or with assertions its key signs",
        ));
    }
    let base_dir = context.source.parent().unwrap_or(Path::new(""));
    let path = base_dir.join(&file.value);
    let pem = std::fs::read_to_string(&path).map_err(|error| {
        file.error(
            format!("cannot read the client key {}: {error}", path.display()),
            "check the path (relative paths start at the config file's directory) and its permissions",
        )
    })?;
    if !(pem.contains("-----BEGIN") && pem.contains("PRIVATE KEY-----")) {
        return Err(file.error(
            format!("{} holds no PEM private key", path.display()),
            "write the client's private key in PEM (-----BEGIN PRIVATE KEY----- or -----BEGIN EC PRIVATE KEY-----)",
        ));
    }
    let algorithm_at = algorithm;
    let algorithm = match algorithm {
        None => crate::KeyAlgorithm::Es256,
        Some(written) => crate::KeyAlgorithm::ALL
            .iter()
            .find(|(name, _)| *name == written.value)
            .map(|(_, algorithm)| *algorithm)
            .ok_or_else(|| {
                written.error(
                    format!("{:?} is not a client key algorithm", written.value),
                    "write RS256, RS384, RS512, ES256 (the default) or ES384, as the authorization server's token_endpoint_auth_signing_alg_values_supported allows",
                )
            })?,
    };
    // A key whose PEM says its kind must suit the algorithm (PKCS#8 keys do not say).
    let rsa = matches!(
        algorithm,
        crate::KeyAlgorithm::Rs256 | crate::KeyAlgorithm::Rs384 | crate::KeyAlgorithm::Rs512
    );
    let kind = if pem.contains("BEGIN RSA PRIVATE KEY") {
        Some(("an RSA key", true))
    } else if pem.contains("BEGIN EC PRIVATE KEY") {
        Some(("an EC key", false))
    } else {
        None
    };
    if let Some((kind, is_rsa)) = kind.filter(|(_, is_rsa)| *is_rsa != rsa) {
        let at = algorithm_at.unwrap_or(file);
        return Err(at.error(
            format!(
                "{} holds {kind}, which cannot sign {}",
                path.display(),
                algorithm.as_str()
            ),
            if is_rsa {
                "write client_key_algorithm = \"RS256\" (or RS384, RS512)"
            } else {
                "write client_key_algorithm = \"ES256\" (or ES384)"
            },
        ));
    }
    Ok(crate::ClientKey {
        pem: Secret::new(pem),
        path,
        algorithm,
    })
}

/// A `tool_discovery` setting, where one is written.
pub(crate) fn tool_discovery(
    raw: Option<&Located<String>>,
) -> Result<Option<ToolDiscovery>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    match raw.value.as_str() {
        "list" => Ok(Some(ToolDiscovery::List)),
        "search" => Ok(Some(ToolDiscovery::Search)),
        other => Err(raw.error(
            format!("tool_discovery = {other:?} is not a way to find tools"),
            "use \"list\" (every tool in tools/list, the default) or \"search\" (the tools discover_tools and call_tool instead, for many servers)",
        )),
    }
}

/// What every check of one server needs to phrase its errors.
struct Context<'e> {
    env: Env<'e>,
    /// The config file (relative `cwd`s are relative to its directory).
    source: &'e Path,
    server: String,
    enabled: bool,
}

fn server(
    raw: RawServer,
    separator: &str,
    policies: &BTreeMap<String, PolicyConfig>,
    source: &Path,
    env: Env<'_>,
) -> Result<ServerConfig, ConfigError> {
    check_name(&raw.name, separator)?;
    let base_dir = source.parent().unwrap_or(Path::new(""));
    let context = Context {
        env,
        source,
        server: raw.name.value.clone(),
        enabled: raw.enabled.as_ref().is_none_or(|enabled| enabled.value),
    };
    let transport = match (&raw.command, &raw.url) {
        (Some(_), Some(url)) => Err(url.error(
            format!("server {:?} has both `command` and `url`", context.server),
            "keep `command` to start a local process, or `url` to connect to a remote server; \
             not both",
        )),
        (None, None) => Err(raw.name.error(
            format!(
                "server {:?} has neither `command` nor `url`",
                context.server
            ),
            "add `command` (a program to start) or `url` (a server to connect to)",
        )),
        (Some(command), None) => stdio(&raw, command, base_dir, &context),
        (None, Some(url)) => http(&raw, url, &context),
    }?;
    if let Some(policy) = &raw.policy {
        policies::check_reference(policy, policies)?;
    }
    let instances = instances(&raw)?;
    Ok(ServerConfig {
        name: context.server,
        transport,
        startup_timeout: raw.startup_timeout.map(|duration| duration.value),
        request_timeout: raw.request_timeout.map(|duration| duration.value),
        relist_interval: raw.relist_interval.map(|duration| duration.value),
        enabled: context.enabled,
        policy: raw.policy.map(|name| name.value),
        params: policies::params(raw.params.as_ref())?,
        tools: team::tool_filter(raw.tools),
        prefix: prefix(raw.prefix, &raw.name.value, separator)?,
        rename: rename(raw.rename, &raw.name.value)?,
        instances,
    })
}

/// `instances` and the settings that go with `"per-client"`.
fn instances(raw: &RawServer) -> Result<crate::Instances, ConfigError> {
    let server = &raw.name.value;
    let per_client = match &raw.instances {
        None => false,
        Some(written) => match written.value.as_str() {
            "shared" => false,
            "per-client" => true,
            other => {
                return Err(written.error(
                    format!("instances {other:?} of server {server:?} is not a way to run it"),
                    "write \"shared\" (one process for every client, the default) or \"per-client\" (one for each client)",
                ))
            }
        },
    };
    if !per_client {
        let message = |name: &str| {
            (
                format!("`{name}` of server {server:?} applies to an instance per client, and the server has one process for every client"),
                format!("add `instances = \"per-client\"` to server {server:?}, or remove `{name}`"),
            )
        };
        if let Some(at) = &raw.instance_owner {
            let (message, fix) = message("instance_owner");
            return Err(at.error(message, fix));
        }
        if let Some(at) = &raw.max_instances {
            let (message, fix) = message("max_instances");
            return Err(at.error(message, fix));
        }
        if let Some(at) = &raw.instance_idle_timeout {
            let (message, fix) = message("instance_idle_timeout");
            return Err(at.error(message, fix));
        }
        return Ok(crate::Instances::Shared);
    }
    let owner = match &raw.instance_owner {
        None => crate::InstanceOwner::Session,
        Some(written) => match written.value.as_str() {
            "session" => crate::InstanceOwner::Session,
            "identity" => crate::InstanceOwner::Identity,
            other => {
                return Err(written.error(
                    format!("instance_owner {other:?} of server {server:?} is not a kind of client"),
                    "write \"session\" (an instance for each client session, the default) or \"identity\" (one for each authenticated client, across its sessions)",
                ))
            }
        },
    };
    let max = match &raw.max_instances {
        None => crate::DEFAULT_MAX_INSTANCES,
        Some(max) if max.value == 0 => {
            return Err(max.error(
                format!(
                "max_instances = 0 of server {server:?} leaves no room for any client's instance"
            ),
                "set it to 1 or more (the default is 16)",
            ))
        }
        Some(max) => usize::try_from(max.value).unwrap_or(usize::MAX),
    };
    Ok(crate::Instances::PerClient(crate::PerClient {
        owner,
        max,
        idle_timeout: raw
            .instance_idle_timeout
            .as_ref()
            .map_or(crate::DEFAULT_INSTANCE_IDLE_TIMEOUT, |timeout| {
                timeout.value
            }),
    }))
}

/// A server's `prefix`: its name unless set; empty lists it under its own names.
fn prefix(
    written: Option<Located<String>>,
    server: &str,
    separator: &str,
) -> Result<String, ConfigError> {
    let Some(written) = written else {
        return Ok(server.to_owned());
    };
    let text = &written.value;
    if text.is_empty() {
        return Ok(String::new());
    }
    if !text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(written.error(
            format!("prefix {text:?} of server {server:?} has characters a tool name cannot hold"),
            "use letters, digits, `_`, `-` and `.`, or \"\" to list the server's tools, prompts and resources under their own names",
        ));
    }
    if text.contains(separator) {
        return Err(written.error(
            format!("prefix {text:?} of server {server:?} contains the separator {separator:?}, so its names could not be told apart"),
            "choose a prefix without the separator",
        ));
    }
    Ok(text.clone())
}

/// `[servers.NAME.rename]`: each listed name a valid tool name, and no two the same.
fn rename(
    written: Option<super::fields::StringMap>,
    server: &str,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut renamed = BTreeMap::new();
    let mut listed: BTreeMap<String, String> = BTreeMap::new();
    for (original, name) in written.map(|map| map.value).unwrap_or_default() {
        let text = &name.value;
        let valid = !text.is_empty()
            && text.len() <= 128
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            return Err(name.error(
                format!("[servers.{server}.rename] lists {original:?} as {text:?}, which is not a valid tool name"),
                "use 1 to 128 letters, digits, `_`, `-` and `.`",
            ));
        }
        if let Some(first) = listed.insert(text.clone(), original.clone()) {
            return Err(name.error(
                format!(
                    "[servers.{server}.rename] lists both {first:?} and {original:?} as {text:?}"
                ),
                "give each a name of its own",
            ));
        }
        renamed.insert(original, text.clone());
    }
    Ok(renamed)
}

fn check_name(name: &Located<String>, separator: &str) -> Result<(), ConfigError> {
    let text = &name.value;
    let replacement = if separator.contains('-') { '_' } else { '-' };
    if text.is_empty() {
        return Err(name.error(
            "a server name cannot be empty",
            "name the server with letters, digits, '_' or '-'",
        ));
    }
    let usable = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !text.chars().all(usable) {
        let renamed: String = text
            .chars()
            .map(|c| if usable(c) { c } else { replacement })
            .collect();
        return Err(name.error(
            format!("server name {text:?} may contain only letters, digits, '_' and '-'"),
            format!("rename the server, for example to {renamed:?}"),
        ));
    }
    if text.contains(separator) {
        return Err(name.error(
            format!(
                "server name {text:?} contains the separator {separator:?}, so its tool names \
                 could not be split back into server and tool"
            ),
            format!(
                "rename the server, for example to {:?}, or choose another [gateway] separator",
                text.replace(separator, &replacement.to_string())
            ),
        ));
    }
    Ok(())
}

fn stdio(
    raw: &RawServer,
    command: &Located<String>,
    base_dir: &Path,
    context: &Context<'_>,
) -> Result<TransportConfig, ConfigError> {
    if let Some(transport) = raw
        .transport
        .as_ref()
        .filter(|t| t.value != TransportKind::Stdio)
    {
        return Err(transport.error(
            format!(
                "server {:?} has a `command`, which always speaks stdio",
                context.server
            ),
            "remove the transport setting, or replace `command` with `url`",
        ));
    }
    if let Some(headers) = &raw.headers {
        return Err(only_for(
            headers,
            "url",
            context,
            "pass values to the process with `env`",
        ));
    }
    if let Some(oauth) = &raw.oauth {
        return Err(only_for(
            &oauth.at,
            "url",
            context,
            "a stdio server takes its credentials from `env`",
        ));
    }
    let inherit_env = raw
        .inherit_env
        .as_ref()
        .is_some_and(|inherit| inherit.value);
    let expanded_command = expand(command, context)?;
    if expanded_command.value.trim().is_empty() {
        return Err(command.error("the command is empty", "name the program to start"));
    }
    let mut args = Vec::new();
    let mut shown_args = Vec::new();
    for arg in raw.args.iter().flat_map(|args| &args.value) {
        let expanded = expand(arg, context)?;
        // `--api-key=${KEY}`: what came from the environment is masked in the log.
        expanded
            .substituted
            .iter()
            .for_each(|value| crate::secrets::remember(value));
        shown_args.push(shown(arg, &expanded));
        args.push(expanded.value);
    }
    let env = secrets(raw.env.as_ref(), context, &ENV_RULES)?;
    let (cwd, shown_cwd) = match &raw.cwd {
        None => (None, None),
        Some(cwd) => {
            let expanded = expand(cwd, context)?;
            if expanded.value.is_empty() {
                let fix = "remove `cwd` to use the gateway's directory, or name a directory";
                return Err(cwd.error("the working directory is empty", fix));
            }
            // `components()` drops `.` parts, so `cwd = "."` shows as the directory itself.
            let path: PathBuf = base_dir.join(&expanded.value).components().collect();
            let shown_cwd = if expanded.from_env {
                cwd.value.clone()
            } else {
                path.display().to_string()
            };
            (Some(path), Some(shown_cwd))
        }
    };
    Ok(TransportConfig::Stdio {
        shown: ShownCommand {
            command: shown(command, &expanded_command),
            args: shown_args,
            cwd: shown_cwd,
        },
        command: expanded_command.value,
        args,
        env,
        inherit_env,
        cwd,
    })
}

fn http(
    raw: &RawServer,
    url: &Located<String>,
    context: &Context<'_>,
) -> Result<TransportConfig, ConfigError> {
    let kind = match &raw.transport {
        Some(transport) if transport.value == TransportKind::Stdio => {
            return Err(transport.error(
                format!(
                    "server {:?} has a `url`; stdio needs a `command`",
                    context.server
                ),
                "set the transport to \"streamable-http\" or \"sse\", or remove it",
            ))
        }
        Some(transport) => transport.value,
        None => TransportKind::StreamableHttp,
    };
    let stdio_only = "remove it, or replace `url` with `command`";
    if let Some(args) = &raw.args {
        return Err(only_for(args, "command", context, stdio_only));
    }
    if let Some(env) = &raw.env {
        return Err(only_for(
            env,
            "command",
            context,
            "send values as `headers`",
        ));
    }
    if let Some(cwd) = &raw.cwd {
        return Err(only_for(cwd, "command", context, stdio_only));
    }
    let expanded = expand(url, context)?;
    expanded
        .substituted
        .iter()
        .for_each(|value| crate::secrets::remember(value));
    let shown_url = shown(url, &expanded);
    let after_scheme = ["http://", "https://"]
        .iter()
        .find_map(|scheme| expanded.value.strip_prefix(scheme));
    if after_scheme.is_none_or(|rest| rest.is_empty() || rest.starts_with('/')) {
        return Err(url.error(
            format!("{shown_url:?} is not an http:// or https:// URL"),
            "write the server's full URL, such as \"https://example.com/mcp\"",
        ));
    }
    let headers = secrets(raw.headers.as_ref(), context, &HEADER_RULES)?;
    let oauth = match &raw.oauth {
        None => None,
        Some(oauth) => {
            if kind == TransportKind::Sse {
                return Err(oauth.at.error(
                    format!("server {:?} speaks the legacy HTTP+SSE transport, which has no OAuth sign-in", context.server),
                    "use the Streamable HTTP transport (remove `transport`), or send a token as `headers`",
                ));
            }
            if headers
                .keys()
                .any(|name| name.eq_ignore_ascii_case("authorization"))
            {
                return Err(oauth.at.error(
                    format!(
                        "server {:?} has both `oauth` and an `Authorization` header",
                        context.server
                    ),
                    "remove one: with `oauth` the gateway sends the token it obtained",
                ));
            }
            let (client_id, shown_client_id) = match &oauth.client_id {
                Some(id) => {
                    let expanded = expand(id, context)?;
                    (Some(expanded.value.clone()), Some(shown(id, &expanded)))
                }
                None => (None, None),
            };
            let client_secret = match &oauth.client_secret {
                Some(secret) if client_id.is_none() => {
                    return Err(secret.error(
                        "a `client_secret` without a `client_id`",
                        "add the `client_id` the secret belongs to, or remove both to register the gateway dynamically",
                    ))
                }
                Some(secret) => Some(Secret::new(expand(secret, context)?.value)),
                None => None,
            };
            let client_key = match &oauth.client_key_file {
                None => None,
                Some(file) => Some(Box::new(client_key(
                    file,
                    oauth.client_key_algorithm.as_ref(),
                    client_id.is_some(),
                    client_secret.is_some(),
                    context,
                )?)),
            };
            if let (None, Some(algorithm)) = (&client_key, &oauth.client_key_algorithm) {
                return Err(algorithm.error(
                    "a `client_key_algorithm` without a `client_key_file`",
                    "add the `client_key_file` whose key signs the client's assertions, or remove the algorithm",
                ));
            }
            let idp_keys = [
                &oauth.idp_issuer,
                &oauth.idp_token_endpoint,
                &oauth.idp_client_id,
                &oauth.idp_client_secret,
                &oauth.id_token_file,
            ];
            let enterprise_grant = oauth
                .grant
                .as_ref()
                .filter(|grant| grant.value == "enterprise_managed");
            let enterprise = match enterprise_grant {
                Some(grant) => Some(Box::new(enterprise_idp(
                    oauth,
                    grant,
                    client_id.is_some(),
                    context,
                )?)),
                None => {
                    if let Some(stray) = idp_keys.iter().find_map(|key| key.as_ref()) {
                        return Err(stray.error(
                            "an identity provider setting without grant = \"enterprise_managed\"",
                            "add grant = \"enterprise_managed\" to use the enterprise IdP, or remove the idp_* and id_token_file settings",
                        ));
                    }
                    None
                }
            };
            let client_credentials = match &oauth.grant {
                None => false,
                Some(grant) if grant.value == "authorization_code" => false,
                Some(grant) if grant.value == "enterprise_managed" => false,
                Some(grant) if grant.value == "client_credentials" => {
                    if client_id.is_none() || (client_secret.is_none() && client_key.is_none()) {
                        return Err(grant.error(
                            format!("server {:?} gets its tokens by the client credentials grant, which needs `client_id` and `client_secret` (or `client_key_file`)", context.server),
                            "add the client's `client_id` and `client_secret` (as `${VAR}`), or a `client_key_file` with its private key, to the [oauth] table",
                        ));
                    }
                    true
                }
                Some(grant) => {
                    return Err(grant.error(
                        format!("unknown OAuth grant {:?}", grant.value),
                        "write \"authorization_code\" (the default: sign in with `wardgate auth login`), \"client_credentials\" (the gateway gets tokens itself with `client_id` and `client_secret`) or \"enterprise_managed\" (an enterprise IdP's ID token is exchanged for them)",
                    ))
                }
            };
            if let (Some(file), false) = (&oauth.client_key_file, client_credentials) {
                return Err(file.error(
                    "a `client_key_file` without grant = \"client_credentials\"",
                    "the key signs the client's assertions for the client credentials grant only: add grant = \"client_credentials\", or remove the key",
                ));
            }
            Some(crate::OAuthClient {
                client_credentials,
                enterprise,
                client_id,
                shown_client_id,
                client_secret,
                client_key,
                scopes: oauth
                    .scopes
                    .as_ref()
                    .map(|scopes| {
                        scopes
                            .value
                            .iter()
                            .map(|scope| scope.value.clone())
                            .collect()
                    })
                    .unwrap_or_default(),
                login: crate::OAuthClient::login_command(context.source, &context.server),
            })
        }
    };
    let url = expanded.value;
    Ok(match kind {
        TransportKind::Sse => TransportConfig::Sse {
            url,
            headers,
            shown_url,
        },
        _ => TransportConfig::StreamableHttp {
            url,
            headers,
            oauth,
            shown_url,
        },
    })
}

/// What names and values an `env` or `headers` map may hold.
struct MapRules {
    what: &'static str,
    valid_name: fn(&str) -> bool,
    forbidden: &'static [char],
    forbidden_words: &'static str,
}

const ENV_RULES: MapRules = MapRules {
    what: "an environment variable",
    valid_name: |name| !name.is_empty() && !name.contains(['=', '\0']),
    // Values may span lines (a PEM key, say); only NUL cannot reach a child's environment.
    forbidden: &['\0'],
    forbidden_words: "a NUL character",
};

const HEADER_RULES: MapRules = MapRules {
    what: "an HTTP header",
    // Header names are HTTP tokens; anything else would only fail later, on every request.
    valid_name: |name| {
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        !name.is_empty() && name.chars().all(token)
    },
    // A line break would split the header in two.
    forbidden: &['\0', '\r', '\n'],
    forbidden_words: "a line break or NUL character",
};

/// Expands an `env` or `headers` map into secrets.
fn secrets(
    map: Option<&StringMap>,
    context: &Context<'_>,
    rules: &MapRules,
) -> Result<BTreeMap<String, Secret>, ConfigError> {
    let mut secrets = BTreeMap::new();
    for (name, value) in map.iter().flat_map(|map| &map.value) {
        if !(rules.valid_name)(name) {
            return Err(value.error(
                format!("{name:?} cannot be the name of {}", rules.what),
                "use a name of letters, digits, '_' and '-'",
            ));
        }
        let expanded = expand(value, context)?;
        if expanded.value.contains(rules.forbidden) {
            let message = format!("the value contains {}", rules.forbidden_words);
            let fix = "remove it from the value, or from the variable the value uses";
            return Err(value.error(message, fix));
        }
        secrets.insert(name.clone(), Secret::new(expanded.value));
    }
    Ok(secrets)
}

fn only_for<T>(found: &Located<T>, needs: &str, context: &Context<'_>, fix: &str) -> ConfigError {
    let key = found.key.rsplit('.').next().unwrap_or(&found.key);
    found.error(
        format!(
            "`{key}` applies only to servers with a `{needs}`, and {:?} has none",
            context.server
        ),
        fix,
    )
}

/// What may be displayed for a value: itself, unless part of it came from the environment.
fn shown(template: &Located<String>, expanded: &Expanded) -> String {
    if expanded.from_env {
        template.value.clone()
    } else {
        expanded.value.clone()
    }
}

fn expand(template: &Located<String>, context: &Context<'_>) -> Result<Expanded, ConfigError> {
    let note = if context.enabled {
        ""
    } else {
        " (the server is disabled, but its settings must still be complete)"
    };
    expand_with(template, context.env, note)
}

/// Expands `${VAR}`s; `note` is added to the fix for a variable that is not set.
fn expand_with(
    template: &Located<String>,
    env: Env<'_>,
    note: &str,
) -> Result<Expanded, ConfigError> {
    env::expand(&template.value, env).map_err(|error| match error {
        ExpandError::Missing { name } => template.error(
            format!("environment variable `{name}` is not set"),
            format!("export {name} or remove the reference{note}"),
        ),
        ExpandError::Unclosed => template.error(
            "a `${` reference has no closing `}`",
            "close it with `}`, or write `$${` for a literal `${`",
        ),
        ExpandError::NotAVariable { reference } => template.error(
            format!("`{reference}` is not an environment variable reference"),
            "write ${NAME}, ${env:NAME} or ${NAME:-default}, or `$${` for a literal `${`",
        ),
    })
}
