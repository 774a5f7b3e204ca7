//! OpenTelemetry's SDK and OTLP exporters, set up from `[gateway.telemetry]` and the
//! `OTEL_*` variables (resolved by `wardgate_config`): spans, metrics and log records go to
//! the collector the operator named. Nothing here runs without that configuration.
//!
//! The engine makes the spans (`wardgate_engine::telemetry`); this module turns them into
//! OTLP through tracing-opentelemetry, sets the W3C trace-context propagator, and bridges
//! log lines to OTLP log records, masked like the stderr log (every line through
//! `wardgate_config::secrets::mask`) and carrying the trace id of the span they were
//! logged in. The SDK's exporters run on threads of their own with reqwest's blocking
//! client; shutting down flushes what is queued.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::SystemTime;

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing::dispatcher::WeakDispatch;
use tracing::field::{Field, Visit};
use tracing::{Dispatch, Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;
use wardgate_config::{OtlpProtocol, Telemetry};

/// The providers that export; [`Exporters::shutdown`] flushes them.
pub struct Exporters {
    traces: Option<SdkTracerProvider>,
    metrics: Option<SdkMeterProvider>,
    logs: Option<SdkLoggerProvider>,
}

/// What `start` gives the log subscriber: the layer that makes spans OTLP, and the one that
/// makes log lines OTLP records (each `None` when that signal is off).
pub struct Layers<S> {
    pub traces: Option<Box<dyn Layer<S> + Send + Sync>>,
    pub logs: Option<SdkLogger>,
}

/// Sets up every signal `settings` turns on.
pub fn start<S>(settings: &Telemetry) -> Result<(Exporters, Layers<S>), String>
where
    S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    let resource = Resource::builder_empty()
        .with_service_name(settings.service_name.clone())
        .with_attributes(
            settings
                .resource
                .iter()
                .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
        )
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let protocol = match settings.protocol {
        OtlpProtocol::HttpProtobuf => Protocol::HttpBinary,
        OtlpProtocol::HttpJson => Protocol::HttpJson,
    };
    let headers: HashMap<String, String> = settings
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), value.expose().to_owned()))
        .collect();
    let failed = |signal: &str, endpoint: &str, error: &dyn std::fmt::Display| {
        // The exporter's error may quote the endpoint whole.
        let message = format!(
            "could not set up OTLP {signal} to {}: {error}; check [gateway.telemetry] endpoint or the OTEL_EXPORTER_OTLP_* variables",
            wardgate_config::redact_url(endpoint)
        );
        wardgate_config::secrets::mask(&message).into_owned()
    };

    let traces = match &settings.traces_endpoint {
        Some(endpoint) => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(protocol)
                .with_endpoint(endpoint.clone())
                .with_headers(headers.clone())
                .build()
                .map_err(|error| failed("traces", endpoint, &error))?;
            Some(
                SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    // The gateway samples at the head, before it makes a span
                    // (`wardgate_engine::telemetry::sample_with`); the SDK keeps what it
                    // is given.
                    .with_sampler(Sampler::AlwaysOn)
                    .with_resource(resource.clone())
                    .build(),
            )
        }
        None => None,
    };
    let metrics = match &settings.metrics_endpoint {
        Some(endpoint) => {
            let exporter = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(protocol)
                .with_endpoint(endpoint.clone())
                .with_headers(headers.clone())
                .build()
                .map_err(|error| failed("metrics", endpoint, &error))?;
            Some(
                SdkMeterProvider::builder()
                    .with_periodic_exporter(exporter)
                    .with_resource(resource.clone())
                    .build(),
            )
        }
        None => None,
    };
    let logs = match &settings.logs_endpoint {
        Some(endpoint) => {
            let exporter = opentelemetry_otlp::LogExporter::builder()
                .with_http()
                .with_protocol(protocol)
                .with_endpoint(endpoint.clone())
                .with_headers(headers)
                .build()
                .map_err(|error| failed("logs", endpoint, &error))?;
            Some(
                SdkLoggerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(resource)
                    .build(),
            )
        }
        None => None,
    };

    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    wardgate_engine::telemetry::forward_baggage(settings.baggage);
    wardgate_engine::telemetry::sample_with(settings.sampler);
    if let Some(provider) = &metrics {
        opentelemetry::global::set_meter_provider(provider.clone());
        wardgate_engine::telemetry::otlp_metrics(true);
    }
    let trace_layer = traces.as_ref().map(|provider| {
        let layer: Box<dyn Layer<S> + Send + Sync> = Box::new(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("wardgate"))
                .with_location(false)
                .with_threads(false)
                .with_target(false)
                .with_tracked_inactivity(false)
                // Attaching a span's OpenTelemetry context on every poll of its request
                // was 1.2 % of the gateway's CPU with every trace sampled, and nothing
                // reads it: spans find their parents through `tracing`, and the log
                // bridge finds its line's span itself (`LogBridge::trace_context`).
                .with_context_activation(false),
        );
        layer
    });
    let layers = Layers {
        traces: trace_layer,
        logs: logs.as_ref().map(|provider| provider.logger("wardgate")),
    };
    Ok((
        Exporters {
            traces,
            metrics,
            logs,
        },
        layers,
    ))
}

impl Exporters {
    /// Flushes and stops every exporter (blocking: call it outside the async runtime).
    pub fn shutdown(self) {
        let results = [
            ("traces", self.traces.map(|provider| provider.shutdown())),
            ("metrics", self.metrics.map(|provider| provider.shutdown())),
            ("logs", self.logs.map(|provider| provider.shutdown())),
        ];
        for (signal, result) in results {
            if let Some(Err(error)) = result {
                // The log may be what failed; stderr is always there.
                #[expect(
                    clippy::print_stderr,
                    reason = "the log's own exporter is shutting down"
                )]
                {
                    eprintln!("wardgate: the last OTLP {signal} were not sent: {error}");
                }
            }
        }
    }
}

/// Log lines as OTLP log records: the line as the stderr log writes it (message, then
/// `key=value` fields), masked, with its level and target, and the trace and span ids of
/// the traced span it was logged in.
pub struct LogBridge {
    logger: SdkLogger,
    /// The subscriber this layer is part of (kept weakly: it owns the layer).
    dispatch: OnceLock<WeakDispatch>,
}

impl LogBridge {
    pub fn new(logger: SdkLogger) -> LogBridge {
        LogBridge {
            logger,
            dispatch: OnceLock::new(),
        }
    }

    /// The trace context of the current span or of its nearest traced ancestor. Contexts
    /// are not attached on entry (see `start`), so the SDK cannot find it by itself; and
    /// this layer's own filter hides the gateway's spans, so the registry is asked
    /// unfiltered, through the subscriber this layer was registered with (a scoped
    /// default, inside an event's dispatch, would not be found by asking for it again).
    fn trace_context(&self) -> Option<opentelemetry::trace::SpanContext> {
        use opentelemetry::trace::TraceContextExt;
        use tracing_subscriber::Registry;
        let dispatch = self.dispatch.get()?.upgrade()?;
        let registry = dispatch.downcast_ref::<Registry>()?;
        let current = registry.span(registry.current_span().id()?)?;
        current.scope().find_map(|span| {
            let context = tracing_opentelemetry::get_otel_context(&span.id(), &dispatch)?;
            let span_context = context.span().span_context().clone();
            span_context.is_valid().then_some(span_context)
        })
    }
}

impl<S: Subscriber> Layer<S> for LogBridge {
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        let _ = self.dispatch.set(subscriber.downgrade());
    }

    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        let metadata = event.metadata();
        let mut line = Line::default();
        event.record(&mut line);
        let mut text = line.message;
        if !line.fields.is_empty() {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(&line.fields);
        }
        let masked = wardgate_config::secrets::mask(&text).into_owned();
        let mut record = self.logger.create_log_record();
        record.set_timestamp(SystemTime::now());
        record.set_target(metadata.target());
        record.set_severity_number(severity(metadata.level()));
        record.set_severity_text(metadata.level().as_str());
        record.set_body(AnyValue::from(masked));
        if let Some(span) = self.trace_context() {
            record.set_trace_context(span.trace_id(), span.span_id(), Some(span.trace_flags()));
        }
        self.logger.emit(record);
    }
}

fn severity(level: &tracing::Level) -> Severity {
    match *level {
        tracing::Level::ERROR => Severity::Error,
        tracing::Level::WARN => Severity::Warn,
        tracing::Level::INFO => Severity::Info,
        tracing::Level::DEBUG => Severity::Debug,
        tracing::Level::TRACE => Severity::Trace,
    }
}

/// An event's message and its other fields, as text.
#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            if !self.fields.is_empty() {
                self.fields.push(' ');
            }
            let _ = write!(self.fields, "{}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.record_debug(field, &value);
        }
    }
}
