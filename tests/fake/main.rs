//! `wardgate-fake`: a scripted fake MCP server over stdio, Streamable HTTP or legacy SSE.

mod arguments;
mod catalog;
mod http;
mod server;
mod sse;
mod state;
mod tasks;
mod tools;

use std::{io::Write, num::NonZeroUsize, sync::Arc, time::Duration};

use clap::{Parser, ValueEnum};
use rmcp::{transport::stdio_pipes, ServiceExt};

use crate::{
    server::FakeServer,
    state::{Faults, Shared},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Transport {
    Stdio,
    Http,
    Sse,
}

/// A scripted fake MCP server. In http/sse mode it prints
/// `LISTENING http://127.0.0.1:PORT` on stdout once bound; diagnostics go to stderr.
#[derive(Debug, Parser)]
#[command(name = "wardgate-fake", version)]
struct Args {
    /// stdio, http (Streamable HTTP at /mcp) or sse (GET /sse + POST /messages).
    #[arg(long, value_enum, default_value_t = Transport::Stdio)]
    transport: Transport,
    /// Port on 127.0.0.1 for http/sse; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// serverInfo name, and the prefix of texts and resource URIs.
    #[arg(long, default_value = "fake")]
    name: String,
    /// Offer the tools of this JSON file (`{"tools": [...]}`, a real server's `tools/list`
    /// as `tests/fixtures/catalogues` keeps them) instead of the built-in ones; a call to
    /// one answers with its name and arguments.
    #[arg(long, value_name = "FILE")]
    tools_file: Option<std::path::PathBuf>,
    /// Adds echo-like tools tool_0..tool_{N-1}.
    #[arg(long, value_name = "N", default_value_t = 0)]
    tools_count: usize,
    /// Also offer an MCP App: the resource `ui://NAME/view.html` (text/html;profile=mcp-app)
    /// and the tool `show_view`, whose `_meta` points at it.
    #[arg(long)]
    app: bool,
    /// Paginate tools/prompts/resources lists with this many items per page.
    #[arg(long, value_name = "N")]
    page_size: Option<NonZeroUsize>,
    /// The (N+1)th tools/call exits the process with code 3 before answering.
    #[arg(long, value_name = "N")]
    crash_after: Option<u64>,
    /// The first tools/call of all the processes started with this FILE exits with code 3
    /// before answering (it creates FILE first, so the restarted process answers).
    #[arg(long, value_name = "FILE")]
    crash_once: Option<std::path::PathBuf>,
    /// From the (N+1)th tools/call on, calls are never answered (until cancelled).
    #[arg(long, value_name = "N")]
    hang_after: Option<u64>,
    /// Every tools/call waits this many milliseconds first.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    delay_ms: u64,
    /// Wait this many milliseconds before serving (stdio: before reading; http/sse: before binding).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    start_delay_ms: u64,
    /// Exit at once with CODE, before reading anything.
    #[arg(long, value_name = "CODE")]
    exit_on_start: Option<i32>,
    /// Never answer initialize.
    #[arg(long)]
    hang_on_initialize: bool,
    /// stdio: write lines that are not valid MCP (not JSON, 100,000-deep nesting, invalid
    /// UTF-8, a 4 MiB string, wrong shapes) to stdout before serving.
    #[arg(long)]
    malformed_output: bool,
    /// Also offer the tool `deep`, which answers with a result nested `depth` levels deep.
    /// stdio: (default 100,000) written straight to stdout, and never answers otherwise;
    /// http/sse: (default 1,000, at most 2,000) as its ordinary result.
    #[arg(long)]
    deep_answer: bool,
    /// http: answer a request with a JSON body rather than an event stream where rmcp can
    /// (2026-07-28 and stateless requests whose handler sends nothing before its answer).
    #[arg(long)]
    json_response: bool,
    /// With `--protocol modern`: the tasks extension (`io.modelcontextprotocol/tasks`) and
    /// the tools the conformance suite's `tasks-*` scenarios call (`greet`, `slow_compute`,
    /// `failing_job`, `protocol_error_job`, `confirm_delete`, `multi_input`,
    /// `test_tool_with_task`).
    #[arg(long)]
    tasks: bool,
    /// Answer ping with method-not-found.
    #[arg(long)]
    no_ping: bool,
    /// Declare no `tools.listChanged`, and change tools (`add_tool`) without telling.
    #[arg(long)]
    silent_list_changes: bool,
    /// While FILE exists, answer `tools/list` with an internal error (a server whose
    /// listing breaks while it still answers everything else).
    #[arg(long, value_name = "FILE")]
    fail_lists_file: Option<std::path::PathBuf>,
    /// While FILE exists, `tools/list` waits (a slow re-discovery) and answers once it is
    /// gone; the tool `lists` says how many lists were asked for and how many wait.
    #[arg(long, value_name = "FILE")]
    hang_lists_file: Option<std::path::PathBuf>,
    /// http/sse: answer every HTTP request with this status (401 adds `WWW-Authenticate: Bearer`).
    #[arg(long, value_name = "CODE", value_parser = parse_status)]
    http_status: Option<::http::StatusCode>,
    /// http/sse: while FILE exists, answer every HTTP request with the status written in it
    /// (a server that starts refusing mid-run: revoked credentials, a failing backend).
    #[arg(long, value_name = "FILE")]
    http_status_file: Option<std::path::PathBuf>,
    /// Which protocol revisions to speak: handshake (default; discover is method-not-found),
    /// handshake-strict (discover answered with -32022), modern (2026-07-28 only) or future
    /// (only a revision no client speaks).
    #[arg(long, value_enum, default_value_t = state::Protocol::Handshake)]
    protocol: state::Protocol,
    /// http: forget all sessions once N tools/calls have finished (old session ids get 404).
    #[arg(long, value_name = "N")]
    expire_session_after: Option<u64>,
    /// Spawn `sleep 1000` as a child in this process group and print its pid on stderr.
    #[arg(long)]
    spawn_grandchild: bool,
    /// Print a line on stderr every 200 ms.
    #[arg(long)]
    stderr_chatter: bool,
    /// Ignore SIGTERM, so only SIGKILL stops the process.
    #[arg(long)]
    ignore_sigterm: bool,
}

fn parse_status(text: &str) -> Result<::http::StatusCode, String> {
    let code: u16 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    ::http::StatusCode::from_u16(code).map_err(|_| format!("{code} is not an HTTP status"))
}

impl Args {
    fn shared(&self) -> Shared {
        let faults = Faults {
            crash_after: self.crash_after,
            crash_once: self.crash_once.clone(),
            hang_after: self.hang_after,
            call_delay: Duration::from_millis(self.delay_ms),
            hang_on_initialize: self.hang_on_initialize,
            no_ping: self.no_ping,
            silent_list_changes: self.silent_list_changes,
            fail_lists_file: self.fail_lists_file.clone(),
            hang_lists_file: self.hang_lists_file.clone(),
            http_status: self.http_status,
            http_status_file: self.http_status_file.clone(),
            expire_sessions_after: self.expire_session_after,
        };
        Shared::new(self.name.clone(), faults, self.tools_count, self.page_size)
            .with_app(self.app)
            .with_protocol(self.protocol)
            .with_deep_answer(self.deep_answer.then_some(match self.transport {
                Transport::Stdio => state::Deep::Written,
                Transport::Http | Transport::Sse => state::Deep::Returned,
            }))
            .with_json_response(self.json_response)
            .with_tasks(self.tasks)
            .with_fixture_tools(self.tools_file.as_deref().map(read_tools_file))
    }
}

/// The tools of a `--tools-file`; a file that cannot be read ends the fake with the reason.
fn read_tools_file(path: &std::path::Path) -> Vec<rmcp::model::Tool> {
    let read = std::fs::read_to_string(path)
        .map_err(|error| error.to_string())
        .and_then(|text| {
            serde_json::from_str::<serde_json::Value>(&text).map_err(|e| e.to_string())
        })
        .and_then(|file| {
            serde_json::from_value(file["tools"].clone()).map_err(|error| error.to_string())
        });
    read.unwrap_or_else(|error| {
        eprintln!("wardgate-fake: --tools-file {}: {error}", path.display());
        std::process::exit(2)
    })
}

fn main() {
    let args = Args::parse();
    let shared = Arc::new(args.shared());
    shared.say(format!("pid={} started", std::process::id()));
    if let Some(code) = args.exit_on_start {
        shared.say(format!("exiting with code {code} (--exit-on-start)"));
        std::process::exit(code);
    }
    let outcome = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(run(&args, shared.clone())),
        Err(error) => Err(format!("cannot start the tokio runtime: {error}").into()),
    };
    let code = match outcome {
        Ok(()) => 0,
        Err(error) => {
            shared.say(format!("failed: {error}"));
            1
        }
    };
    // Exit without dropping the runtime: a blocking stdin read would hold it up.
    std::process::exit(code)
}

async fn run(args: &Args, shared: Arc<Shared>) -> Result<(), Box<dyn std::error::Error>> {
    if args.spawn_grandchild {
        spawn_grandchild(&shared)?;
    }
    if args.ignore_sigterm {
        // SAFETY: installs SIG_IGN, no handler code runs; done after spawning the
        // grandchild so it does not inherit the ignored disposition.
        unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
        shared.say("ignoring SIGTERM");
    }
    if args.stderr_chatter {
        tokio::spawn(chatter(shared.clone()));
    }
    report_ignored_flags(args, &shared);
    if args.start_delay_ms > 0 {
        shared.say(format!(
            "waiting {} ms before serving (--start-delay-ms)",
            args.start_delay_ms
        ));
        tokio::time::sleep(Duration::from_millis(args.start_delay_ms)).await;
    }
    match args.transport {
        Transport::Stdio => serve_stdio(args, shared).await,
        Transport::Http => {
            let listener = http::bind(args.port).await?;
            http::run(shared, listener).await;
            Ok(())
        }
        Transport::Sse => {
            let listener = http::bind(args.port).await?;
            sse::run(shared, listener).await;
            Ok(())
        }
    }
}

async fn serve_stdio(args: &Args, shared: Arc<Shared>) -> Result<(), Box<dyn std::error::Error>> {
    if args.malformed_output {
        // Lines no MCP client should trip over: not JSON, nesting past any parser's depth,
        // invalid UTF-8, a large string, wrong shapes. (Not an answer to a request never made:
        // before the initialize answer, rmcp's handshake fails on it, and the server's start
        // counts as a crash.)
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "this is not json")?;
        writeln!(stdout, "{}{}", "[".repeat(100_000), "]".repeat(100_000))?;
        stdout.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\xfe\"}\n")?;
        writeln!(
            stdout,
            r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":"{}"}}}}"#,
            "x".repeat(4 * 1024 * 1024)
        )?;
        writeln!(
            stdout,
            r#"{{"jsonrpc":"2.0","id":{{"a":1}},"result":null}}"#
        )?;
        writeln!(
            stdout,
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":7}}"#
        )?;
        stdout.flush()?;
    }
    let running = FakeServer::new(shared.clone()).serve(stdio_pipes()).await?;
    let reason = running.waiting().await?;
    shared.say(format!("stdio session ended: {reason:?}"));
    Ok(())
}

/// Flags that mean nothing for the chosen transport are reported, not silently dropped.
fn report_ignored_flags(args: &Args, shared: &Shared) {
    let (transport, ignored) = match args.transport {
        Transport::Stdio => (
            "stdio",
            vec![
                ("--port", args.port != 0),
                ("--http-status", args.http_status.is_some()),
                ("--json-response", args.json_response),
                (
                    "--expire-session-after",
                    args.expire_session_after.is_some(),
                ),
            ],
        ),
        Transport::Http => ("http", vec![("--malformed-output", args.malformed_output)]),
        Transport::Sse => (
            "sse",
            vec![
                ("--malformed-output", args.malformed_output),
                ("--json-response", args.json_response),
                (
                    "--expire-session-after",
                    args.expire_session_after.is_some(),
                ),
            ],
        ),
    };
    for (flag, _) in ignored.into_iter().filter(|(_, given)| *given) {
        shared.say(format!(
            "ignores {flag}: it has no effect with --transport {transport}"
        ));
    }
}

/// The grandchild keeps no protocol pipe open, so it cannot hold the client's reads open.
fn spawn_grandchild(shared: &Shared) -> std::io::Result<()> {
    let child = std::process::Command::new("sleep")
        .arg("1000")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    shared.say(format!("grandchild pid={}", child.id()));
    // Deliberately not waited for: it must outlive us unless the whole group is killed.
    drop(child);
    Ok(())
}

async fn chatter(shared: Arc<Shared>) {
    let mut ticker = tokio::time::interval(Duration::from_millis(200));
    for line in 1u64.. {
        ticker.tick().await;
        shared.say(format!("chatter {line}"));
    }
}
