//! The trace context: what a client's request carries (`params._meta`, else the HTTP
//! headers), whether its trace is recorded (head sampling), and what goes upstream in
//! `_meta` and in an HTTP upstream's headers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use opentelemetry::propagation::Injector;
use rmcp::model::RequestMetaObject;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use wardgate_config::{ParentRoot, Sampler};

use super::on;

/// Whether a client's W3C baggage goes on to upstream servers (`[gateway.telemetry]
/// baggage`); off unless configured.
static FORWARD_BAGGAGE: AtomicBool = AtomicBool::new(false);

/// Set once by the binary from the config.
pub fn forward_baggage(on: bool) {
    FORWARD_BAGGAGE.store(on, Ordering::Relaxed);
}

/// The sampler of `[gateway.telemetry]`, set once by the binary. The gateway samples at the
/// head, before it makes a span: a request that is not sampled costs no span (the SDK's
/// own sampler, which decides only once a span exists, keeps everything it is given).
static SAMPLER: OnceLock<Sampler> = OnceLock::new();

pub fn sample_with(sampler: Sampler) {
    let _ = SAMPLER.set(sampler);
}

/// Whether a trace with this parent (an empty context for a new trace) is recorded, as
/// the configured sampler says. A ratio is decided by the trace id when the parent has one
/// (as OpenTelemetry's `TraceIdRatioBased` does, so services agree), else at random.
pub(super) fn sampled(parent: &opentelemetry::Context) -> bool {
    use opentelemetry::trace::TraceContextExt;
    let span = parent.span();
    let remote = span.span_context();
    let by_ratio = |ratio: f64| {
        if ratio >= 1.0 {
            return true;
        }
        let draw = if remote.is_valid() {
            let bytes = remote.trace_id().to_bytes();
            let mut low = [0u8; 8];
            low.copy_from_slice(&bytes[8..]);
            u64::from_be_bytes(low) >> 1
        } else {
            random() >> 1
        };
        (draw as f64) < ratio * (1u64 << 63) as f64
    };
    match SAMPLER.get() {
        None | Some(Sampler::AlwaysOn) => true,
        Some(Sampler::AlwaysOff) => false,
        Some(Sampler::Ratio(ratio)) => by_ratio(*ratio),
        Some(Sampler::ParentBased(_)) if remote.is_valid() => remote.is_sampled(),
        Some(Sampler::ParentBased(ParentRoot::AlwaysOn)) => true,
        Some(Sampler::ParentBased(ParentRoot::AlwaysOff)) => false,
        Some(Sampler::ParentBased(ParentRoot::Ratio(ratio))) => by_ratio(*ratio),
    }
}

/// 64 random bits, from the standard library's per-process hash keys (no RNG crate for a
/// sampling draw).
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

tokio::task_local! {
    /// Set while a client's request is handled (and while a task's call it left runs):
    /// what happens then belongs to that request, traced or not.
    static CALL: ();
}

/// Runs `work` as a client's request: a decision or status change inside it is never a
/// trace of its own, even when the request is not sampled.
pub async fn in_call<F: std::future::Future>(work: F) -> F::Output {
    CALL.scope((), work).await
}

/// Whether a span that starts a trace of its own (a supervisor's status change or
/// decision, outside any request) is recorded.
pub fn sample_root() -> bool {
    on() && CALL.try_with(|_| ()).is_err() && sampled(&opentelemetry::Context::new())
}

/// The trace context a client's request carries.
pub(super) fn extract(
    meta: &RequestMetaObject,
    headers: Option<&http::HeaderMap>,
) -> opentelemetry::Context {
    let from_headers = headers.filter(|headers| headers.contains_key("traceparent"));
    if meta.get_traceparent().is_none() && from_headers.is_none() {
        // Most clients send none: a new trace, with nothing to parse.
        return opentelemetry::Context::new();
    }
    let mut carrier: HashMap<String, String> = HashMap::new();
    let mut put = |key: &str, value: Option<&str>| {
        if let Some(value) = value {
            carrier.insert(key.to_owned(), value.to_owned());
        }
    };
    if meta.get_traceparent().is_some() {
        put("traceparent", meta.get_traceparent());
        put("tracestate", meta.get_tracestate());
        put("baggage", meta.get_baggage());
    } else if let Some(headers) = headers {
        for key in ["traceparent", "tracestate", "baggage"] {
            put(key, headers.get(key).and_then(|value| value.to_str().ok()));
        }
    }
    opentelemetry::global::get_text_map_propagator(|propagator| propagator.extract(&carrier))
}

/// What of the client's trace context goes upstream in `_meta`: the gateway's own span's
/// context when telemetry is on, else the client's `traceparent` and `tracestate` as they
/// came; `baggage` only when configured.
pub fn pass_on(
    span: &Span,
    client: &RequestMetaObject,
    headers: Option<&http::HeaderMap>,
    upstream: &mut RequestMetaObject,
) {
    let baggage = FORWARD_BAGGAGE.load(Ordering::Relaxed);
    if span.is_disabled() {
        // As the client sent them (`_meta`, else its HTTP headers), when they are what W3C
        // Trace Context says (they may become an HTTP upstream's headers).
        let header = |name: &str| headers?.get(name)?.to_str().ok();
        let (parent, state) = match client.get_traceparent() {
            Some(parent) => (Some(parent), client.get_tracestate()),
            None => (header("traceparent"), header("tracestate")),
        };
        match parent.filter(|value| valid_traceparent(value)) {
            Some(value) => {
                upstream.set_traceparent(value);
                if let Some(state) = state.filter(|state| valid_tracestate(state)) {
                    upstream.set_tracestate(state);
                }
            }
            // Telemetry is on and this request is not sampled: say so upstream, so that
            // a server sampling by its parent does not start a trace of its own.
            None if on() => {
                upstream.set_traceparent(unsampled_traceparent(random(), random(), random() | 1));
            }
            None => {}
        }
    } else {
        let context = span.context();
        opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.inject_context(&context, &mut MetaInjector(upstream))
        });
    }
    if baggage {
        if let Some(value) = client.get_baggage() {
            upstream.set_baggage(value);
        }
    }
}

/// `00-{trace id}-{parent id}-00`: a trace not sampled. Written digit by digit (`format!`
/// with padded hex was 1 % of the gateway's CPU at 1 % sampling, for every other request).
fn unsampled_traceparent(high: u64, low: u64, parent: u64) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(55);
    text.push_str("00-");
    for (index, value) in [high, low, parent].into_iter().enumerate() {
        if index == 2 {
            text.push('-');
        }
        for shift in (0..16).rev() {
            text.push(char::from(HEX[((value >> (shift * 4)) & 0xf) as usize]));
        }
    }
    text.push_str("-00");
    text
}

/// `00-{32 hex}-{16 hex}-{2 hex}`, ids not all zero (W3C Trace Context, version 00).
fn valid_traceparent(value: &str) -> bool {
    let hex = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let parts: Vec<&str> = value.split('-').collect();
    let [version, trace, parent, flags] = parts[..] else {
        return false;
    };
    version == "00"
        && hex(trace, 32)
        && hex(parent, 16)
        && hex(flags, 2)
        && trace.bytes().any(|b| b != b'0')
        && parent.bytes().any(|b| b != b'0')
}

/// At most 512 bytes of printable ASCII (W3C Trace Context's limit for `tracestate`).
fn valid_tracestate(value: &str) -> bool {
    value.len() <= 512 && value.bytes().all(|b| (b' '..=b'~').contains(&b))
}

struct MetaInjector<'m>(&'m mut RequestMetaObject);

impl Injector for MetaInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        match key {
            "traceparent" => self.0.set_traceparent(&value),
            "tracestate" => self.0.set_tracestate(&value),
            // The client's baggage, or none (see `pass_on`).
            _ => {}
        }
    }
}

/// The trace context an upstream request carries in its `_meta`, as the HTTP headers of the
/// POST that carries it (for the server's HTTP layer, which may know nothing of `_meta`).
pub fn trace_headers(
    message: &rmcp::model::ClientJsonRpcMessage,
) -> Vec<(http::HeaderName, http::HeaderValue)> {
    use rmcp::model::GetMeta;
    let rmcp::model::JsonRpcMessage::Request(request) = message else {
        return Vec::new();
    };
    let meta = request.request.get_meta();
    [
        (
            http::HeaderName::from_static("traceparent"),
            meta.get_traceparent(),
        ),
        (
            http::HeaderName::from_static("tracestate"),
            meta.get_tracestate(),
        ),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some((name, http::HeaderValue::from_str(value?).ok()?)))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsampled_traceparent_is_what_padded_hex_writes_and_is_valid() {
        for (high, low, parent) in [
            (0, 1, 1),
            (u64::MAX, u64::MAX, u64::MAX),
            (
                0x0123_4567_89ab_cdef,
                0xfedc_ba98_7654_3210,
                0x00f0_0000_0000_0001,
            ),
            (random(), random(), random() | 1),
        ] {
            let written = unsampled_traceparent(high, low, parent);
            assert_eq!(
                written,
                format!("00-{high:016x}{low:016x}-{parent:016x}-00")
            );
            assert!(valid_traceparent(&written), "{written}");
        }
    }
}
