//! The settings of a gateway a team exposes: who may reach `/mcp` (`[gateway.http]` hosts and
//! origins), who a client is (`[gateway.auth]`: bearer tokens, OAuth access tokens), what it
//! may see and call (grants), the limits one client may not pass, and the tools a server
//! hides from everyone (`[servers.NAME.tools]`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::Secret;

/// `[gateway.http]`: who may reach `/mcp`, and what one client may hold. Applies to
/// `--listen` only (stdio has one client, the process that started the gateway).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// `Host` values accepted besides the listener's own loopback names (`localhost`,
    /// `127.0.0.1`, `[::1]`) and its address: the DNS names clients use to reach the
    /// gateway, `name` (any port) or `name:port`. `"*"` accepts any host (behind a proxy
    /// that checks it). Default none.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted besides loopback ones (which a loopback listener accepts):
    /// `scheme://host[:port]`, `:*` for any port. A request without `Origin` (not from a
    /// browser page) is not affected. Default none.
    pub allowed_origins: Vec<String>,
    /// The largest request body; a larger one is answered 413. Default 8 MiB.
    pub max_body_bytes: usize,
    /// A session with no request and no open stream for this long is closed. Default 5 min.
    pub session_idle: Duration,
    /// Sessions open at once, all clients together; more are refused with 503. Default 1024.
    pub max_sessions: usize,
    /// Sessions one client (its name, or its address without authentication) may hold
    /// open; more are refused with 429. Default 64.
    pub max_sessions_per_client: usize,
    /// Requests per second one client may send on average; more are answered 429 with
    /// `Retry-After`. 0 turns the limit off. Default 50.
    pub rate_limit: u32,
    /// Requests one client may send at once above its rate. Default twice the rate.
    pub rate_burst: u32,
    /// Whether a listener other machines can reach may serve clients without credentials
    /// when `[gateway.auth]` configures none (as `--allow-anonymous` says). Without it such a
    /// gateway refuses to start. Default false.
    pub allow_anonymous: bool,
    /// Client connections one address (an IPv6 /64 is one) may hold open; more are answered
    /// 503. Default a quarter of the connection cap (256 of 1024); raise it behind a proxy,
    /// where every client has the proxy's address.
    pub max_connections_per_address: Option<usize>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: 8 * 1024 * 1024,
            session_idle: Duration::from_secs(300),
            max_sessions: 1024,
            max_sessions_per_client: 64,
            rate_limit: 50,
            rate_burst: 100,
            allow_anonymous: false,
            max_connections_per_address: None,
        }
    }
}

/// `[gateway.auth]`: how clients of `/mcp` say who they are. With neither tokens nor OAuth,
/// clients are anonymous and see everything (a loopback gateway for one person).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthSettings {
    /// `[gateway.auth.clients.NAME]`, in name order.
    pub clients: Vec<TokenClient>,
    /// `[gateway.auth.oauth]`: OAuth 2.1 access tokens (JWTs) from one issuer.
    pub oauth: Option<OAuthSettings>,
}

impl AuthSettings {
    /// Whether clients must present credentials.
    pub fn required(&self) -> bool {
        !self.clients.is_empty() || self.oauth.is_some()
    }
}

/// A named client with a bearer token of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenClient {
    pub name: String,
    /// From an environment variable or a file; never written in the config in clear.
    pub token: Secret,
    /// Where the token comes from, as it may be shown: `${VAR}` or `file PATH`.
    pub source: String,
    pub grant: Grant,
    /// `tool_discovery`: how this client finds tools; `None`, as `[gateway]` says.
    pub tool_discovery: Option<super::ToolDiscovery>,
}

/// An OAuth 2.1 resource server's settings (the MCP authorization spec): access tokens are
/// JWTs signed by `issuer`'s keys and meant for `resource`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthSettings {
    /// The authorization server (`iss` of every token); its metadata names its keys.
    pub issuer: String,
    /// This gateway's `/mcp` URL as clients reach it: the audience tokens must carry, and
    /// the `resource` of the Protected Resource Metadata.
    pub resource: String,
    /// The issuer's JWKS; default: `jwks_uri` from the issuer's metadata.
    pub jwks_url: Option<String>,
    /// The claim that names the client. Default `client_id`, falling back to `azp`. A
    /// token's identity is its issuer, `sub` and client; without `sub` (or with an empty
    /// one) its client's; naming neither, it is refused (`jwt::Holder`).
    pub client_claim: String,
    /// What a token may use when `scopes` is empty. Default everything.
    pub grant: Grant,
    /// Scope → what a token with that scope may use; a token's grant is the union of its
    /// scopes' grants, and a token with none of them is refused (403 insufficient_scope).
    pub scopes: BTreeMap<String, Grant>,
    /// `tool_discovery`: how clients with access tokens find tools; `None`, as `[gateway]` says.
    pub tool_discovery: Option<super::ToolDiscovery>,
}

/// What a client may see and call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Every server, tool, prompt and resource.
    All,
    /// Only what these patterns name (an empty list: nothing).
    Only(Vec<NamePattern>),
}

/// One entry of an `allow` list: `SERVER` (everything of that server: tools, prompts,
/// resources), `SERVER{separator}NAME` (one tool or prompt, by its listed name) or `*`; `*`
/// in either part matches any run of characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamePattern {
    pub written: String,
    pub server: Glob,
    /// `None`: everything of the matching servers.
    pub item: Option<Glob>,
}

impl NamePattern {
    /// `written`, its server part being the longest of `servers` it begins with (followed by
    /// the separator): server names may end with the separator's first character, so the
    /// first separator in the text is not always the one after the server.
    pub fn parse_known(written: &str, separator: &str, servers: &[&str]) -> NamePattern {
        let known = servers
            .iter()
            .filter(|server| {
                written
                    .strip_prefix(**server)
                    .is_some_and(|rest| rest.starts_with(separator))
            })
            .max_by_key(|server| server.len());
        match known {
            Some(server) => {
                let item = &written[server.len() + separator.len()..];
                NamePattern {
                    written: written.to_owned(),
                    server: Glob::new(server),
                    item: (item != "*").then(|| Glob::new(item)),
                }
            }
            None => NamePattern::parse(written, separator),
        }
    }

    pub fn parse(written: &str, separator: &str) -> NamePattern {
        let (server, item) = match written.split_once(separator) {
            Some((server, item)) => (server, Some(Glob::new(item))),
            None => (written, None),
        };
        let item = item.filter(|item| item.0 != "*");
        NamePattern {
            written: written.to_owned(),
            server: Glob::new(if written == "*" { "*" } else { server }),
            item,
        }
    }
}

impl Grant {
    /// May the client use the tool or prompt listed as `item` of `server`?
    pub fn allows(&self, server: &str, item: &str) -> bool {
        match self {
            Grant::All => true,
            Grant::Only(patterns) => patterns.iter().any(|pattern| {
                pattern.server.matches(server)
                    && pattern.item.as_ref().is_none_or(|glob| glob.matches(item))
            }),
        }
    }

    /// May the client use everything of `server` (its resources, whose URIs name no tool)?
    pub fn allows_server(&self, server: &str) -> bool {
        match self {
            Grant::All => true,
            Grant::Only(patterns) => patterns
                .iter()
                .any(|pattern| pattern.item.is_none() && pattern.server.matches(server)),
        }
    }

    /// May the client use anything of `server` (a tool, a prompt or its resources)? What
    /// decides whether its log messages and the events about it reach the client.
    pub fn allows_server_any(&self, server: &str) -> bool {
        match self {
            Grant::All => true,
            Grant::Only(patterns) => patterns
                .iter()
                .any(|pattern| pattern.server.matches(server)),
        }
    }

    /// Everything either grant allows.
    pub fn union(&self, other: &Grant) -> Grant {
        match (self, other) {
            (Grant::All, _) | (_, Grant::All) => Grant::All,
            (Grant::Only(a), Grant::Only(b)) => Grant::Only(a.iter().chain(b).cloned().collect()),
        }
    }
}

/// `[servers.NAME.tools]`: tools the server has that no client sees or may call, by their
/// original names (`*` matches any run of characters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// `None`: every tool not denied.
    pub allow: Option<Vec<Glob>>,
    pub deny: Vec<Glob>,
}

impl ToolFilter {
    pub fn keeps(&self, tool: &str) -> bool {
        self.allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|glob| glob.matches(tool)))
            && !self.deny.iter().any(|glob| glob.matches(tool))
    }

    pub fn is_empty(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }
}

/// A name pattern where `*` matches any run of characters (and nothing else is special).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(String);

impl Glob {
    pub fn new(pattern: &str) -> Glob {
        Glob(pattern.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn matches(&self, text: &str) -> bool {
        let mut parts = self.0.split('*');
        let first = parts.next().unwrap_or("");
        let Some(mut rest) = text.strip_prefix(first) else {
            return false;
        };
        let parts: Vec<&str> = parts.collect();
        let Some((last, middle)) = parts.split_last() else {
            return rest.is_empty();
        };
        for part in middle {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        rest.len() >= last.len() && rest.ends_with(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_runs_of_anything_at_the_stars() {
        let cases = [
            ("read_*", "read_file", true),
            ("read_*", "write_file", false),
            ("*", "", true),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "acb", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("*_file", "read_file", true),
            ("ab*ba", "aba", false),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(
                Glob::new(pattern).matches(text),
                expected,
                "{pattern} vs {text}"
            );
        }
    }

    #[test]
    fn grants_name_servers_or_their_tools() {
        let grant = Grant::Only(vec![
            NamePattern::parse("files", "__"),
            NamePattern::parse("github__search_*", "__"),
        ]);
        assert!(grant.allows("files", "anything"));
        assert!(grant.allows("github", "search_issues"));
        assert!(!grant.allows("github", "delete_repo"));
        assert!(grant.allows_server("files"));
        assert!(!grant.allows_server("github"));
        let everything = Grant::Only(vec![NamePattern::parse("*", "__")]);
        assert!(everything.allows("x", "y") && everything.allows_server("x"));
        assert!(!Grant::Only(Vec::new()).allows("x", "y"));
    }

    #[test]
    fn tool_filters_allow_then_deny() {
        let filter = ToolFilter {
            allow: Some(vec![Glob::new("read_*"), Glob::new("list")]),
            deny: vec![Glob::new("read_secret*")],
        };
        assert!(filter.keeps("read_file") && filter.keeps("list"));
        assert!(!filter.keeps("read_secrets") && !filter.keeps("write"));
    }
}
