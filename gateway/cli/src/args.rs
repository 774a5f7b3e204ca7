//! Command-line flags.
//!
//! Why this file is long: every subcommand's flags and their help text live here, in one
//! clap tree, so `--help` and the code read the same; splitting it would scatter one tree.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::logging::LogFormat;

/// One MCP endpoint in front of many MCP servers, with recovery you can change at run time.
///
/// Without a subcommand, wardgate serves MCP: over stdio (the way Claude Desktop, Cursor and
/// VS Code launch servers), or over Streamable HTTP at /mcp with --listen.
#[derive(Debug, Parser)]
#[command(name = "wardgate", version, about, long_about)]
pub struct Cli {
    /// Config file: wardgate.toml, or a JSON file with "mcpServers" (Claude Desktop, Cursor) or
    /// "servers" (VS Code). Without it: ./wardgate.toml, then wardgate/wardgate.toml in the
    /// user's config directory ($XDG_CONFIG_HOME or ~/.config), else the built-in demo servers.
    #[arg(
        long,
        short,
        env = "WARDGATE_CONFIG",
        global = true,
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,

    /// Serve MCP over Streamable HTTP on this address (endpoint /mcp) instead of stdio.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,

    /// With --listen: serve https:// with this certificate chain (PEM, the server's
    /// certificate first). Needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key", requires = "listen")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// With --listen: the private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// With --listen on an address other machines can reach and no [gateway.auth]: serve
    /// them anyway, every client anonymous and allowed everything (as [gateway.http]
    /// allow_anonymous = true does). Without it such a gateway refuses to start.
    #[arg(long, requires = "listen")]
    pub allow_anonymous: bool,

    /// Log filter: error, warn, info, debug, trace, or a tracing directive such as
    /// "info,wardgate::upstream::stderr=warn". The default shows the gateway's own news
    /// (what it serves where, status changes, events) and only warnings from the libraries
    /// it uses; "info" or "debug" opens everything. Logs always go to stderr.
    #[arg(
        long,
        env = "WARDGATE_LOG",
        default_value = crate::logging::DEFAULT_FILTER,
        global = true,
        value_name = "FILTER"
    )]
    pub log_level: String,

    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// The admin HTTP API. When serving: serve it on this address (off unless given; a
    /// non-loopback address needs --admin-token). For status, servers, reconnect and the
    /// other operator subcommands: the running gateway's admin address (default: the
    /// WARDGATE_ADMIN environment variable, which a serving gateway does not read).
    #[arg(
        long,
        visible_alias = "admin-url",
        global = true,
        value_name = "HOST:PORT"
    )]
    pub admin: Option<String>,

    /// Bearer token of the admin API: required by the gateway on every admin request when
    /// set, and sent by the operator subcommands. On the command line it shows in the
    /// process list (a warning says so): prefer --admin-token-file or the variable.
    #[arg(
        long,
        env = "WARDGATE_ADMIN_TOKEN",
        hide_env_values = true,
        global = true,
        value_name = "TOKEN"
    )]
    pub admin_token: Option<String>,

    /// A file whose first line is the admin API's bearer token: the way to give it without
    /// showing it in the process list (as --admin-token does). Keep the file mode 0600.
    #[arg(
        long,
        env = "WARDGATE_ADMIN_TOKEN_FILE",
        global = true,
        value_name = "FILE"
    )]
    pub admin_token_file: Option<std::path::PathBuf>,

    /// The fleet database: run as a member of the fleet it holds (as `[fleet] database_url`
    /// does), or, for `wardgate fleet …`, the fleet to manage.
    #[arg(
        long,
        env = "WARDGATE_FLEET_DATABASE_URL",
        hide_env_values = true,
        global = true,
        value_name = "postgres://…"
    )]
    pub fleet_database_url: Option<String>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve one of the built-in demo servers (notes, math) over stdio: what the gateway
    /// runs when it finds no config.
    #[command(hide = true)]
    DemoServer {
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Validate a config file and print what it would run; exits non-zero on error.
    Check {
        /// The config file to check (or give it with --config).
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
    },
    /// Check a WebAssembly recovery policy module, or simulate the decisions it would make.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Manage a fleet of gateways that share one PostgreSQL database (its URL from
    /// --fleet-database-url, WARDGATE_FLEET_DATABASE_URL, or [fleet] of --config).
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// Sign in to servers that use OAuth (`[servers.NAME.oauth]`); tokens are kept in
    /// the state directory (WARDGATE_STATE_DIR, default ~/.local/state/wardgate).
    #[command(subcommand)]
    Auth(AuthCommand),
    #[command(flatten)]
    Operator(OperatorCommand),
}

#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Sign in to SERVER: prints the URL to open (and opens a browser where there is one),
    /// receives the answer on a loopback port, and stores the tokens. A running gateway
    /// sees them and reconnects the server by itself.
    Login {
        server: String,
        /// Do not try to open a browser; only print the URL.
        #[arg(long)]
        no_browser: bool,
    },
    /// Which servers sign in with OAuth, and whether each is signed in.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Forget SERVER's tokens.
    Logout { server: String },
}

/// The operator subcommands: clients of a running gateway's admin API.
#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// Show a running gateway at a glance: readiness, servers, policies (needs --admin).
    Status(Output),
    /// List a running gateway's servers, or show one with its tools (needs --admin).
    Servers {
        /// Show this server in full, with its tools.
        #[arg(value_name = "NAME")]
        name: Option<String>,
        #[command(flatten)]
        output: Output,
    },
    /// Reconnect a server now, resetting its backoff and crash budget (needs --admin).
    Reconnect(ServerAction),
    /// Restart a server: a stdio server's process is stopped and started (needs --admin).
    Restart(ServerAction),
    /// Start a disabled server (needs --admin).
    Enable(ServerAction),
    /// Stop a server and keep it disabled until enabled (needs --admin).
    Disable(ServerAction),
    /// Check that a server answers now (needs --admin).
    HealthCheck(ServerAction),
    /// Print the gateway's recent events; with --follow, keep printing new ones (needs --admin).
    Events {
        /// Keep the stream open and print events as they happen, until interrupted.
        #[arg(long, short)]
        follow: bool,
        #[command(flatten)]
        output: Output,
    },
    /// List the commands the gateway has queued, run or finished (needs --admin).
    Commands(Output),
    /// The gateway's recovery decisions (needs --admin).
    #[command(subcommand)]
    Decisions(DecisionsCommand),
}

#[derive(Debug, Subcommand)]
pub enum DecisionsCommand {
    /// Write the decisions the gateway keeps (the last 1024, each server's recent ones) as
    /// JSON lines, one decision a line with every input it was asked with: what `wardgate
    /// policy simulate FILE --replay` reads.
    Export {
        /// Only this server's decisions.
        #[arg(long, value_name = "NAME")]
        server: Option<String>,
        /// Write to this file instead of stdout.
        #[arg(long, short, value_name = "FILE.jsonl")]
        output: Option<PathBuf>,
    },
}

/// How operator subcommands print.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Output {
    /// Print the admin API's JSON instead of a table, for scripts.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ServerAction {
    /// The server, as named in the config.
    #[arg(value_name = "NAME")]
    pub name: String,
    #[command(flatten)]
    pub output: Output,
}

/// `wardgate policy ...`: tools for policy authors; they never start a gateway.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Load a policy module as the gateway would (compile, link against the world, describe,
    /// self-check) and print what it is; exits 2 naming the file and the reason if it cannot
    /// serve.
    Check {
        /// The policy module: a wardgate:policy component built for wasm32-wasip2.
        #[arg(value_name = "FILE.wasm")]
        module: PathBuf,
        /// A policy parameter, as in `params` under [policies.NAME]; repeat for more.
        #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
        params: Vec<(String, String)>,
    },
    /// Drive a policy module through failure scenarios on simulated time: prints each event,
    /// the policy's decision and the server's status, then the reconnect backoff as a chart.
    ///
    /// Decisions are the module's own answers; what follows from them (statuses, backoff,
    /// crash budget, when a waiting call gives up) comes from the same recovery machine the
    /// gateway runs. Only the world is simulated. Jitter is seeded, so runs are reproducible.
    #[command(after_long_help = crate::simulate::TRACE_HELP)]
    Simulate(SimulateArgs),
    /// Write a ready-to-build policy project: the world's WIT, a small working policy, a
    /// build script and a README with the build, check and deploy commands.
    New {
        /// The policy's name: lowercase letters, digits and dashes; also the directory made.
        #[arg(value_name = "NAME")]
        name: String,
        /// The language to write the policy in.
        #[arg(long, value_enum)]
        lang: PolicyLanguage,
        /// Where to create the project (default: ./NAME).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Reload every policy module of a running gateway from its file now (needs --admin).
    Reload(Output),
    /// Bind a candidate module as a policy's shadow on a running gateway (needs --admin).
    ///
    /// The shadow is asked every question the policy is asked, with the same inputs, on a
    /// thread and a WebAssembly runtime of its own, after the live module answered; it
    /// decides nothing. `policy shadow-report NAME` shows where it would have decided
    /// differently; `policy promote-shadow NAME` makes it live. The file is read by the
    /// gateway, on its machine.
    Shadow {
        /// The policy (as in [policies.NAME], or builtin).
        #[arg(value_name = "NAME")]
        policy: String,
        /// The candidate module.
        #[arg(value_name = "FILE.wasm", required_unless_present = "clear")]
        module: Option<PathBuf>,
        /// Unbind the policy's shadow instead.
        #[arg(long, conflicts_with = "module")]
        clear: bool,
        #[command(flatten)]
        output: Output,
    },
    /// What a policy's shadow would have decided on a running gateway: counts by question
    /// and by verdict pair, and the first disagreements with their inputs (needs --admin).
    ShadowReport {
        #[arg(value_name = "NAME")]
        policy: String,
        #[command(flatten)]
        output: Output,
    },
    /// Make a policy's shadow its live module, in one swap (needs --admin). The module it
    /// replaces is kept for `policy rollback NAME`; the promoted one decides until the
    /// policy's module is loaded from its own file again (the file changes, `policy
    /// reload`, SIGHUP, a config reload that changes the policy) or the gateway restarts.
    PromoteShadow {
        #[arg(value_name = "NAME")]
        policy: String,
        #[command(flatten)]
        output: Output,
    },
    /// Swap a policy's previous module back in: the one its last promotion or reload
    /// replaced (needs --admin).
    Rollback {
        #[arg(value_name = "NAME")]
        policy: String,
        #[command(flatten)]
        output: Output,
    },
}

impl PolicyCommand {
    /// Whether it talks to a running gateway's admin API.
    pub fn needs_gateway(&self) -> bool {
        matches!(
            self,
            PolicyCommand::Reload(_)
                | PolicyCommand::Shadow { .. }
                | PolicyCommand::ShadowReport { .. }
                | PolicyCommand::PromoteShadow { .. }
                | PolicyCommand::Rollback { .. }
        )
    }
}

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// The policy module to simulate.
    #[arg(value_name = "FILE.wasm")]
    pub module: PathBuf,
    /// Also run another module, or `builtin` (the built-in policy), and print both timelines
    /// side by side (for a file named builtin, write ./builtin).
    #[arg(long, value_name = "OTHER.wasm|builtin")]
    pub against: Option<PathBuf>,
    /// The world to simulate.
    #[arg(long, value_enum, default_value_t = ScenarioName::All)]
    pub scenario: ScenarioName,
    /// Replay the world described in a JSON trace file instead (format below).
    #[arg(long, value_name = "FILE.json", conflicts_with = "scenario")]
    pub trace: Option<PathBuf>,
    /// Replay a gateway's recorded decisions instead (`wardgate decisions export`, or
    /// `GET /decisions?format=jsonl`): each recorded question is asked of the module again
    /// and compared with the verdict recorded (or, with --against, the other module's);
    /// then the failures the log saw are played through the recovery machine with both,
    /// to show what the differences would have meant.
    #[arg(long, value_name = "FILE.jsonl", conflicts_with_all = ["scenario", "trace"])]
    pub replay: Option<PathBuf>,
    /// A parameter of the simulated server, as in `params` under [servers.NAME]; repeat for
    /// more. Both policies see it.
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
    pub params: Vec<(String, String)>,
    /// Seed of the simulated jitter.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print the timelines and backoff curves as one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// The languages `wardgate policy new` writes skeletons in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyLanguage {
    /// Rust with wit-bindgen, built by cargo for wasm32-wasip2.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js (jco's componentizer).
    Javascript,
}

/// The built-in scenarios of `wardgate policy simulate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScenarioName {
    /// An HTTP server down 60 s, up 30 s, down 5 min, then up; a tool call every 10 s.
    FlappingHttp,
    /// A stdio server that exits 20 s after every start, for 10 minutes.
    CrashLoop,
    /// A stdio server that exits at every start until an operator reconnects it at 60 s.
    FailedStart,
    /// HTTP 401 on connect, then on a call.
    AuthFailure,
    /// Calls time out and probes fail for 12 minutes, then the server recovers.
    SlowServer,
    /// Pings succeed but every tool call fails (HTTP 500) for 2 minutes: `error`, then back.
    FailingTools,
    /// Every scenario above, one after the other.
    All,
}

/// `KEY=VALUE`, as `--param` takes it.
fn parse_param(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!(
            "expected KEY=VALUE, such as max_crashes=5, not {text:?}"
        )),
    }
}

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Members × servers at a glance: each member's state, and each server's status on it.
    ///
    /// A member is live while its heartbeats (every 5 s) are younger than 15 s, gone when
    /// they are older, and stopped when it shut down cleanly. The servers of a member that
    /// is not live show what it reported last, marked "(gone: last)" or "(stopped: last)";
    /// with --json their `status` is "unknown", the report is in `last_status`, and the
    /// member says `"live": false`.
    Status(FleetOutput),
    /// Import a TOML config file's servers and policy modules into the fleet.
    ///
    /// Every file is read and every server and module checked here before anything is
    /// written. Each [policies.NAME] module is then published as the next version of NAME
    /// for the whole fleet, with the file's params for it (none in the file: none), and
    /// each live member's report is awaited (60 s at most); then each [servers.NAME] is
    /// added or replaced (one that names no policy gets the file's [gateway] policy) and
    /// every live member is told to configure. ${VAR}s stay unexpanded: each member expands
    /// its own. Exits non-zero when a member rejected a module or did not answer.
    Import {
        /// The config file, in TOML (a JSON config cannot be imported).
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// The fleet's servers: list, set (add or change) or remove.
    #[command(subcommand)]
    Servers(FleetServers),
    /// Queue a command (configure, restart, …) for one member, some, or every live member.
    ///
    /// Each member gets a row of its own in the fleet's command table, all with one
    /// correlation id. A member claims its rows at once (LISTEN/NOTIFY, or its poll for
    /// the priority) and runs them on its local queue; a row still pending 5 minutes after
    /// it was queued expires. Without --wait, prints the rows' ids and returns.
    Command {
        /// configure (apply the member's config file with the fleet's servers and modules
        /// again), spawn, kill, restart, reconnect, enable, disable, health_check,
        /// reload_policies.
        #[arg(value_name = "TYPE")]
        kind: String,
        /// The server, for the commands about one (all but configure and reload_policies).
        #[arg(value_name = "SERVER")]
        server: Option<String>,
        /// A member or group (repeatable); default: every live member. A gone or stopped
        /// member gets its row anyway, with a warning: the command runs if the member is
        /// back within 5 minutes, and expires otherwise. A name that is no member and no
        /// group is refused, and nothing is sent.
        #[arg(long = "member", value_name = "NAME")]
        members: Vec<String>,
        /// Its place in each member's queue: immediate starts at once, even beside a
        /// running command; high, normal and low run one at a time, in that order. Members
        /// that miss a notification poll for them every 2, 10, 30 and 60 s.
        #[arg(long, default_value = "immediate", value_parser = ["immediate", "high", "normal", "low"])]
        priority: String,
        /// Wait (up to 6 minutes) until every row has finished, print the rows, and exit
        /// non-zero unless all completed.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        output: FleetOutput,
    },
    /// The fleet's newest 50 command rows, or those of one correlation id.
    ///
    /// A line per row: its id, type and server, member, state (pending, acknowledged,
    /// executing, completed, failed, expired), how many times its member claimed it
    /// (attempts), and its error. --json prints every column.
    Commands {
        /// Only the rows of this correlation id: every member's row of one `fleet command`,
        /// one policy step, or one command of a member's admin API (the newest 50).
        #[arg(long, value_name = "ID")]
        correlation: Option<String>,
        #[command(flatten)]
        output: FleetOutput,
    },
    /// Roll policy modules out: publish (to a canary or the fleet), promote, roll back.
    #[command(subcommand)]
    Policy(FleetPolicy),
}

// How `wardgate fleet …` prints. (Not a doc comment: clap would show it as the description
// of a subcommand that takes this struct and has none of its own.)
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct FleetOutput {
    /// Print JSON instead of text, for scripts (from the fleet database, as the text is; no
    /// admin API is involved).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum FleetServers {
    /// Print the fleet's servers as [servers.NAME] tables (--json: an object of name → TOML).
    List(FleetOutput),
    /// Add or replace a server: its [servers.NAME] table as TOML (`--spec`), or built from
    /// `--command`/`--arg` or `--url`.
    ///
    /// The table is checked as a config file's would be (${VAR}s stay for each member to
    /// expand), stored, and every live member is told to configure, so it starts there now
    /// and other servers are not disturbed; a member that is not live applies it when it
    /// starts or reconnects.
    Set {
        /// The server's name (a member's own file must not have a server of that name).
        #[arg(value_name = "NAME")]
        name: String,
        /// The whole [servers.NAME] table as TOML, e.g. --spec 'url = "https://…"'.
        #[arg(long, value_name = "TOML", conflicts_with_all = ["command", "url"])]
        spec: Option<String>,
        /// A stdio server: the program to run.
        #[arg(long, value_name = "PROGRAM", conflicts_with = "url")]
        command: Option<String>,
        /// An argument of --command (repeatable, in order).
        #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
        args: Vec<String>,
        /// An HTTP server: its MCP endpoint.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
    /// Remove a server from the fleet; every live member is told to configure, which stops
    /// it there. Exits 2 when the fleet has no server of that name.
    Remove {
        /// The server's name.
        #[arg(value_name = "NAME")]
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum FleetPolicy {
    /// Publish a module as the next version of NAME: to the members or groups of
    /// `--canary`, or to the whole fleet. Waits for each member's report.
    ///
    /// The module is loaded here first, as a gateway would, then stored with its sha256
    /// and assigned: to the canary's members (rows of their own, which win over the
    /// fleet's version), or to the whole fleet (a rollout that `rollback` can undo). Then
    /// it waits (60 s at most) for each member told to apply it, and prints what each made
    /// of it: loaded, or rejected with the reason (that member puts its previous module
    /// back). Exits non-zero on a rejection or a member that did not answer.
    Publish {
        /// The policy's name, as servers name it (policy = "NAME").
        #[arg(value_name = "NAME")]
        name: String,
        /// The module: a wardgate:policy component built for wasm32-wasip2.
        #[arg(value_name = "FILE.wasm")]
        module: PathBuf,
        /// Members or groups that get this version first (comma-separated or repeated);
        /// the rest of the fleet keeps its version until `promote`. A gone or stopped one
        /// is assigned it too, with a warning. Default: the whole fleet.
        #[arg(long, value_name = "MEMBER|GROUP", value_delimiter = ',')]
        canary: Vec<String>,
        /// A policy-wide decision parameter (repeat for more). Given ones replace the
        /// previous version's set; without any, the previous version's carry over.
        #[arg(long = "param", value_name = "KEY=VALUE")]
        params: Vec<String>,
        /// Publish without loading the module here first (members still check it).
        #[arg(long)]
        no_local_check: bool,
        /// Publish it as the fleet's shadow of NAME instead: every member serving NAME from
        /// the fleet asks it every question beside its live module and decides nothing.
        /// `fleet policy shadow-report NAME` sums what they would have decided; `fleet
        /// policy promote NAME` rolls it out (and ends the shadow).
        #[arg(long, conflicts_with_all = ["canary", "params"])]
        shadow: bool,
    },
    /// What the fleet's shadow of a policy would have decided, summed over the members'
    /// reports (each member files one every 5 s): counts by question and verdict pair,
    /// per member, and the first disagreements.
    ShadowReport {
        /// The policy's name.
        #[arg(value_name = "NAME")]
        name: String,
        #[command(flatten)]
        output: FleetOutput,
    },
    /// Stop the fleet's shadow of a policy on every member.
    Unshadow {
        /// The policy's name.
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Roll the newest version (the canary's) out to the whole fleet; refused while a
    /// member rejected it or a canary has not reported.
    ///
    /// The canary's own rows give way to the fleet-wide assignment, recorded as a rollout.
    /// Waits for the members' reports as publish does.
    Promote {
        /// The policy's name.
        #[arg(value_name = "NAME")]
        name: String,
        /// Promote even when a member rejected the version or a canary has not reported.
        #[arg(long)]
        force: bool,
    },
    /// Undo the last step: a canary back to the fleet's version, or the fleet back to the
    /// version before.
    ///
    /// While canary rows exist, they are all removed and their members go back to the
    /// fleet-wide version. Otherwise the newest fleet-wide rollout is undone and the fleet
    /// goes back to the version it ran before that one, never to one only a canary ran;
    /// run it again to go further back. Waits for the members' reports as publish does.
    Rollback {
        /// The policy's name.
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Which version each member is assigned, and what each made of each version.
    Status {
        /// The policy's name.
        #[arg(value_name = "NAME")]
        name: String,
        #[command(flatten)]
        output: FleetOutput,
    },
}
