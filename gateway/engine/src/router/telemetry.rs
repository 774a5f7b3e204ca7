//! One attempt at a request upstream as OpenTelemetry sees it: its CLIENT span, whose
//! context goes upstream in `_meta` (and in the headers of an HTTP POST), how it ended, and
//! the `mcp.client.operation.duration` it took.

use std::sync::Arc;

use rmcp::model::{ClientRequest, ServerResult};
use tokio::time::Instant;
use wardgate_policy::FailureKind;

use crate::metrics::Metrics;
use crate::slot::Live;
use crate::telemetry::{self, Ending, Operation, Transport};

use super::send::Sent;

/// One attempt under way: its span and what its metric is labelled with.
pub(super) struct Attempt {
    pub span: tracing::Span,
    described: telemetry::Described,
    transport: Transport,
    version: Option<String>,
    server: String,
    started: Instant,
}

impl Attempt {
    /// The CLIENT span of attempt number `attempt` at `request` on `live`.
    pub fn begin(live: &Arc<Live>, server: &str, request: &ClientRequest, attempt: u32) -> Attempt {
        let described = telemetry::describe(request);
        let transport = if live.exit.is_some() {
            Transport::Pipe
        } else {
            Transport::Tcp
        };
        let version = live
            .peer
            .peer_info()
            .map(|info| telemetry::known_version(info.protocol_version.as_str()).to_owned());
        let span =
            telemetry::client_span(&described, server, transport, version.as_deref(), attempt);
        Attempt {
            span,
            described,
            transport,
            version,
            server: crate::slot::server_of(server).to_owned(),
            started: Instant::now(),
        }
    }

    /// How the attempt ended, on its span and in `mcp.client.operation.duration`.
    pub fn finish(self, metrics: &Metrics, outcome: &Result<ServerResult, Sent>) {
        let ending = match outcome {
            Ok(ServerResult::CallToolResult(result)) if result.is_error == Some(true) => {
                Ending::ToolError
            }
            Ok(_) => Ending::Ok,
            Err(Sent::Cancelled) => Ending::Failed {
                kind: "cancelled",
                message: "cancelled by the client".to_owned(),
            },
            Err(Sent::Failed(failure)) => match failure.kind {
                FailureKind::JsonRpc { code } => Ending::Error {
                    code,
                    message: failure.message.clone(),
                },
                ref kind => Ending::Failed {
                    kind: failure_type(kind),
                    message: failure.message.clone(),
                },
            },
        };
        telemetry::end(&self.span, &ending, false);
        // A tool's name becomes a label only when the server answered it (a client may
        // send any name, and an unknown one must not make a series).
        let answered = matches!(ending, Ending::Ok | Ending::ToolError);
        let operation = Operation {
            method: self.described.method,
            tool: self.described.tool.as_deref().filter(|_| answered),
            prompt: self.described.prompt.as_deref().filter(|_| answered),
            error_type: ending.metric_error_type(),
            transport: self.transport,
            protocol_version: self.version.as_deref(),
            server: Some(&self.server),
        };
        let took = self.started.elapsed();
        metrics.mcp_client(&operation, took);
    }
}

/// `error.type` of a failure without a JSON-RPC answer.
fn failure_type(kind: &FailureKind) -> &'static str {
    match kind {
        FailureKind::ConnectRefused => "connect_refused",
        FailureKind::TimedOut => "timeout",
        FailureKind::Dns => "dns",
        FailureKind::ConnectionReset => "connection_reset",
        FailureKind::ConnectionClosed => "connection_closed",
        FailureKind::HttpStatus(_) => "http_status",
        FailureKind::SessionExpired => "session_expired",
        FailureKind::ProcessExited { .. } => "process_exited",
        FailureKind::Protocol => "protocol_error",
        FailureKind::JsonRpc { .. } | FailureKind::Other => "_OTHER",
    }
}
