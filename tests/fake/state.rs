//! State shared by the sessions of one fake process: faults, counters, tools, subscriptions.

use std::{
    num::NonZeroUsize,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Mutex, MutexGuard, PoisonError,
    },
    time::Duration,
};

use http::StatusCode;
use rmcp::{Peer, RoleServer};

/// Faults chosen on the command line; fixed for the life of the process.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// The (N+1)th `tools/call` exits the process with code 3 before answering.
    pub crash_after: Option<u64>,
    /// The first `tools/call` of all processes that share this file crashes (see `--crash-once`).
    pub crash_once: Option<std::path::PathBuf>,
    /// From the (N+1)th `tools/call` on, calls are never answered.
    pub hang_after: Option<u64>,
    /// Every `tools/call` waits this long before doing anything.
    pub call_delay: Duration,
    /// `initialize` is never answered.
    pub hang_on_initialize: bool,
    /// `ping` is answered with method-not-found.
    pub no_ping: bool,
    /// No `tools.listChanged` is declared, and `add_tool` tells no one.
    pub silent_list_changes: bool,
    /// While this file exists, `tools/list` is answered with an internal error.
    pub fail_lists_file: Option<std::path::PathBuf>,
    /// While this file exists, `tools/list` waits; the tool `lists` counts them.
    pub hang_lists_file: Option<std::path::PathBuf>,
    /// HTTP modes: every HTTP request is answered with this status.
    pub http_status: Option<StatusCode>,
    /// HTTP modes: while this file exists, every HTTP request is answered with its status.
    pub http_status_file: Option<std::path::PathBuf>,
    /// Streamable HTTP: all sessions are forgotten once this many `tools/call` have finished.
    pub expire_sessions_after: Option<u64>,
}

/// How the tool `deep` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deep {
    /// Written straight to stdout by hand (stdio), nested as deep as asked.
    Written,
    /// As the tool's ordinary result, which rmcp serializes (at most [`DEEP_RETURNED_MAX`]).
    Returned,
}

/// The deepest answer `deep` returns as its result: serde_json serializes by recursion.
pub const DEEP_RETURNED_MAX: usize = 2_000;

/// Which protocol revisions the fake speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// The handshake era (`initialize`, up to 2025-11-25), answering `server/discover` with
    /// method-not-found as servers written before 2026-07-28 do.
    #[default]
    Handshake,
    /// The handshake era, answering `server/discover` with -32022 and the handshake-era
    /// revisions (an rmcp server pinned to them).
    HandshakeStrict,
    /// 2026-07-28 only: `initialize` is refused with -32022.
    Modern,
    /// Only a revision from the future (`2099-01-01`), which no client speaks.
    Future,
}

/// What the scripted faults decide for one `tools/call`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallFate {
    Answer,
    Crash,
    Hang,
}

/// A client session that asked for `notifications/resources/updated` on `uri`.
struct Subscription {
    session: u64,
    uri: String,
    peer: Peer<RoleServer>,
}

/// One per process, behind an `Arc`; each MCP session holds a clone.
pub struct Shared {
    pub server_name: String,
    pub faults: Faults,
    /// Number of extra echo-like tools `tool_0..tool_{n-1}`.
    pub extra_tools: usize,
    /// Page size for tools/prompts/resources lists; `None` lists everything at once.
    pub page_size: Option<NonZeroUsize>,
    /// Offers an MCP App: the resource [`Shared::app_view_uri`] and the tool `show_view`
    /// that points at it.
    pub app: bool,
    /// Which protocol revisions the fake speaks.
    pub protocol: Protocol,
    /// Offers the tool `deep`, whose answer nests too deep to be read, and how it answers.
    pub deep_answer: Option<Deep>,
    /// http: prefer a JSON body to an event stream for an answer (`--json-response`).
    pub json_response: bool,
    /// Runs the tasks of `--tasks`; `None` without it.
    pub tasks: Option<rmcp::task_manager::TaskManager>,
    /// `--tools-file`: a real server's tools, offered instead of the built-in ones.
    pub fixture_tools: Option<Vec<rmcp::model::Tool>>,
    tool_calls_started: AtomicU64,
    tool_calls_finished: AtomicU64,
    requests_cancelled: AtomicU64,
    sessions_expired: AtomicBool,
    next_session: AtomicU64,
    dynamic_tools: Mutex<Vec<String>>,
    subscriptions: Mutex<Vec<Subscription>>,
    /// 2026-07-28 clients' `subscriptions/listen` streams, by a number of their own.
    listeners: Mutex<Vec<(u64, rmcp::service::SubscriptionSink)>>,
    next_listener: std::sync::atomic::AtomicU64,
    flaky_calls: Mutex<std::collections::HashMap<String, u64>>,
    /// `tools/list` requests received, and those waiting for `--hang-lists-file` to go.
    pub lists_received: AtomicU64,
    pub lists_waiting: AtomicU64,
}

impl Shared {
    pub fn new(
        server_name: String,
        faults: Faults,
        extra_tools: usize,
        page_size: Option<NonZeroUsize>,
    ) -> Self {
        Self {
            server_name,
            faults,
            extra_tools,
            page_size,
            app: false,
            protocol: Protocol::default(),
            deep_answer: None,
            json_response: false,
            tasks: None,
            fixture_tools: None,
            tool_calls_started: AtomicU64::new(0),
            tool_calls_finished: AtomicU64::new(0),
            requests_cancelled: AtomicU64::new(0),
            sessions_expired: AtomicBool::new(false),
            next_session: AtomicU64::new(0),
            dynamic_tools: Mutex::new(Vec::new()),
            subscriptions: Mutex::new(Vec::new()),
            listeners: Mutex::new(Vec::new()),
            next_listener: Default::default(),
            flaky_calls: Mutex::default(),
            lists_received: AtomicU64::new(0),
            lists_waiting: AtomicU64::new(0),
        }
    }

    pub fn with_fixture_tools(mut self, tools: Option<Vec<rmcp::model::Tool>>) -> Self {
        self.fixture_tools = tools;
        self
    }

    /// Also offer an MCP App (`--app`).
    pub fn with_protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    pub fn with_app(mut self, app: bool) -> Self {
        self.app = app;
        self
    }

    pub fn with_deep_answer(mut self, deep_answer: Option<Deep>) -> Self {
        self.deep_answer = deep_answer;
        self
    }

    pub fn with_json_response(mut self, json_response: bool) -> Self {
        self.json_response = json_response;
        self
    }

    pub fn with_tasks(mut self, tasks: bool) -> Self {
        self.tasks = tasks.then(rmcp::task_manager::TaskManager::new);
        self
    }

    /// `ui://NAME/view.html`, the app's UI resource, when the fake offers an app.
    pub fn app_view_uri(&self) -> Option<String> {
        self.app
            .then(|| format!("ui://{}/view.html", self.server_name))
    }

    /// The status every HTTP request is answered with now, if the faults script one.
    pub fn forced_http_status(&self) -> Option<StatusCode> {
        self.faults.http_status.or_else(|| {
            let path = self.faults.http_status_file.as_ref()?;
            let text = std::fs::read_to_string(path).ok()?;
            let status = text
                .trim()
                .parse::<u16>()
                .ok()
                .and_then(|code| StatusCode::from_u16(code).ok());
            if status.is_none() {
                self.say(format!("{} holds no HTTP status: {text:?}", path.display()));
            }
            status
        })
    }

    /// Prints one diagnostic line on stderr (stdout is the protocol in stdio mode).
    pub fn say(&self, message: impl std::fmt::Display) {
        eprintln!("fake {} {message}", self.server_name);
    }

    /// Counts a `tools/call` as started and decides its fate from the scripted faults.
    pub fn begin_tool_call(&self) -> CallFate {
        let calls_before = self.tool_calls_started.fetch_add(1, Ordering::SeqCst);
        let first_of_all = || {
            self.faults.crash_once.as_ref().is_some_and(|file| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(file)
                    .is_ok()
            })
        };
        if self.faults.crash_after.is_some_and(|n| calls_before == n) || first_of_all() {
            CallFate::Crash
        } else if self.faults.hang_after.is_some_and(|n| calls_before >= n) {
            CallFate::Hang
        } else {
            CallFate::Answer
        }
    }

    pub fn finish_tool_call(&self) {
        self.tool_calls_finished.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts finished calls, not started ones, so the call that trips the
    /// expiry still gets its answer on the session it came from.
    pub fn take_session_expiry(&self) -> bool {
        let Some(limit) = self.faults.expire_sessions_after else {
            return false;
        };
        self.tool_calls_finished.load(Ordering::SeqCst) >= limit
            && !self.sessions_expired.swap(true, Ordering::SeqCst)
    }

    pub fn record_cancelled(&self) {
        self.requests_cancelled.fetch_add(1, Ordering::SeqCst);
    }

    pub fn cancelled_count(&self) -> u64 {
        self.requests_cancelled.load(Ordering::SeqCst)
    }

    pub fn next_session_number(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::SeqCst)
    }

    /// Counts a call of the `flaky` tool with `key`; returns its 1-based number.
    pub fn count_flaky_call(&self, key: &str) -> u64 {
        let mut calls = lock(&self.flaky_calls);
        let count = calls.entry(key.to_owned()).or_default();
        *count += 1;
        *count
    }

    /// Adds a dynamic tool; false if a tool of that name was already added.
    pub fn add_dynamic_tool(&self, name: &str) -> bool {
        let mut tools = lock(&self.dynamic_tools);
        if tools.iter().any(|existing| existing == name) {
            return false;
        }
        tools.push(name.to_owned());
        true
    }

    pub fn dynamic_tools(&self) -> Vec<String> {
        lock(&self.dynamic_tools).clone()
    }

    pub fn subscribe(&self, session: u64, uri: &str, peer: Peer<RoleServer>) {
        let mut subscriptions = lock(&self.subscriptions);
        if !subscriptions
            .iter()
            .any(|s| s.session == session && s.uri == uri)
        {
            subscriptions.push(Subscription {
                session,
                uri: uri.to_owned(),
                peer,
            });
        }
    }

    pub fn unsubscribe(&self, session: u64, uri: &str) {
        lock(&self.subscriptions).retain(|s| !(s.session == session && s.uri == uri));
    }

    /// The sessions subscribed to `uri`, as (session number, peer).
    pub fn subscribers(&self, uri: &str) -> Vec<(u64, Peer<RoleServer>)> {
        lock(&self.subscriptions)
            .iter()
            .filter(|s| s.uri == uri)
            .map(|s| (s.session, s.peer.clone()))
            .collect()
    }

    /// A listen stream opened; its number, to close it with.
    pub fn listening(&self, sink: rmcp::service::SubscriptionSink) -> u64 {
        let id = self
            .next_listener
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.listeners).push((id, sink));
        id
    }

    pub fn stopped_listening(&self, id: u64) {
        lock(&self.listeners).retain(|(listener, _)| *listener != id);
    }

    /// The open listen streams (each takes only what its filter accepted).
    pub fn listeners(&self) -> Vec<rmcp::service::SubscriptionSink> {
        lock(&self.listeners)
            .iter()
            .map(|(_, sink)| sink.clone())
            .collect()
    }

    /// Forgets every subscription of a session whose transport is gone.
    pub fn drop_subscriber(&self, session: u64) {
        lock(&self.subscriptions).retain(|s| s.session != session);
    }
}

/// A panic while holding one of these locks leaves plain data behind, still usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
