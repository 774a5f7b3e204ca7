//! The `mcp.*.duration` histograms as OTLP sends them, beside their Prometheus form
//! (`crate::metrics`, which records the operation histograms into both).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::KeyValue;

use super::Transport;

/// The `mcp.server.operation.duration` and `mcp.client.operation.duration` histograms as
/// OTLP sends them (when telemetry exports metrics; the global meter is a no-op until the
/// binary sets a provider).
struct Instruments {
    server: opentelemetry::metrics::Histogram<f64>,
    client: opentelemetry::metrics::Histogram<f64>,
    session: opentelemetry::metrics::Histogram<f64>,
}

/// The conventions' advised buckets, in seconds.
pub const BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Whether OTLP metrics are on (set by the binary after it set the meter provider).
static OTLP_METRICS: AtomicBool = AtomicBool::new(false);

pub fn otlp_metrics(on: bool) {
    OTLP_METRICS.store(on, Ordering::Relaxed);
}

fn instruments() -> Option<&'static Instruments> {
    if !OTLP_METRICS.load(Ordering::Relaxed) {
        return None;
    }
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    Some(INSTRUMENTS.get_or_init(|| {
        let meter = opentelemetry::global::meter("wardgate");
        let histogram = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(BUCKETS.to_vec())
                .build()
        };
        Instruments {
            server: histogram(
                "mcp.server.operation.duration",
                "Time from a client's request to the gateway's answer",
            ),
            client: histogram(
                "mcp.client.operation.duration",
                "Time from a request sent upstream to its answer",
            ),
            session: histogram(
                "mcp.server.session.duration",
                "How long a client's session lasted",
            ),
        }
    }))
}

/// The labels of an operation metric.
#[derive(Debug, Clone)]
pub struct Operation<'a> {
    pub method: &'static str,
    /// A tool's or prompt's name: only a name the gateway serves (a client may call any
    /// name, and an unknown one must not become a series).
    pub tool: Option<&'a str>,
    pub prompt: Option<&'a str>,
    pub error_type: Option<String>,
    pub transport: Transport,
    pub protocol_version: Option<&'a str>,
    /// The upstream server, for the client metric.
    pub server: Option<&'a str>,
}

impl Operation<'_> {
    /// The series' attributes (bound once per series: see `crate::metrics::McpSeries`).
    pub(crate) fn attributes(&self) -> Vec<KeyValue> {
        let mut attributes = vec![
            KeyValue::new("mcp.method.name", self.method),
            KeyValue::new("network.transport", self.transport.as_str()),
        ];
        let optional = [
            ("gen_ai.tool.name", self.tool),
            ("gen_ai.prompt.name", self.prompt),
            ("error.type", self.error_type.as_deref()),
            ("mcp.protocol.version", self.protocol_version),
            ("wardgate.server", self.server),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                attributes.push(KeyValue::new(key, value.to_owned()));
            }
        }
        attributes
    }
}

/// `mcp.server.operation.duration`, when OTLP metrics are on; `Metrics::mcp_server`
/// records into it beside the Prometheus form.
pub(crate) fn server() -> Option<&'static opentelemetry::metrics::Histogram<f64>> {
    instruments().map(|instruments| &instruments.server)
}

/// `mcp.client.operation.duration`, when OTLP metrics are on (see [`server`]).
pub(crate) fn client() -> Option<&'static opentelemetry::metrics::Histogram<f64>> {
    instruments().map(|instruments| &instruments.client)
}

/// Records a client session that ended.
pub fn record_session(protocol_version: Option<&str>, transport: Transport, took: Duration) {
    if let Some(instruments) = instruments() {
        let mut attributes = vec![KeyValue::new("network.transport", transport.as_str())];
        if let Some(version) = protocol_version {
            attributes.push(KeyValue::new("mcp.protocol.version", version.to_owned()));
        }
        instruments.session.record(took.as_secs_f64(), &attributes);
    }
}
