//! Wardgate's configuration: read a TOML or JSON file once, validate it into a `Config`.
//!
//! The pipeline is `text → tree::Node (format-neutral, with line numbers) → raw::RawConfig
//! (keys and types checked) → Config (every rule checked)`, so a `Config` that exists is valid.
//! Values that may hold secrets (`env`, `headers`) are `Secret`s; for everything else that
//! may contain `${VAR}` references, the text as written is kept beside the expanded value so
//! logs, `Debug` and `summary()` never show what a variable holds. The one exception is a
//! policy's `path`, which is shown resolved: it names a module file, not a credential.
//!
//! A crate of its own, with no I/O beyond reading the file: the engine runs what it
//! describes, and `wardgate check` and the fleet's import read it without running anything.
//! [`secrets`] is the registry of secret values the config made, which every log line and
//! error is masked with.

mod digest;
mod duration;
mod env;
mod error;
mod fields;
mod fleet;
mod instances;
mod json;
mod programs;
mod raw;
mod summary;
mod team;
mod telemetry;
mod token_file;
mod tree;
mod validate;

pub mod secrets;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use error::ConfigError;
pub use fleet::{redact_url, FleetSettings};
pub use instances::{
    InstanceOwner, Instances, PerClient, DEFAULT_INSTANCE_IDLE_TIMEOUT, DEFAULT_MAX_INSTANCES,
};
pub use summary::human as human_duration;
pub use team::{
    AuthSettings, Glob, Grant, HttpSettings, NamePattern, OAuthSettings, TokenClient, ToolFilter,
};
pub use telemetry::{OtlpProtocol, ParentRoot, Sampler, Telemetry};
pub use token_file::{read_token_file, TokenFileError};

/// A validated configuration: every server has exactly one transport, every `${VAR}` has been
/// expanded, every name is usable in namespaced tool names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The file this was read from (as given to `parse`; `load` makes it absolute).
    pub source: PathBuf,
    pub gateway: GatewaySettings,
    /// Keyed by server name, which equals `ServerConfig::name`.
    pub servers: BTreeMap<String, ServerConfig>,
    /// Recovery policy modules, keyed by name, which equals `PolicyConfig::name`. Every
    /// policy a server or the gateway names is here, except `builtin`.
    pub policies: BTreeMap<String, PolicyConfig>,
    /// Shadow modules (`[policies.NAME] shadow`), keyed by policy name: each is asked every
    /// question its policy is asked and decides nothing. Apart from `policies`, so that
    /// binding or changing a shadow never rebinds (restarts) the policy's servers.
    pub shadows: BTreeMap<String, PathBuf>,
    /// `[fleet]`: `Some` when this gateway is a member of a fleet (see `FleetSettings`).
    pub fleet: Option<FleetSettings>,
}

/// The name of the native policy: usable in `policy = ...`, never defined as a module.
pub const BUILTIN_POLICY: &str = "builtin";

/// One `[policies.NAME]` table: a WebAssembly recovery policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyConfig {
    /// `[A-Za-z0-9_-]+`, never `builtin`.
    pub name: String,
    /// The module file, `${VAR}`-expanded; absolute when the config path was absolute
    /// (relative paths resolve against the config file's directory). Whether it exists is
    /// not checked here: the gateway reports a missing module when loading it and keeps the
    /// builtin policy.
    pub path: PathBuf,
    /// Policy-wide decision parameters, each value as its text; a server's own `params`
    /// override them.
    pub params: BTreeMap<String, String>,
}

/// The `[gateway]` table (or the `"gateway"` object in JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewaySettings {
    /// Joins server and tool names: `{server}{separator}{tool}`. Default `"__"`.
    pub separator: String,
    /// How long a request may wait for its answer; progress notifications restart it. Default 60 s.
    pub request_timeout: Duration,
    /// Spawn or connect, `initialize`, and the first discovery. Default 30 s.
    pub startup_timeout: Duration,
    /// How long catalogue lists (`tools/list`, ...) wait for servers that are starting for
    /// the first time (or were just added or enabled) to settle: online, or failed. Calls
    /// to such a server wait for it within their own timeout. Zero turns the wait off
    /// (clients then learn of late servers from `list_changed` only). Default 10 s.
    pub startup_wait: Duration,
    /// How long to wait after closing a child's stdin before SIGTERM (and for a closing
    /// connection to finish). Default 3 s.
    pub shutdown_grace: Duration,
    /// How long to wait after SIGTERM before SIGKILL, so a server can flush what it was
    /// writing. Default 10 s.
    pub kill_grace: Duration,
    /// List tools of servers that are not online (they fail when called). Default false.
    pub list_unavailable_tools: bool,
    /// How clients find tools: every tool in `tools/list` (the default), or two tools that
    /// search and call them (for gateways with many servers). A client of `--listen` may
    /// have its own (`[gateway.auth.clients.NAME] tool_discovery`, `[gateway.auth.oauth]`).
    pub tool_discovery: ToolDiscovery,
    /// Add the MCP tools `wardgate{separator}list_servers` and
    /// `wardgate{separator}reconnect_server`, so an agent can see server health and force a
    /// reconnect. Default false.
    pub expose_admin_tools: bool,
    /// `[gateway] policy`: the policy of servers that name none. `None`, or
    /// `Some("builtin")`, is the native policy.
    pub default_policy: Option<String>,
    /// `[gateway] max_instances`: per-client instances of all servers at most. Default 64.
    pub max_instances: usize,
    /// `[gateway.http]`: hosts, origins and limits of `--listen`.
    pub http: HttpSettings,
    /// `[gateway.auth]`: who clients of `--listen` are, and what each may use.
    pub auth: AuthSettings,
    /// `[gateway.telemetry]` with the `OTEL_*` variables: `None` when telemetry is off.
    pub telemetry: Option<Telemetry>,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        GatewaySettings {
            separator: "__".to_owned(),
            request_timeout: Duration::from_secs(60),
            startup_timeout: Duration::from_secs(30),
            startup_wait: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(3),
            kill_grace: Duration::from_secs(10),
            list_unavailable_tools: false,
            tool_discovery: ToolDiscovery::List,
            expose_admin_tools: false,
            default_policy: None,
            max_instances: 64,
            http: HttpSettings::default(),
            auth: AuthSettings::default(),
            telemetry: None,
        }
    }
}

/// How a client finds the tools of the servers behind the gateway.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolDiscovery {
    /// `tools/list` lists every tool of every server the client may use.
    #[default]
    List,
    /// `tools/list` lists two tools instead: `discover_tools`, which searches the tools by
    /// words and server and describes them on demand, and `call_tool`, which calls one by
    /// name. What a client pays in context stays the same however many servers there are.
    Search,
}

impl ToolDiscovery {
    /// The mode as the config writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolDiscovery::List => "list",
            ToolDiscovery::Search => "search",
        }
    }
}

/// One upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// `[A-Za-z0-9_-]+`, never containing the gateway separator.
    pub name: String,
    pub transport: TransportConfig,
    /// Overrides `GatewaySettings::startup_timeout` for this server.
    pub startup_timeout: Option<Duration>,
    /// Overrides `GatewaySettings::request_timeout` for this server.
    pub request_timeout: Option<Duration>,
    /// `relist_interval`: how often the gateway lists the server's tools, prompts and
    /// resources again on its own, to pick up changes it did not announce. `None`: every
    /// [`DEFAULT_RELIST_INTERVAL`] unless the server declares `tools.listChanged`;
    /// `Some(ZERO)`: never. See [`ServerConfig::effective_relist_interval`].
    pub relist_interval: Option<Duration>,
    /// False for `enabled = false` (TOML) or `"disabled": true` (JSON): the server keeps a
    /// status slot but is never started.
    pub enabled: bool,
    /// This server's policy: a key of `Config::policies` or `"builtin"`. `None` → the
    /// gateway's default. See `effective_policy`.
    pub policy: Option<String>,
    /// This server's decision parameters, each value as its text; they override the
    /// policy's own `params`.
    pub params: BTreeMap<String, String>,
    /// `[servers.NAME.tools]`: tools hidden from every client.
    pub tools: ToolFilter,
    /// What goes before the separator in the names this server's tools and prompts are
    /// listed under, and the namespace of its resource URIs: the server's name unless
    /// `prefix` says otherwise; empty for a server listed under its own names and URIs.
    pub prefix: String,
    /// `[servers.NAME.rename]`: a tool's or prompt's original name → the whole name it is
    /// listed under (no prefix is added to it).
    pub rename: BTreeMap<String, String>,
    /// `instances`: one process (or connection) shared by every client, or one per client.
    pub instances: Instances,
}

/// How often a server that does not announce list changes (`tools.listChanged`) is listed
/// again, unless its `relist_interval` says otherwise.
pub const DEFAULT_RELIST_INTERVAL: Duration = Duration::from_secs(300);

impl ServerConfig {
    /// How often to list the server again on a connection whose server declared
    /// `tools.listChanged` (`announces`) or not; `None`: never.
    pub fn effective_relist_interval(&self, announces: bool) -> Option<Duration> {
        match self.relist_interval {
            Some(interval) if interval.is_zero() => None,
            Some(interval) => Some(interval),
            None if announces => None,
            None => Some(DEFAULT_RELIST_INTERVAL),
        }
    }

    /// This server's startup timeout, falling back to the gateway's.
    pub fn effective_startup_timeout(&self, gateway: &GatewaySettings) -> Duration {
        self.startup_timeout.unwrap_or(gateway.startup_timeout)
    }

    /// This server's request timeout, falling back to the gateway's.
    pub fn effective_request_timeout(&self, gateway: &GatewaySettings) -> Duration {
        self.request_timeout.unwrap_or(gateway.request_timeout)
    }

    /// The policy module that decides for this server: its own `policy`, else the gateway's
    /// default. `None` means the native builtin policy (named `"builtin"` or not named at
    /// all); `Some(name)` is a key of `Config::policies`.
    pub fn effective_policy<'a>(&'a self, gateway: &'a GatewaySettings) -> Option<&'a str> {
        self.policy
            .as_deref()
            .or(gateway.default_policy.as_deref())
            .filter(|&name| name != BUILTIN_POLICY)
    }
}

/// How to reach a server. Values are already `${VAR}`-expanded; the `shown*` fields hold what
/// may be displayed instead (see `ShownCommand`).
#[derive(Clone, PartialEq, Eq)]
pub enum TransportConfig {
    /// A child process speaking MCP over stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Added to the minimal environment a server gets (see `upstream::stdio::child_env`).
        env: BTreeMap<String, Secret>,
        /// `inherit_env = true`: the gateway's whole environment instead of the minimal one
        /// (still without the gateway's own `WARDGATE_*` settings). Default false.
        inherit_env: bool,
        /// Absolute when the config path was absolute (relative paths resolve against the
        /// config file's directory). `None`: inherit the gateway's working directory.
        cwd: Option<PathBuf>,
        shown: ShownCommand,
    },
    /// MCP Streamable HTTP.
    StreamableHttp {
        url: String,
        headers: BTreeMap<String, Secret>,
        /// Signs in with OAuth: tokens from `wardgate auth login`, kept in the state
        /// directory, refreshed by the gateway.
        oauth: Option<OAuthClient>,
        /// `url` as it may be displayed: see `ShownCommand`.
        shown_url: String,
    },
    /// The legacy HTTP+SSE transport.
    Sse {
        url: String,
        headers: BTreeMap<String, Secret>,
        /// `url` as it may be displayed: see `ShownCommand`.
        shown_url: String,
    },
}

/// A stdio server's command line as it may be displayed: each part is the expanded value when
/// it held no `${VAR}` reference, and the text as written in the config when it did, so
/// nothing taken from the environment is ever shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownCommand {
    pub command: String,
    pub args: Vec<String>,
    pub cwd: Option<String>,
}

impl TransportConfig {
    /// The transport's name as written in TOML: `"stdio"`, `"streamable-http"` or `"sse"`.
    pub fn kind(&self) -> &'static str {
        match self {
            TransportConfig::Stdio { .. } => "stdio",
            TransportConfig::StreamableHttp { .. } => "streamable-http",
            TransportConfig::Sse { .. } => "sse",
        }
    }

    /// The command line or URL, safe to log: `${VAR}` references are shown, not their values.
    pub fn describe(&self) -> String {
        match self {
            TransportConfig::Stdio { shown, .. } => summary::command_line(shown),
            TransportConfig::StreamableHttp { shown_url, .. }
            | TransportConfig::Sse { shown_url, .. } => shown_url.clone(),
        }
    }
}

// Hand-written so `{:?}` of a config never prints an expanded `${VAR}`: the shown forms stand
// in for command, args, cwd and url, and `Secret` redacts itself.
impl fmt::Debug for TransportConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportConfig::Stdio { env, shown, .. } => f
                .debug_struct("Stdio")
                .field("command", &shown.command)
                .field("args", &shown.args)
                .field("env", env)
                .field("cwd", &shown.cwd)
                .finish(),
            TransportConfig::StreamableHttp {
                headers,
                shown_url,
                oauth,
                ..
            } => f
                .debug_struct("StreamableHttp")
                .field("url", shown_url)
                .field("headers", headers)
                .field("oauth", oauth)
                .finish(),
            TransportConfig::Sse {
                headers, shown_url, ..
            } => f
                .debug_struct("Sse")
                .field("url", shown_url)
                .field("headers", headers)
                .finish(),
        }
    }
}

/// The enterprise identity provider of `grant = "enterprise_managed"`.
#[derive(Clone, PartialEq, Eq)]
pub struct EnterpriseIdp {
    pub issuer: String,
    pub token_endpoint: String,
    pub client_id: String,
    pub client_secret: Option<Secret>,
    /// Where the user's ID token is: read at every exchange, so whatever keeps the user's
    /// SSO session (and renews the token) can replace the file while the gateway runs.
    pub id_token_file: PathBuf,
}

impl fmt::Debug for EnterpriseIdp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnterpriseIdp")
            .field("issuer", &self.issuer)
            .field("token_endpoint", &self.token_endpoint)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret)
            .field("id_token_file", &self.id_token_file)
            .finish()
    }
}

impl OAuthClient {
    /// The gateway gets its tokens itself (client credentials, or enterprise-managed):
    /// no one signs in with `auth login`.
    pub fn machine(&self) -> bool {
        self.client_credentials || self.enterprise.is_some()
    }
}

/// A private key the gateway signs its client assertions with (`client_key_file`).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientKey {
    /// The PEM file's contents: never shown.
    pub pem: Secret,
    /// Where it was read from, as it may be shown.
    pub path: PathBuf,
    pub algorithm: KeyAlgorithm,
}

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientKey")
            .field("path", &self.path)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

/// The JWS algorithm of a client assertion (`client_key_algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlgorithm {
    Rs256,
    Rs384,
    Rs512,
    Es256,
    Es384,
}

impl KeyAlgorithm {
    /// Every algorithm, by the name the config writes.
    pub const ALL: [(&'static str, KeyAlgorithm); 5] = [
        ("RS256", KeyAlgorithm::Rs256),
        ("RS384", KeyAlgorithm::Rs384),
        ("RS512", KeyAlgorithm::Rs512),
        ("ES256", KeyAlgorithm::Es256),
        ("ES384", KeyAlgorithm::Es384),
    ];

    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, algorithm)| *algorithm == self)
            .map_or("ES256", |(name, _)| name)
    }
}

/// `[servers.NAME.oauth]`: how the gateway is known to the server's authorization server.
/// Without a `client_id`, `wardgate auth login` registers one (dynamic client
/// registration).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct OAuthClient {
    pub client_id: Option<String>,
    /// `client_id` as it may be displayed: see `ShownCommand`.
    pub shown_client_id: Option<String>,
    pub client_secret: Option<Secret>,
    /// `client_key_file`: the client authenticates to the token endpoint with a JWT signed
    /// by this private key (`private_key_jwt`, RFC 7523) instead of a secret.
    pub client_key: Option<Box<ClientKey>>,
    /// Asked for at sign-in; empty: what the server's metadata suggests.
    pub scopes: Vec<String>,
    /// `grant = "client_credentials"`: the gateway gets its tokens itself with `client_id`
    /// and `client_secret` (a machine-to-machine server; no one signs in). Otherwise the
    /// authorization code grant of `wardgate auth login`.
    pub client_credentials: bool,
    /// `grant = "enterprise_managed"` (SEP-990, cross-app access): the gateway exchanges
    /// an enterprise IdP's ID token for an identity assertion (ID-JAG) at the IdP, and that
    /// for an access token at the server's authorization server; no one signs in here.
    pub enterprise: Option<Box<EnterpriseIdp>>,
    /// The command that signs the server in, ready to paste: `wardgate --config FILE auth
    /// login NAME` with this config's absolute path, quoted for a shell.
    pub login: String,
}

// Hand-written for the same reason as `TransportConfig`'s: `client_id` as written.
impl fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthClient")
            .field("client_id", &self.shown_client_id)
            .field("client_secret", &self.client_secret)
            .field("client_key", &self.client_key)
            .field("scopes", &self.scopes)
            .field("client_credentials", &self.client_credentials)
            .field("enterprise", &self.enterprise)
            .field("login", &self.login)
            .finish()
    }
}

impl OAuthClient {
    /// The sign-in command of `server` in the config at `source`.
    pub fn login_command(source: &Path, server: &str) -> String {
        let source = std::path::absolute(source).unwrap_or_else(|_| source.to_owned());
        let quote = |word: &str| {
            shlex::try_quote(word)
                .map_or_else(|_| format!("{word:?}"), |quoted| quoted.into_owned())
        };
        format!(
            "wardgate --config {} auth login {}",
            quote(&source.to_string_lossy()),
            quote(server)
        )
    }
}

/// A value that must never reach a log: `Debug` and `Display` print `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret value; from now on the log masks it (see [`crate::secrets`]).
    pub fn new(value: impl Into<String>) -> Secret {
        let value = value.into();
        crate::secrets::remember(&value);
        Secret(value)
    }

    /// The value itself, for the one place that needs it (a child's environment, a header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Config {
    /// The `allow` entries that match no configured server, each as a sentence naming the
    /// client and the entry. Empty but on a fleet member, whose file may name servers the
    /// fleet's database adds (checked again once the config is composed).
    pub fn unmatched_grants(&self) -> Vec<String> {
        let mut unmatched = Vec::new();
        let mut check = |who: String, grant: &Grant| {
            if let Grant::Only(patterns) = grant {
                for pattern in patterns {
                    if !self
                        .servers
                        .keys()
                        .any(|server| pattern.server.matches(server))
                    {
                        unmatched.push(format!(
                            "{who}'s allow entry {:?} names no server this member has",
                            pattern.written
                        ));
                    }
                }
            }
        };
        for client in &self.gateway.auth.clients {
            check(format!("client {:?}", client.name), &client.grant);
        }
        if let Some(oauth) = &self.gateway.auth.oauth {
            check("[gateway.auth.oauth]".to_owned(), &oauth.grant);
            for (scope, grant) in &oauth.scopes {
                check(format!("scope {scope:?}"), grant);
            }
        }
        unmatched
    }

    /// Reads `path` (`.json` → JSON, anything else → TOML), expanding `${VAR}` from the
    /// process environment. The path is made absolute first, so relative `cwd`s stay right
    /// whatever the gateway's working directory later becomes.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let source = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let text = std::fs::read_to_string(&source).map_err(|error| {
            ConfigError::at("", None, format!("cannot read the config file: {error}"), {
                "check that the file exists, is readable and is UTF-8 text"
            })
            .in_file(&source)
        })?;
        // A variable that is set but not UTF-8 reads as unset: it cannot be passed on as text.
        Config::parse(&source, &text, &|name| std::env::var(name).ok())
    }

    /// Parses `text` as if read from `path` (whose extension picks the format and whose
    /// directory anchors relative `cwd`s), looking variables up with `env`.
    pub fn parse(
        path: &Path,
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        // Editors on Windows like to start files with a byte-order mark; neither parser wants it.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let is_json = path
            .extension()
            .is_some_and(|extension| extension.eq_ignore_ascii_case("json"));
        let parsed = if is_json {
            json::parse(text).and_then(|root| raw::read(&root, raw::Dialect::Json))
        } else {
            tree::parse_toml(text).and_then(|root| raw::read(&root, raw::Dialect::Toml))
        };
        parsed
            .and_then(|(raw, errors)| validate::validate(raw, errors, path, env))
            .map_err(|error| error.in_file(path))
    }

    /// What would run, one block per server; names of env variables and headers, never values.
    pub fn summary(&self) -> String {
        summary::render(self)
    }
}
