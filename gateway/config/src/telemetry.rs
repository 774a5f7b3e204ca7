//! `[gateway.telemetry]` and the standard `OTEL_*` variables: where the gateway sends its
//! traces, metrics and logs over OTLP, and how it samples.
//!
//! Telemetry is off unless the table is there or an OTLP endpoint variable is set
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and
//! `OTEL_SDK_DISABLED=true` turns it off whatever else says. A key of the table wins over
//! its variable; a variable fills what the table leaves out. Everything is resolved here,
//! once, so `wardgate check` shows what the gateway will do and a bad value is an error
//! with its fix, not a silent default in an exporter.

use std::collections::BTreeMap;

use super::env::{expand, ExpandError};
use super::error::ConfigError;
use super::fields::{Fields, Located, StringMap};
use super::Secret;

/// Resolved telemetry: `None` in `GatewaySettings::telemetry` when it is off.
#[derive(Debug, Clone, PartialEq)]
pub struct Telemetry {
    /// Where spans go: `…/v1/traces` (`None`: `OTEL_TRACES_EXPORTER=none`, or `traces =
    /// false`).
    pub traces_endpoint: Option<String>,
    /// Where metrics go: `…/v1/metrics` (`None`: off).
    pub metrics_endpoint: Option<String>,
    /// Where log records go: `…/v1/logs` (`None`: off).
    pub logs_endpoint: Option<String>,
    pub protocol: OtlpProtocol,
    /// Sent with every export (an API key, say); secret.
    pub headers: BTreeMap<String, Secret>,
    /// `service.name` (default `wardgate`).
    pub service_name: String,
    /// More resource attributes (`OTEL_RESOURCE_ATTRIBUTES`, the table's
    /// `resource_attributes`), without `service.name`.
    pub resource: BTreeMap<String, String>,
    pub sampler: Sampler,
    /// Forward W3C baggage from clients to upstream servers (off by default: baggage is
    /// the client's, and may say more than an upstream should hear).
    pub baggage: bool,
    /// A link to a trace in the operator's trace viewer, with `{trace_id}` in it (for the
    /// status page).
    pub trace_url: Option<String>,
}

// Ratios are finite numbers from 0 to 1 (checked when read), so equality is an equivalence.
impl Eq for Telemetry {}

impl Telemetry {
    /// What is sent where, for `wardgate check` and the startup log: endpoints without
    /// credentials, header names without values.
    pub fn describe(&self) -> String {
        let signals: Vec<String> = [
            ("traces", &self.traces_endpoint),
            ("metrics", &self.metrics_endpoint),
            ("logs", &self.logs_endpoint),
        ]
        .into_iter()
        .filter_map(|(signal, endpoint)| {
            Some(format!(
                "{signal} to {}",
                crate::redact_url(endpoint.as_ref()?)
            ))
        })
        .collect();
        let mut text = format!(
            "{} over OTLP {}, service {:?}, sampled {}",
            if signals.is_empty() {
                "nothing".to_owned()
            } else {
                signals.join(", ")
            },
            self.protocol.as_str(),
            self.service_name,
            self.sampler.describe(),
        );
        if !self.headers.is_empty() {
            let names: Vec<&str> = self.headers.keys().map(String::as_str).collect();
            text.push_str(&format!(", headers {}", names.join(", ")));
        }
        text.push_str(if self.baggage {
            ", baggage forwarded"
        } else {
            ", baggage not forwarded"
        });
        if self.trace_url.is_some() {
            text.push_str(", the status page links traces (trace_url)");
        }
        text
    }
}

/// How OTLP is carried. gRPC is not built in (see the workspace's Cargo.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    HttpProtobuf,
    HttpJson,
}

impl OtlpProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::HttpProtobuf => "http/protobuf",
            OtlpProtocol::HttpJson => "http/json",
        }
    }
}

/// Which traces are kept: `OTEL_TRACES_SAMPLER`'s names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    AlwaysOn,
    AlwaysOff,
    /// This fraction of traces, by trace id.
    Ratio(f64),
    /// A client's sampled flag decides; a trace the gateway starts is decided by `root`.
    ParentBased(ParentRoot),
}

/// The decision for traces that start at the gateway, under [`Sampler::ParentBased`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParentRoot {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
}

impl Sampler {
    /// The sampler as `OTEL_TRACES_SAMPLER` (and its argument) write it.
    pub fn describe(&self) -> String {
        match self {
            Sampler::AlwaysOn => "always_on".into(),
            Sampler::AlwaysOff => "always_off".into(),
            Sampler::Ratio(ratio) => format!("traceidratio {ratio}"),
            Sampler::ParentBased(ParentRoot::AlwaysOn) => "parentbased_always_on".into(),
            Sampler::ParentBased(ParentRoot::AlwaysOff) => "parentbased_always_off".into(),
            Sampler::ParentBased(ParentRoot::Ratio(ratio)) => {
                format!("parentbased_traceidratio {ratio}")
            }
        }
    }
}

/// OTLP over HTTP's default: a collector on this machine.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

#[derive(Debug, Default)]
pub(crate) struct RawTelemetry {
    pub at: Option<Located<()>>,
    pub endpoint: Option<Located<String>>,
    pub protocol: Option<Located<String>>,
    pub headers: Option<StringMap>,
    pub service_name: Option<Located<String>>,
    pub resource_attributes: Option<StringMap>,
    pub sampler: Option<Located<String>>,
    pub sample_ratio: Option<Located<f64>>,
    pub traces: Option<Located<bool>>,
    pub metrics: Option<Located<bool>>,
    pub logs: Option<Located<bool>>,
    pub baggage: Option<Located<bool>>,
    pub trace_url: Option<Located<String>>,
}

pub(crate) fn read(mut fields: Fields<'_>) -> Result<RawTelemetry, ConfigError> {
    let telemetry = RawTelemetry {
        at: Some(fields.located(())),
        endpoint: fields.string("endpoint")?,
        protocol: fields.string("protocol")?,
        headers: fields.string_map("headers")?,
        service_name: fields.string("service_name")?,
        resource_attributes: fields.string_map("resource_attributes")?,
        sampler: fields.string("sampler")?,
        sample_ratio: fields.number("sample_ratio")?,
        traces: fields.boolean("traces")?,
        metrics: fields.boolean("metrics")?,
        logs: fields.boolean("logs")?,
        baggage: fields.boolean("baggage")?,
        trace_url: fields.string("trace_url")?,
    };
    fields.finish()?;
    Ok(telemetry)
}

type Env<'e> = &'e dyn Fn(&str) -> Option<String>;

/// A variable that is set to something other than blanks.
fn var(env: Env<'_>, name: &str) -> Option<String> {
    env(name)
        .map(|value| value.trim().to_owned())
        .filter(|value| !value.is_empty())
}

/// An error about a variable's value (variables have no line).
fn variable_error(name: &str, message: impl Into<String>, fix: impl Into<String>) -> ConfigError {
    ConfigError::at(name, None, message, fix)
}

pub(crate) fn validate(raw: RawTelemetry, env: Env<'_>) -> Result<Option<Telemetry>, ConfigError> {
    if var(env, "OTEL_SDK_DISABLED").is_some_and(|value| value.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let env_endpoint = var(env, "OTEL_EXPORTER_OTLP_ENDPOINT");
    let env_traces_endpoint = var(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    if raw.at.is_none() && env_endpoint.is_none() && env_traces_endpoint.is_none() {
        return Ok(None);
    }
    let expanded = |value: &Located<String>| -> Result<String, ConfigError> {
        expand(&value.value, env)
            .map(|expanded| {
                // What came from the environment is masked wherever it would be shown.
                expanded
                    .substituted
                    .iter()
                    .for_each(|value| crate::secrets::remember(value));
                expanded.value
            })
            .map_err(|error| match error {
                ExpandError::Missing { name } => value.error(
                    format!("the variable {name} is not set"),
                    format!("export {name}=... before starting the gateway"),
                ),
                _ => value.error(
                    "the value has a malformed ${...} reference",
                    "write ${NAME} for a variable, or $${ for a literal ${",
                ),
            })
    };

    // Endpoints: the table's base, else the variable's; a signal's own variable is used as
    // it is, as the OTLP exporter specification says.
    let base = match &raw.endpoint {
        Some(endpoint) => {
            let url = expanded(endpoint)?;
            check_url(&url).map_err(|(message, fix)| endpoint.error(message, fix))?;
            url
        }
        None => match &env_endpoint {
            Some(url) => {
                check_url(url).map_err(|(message, fix)| {
                    variable_error("OTEL_EXPORTER_OTLP_ENDPOINT", message, fix)
                })?;
                url.clone()
            }
            None => DEFAULT_ENDPOINT.to_owned(),
        },
    };
    let base = base.trim_end_matches('/').to_owned();
    let signal = |switch: &Option<Located<bool>>,
                  exporter: &str,
                  endpoint_var: &str,
                  path: &str,
                  default_on: bool|
     -> Result<Option<String>, ConfigError> {
        let on = match switch {
            Some(switch) => switch.value,
            None => match var(env, exporter) {
                Some(value) if value == "none" => false,
                Some(value) if value == "otlp" => true,
                Some(value) => {
                    return Err(variable_error(
                        exporter,
                        format!("{exporter}={value:?} names an exporter the gateway does not have"),
                        "use otlp, or none to send nothing of this kind",
                    ))
                }
                None => default_on,
            },
        };
        if !on {
            return Ok(None);
        }
        // The table's endpoint wins over a signal's variable too.
        let own = if raw.endpoint.is_none() {
            var(env, endpoint_var)
        } else {
            None
        };
        match own {
            Some(url) => {
                check_url(&url)
                    .map_err(|(message, fix)| variable_error(endpoint_var, message, fix))?;
                Ok(Some(url))
            }
            None => Ok(Some(format!("{base}{path}"))),
        }
    };
    let traces_endpoint = signal(
        &raw.traces,
        "OTEL_TRACES_EXPORTER",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "/v1/traces",
        true,
    )?;
    let metrics_endpoint = signal(
        &raw.metrics,
        "OTEL_METRICS_EXPORTER",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "/v1/metrics",
        true,
    )?;
    let logs_endpoint = signal(
        &raw.logs,
        "OTEL_LOGS_EXPORTER",
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
        "/v1/logs",
        true,
    )?;

    let protocol = match &raw.protocol {
        Some(protocol) => parse_protocol(&protocol.value)
            .map_err(|(message, fix)| protocol.error(message, fix))?,
        None => match var(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .map(|value| ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", value))
            .or_else(|| {
                var(env, "OTEL_EXPORTER_OTLP_PROTOCOL")
                    .map(|value| ("OTEL_EXPORTER_OTLP_PROTOCOL", value))
            }) {
            Some((name, value)) => parse_protocol(&value)
                .map_err(|(message, fix)| variable_error(name, message, fix))?,
            None => OtlpProtocol::HttpProtobuf,
        },
    };

    // Headers: the table's, then the variables' (`k=v,k2=v2`, values percent-encoded),
    // which the exporter reads itself and which win for a name in both. Every value is a
    // secret; the names are shown.
    let mut headers = BTreeMap::new();
    for (name, value) in raw.headers.iter().flat_map(|headers| &headers.value) {
        headers.insert(name.to_ascii_lowercase(), Secret::new(expanded(value)?));
    }
    // A signal's own variable is its exporter's only (each reads its own, else the
    // generic one): its values are secrets to mask, never sent to the other signals.
    for variable in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
        "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
    ] {
        let Some(list) = var(env, variable) else {
            continue;
        };
        for (name, value) in pairs(&list).map_err(|entry| {
            variable_error(
                variable,
                format!("an entry is not NAME=VALUE ({} characters)", entry.len()),
                "write api-key=VALUE,other=VALUE",
            )
        })? {
            let value = Secret::new(value);
            if variable == "OTEL_EXPORTER_OTLP_HEADERS" {
                headers.insert(name.to_ascii_lowercase(), value);
            }
        }
    }

    let mut resource = BTreeMap::new();
    if let Some(list) = var(env, "OTEL_RESOURCE_ATTRIBUTES") {
        for (name, value) in pairs(&list).map_err(|entry| {
            variable_error(
                "OTEL_RESOURCE_ATTRIBUTES",
                format!("{entry:?} is not KEY=VALUE"),
                "write deployment.environment.name=prod,service.version=1",
            )
        })? {
            resource.insert(name, value);
        }
    }
    for (name, value) in raw.resource_attributes.iter().flat_map(|map| &map.value) {
        resource.insert(name.clone(), expanded(value)?);
    }
    let from_resource = resource.remove("service.name");
    let service_name = match &raw.service_name {
        Some(name) => expanded(name)?,
        None => var(env, "OTEL_SERVICE_NAME")
            .or(from_resource)
            .unwrap_or_else(|| "wardgate".to_owned()),
    };

    let sampler = sampler(&raw, env)?;
    let baggage = match &raw.baggage {
        Some(baggage) => baggage.value,
        None => var(env, "OTEL_PROPAGATORS")
            .is_some_and(|list| list.split(',').any(|name| name.trim() == "baggage")),
    };
    let trace_url = match &raw.trace_url {
        Some(url) => {
            let text = expanded(url)?;
            if !text.contains("{trace_id}") {
                return Err(url.error(
                    "trace_url has no {trace_id} in it",
                    "write the viewer's link with {trace_id} where the id goes, such as http://localhost:16686/trace/{trace_id}",
                ));
            }
            Some(text)
        }
        None => None,
    };
    Ok(Some(Telemetry {
        traces_endpoint,
        metrics_endpoint,
        logs_endpoint,
        protocol,
        headers,
        service_name,
        resource,
        sampler,
        baggage,
        trace_url,
    }))
}

fn check_url(url: &str) -> Result<(), (String, String)> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err((
            format!("{:?} is not an http(s) URL", crate::redact_url(url)),
            "write the collector's OTLP/HTTP address, such as http://localhost:4318".to_owned(),
        ))
    }
}

fn parse_protocol(value: &str) -> Result<OtlpProtocol, (String, String)> {
    match value {
        "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        "http/json" => Ok(OtlpProtocol::HttpJson),
        "grpc" => Err((
            "OTLP over gRPC is not built into this gateway".to_owned(),
            "use http/protobuf (collectors, Jaeger and Tempo take it on port 4318)".to_owned(),
        )),
        other => Err((
            format!("{other:?} is not an OTLP protocol"),
            "use http/protobuf (the default) or http/json".to_owned(),
        )),
    }
}

/// `k=v,k2=v2` with percent-encoded values (the OTel variables' format).
fn pairs(list: &str) -> Result<Vec<(String, String)>, String> {
    list.split(',')
        .filter(|entry| !entry.trim().is_empty())
        .map(|entry| {
            let (name, value) = entry.split_once('=').ok_or_else(|| entry.to_owned())?;
            let name = name.trim();
            if name.is_empty() {
                return Err(entry.to_owned());
            }
            Ok((name.to_owned(), percent_decode(value.trim())))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&high), Some(&low)) if hex(high).is_some() && hex(low).is_some() => {
                out.push((hex(high).unwrap_or(0) * 16 + hex(low).unwrap_or(0)) as u8);
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where a value came from, for its error.
enum Origin<'a, T> {
    Table(&'a Located<T>),
    Variable(&'static str),
}

impl<T> Origin<'_, T> {
    fn error(&self, message: String, fix: &str) -> ConfigError {
        match self {
            Origin::Table(at) => at.error(message, fix),
            Origin::Variable(name) => variable_error(name, message, fix),
        }
    }
}

const RATIO_FIX: &str = "write a fraction from 0 to 1, such as 0.01";

fn sampler(raw: &RawTelemetry, env: Env<'_>) -> Result<Sampler, ConfigError> {
    let (name, origin) = match &raw.sampler {
        Some(sampler) => (sampler.value.clone(), Origin::Table(sampler)),
        None => (
            var(env, "OTEL_TRACES_SAMPLER").unwrap_or_else(|| "parentbased_always_on".to_owned()),
            Origin::Variable("OTEL_TRACES_SAMPLER"),
        ),
    };
    let ratio = || -> Result<f64, ConfigError> {
        let (ratio, origin) = match &raw.sample_ratio {
            Some(ratio) => (ratio.value, Origin::Table(ratio)),
            None => {
                let name = "OTEL_TRACES_SAMPLER_ARG";
                let Some(text) = var(env, name) else {
                    return Ok(1.0);
                };
                let ratio = text.parse::<f64>().map_err(|_| {
                    variable_error(name, format!("{text:?} is not a number"), RATIO_FIX)
                })?;
                (ratio, Origin::Variable(name))
            }
        };
        if (0.0..=1.0).contains(&ratio) {
            Ok(ratio)
        } else {
            Err(origin.error(
                format!("the sample ratio {ratio} is not between 0 and 1"),
                RATIO_FIX,
            ))
        }
    };
    Ok(match name.as_str() {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::Ratio(ratio()?),
        "parentbased_always_on" => Sampler::ParentBased(ParentRoot::AlwaysOn),
        "parentbased_always_off" => Sampler::ParentBased(ParentRoot::AlwaysOff),
        "parentbased_traceidratio" => Sampler::ParentBased(ParentRoot::Ratio(ratio()?)),
        other => {
            return Err(origin.error(
                format!("{other:?} is not a sampler"),
                "use parentbased_always_on (the default), parentbased_traceidratio with a ratio, traceidratio, always_on or always_off",
            ))
        }
    })
}

#[cfg(test)]
mod tests;
