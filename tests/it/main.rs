//! Integration tests: the real `wardgate` binary against real fake servers, pipes and sockets.

// The harness: binaries, configs, clients.
mod harness;
// Server-sent events read off a response, for tests that read a stream themselves.
mod sse;
// Third-party parts from npm (the MCP Inspector CLI, server-everything), installed on first use.
#[path = "../support/node.rs"]
mod node;
// The official MCP Python SDK in a virtualenv, installed on first use (shared with the benchmarks).
#[path = "../support/python.rs"]
mod python;
// A lean keep-alive HTTP client that writes headers and body apart (shared with the benchmarks).
#[path = "../support/lean_client.rs"]
mod lean_client;
// A free port, a process's resident memory (shared with the benchmarks).
#[path = "../support/measure.rs"]
mod measure;
// Programs from Debian's packages (Chromium), installed on first use.
#[path = "../support/debian.rs"]
mod debian;
// Headless Chromium driven by npm playwright-core, for the status page.
#[path = "../support/browser.rs"]
mod browser;
// The README's run command as a newcomer meets it (shared with the first-call benchmark).
#[path = "../support/newcomer.rs"]
mod newcomer;
// A throwaway PostgreSQL cluster from Debian's packages, for the fleet.
#[path = "../support/postgres.rs"]
mod postgres;

// `wardgate --help`, `--version` and `wardgate check`.
mod cli;
// Aggregation and routing of tools, prompts and resources, over every transport pair.
mod aggregation;
// Names: prefixes, renames and collisions.
mod names;
// MCP Apps: `ui://` resources keep their scheme, and the tools that point at them follow.
mod apps;
// MCP revisions on both sides: 2026-07-28 and handshake-era clients and servers at once.
mod protocol;
// Notifications in the order their server sent them, before their request's answer.
mod ordering;
// Tasks (the io.modelcontextprotocol/tasks extension): names, isolation, a dead server's tasks.
mod tasks;
// A 2025-11-25 client's tasks, which the gateway runs itself.
mod server_tasks;
mod tasks_2025;
// Clients never see each other: server-to-client requests and server logs reach only their client.
mod isolation;
// Per-client instances: a process per client, asked by itself, with its own state, bounded and reaped.
mod instances;
// Progress, cancellation, sampling, elicitation, roots, logging and list_changed relayed across.
mod forwarding;
// Clients that ask at once: lists wait for starting servers, calls route by prefix, the Inspector CLI.
mod first_contact;
// A newcomer's first look: no config at all, a server that says why it fails, the answers after.
mod first_look;
// Servers that fail to start, crash mid-call, hang, or refuse credentials.
mod failures;
// Shutdown leaves no process behind: checked in the process table.
mod shutdown;
// The Streamable HTTP endpoint: sessions, GET stream, DELETE, unknown sessions.
mod http_endpoint;
// Hostile client input (deep nesting, huge strings, invalid UTF-8, token soup) over HTTP and stdio.
mod hostile;
// Connection limits: a cap, header and body timeouts, a body size cap; each refuses cleanly.
mod limits;
// Secrets masked in the log at every level, whatever logs them.
mod log_secrets;
// Connection admission: per-address shares, first-byte deadline, idle connections.
mod admission;
// A gateway a team can expose: hosts, origins, tokens, OAuth, grants, limits, TLS.
mod team;
// Tool discovery by search: discover_tools and call_tool.
mod discovery;
// One recovery machine: the simulator's journal replayed through the real supervisor agrees.
mod agreement;
// Supervision and recovery: crash budgets, reconnection, re-authentication, operator actions, chaos.
mod recovery;
// WebAssembly policies on a running gateway: hot swap, broken and faulty modules.
mod policies;
// `wardgate policy check` and `wardgate policy simulate` on the bundled guest policies.
mod policy_cli;
// Shadow policies beside the live one, replay of an exported decision log, promotion.
mod shadow;
// Python and JavaScript policies built from source, held to their READMEs, hot-swapped; `policy new` skeletons.
mod policy_languages;
// The official Python SDK as a third-party client, on both handshakes.
mod python_sdk;
// Config hot reload: edits add, remove and restart servers; untouched ones keep serving; bad edits change nothing.
mod reload;
// Operator commands on a running gateway: MCP admin tools (expose_admin_tools), kill/spawn/health_check/configure.
mod commands;
// The admin HTTP API: servers, events, policies, health, metrics, commands, authentication.
mod admin;
// The status page at `/` of the admin address, in a real headless Chromium.
mod status_page;
// The operator subcommands (status, servers, reconnect, events, ...) against a running gateway.
mod admin_cli;
// Many gateways on one PostgreSQL: config, commands, status and policy rollout.
mod fleet;
// Servers that sign in with OAuth, against a real authorization server.
mod upstream_oauth;
// OpenTelemetry: traces, metrics and logs against a real OTLP receiver.
mod telemetry;
// The official MCP conformance suite's server scenarios, directly and through the gateway.
mod conformance;
// Tidy checks over the source tree: module comments, module cycles, long files, who asks a
// policy, the code map.
mod tidy;
