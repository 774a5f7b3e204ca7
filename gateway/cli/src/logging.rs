//! Logging to stderr only: stdout belongs to the MCP protocol in stdio mode.

use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// The gateway's own crates (targets `wardgate*`) at info, every dependency at warn: rmcp,
/// hyper and reqwest log each connection, peer info and notification at info, which floods
/// a newcomer's terminal and can carry tool data. rmcp's transport worker is off: when a
/// connection fails it logs the `reqwest` error whole, request URL included, and a URL may
/// hold a `${VAR}` secret; the gateway reports the same failure itself, URL withheld.
pub const DEFAULT_FILTER: &str = "warn,wardgate=info,rmcp::transport::worker=off";

/// Standard error, with every line masked (`wardgate_config::secrets`): secrets and URL
/// credentials and queries never reach the log, whatever logs them, at any level. The
/// formatter writes each event whole, in one call.
struct Masked;

impl std::io::Write for Masked {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let masked = wardgate_config::secrets::mask(&text);
        std::io::stderr().write_all(masked.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// How log lines are written: text for people, JSON for collectors (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Sets up the stderr log with `filter` and, when `telemetry` is configured, OpenTelemetry's
/// exporters beside it; the exporters are returned so that `main` flushes them at exit.
pub fn init(
    filter: &str,
    format: LogFormat,
    telemetry: Option<&wardgate_config::Telemetry>,
) -> Result<Option<crate::telemetry::Exporters>, String> {
    let parse = |extra: &[&str]| {
        let mut parsed = EnvFilter::try_new(filter).map_err(|error| {
            format!(
                "invalid --log-level {filter:?}: {error}; try info, debug or \"info,wardgate=debug\""
            )
        })?;
        // Spans and events made for OpenTelemetry are never log lines.
        for directive in ["wardgate::telemetry=off"].iter().chain(extra) {
            parsed = parsed.add_directive(directive.parse().map_err(|error| format!("{error}"))?);
        }
        Ok::<_, String>(parsed)
    };
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(|| Masked)
        .with_ansi(false);
    let stderr: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => Box::new(stderr.with_filter(parse(&[])?)),
        LogFormat::Json => Box::new(stderr.json().with_filter(parse(&[])?)),
    };
    let mut layers = vec![stderr];
    let mut bridge = None;
    let mut exporting_spans = false;
    let exporters = match telemetry {
        Some(settings) => {
            let (exporters, otel) = crate::telemetry::start::<Registry>(settings)?;
            if let Some(traces) = otel.traces {
                // The gateway's spans and their events, nothing else: a log line's text is
                // masked on its way to stderr and to OTLP logs, and a span event would not be.
                let targets =
                    Targets::new().with_target(wardgate_engine::telemetry::TARGET, Level::INFO);
                layers.push(Box::new(traces.with_filter(targets)));
                exporting_spans = true;
            }
            if let Some(logger) = otel.logs {
                // The stderr log's lines, less what exporting them logs (a loop).
                let quiet = [
                    "opentelemetry=off",
                    "opentelemetry_sdk=off",
                    "opentelemetry_otlp=off",
                    "opentelemetry_http=off",
                    "reqwest=off",
                    "hyper=off",
                    "hyper_util=off",
                    "h2=off",
                ];
                // Outside the list of layers: the bridge asks the subscriber it joined for
                // a line's span (`LogBridge::trace_context`).
                bridge = Some(crate::telemetry::LogBridge::new(logger).with_filter(parse(&quiet)?));
            }
            Some(exporters)
        }
        None => None,
    };
    // The bridge is layered by itself, not as an `Option`: neither a list nor an `Option`
    // passes on which subscriber its layer joined.
    let subscriber = tracing_subscriber::registry().with(layers);
    match bridge {
        Some(bridge) => subscriber.with(bridge).try_init(),
        None => subscriber.try_init(),
    }
    .map_err(|error| format!("could not set up logging: {error}"))?;
    if exporting_spans {
        wardgate_engine::telemetry::exporting_spans();
    }
    Ok(exporters)
}
