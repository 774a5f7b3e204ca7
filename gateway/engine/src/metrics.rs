//! Prometheus metrics: counters and latency histograms the engine records as it works, and
//! per-server gauges (status, catalogue sizes) read from the slots when scraped.
//!
//! Policy metrics live outside the engine (it never knows WebAssembly): the caller passes
//! them to [`Gateway::encode_metrics`] as [`PolicyMetricsSample`]s at scrape time.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::metrics::{BoundHistogram, Histogram as OtelHistogram};

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::info::ServerInfo;
use crate::telemetry::{otlp, Operation, Transport, BUCKETS};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    server: String,
    tool: String,
    outcome: String,
}

/// The labels of OpenTelemetry's MCP operation metrics, in Prometheus' spelling.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct McpLabels {
    mcp_method_name: String,
    gen_ai_tool_name: String,
    gen_ai_prompt_name: String,
    error_type: String,
    network_transport: String,
    mcp_protocol_version: String,
    wardgate_server: String,
}

impl McpLabels {
    fn of(operation: &Operation<'_>) -> McpLabels {
        let text = |value: Option<&str>| value.unwrap_or("").to_owned();
        McpLabels {
            mcp_method_name: operation.method.to_owned(),
            gen_ai_tool_name: text(operation.tool),
            gen_ai_prompt_name: text(operation.prompt),
            error_type: text(operation.error_type.as_deref()),
            network_transport: operation.transport.as_str().to_owned(),
            mcp_protocol_version: text(operation.protocol_version),
            wardgate_server: text(operation.server),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SessionLabels {
    mcp_protocol_version: String,
    network_transport: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    server: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: String,
    module: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FaultLabels {
    policy: String,
    module: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowLabels {
    policy: String,
    question: String,
    outcome: String,
}

/// How a forwarded request ended, as the `outcome` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The server answered with a result.
    Ok,
    /// The server answered with a JSON-RPC error (it is alive).
    Error,
    /// No answer within the request timeout.
    Timeout,
    /// The server could not be reached or its connection failed.
    Failed,
    /// The server's status refused the call (disabled, requires_reauth, ...).
    Unavailable,
    /// The client cancelled the request.
    Cancelled,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Timeout => "timeout",
            Outcome::Failed => "failed",
            Outcome::Unavailable => "unavailable",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// One policy module's counters, as the policy host reports them at scrape time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyMetricsSample {
    /// The policy's name in the config (`[policies.NAME]`).
    pub policy: String,
    /// The module's own name and version as it describes itself (empty when none loaded).
    pub module: String,
    /// Decisions asked of the module.
    pub decisions: u64,
    /// Faults by kind (trap, deadline, memory, invalid answer, ...); the builtin answered them.
    pub faults: BTreeMap<String, u64>,
    /// The policy's shadow, if it has one: its verdicts by (question, outcome), the
    /// outcome being `agreed`, `disagreed`, `fault` or `dropped`.
    pub shadow: BTreeMap<(String, String), u64>,
}

fn latency_histogram() -> Histogram {
    // 1 ms … ~33 s.
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ])
}

fn mcp_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

type McpHistograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// One series of an MCP operation histogram: its Prometheus form and, once OTLP metrics
/// are on, the same series in OpenTelemetry's histogram, bound to its attributes the first
/// time it is recorded. A call then looks its labels up once, for both, instead of a
/// second time in the SDK with attributes built for each call (that was 2.5 % of the
/// gateway's CPU with telemetry on).
#[derive(Debug)]
struct McpSeries {
    prometheus: Histogram,
    otlp: OnceLock<BoundHistogram<f64>>,
}

impl McpSeries {
    fn new() -> McpSeries {
        McpSeries {
            prometheus: mcp_histogram(),
            otlp: OnceLock::new(),
        }
    }

    fn observe(&self, took: Duration, otlp: Option<&OtelHistogram<f64>>, operation: &Operation) {
        let seconds = took.as_secs_f64();
        self.prometheus.observe(seconds);
        if let Some(histogram) = otlp {
            self.otlp
                .get_or_init(|| histogram.bind(&operation.attributes()))
                .record(seconds);
        }
    }
}

impl TypedMetric for McpSeries {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for McpSeries {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.prometheus.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

type McpOperations = Family<McpLabels, McpSeries, fn() -> McpSeries>;

/// The engine's own metrics; cheap to record into from any task.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// OpenTelemetry's MCP metrics, under their own names (no `wardgate_` prefix).
    mcp: Registry,
    mcp_server: McpOperations,
    mcp_client: McpOperations,
    mcp_session: McpHistograms<SessionLabels>,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RequestLabels, Histogram, fn() -> Histogram>,
    retries: Family<ServerLabels, Counter>,
    reconnects: Family<ServerLabels, Counter>,
    crashes: Family<ServerLabels, Counter>,
    /// Notifications dropped for clients that were not reading them.
    pub(crate) notifications_dropped: Counter,
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("wardgate");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<RequestLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        let retries = Family::<ServerLabels, Counter>::default();
        let reconnects = Family::<ServerLabels, Counter>::default();
        let crashes = Family::<ServerLabels, Counter>::default();
        let notifications_dropped = Counter::default();
        let mut mcp = Registry::default();
        let mcp_server = McpOperations::new_with_constructor(McpSeries::new);
        let mcp_client = McpOperations::new_with_constructor(McpSeries::new);
        let mcp_session = McpHistograms::<SessionLabels>::new_with_constructor(mcp_histogram);
        mcp.register(
            "mcp_server_operation_duration_seconds",
            "mcp.server.operation.duration: time from a client's request to the gateway's answer",
            mcp_server.clone(),
        );
        mcp.register(
            "mcp_client_operation_duration_seconds",
            "mcp.client.operation.duration: time from one attempt sent upstream to its answer",
            mcp_client.clone(),
        );
        mcp.register(
            "mcp_server_session_duration_seconds",
            "mcp.server.session.duration: how long a client's session lasted",
            mcp_session.clone(),
        );
        registry.register(
            "notifications_dropped",
            "Notifications dropped for clients that were not reading them (past a session's or the gateway's backlog in bytes)",
            notifications_dropped.clone(),
        );
        registry.register(
            "requests",
            "Requests forwarded to servers, by server, tool (or method) and outcome",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from a client's request to its answer, retries included",
            latency.clone(),
        );
        registry.register(
            "retries",
            "Requests sent again after a failure, as the policy decided",
            retries.clone(),
        );
        registry.register(
            "reconnects",
            "Reconnection attempts scheduled after a lost or failed connection",
            reconnects.clone(),
        );
        registry.register(
            "crashes",
            "Exits of stdio server processes the gateway did not ask for",
            crashes.clone(),
        );
        Metrics {
            registry,
            mcp,
            mcp_server,
            mcp_client,
            mcp_session,
            requests,
            latency,
            retries,
            reconnects,
            crashes,
            notifications_dropped,
        }
    }

    pub(crate) fn request(&self, server: &str, tool: &str, outcome: Outcome, took: Duration) {
        let labels = RequestLabels {
            server: crate::slot::server_of(server).to_owned(),
            tool: tool.to_owned(),
            outcome: outcome.as_str().to_owned(),
        };
        self.requests.get_or_create(&labels).inc();
        self.latency
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// One request a client sent, answered (`mcp.server.operation.duration`).
    pub fn mcp_server(&self, operation: &Operation<'_>, took: Duration) {
        self.mcp_server
            .get_or_create(&McpLabels::of(operation))
            .observe(took, otlp::server(), operation);
    }

    /// One attempt upstream, answered or not (`mcp.client.operation.duration`).
    pub(crate) fn mcp_client(&self, operation: &Operation<'_>, took: Duration) {
        self.mcp_client
            .get_or_create(&McpLabels::of(operation))
            .observe(took, otlp::client(), operation);
    }

    /// A client session that ended (`mcp.server.session.duration`).
    pub fn mcp_session(
        &self,
        protocol_version: Option<&str>,
        transport: Transport,
        took: Duration,
    ) {
        let labels = SessionLabels {
            mcp_protocol_version: protocol_version.unwrap_or("").to_owned(),
            network_transport: transport.as_str().to_owned(),
        };
        self.mcp_session
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub(crate) fn retry(&self, server: &str) {
        self.retries.get_or_create(&server_labels(server)).inc();
    }

    pub(crate) fn reconnect(&self, server: &str) {
        self.reconnects.get_or_create(&server_labels(server)).inc();
    }

    pub(crate) fn crash(&self, server: &str) {
        self.crashes.get_or_create(&server_labels(server)).inc();
    }
}

/// A server's labels; an instance (`SERVER#N`) counts for its server, so the series are as
/// many as the configured servers.
fn server_labels(server: &str) -> ServerLabels {
    ServerLabels {
        server: crate::slot::server_of(server).to_owned(),
    }
}

/// Everything in Prometheus text exposition format (the OpenMetrics text subset that
/// Prometheus parses, ending in `# EOF`): the engine's counters and histograms, per-server
/// status and catalogue-size gauges of `servers` as read now, and `policies` — the policy
/// host's counters, which the caller gathers (the engine never knows WebAssembly).
pub fn encode(
    metrics: &Metrics,
    servers: &[ServerInfo],
    instances: &[(String, Vec<String>)],
    policies: &[PolicyMetricsSample],
) -> String {
    {
        let mut scraped = Registry::with_prefix("wardgate");
        let status = Family::<StatusLabels, Gauge>::default();
        let tools = Family::<ServerLabels, Gauge>::default();
        let prompts = Family::<ServerLabels, Gauge>::default();
        let resources = Family::<ServerLabels, Gauge>::default();
        for server in servers {
            // One series per status (1 for the current one, 0 for the rest), so a
            // dashboard can sum by status.
            for name in crate::status::ServerStatus::NAMES {
                let labels = StatusLabels {
                    server: server.name.clone(),
                    status: name.to_owned(),
                };
                status
                    .get_or_create(&labels)
                    .set(i64::from(server.status.as_str() == name));
            }
            let labels = server_labels(&server.name);
            tools.get_or_create(&labels).set(server.tools as i64);
            prompts.get_or_create(&labels).set(server.prompts as i64);
            resources
                .get_or_create(&labels)
                .set(server.resources as i64);
        }
        scraped.register(
            "server_status",
            "1 for each server's current status, 0 for the others",
            status,
        );
        scraped.register(
            "server_tools",
            "Tools in each server's last good snapshot",
            tools,
        );
        scraped.register(
            "server_prompts",
            "Prompts in each server's last good snapshot",
            prompts,
        );
        scraped.register(
            "server_resources",
            "Resources and resource templates in each server's last good snapshot",
            resources,
        );
        // Per-client instances of each server that has them, by status (every status, so
        // a dashboard sees a 0 rather than a gap).
        let counted = Family::<StatusLabels, Gauge>::default();
        for (server, statuses) in instances {
            for name in crate::status::ServerStatus::NAMES {
                let labels = StatusLabels {
                    server: server.clone(),
                    status: name.to_owned(),
                };
                let count = statuses.iter().filter(|status| *status == name).count();
                counted.get_or_create(&labels).set(count as i64);
            }
        }
        scraped.register(
            "server_instances",
            "Per-client instances of each server that has them, by status",
            counted,
        );
        let decisions = Family::<PolicyLabels, Counter>::default();
        let faults = Family::<FaultLabels, Counter>::default();
        for sample in policies {
            let labels = PolicyLabels {
                policy: sample.policy.clone(),
                module: sample.module.clone(),
            };
            decisions.get_or_create(&labels).inc_by(sample.decisions);
            for (kind, count) in &sample.faults {
                let labels = FaultLabels {
                    policy: sample.policy.clone(),
                    module: sample.module.clone(),
                    kind: kind.clone(),
                };
                faults.get_or_create(&labels).inc_by(*count);
            }
        }
        scraped.register(
            "policy_decisions",
            "Decisions asked of each policy module",
            decisions,
        );
        scraped.register(
            "policy_faults",
            "Policy module faults by kind; the builtin policy answered each",
            faults,
        );
        let shadow = Family::<ShadowLabels, Counter>::default();
        for sample in policies {
            for ((question, outcome), count) in &sample.shadow {
                let labels = ShadowLabels {
                    policy: sample.policy.clone(),
                    question: question.clone(),
                    outcome: outcome.clone(),
                };
                shadow.get_or_create(&labels).inc_by(*count);
            }
        }
        scraped.register(
            "policy_shadow_decisions",
            "Questions asked of each policy's shadow module, by question and outcome (agreed or disagreed with the live verdict, fault, or dropped because the shadow queue was full)",
            shadow,
        );
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode_registry(&mut text, &metrics.registry);
        let _ = encode_registry(&mut text, &scraped);
        let _ = encode_registry(&mut text, &metrics.mcp);
        let _ = encode_eof(&mut text);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_requests_appear_as_counters_and_histograms() {
        let metrics = Metrics::new();
        metrics.request("s", "echo", Outcome::Ok, Duration::from_millis(3));
        metrics.retry("s");
        let mut text = String::new();
        encode_registry(&mut text, &metrics.registry).unwrap();
        assert!(
            text.contains(r#"wardgate_requests_total{server="s",tool="echo",outcome="ok"} 1"#),
            "{text}"
        );
        assert!(
            text.contains("wardgate_request_duration_seconds_bucket"),
            "{text}"
        );
        assert!(
            text.contains(r#"wardgate_retries_total{server="s"} 1"#),
            "{text}"
        );
    }
}
