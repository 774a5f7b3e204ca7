//! `[gateway.http]`, `[gateway.auth]` and `[servers.NAME.tools]` checked into settings.

use std::collections::BTreeMap;
use std::path::Path;

use super::{expand_with, Env};
use crate::error::ConfigError;
use crate::fields::{Located, StringList};
use crate::raw::{RawAuth, RawHttp, RawOAuth, RawTokenClient, RawToolFilter};
use crate::{
    read_token_file, AuthSettings, Glob, Grant, HttpSettings, NamePattern, OAuthSettings, Secret,
    ServerConfig, TokenClient, TokenFileError, ToolFilter,
};

/// Shorter tokens are refused: a bearer token is the whole of a client's credentials.
const MIN_TOKEN_LEN: usize = 16;
const MAKE_TOKEN: &str = "make one with `openssl rand -hex 32`";

pub(super) fn http(raw: RawHttp) -> Result<HttpSettings, ConfigError> {
    let defaults = HttpSettings::default();
    let mut allowed_hosts = Vec::new();
    for host in raw.allowed_hosts.iter().flat_map(|list| &list.value) {
        let valid = host.value == "*"
            || (!host.value.is_empty()
                && !host.value.contains(['/', ' ', '@', '*'])
                && ::http::uri::Authority::try_from(host.value.as_str()).is_ok());
        if !valid {
            return Err(host.error(
                format!("{:?} is not a host name", host.value),
                "write a name clients use to reach the gateway, such as \"mcp.example.com\" or \"mcp.example.com:8443\" (no scheme, no path), or \"*\" for any",
            ));
        }
        allowed_hosts.push(host.value.to_ascii_lowercase());
    }
    let mut allowed_origins = Vec::new();
    for origin in raw.allowed_origins.iter().flat_map(|list| &list.value) {
        if !valid_origin(&origin.value) {
            return Err(origin.error(
                format!("{:?} is not an origin", origin.value),
                "write scheme, host and port only, such as \"https://app.example.com\" or \"http://localhost:*\" (any port)",
            ));
        }
        allowed_origins.push(origin.value.trim_end_matches('/').to_ascii_lowercase());
    }
    let positive = |value: &Option<Located<u64>>, what: &str| -> Result<(), ConfigError> {
        match value {
            Some(found) if found.value == 0 => Err(found.error(
                format!("{what} cannot be 0"),
                "give a number of at least 1, or remove the key for the default",
            )),
            _ => Ok(()),
        }
    };
    positive(&raw.max_body_bytes, "max_body_bytes")?;
    positive(&raw.max_sessions, "max_sessions")?;
    positive(&raw.max_sessions_per_client, "max_sessions_per_client")?;
    let small = |value: Option<Located<u64>>, default: u32| -> Result<u32, ConfigError> {
        match value {
            None => Ok(default),
            Some(found) => u32::try_from(found.value)
                .map_err(|_| found.error("the number is too large", "give at most 4294967295")),
        }
    };
    let rate_limit = small(raw.rate_limit, defaults.rate_limit)?;
    let rate_burst = match raw.rate_burst {
        Some(burst) if burst.value == 0 => {
            return Err(burst.error(
                "rate_burst cannot be 0",
                "give at least 1 (requests a client may send at once), or set rate_limit = 0 to turn the limit off",
            ))
        }
        burst => small(burst, rate_limit.saturating_mul(2).max(1))?,
    };
    Ok(HttpSettings {
        allowed_hosts,
        allowed_origins,
        max_body_bytes: raw.max_body_bytes.map_or(defaults.max_body_bytes, |bytes| {
            usize::try_from(bytes.value).unwrap_or(usize::MAX)
        }),
        session_idle: raw
            .session_idle
            .map_or(defaults.session_idle, |idle| idle.value),
        max_sessions: raw.max_sessions.map_or(defaults.max_sessions, |max| {
            usize::try_from(max.value).unwrap_or(usize::MAX)
        }),
        max_sessions_per_client: raw
            .max_sessions_per_client
            .map_or(defaults.max_sessions_per_client, |max| {
                usize::try_from(max.value).unwrap_or(usize::MAX)
            }),
        rate_limit,
        rate_burst,
        allow_anonymous: raw
            .allow_anonymous
            .map_or(defaults.allow_anonymous, |allow| allow.value),
        max_connections_per_address: match raw.max_connections_per_address {
            Some(max) if max.value == 0 => {
                return Err(max.error(
                    "max_connections_per_address cannot be 0",
                    "give at least 1; behind a proxy, as many as the proxy may open",
                ))
            }
            max => max.map(|max| usize::try_from(max.value).unwrap_or(usize::MAX)),
        },
    })
}

/// `scheme://host[:port|:*]`, or `null`.
fn valid_origin(origin: &str) -> bool {
    let origin = origin.trim_end_matches('/');
    if origin == "null" {
        return true;
    }
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    let authority = authority.strip_suffix(":*").unwrap_or(authority);
    matches!(scheme, "http" | "https")
        && !authority.is_empty()
        && !authority.contains(['/', '@', '*', '?', '#'])
        && ::http::uri::Authority::try_from(authority).is_ok()
}

/// The servers an `allow` entry may name: the configured ones, and on a fleet member
/// (`more_from_fleet`) the fleet database's too, which the file cannot know.
pub(super) struct Known<'a> {
    pub servers: &'a BTreeMap<String, ServerConfig>,
    pub more_from_fleet: bool,
}

pub(super) fn auth(
    raw: RawAuth,
    separator: &str,
    servers: &Known<'_>,
    base_dir: &Path,
    env: Env<'_>,
) -> Result<AuthSettings, ConfigError> {
    let mut clients: Vec<TokenClient> = Vec::new();
    for client in raw.clients {
        let at = client.name.clone();
        let client = token_client(client, separator, servers, base_dir, env)?;
        if let Some(other) = clients
            .iter()
            .find(|other| other.token.expose() == client.token.expose())
        {
            return Err(at.error(
                format!("clients {:?} and {:?} have the same token", other.name, client.name),
                format!("give each client a token of its own, so the gateway can tell them apart; {MAKE_TOKEN}"),
            ));
        }
        clients.push(client);
    }
    let oauth = raw
        .oauth
        .map(|oauth| self::oauth(oauth, separator, servers))
        .transpose()?;
    if let (Some(at), true, None) = (&raw.at, clients.is_empty(), &oauth) {
        return Err(at.error(
            "[gateway.auth] names no way to authenticate",
            "add a client ([gateway.auth.clients.NAME] with token = \"${VARIABLE}\") or [gateway.auth.oauth], or remove [gateway.auth] to let every client in",
        ));
    }
    Ok(AuthSettings { clients, oauth })
}

fn token_client(
    raw: RawTokenClient,
    separator: &str,
    servers: &Known<'_>,
    base_dir: &Path,
    env: Env<'_>,
) -> Result<TokenClient, ConfigError> {
    let name = &raw.name.value;
    let valid_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@'));
    if !valid_name {
        return Err(raw.name.error(
            format!("{name:?} cannot name a client"),
            "use letters, digits, '_', '-', '.' and '@'",
        ));
    }
    let (token, source) = match (&raw.token, &raw.token_file) {
        (Some(_), Some(file)) => {
            return Err(file.error(
                format!("client {name:?} has both `token` and `token_file`"),
                "keep one of them",
            ))
        }
        (None, None) => {
            return Err(raw.name.error(
                format!("client {name:?} has no token"),
                format!("add token = \"${{VARIABLE}}\" (exported in the gateway's environment) or token_file = \"PATH\"; {MAKE_TOKEN}"),
            ))
        }
        (Some(token), None) => {
            let expanded = expand_with(token, env, "")?;
            if !expanded.from_env {
                return Err(token.error(
                    format!("the token of client {name:?} is written in the config in clear"),
                    "move it into an environment variable and write token = \"${VARIABLE}\", or into a file named by token_file; then change the token, since this file has shown it",
                ));
            }
            (expanded.value, token.value.clone())
        }
        (None, Some(file)) => {
            let path = base_dir.join(&file.value);
            let token = read_token_file(&path).map_err(|error| {
                let fix = match error {
                    TokenFileError::Unreadable { .. } => "check the path (relative paths start at the config file's directory) and its permissions".to_owned(),
                    _ => error.fix(),
                };
                file.error(format!("client {name:?}: {error}"), fix)
            })?;
            (token, format!("file {}", path.display()))
        }
    };
    let at = raw
        .token
        .as_ref()
        .or(raw.token_file.as_ref())
        .unwrap_or(&raw.name);
    if token.chars().count() < MIN_TOKEN_LEN {
        return Err(at.error(
            format!("the token of client {name:?} is shorter than {MIN_TOKEN_LEN} characters"),
            format!("use a long random token; {MAKE_TOKEN}"),
        ));
    }
    if token.contains(|c: char| c.is_whitespace() || c.is_control()) {
        return Err(at.error(
            format!("the token of client {name:?} contains a space or control character"),
            format!("a bearer token is one word; {MAKE_TOKEN}"),
        ));
    }
    Ok(TokenClient {
        name: name.clone(),
        token: Secret::new(token),
        source,
        grant: grant(raw.allow.as_ref(), separator, servers)?,
        tool_discovery: super::tool_discovery(raw.tool_discovery.as_ref())?,
    })
}

fn oauth(
    raw: RawOAuth,
    separator: &str,
    servers: &Known<'_>,
) -> Result<OAuthSettings, ConfigError> {
    let url = |value: &Option<Located<String>>,
               key: &str,
               example: &str|
     -> Result<Option<String>, ConfigError> {
        let Some(value) = value else {
            return Ok(None);
        };
        let parsed = url::Url::parse(&value.value)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some());
        let Some(parsed) = parsed else {
            return Err(value.error(
                format!("{key} {:?} is not an http:// or https:// URL", value.value),
                format!("write the full URL, such as {example:?}"),
            ));
        };
        // Keys and metadata fetched in clear could be replaced on the way.
        let loopback = parsed.host_str().is_some_and(|host| {
            host == "localhost"
                || host
                    .trim_matches(['[', ']'])
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        });
        if parsed.scheme() == "http" && !loopback && key != "resource" {
            return Err(value.error(
                format!("{key} {:?} is plain http on another machine: the gateway would trust keys anyone on the way could replace", value.value),
                "use https:// (plain http is accepted for a loopback issuer only)",
            ));
        }
        Ok(Some(value.value.clone()))
    };
    let issuer = url(&raw.issuer, "issuer", "https://auth.example.com")?.ok_or_else(|| {
        raw.at.error(
            "[gateway.auth.oauth] has no issuer",
            "add issuer = \"https://...\": the authorization server whose tokens clients present",
        )
    })?;
    let resource = url(&raw.resource, "resource", "https://mcp.example.com/mcp")?.ok_or_else(|| {
        raw.at.error(
            "[gateway.auth.oauth] has no resource",
            "add resource = \"https://HOST/mcp\": this gateway's /mcp URL as clients reach it, which tokens must name as their audience",
        )
    })?;
    let jwks_url = url(&raw.jwks_url, "jwks_url", "https://auth.example.com/jwks")?;
    let mut scopes = BTreeMap::new();
    for (scope, allow) in raw.scopes.iter().flat_map(|scopes| &scopes.value) {
        scopes.insert(scope.clone(), grant(Some(allow), separator, servers)?);
    }
    Ok(OAuthSettings {
        issuer,
        resource,
        jwks_url,
        client_claim: raw
            .client_claim
            .map_or_else(|| "client_id".to_owned(), |claim| claim.value),
        grant: grant(raw.allow.as_ref(), separator, servers)?,
        scopes,
        tool_discovery: super::tool_discovery(raw.tool_discovery.as_ref())?,
    })
}

/// An `allow` list; absent, everything. Each entry must be able to match a configured server.
fn grant(
    allow: Option<&StringList>,
    separator: &str,
    servers: &Known<'_>,
) -> Result<Grant, ConfigError> {
    let Some(allow) = allow else {
        return Ok(Grant::All);
    };
    let names: Vec<&str> = servers.servers.keys().map(String::as_str).collect();
    let mut patterns = Vec::new();
    for entry in &allow.value {
        let pattern = NamePattern::parse_known(&entry.value, separator, &names);
        // A fleet member's servers also come from the fleet's database, which the file
        // cannot know: the composed config is checked for patterns that match nothing
        // (`Config::unmatched_grants`).
        let known = servers
            .servers
            .keys()
            .any(|server| pattern.server.matches(server));
        if !known && !servers.more_from_fleet {
            return Err(entry.error(
                format!("{:?} names no configured server", entry.value),
                format!(
                    "write SERVER (all of it) or SERVER{separator}TOOL; the servers are: {}",
                    names.join(", ")
                ),
            ));
        }
        patterns.push(pattern);
    }
    Ok(Grant::Only(patterns))
}

pub(super) fn tool_filter(raw: Option<RawToolFilter>) -> ToolFilter {
    let Some(raw) = raw else {
        return ToolFilter::default();
    };
    let globs = |list: Option<StringList>| {
        list.map(|list| {
            list.value
                .iter()
                .map(|glob| Glob::new(&glob.value))
                .collect::<Vec<_>>()
        })
    };
    ToolFilter {
        allow: globs(raw.allow),
        deny: globs(raw.deny).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::{Config, Grant};

    const SERVERS: &str = "[servers.docs]\ncommand = \"x\"\n[servers.github]\ncommand = \"y\"\n";

    fn parse(text: &str) -> Result<Config, String> {
        let env = |name: &str| (name == "CI_TOKEN").then(|| "0123456789abcdef-secret".to_owned());
        Config::parse(
            Path::new("/tmp/wardgate.toml"),
            &format!("{text}\n{SERVERS}"),
            &env,
        )
        .map_err(|error| error.to_string())
    }

    #[test]
    fn a_token_in_clear_is_refused_without_being_shown() {
        let error = parse("[gateway.auth.clients.ci]\ntoken = \"0123456789abcdef-in-clear\"\n")
            .unwrap_err();
        assert!(error.contains("in clear"), "{error}");
        assert!(error.contains("${VARIABLE}"), "{error}");
        assert!(!error.contains("0123456789abcdef-in-clear"), "{error}");
        let error = parse("[gateway.auth.clients.ci]\ntoken = \"${SHORT:-abc}\"\n").unwrap_err();
        assert!(error.contains("shorter than 16"), "{error}");
    }

    #[test]
    fn grants_must_name_configured_servers_and_check_shows_no_token() {
        let error =
            parse("[gateway.auth.clients.ci]\ntoken = \"${CI_TOKEN}\"\nallow = [\"gitlab\"]\n")
                .unwrap_err();
        assert!(
            error.contains("names no configured server") && error.contains("docs, github"),
            "{error}"
        );
        let config = parse(
            "[gateway.auth.clients.ci]\ntoken = \"${CI_TOKEN}\"\nallow = [\"github__search_*\"]\n",
        )
        .unwrap();
        let client = &config.gateway.auth.clients[0];
        assert!(client.grant.allows("github", "search_code"));
        assert!(!client.grant.allows("docs", "read"));
        let summary = config.summary();
        assert!(
            summary.contains("client ci: token from ${CI_TOKEN}"),
            "{summary}"
        );
        assert!(summary.contains("allowed_hosts"), "{summary}");
        assert!(!summary.contains("0123456789abcdef-secret"), "{summary}");
    }

    #[test]
    fn a_fleet_member_s_grant_may_name_a_server_the_fleet_adds_and_is_checked_once_composed() {
        let grant = "[gateway.auth.clients.ci]\ntoken = \"${CI_TOKEN}\"\nallow = [\"gitlab\", \"github\"]\n";
        let error = parse(grant).unwrap_err();
        assert!(error.contains("names no configured server"), "{error}");
        // With [fleet], the database may add `gitlab`: accepted here, said once composed.
        let member = parse(&format!(
            "[fleet]\ndatabase_url = \"postgres://wardgate@db/wardgate\"\n\n{grant}"
        ))
        .unwrap();
        assert_eq!(
            member.unmatched_grants(),
            ["client \"ci\"'s allow entry \"gitlab\" names no server this member has"]
        );
        assert!(parse(&grant.replace("\"gitlab\", ", ""))
            .unwrap()
            .unmatched_grants()
            .is_empty());
    }

    #[test]
    fn oauth_needs_an_issuer_and_a_resource_and_scopes_grant() {
        let error =
            parse("[gateway.auth.oauth]\nresource = \"https://m.example/mcp\"\n").unwrap_err();
        assert!(error.contains("no issuer"), "{error}");
        let config = parse(
            "[gateway.auth.oauth]\nissuer = \"https://auth.example\"\nresource = \"https://m.example/mcp\"\n\
             [gateway.auth.oauth.scopes]\n\"mcp:read\" = [\"docs\"]\n",
        )
        .unwrap();
        let oauth = config.gateway.auth.oauth.unwrap();
        assert_eq!(oauth.client_claim, "client_id");
        assert!(matches!(oauth.scopes["mcp:read"], Grant::Only(_)));
    }

    #[test]
    fn two_clients_cannot_share_a_token_and_issuers_elsewhere_need_https() {
        let error = parse(
            "[gateway.auth.clients.a]\ntoken = \"${CI_TOKEN}\"\n[gateway.auth.clients.b]\ntoken = \"${CI_TOKEN}\"\n",
        )
        .unwrap_err();
        assert!(error.contains("the same token"), "{error}");
        assert!(!error.contains("0123456789abcdef-secret"), "{error}");
        let error = parse(
            "[gateway.auth.oauth]\nissuer = \"http://auth.example\"\nresource = \"https://m.example/mcp\"\n",
        )
        .unwrap_err();
        assert!(error.contains("plain http"), "{error}");
        assert!(parse(
            "[gateway.auth.oauth]\nissuer = \"http://127.0.0.1:9000\"\nresource = \"http://127.0.0.1:8080/mcp\"\n"
        )
        .is_ok());
    }

    #[test]
    fn allow_anonymous_is_off_unless_set_and_check_says_what_it_means() {
        let default = parse("").unwrap();
        assert!(!default.gateway.http.allow_anonymous);
        assert!(
            default.summary().contains("refuses to start"),
            "{}",
            default.summary()
        );
        let allowed = parse("[gateway.http]\nallow_anonymous = true\n").unwrap();
        assert!(allowed.gateway.http.allow_anonymous);
        assert!(
            allowed
                .summary()
                .contains("auth: none, allow_anonymous = true"),
            "{}",
            allowed.summary()
        );
        let error = parse("[gateway.http]\nallow_anonymous = \"yes\"\n").unwrap_err();
        assert!(error.contains("true or false"), "{error}");
    }

    #[test]
    fn hosts_and_origins_are_checked() {
        let error = parse("[gateway.http]\nallowed_origins = [\"app.example.com\"]\n").unwrap_err();
        assert!(error.contains("not an origin"), "{error}");
        let error = parse("[gateway.http]\nallowed_hosts = [\"https://x.example\"]\n").unwrap_err();
        assert!(error.contains("not a host name"), "{error}");
        let config = parse(
            "[gateway.http]\nallowed_hosts = [\"MCP.example.com\"]\nallowed_origins = [\"http://localhost:*\"]\nrate_limit = 5\n",
        )
        .unwrap();
        assert_eq!(config.gateway.http.allowed_hosts, ["mcp.example.com"]);
        assert_eq!(config.gateway.http.rate_burst, 10);
    }
}
