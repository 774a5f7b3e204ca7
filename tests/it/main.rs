//! Integration tests: the real `wardgate` binary against real fake servers, pipes and sockets.

// The harness: binaries, configs, clients.
mod harness;

// `wardgate --help`, `--version` and `wardgate check`.
mod cli;
// Aggregation and routing of tools, prompts and resources, over every transport pair.
mod aggregation;
// Progress, cancellation, sampling, elicitation, roots, logging and list_changed relayed across.
mod forwarding;
// Servers that fail to start, crash mid-call, hang, or refuse credentials.
mod failures;
// Shutdown leaves no process behind: checked in the process table.
mod shutdown;
// The Streamable HTTP endpoint: sessions, GET stream, DELETE, unknown sessions.
mod http_endpoint;
// Supervision and recovery: crash budgets, reconnection, re-authentication, operator actions, chaos.
mod recovery;
// WebAssembly policies on a running gateway: hot swap, broken and faulty modules.
mod policies;
// `wardgate policy check` and `wardgate policy simulate` on the bundled guest policies.
mod policy_cli;
// The official Python SDK as a third-party client, on both handshakes.
mod python_sdk;
