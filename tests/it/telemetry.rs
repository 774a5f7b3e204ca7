//! OpenTelemetry through the gateway, against a real OTLP receiver: the OpenTelemetry
//! project's protobuf definitions (`opentelemetry-proto`, from PyPI) decoding what the
//! gateway exports over OTLP/HTTP (tests/python/otlp_receiver.py).
//!
//! Why this file is long: one end-to-end trace (a client's context, a crash, a policy
//! decision, a retry, stdio and HTTP servers, metrics, logs and the status page's link) is
//! one test whose assertions read the same exported records, and its helpers are here.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, RequestMetaObject};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::admin::support::start;
use crate::harness::*;
use crate::python::{python_sdk, script};

/// The client's trace: its trace id and the id of the span it calls from.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
/// A second client's, sent in the HTTP header instead of `_meta`.
const HEADER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const HEADER_PARENT: &str = "b7ad6b7169203331";

/// A running receiver: where to send OTLP, and the records it decoded.
pub struct Receiver {
    process: Child,
    pub url: String,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("received.jsonl");
        let mut process = Command::new(python_sdk())
            .arg(script("otlp_receiver.py"))
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the OTLP receiver (python3 with opentelemetry-proto)");
        let stdout = process.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the receiver said where it listens in time")
            .expect("read the receiver's stdout")
            .expect("the receiver printed its address");
        let url = line
            .strip_prefix("LISTENING ")
            .unwrap_or_else(|| panic!("the receiver said {line:?}"))
            .to_owned();
        Receiver {
            process,
            url,
            out,
            _dir: dir,
        }
    }

    /// Every record so far.
    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }

    fn of(&self, signal: &str) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter(|record| record["signal"] == signal)
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.process.start_kill();
    }
}

/// Stops the gateway as an operator does (SIGTERM), so it flushes what it holds.
async fn stop(process: &mut Child) {
    let pid = process.id().expect("the gateway runs") as i32;
    // SAFETY: signalling a child this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    tokio::time::timeout(Duration::from_secs(30), process.wait())
        .await
        .expect("the gateway stopped in time")
        .expect("wait for the gateway");
}

/// A call of `tool` from a client span `parent` of `trace`, with trace state and baggage.
pub fn traced_call(tool: &str, trace: &str, parent: &str) -> CallToolRequestParams {
    let mut params = call(tool, json!({}));
    let mut meta = RequestMetaObject::new();
    meta.set_traceparent(format!("00-{trace}-{parent}-01"));
    meta.set_tracestate("client=1");
    meta.set_baggage("user=alice");
    params.meta = Some(meta);
    params
}

/// The `_meta` (and `http_traceparent`) the fake server's `meta` tool saw.
fn seen(result: &rmcp::model::CallToolResult) -> Value {
    serde_json::from_str(&text_of(result)).expect("meta answers JSON")
}

/// `00-TRACE-SPAN-01` → (TRACE, SPAN).
fn ids(traceparent: &Value) -> (String, String) {
    let text = traceparent
        .as_str()
        .unwrap_or_else(|| panic!("a traceparent: {traceparent}"));
    let parts: Vec<&str> = text.split('-').collect();
    assert_eq!(parts.len(), 4, "{text}");
    (parts[1].to_owned(), parts[2].to_owned())
}

fn span_named<'s>(spans: &'s [Value], trace: &str, kind: &str, name: &str) -> Vec<&'s Value> {
    spans
        .iter()
        .filter(|span| span["trace_id"] == trace && span["kind"] == kind && span["name"] == name)
        .collect()
}

fn event_names(span: &Value) -> Vec<String> {
    span["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|event| event["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A gateway over an HTTP fake `web`, with `env` added to its environment, and a client
/// that called `web__meta` from the client span `PARENT` of `TRACE`: the gateway, the
/// client, what the server saw, and the fake and the config file (kept with them).
async fn call_web_meta(env: &[(&str, &str)]) -> (Child, Client, Value, (FakeHttp, ConfigFile)) {
    let web = FakeHttp::start("http", &["--name", "web"]).await;
    let file = config(&http_server("web", &web.url("http"), "streamable-http"));
    let (process, url) = spawn_gateway_http_with_env(&file, env).await;
    let (client, _) = http_client(&url).await;
    let result = client
        .call_tool(traced_call("web__meta", TRACE, PARENT))
        .await
        .expect("web__meta");
    (process, client, seen(&result), (web, file))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_trace_runs_through_a_crash_a_decision_and_a_retry_to_stdio_and_http_servers() {
    let receiver = Receiver::start().await;
    let web = FakeHttp::start("http", &["--name", "web"]).await;
    let marks = tempfile::tempdir().expect("tempdir");
    let crashed = marks.path().join("crashed");
    let text = format!(
        "[gateway.telemetry]\nendpoint = {:?}\nheaders = {{ \"x-api-key\" = \"${{OTLP_KEY}}\" }}\n\
         resource_attributes = {{ \"deployment.environment.name\" = \"test\" }}\n\
         trace_url = \"http://traces.example/trace/{{trace_id}}\"\n\n{}{}",
        receiver.url,
        stdio_server("local", &["--crash-once", crashed.to_str().unwrap()]),
        http_server("web", &web.url("http"), "streamable-http"),
    );
    let mut gateway = start(
        config(&text),
        &[],
        &[
            ("OTLP_KEY", "otlp-key-8d1e2f"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_BLRP_SCHEDULE_DELAY", "100"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "500"),
        ],
    )
    .await;
    let (client, _) = http_client(&gateway.mcp).await;

    // At once, as clients do: the first call waits for the stdio server, whose first
    // process crashes on it; the policy retries it on the restarted process.
    let result = client
        .call_tool(traced_call("local__meta", TRACE, PARENT))
        .await
        .expect("the call was retried after the crash");
    let from_stdio = seen(&result);
    let result = client
        .call_tool(traced_call("web__meta", TRACE, PARENT))
        .await
        .expect("web__meta");
    let from_http = seen(&result);

    // A 2026-07-28 client with the context in its HTTP headers only.
    let http = reqwest::Client::new();
    let request = json!({
        "jsonrpc": "2.0", "id": 41, "method": "tools/call",
        "params": {"name": "web__meta", "arguments": {}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}
        }}
    });
    let answer = http
        .post(&gateway.mcp)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "web__meta")
        .header(
            "traceparent",
            format!("00-{HEADER_TRACE}-{HEADER_PARENT}-01"),
        )
        .body(request.to_string())
        .send()
        .await
        .expect("a modern tools/call");
    assert!(answer.status().is_success(), "{}", answer.status());
    let body = answer.text().await.expect("the answer");
    let from_header = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .chain(std::iter::once(body.as_str()))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find_map(|message| {
            let text = message["result"]["content"][0]["text"].as_str()?.to_owned();
            serde_json::from_str::<Value>(&text).ok()
        })
        .unwrap_or_else(|| panic!("no meta in {body}"));

    // The status page's side: the decision carries its trace, the gateway its viewer.
    let (_, decisions) = gateway.get("/decisions").await;
    let classify = decisions["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|decision| decision["decision"] == "classify" && decision["server"] == "local")
        .unwrap_or_else(|| panic!("a classify decision for local: {decisions}"))
        .clone();
    let (_, about) = gateway.get("/gateway").await;
    let metrics = gateway.get_text("/metrics").await;
    drop(client);
    stop(&mut gateway.process).await;

    let spans = receiver.of("span");
    let undecodable = receiver.of("undecodable");
    assert!(undecodable.is_empty(), "{undecodable:?}");
    // The configured header's secret went out as that header, and nowhere else.
    let exported: Vec<Value> = receiver
        .records()
        .into_iter()
        .filter(|record| record["signal"] != "request")
        .collect();
    let exported_text = serde_json::to_string(&exported).unwrap();
    assert!(
        !exported_text.contains("otlp-key-8d1e2f"),
        "the secret was exported"
    );
    for request in receiver.of("request") {
        assert_eq!(
            request["headers"]["x-api-key"], "otlp-key-8d1e2f",
            "{request}"
        );
        assert_eq!(
            request["content_type"], "application/x-protobuf",
            "{request}"
        );
    }

    // The stdio call: one SERVER span under the client's, with the recovery on it.
    let server = span_named(&spans, TRACE, "SPAN_KIND_SERVER", "tools/call local__meta");
    assert_eq!(server.len(), 1, "{spans:#?}");
    let server = server[0];
    assert_eq!(server["parent_span_id"], PARENT, "{server}");
    let attributes = &server["attributes"];
    for (key, value) in [
        ("mcp.method.name", json!("tools/call")),
        ("gen_ai.tool.name", json!("local__meta")),
        ("gen_ai.operation.name", json!("execute_tool")),
        ("network.transport", json!("tcp")),
        ("network.protocol.name", json!("http")),
        ("wardgate.server", json!("local")),
        ("wardgate.server.status", json!("online")),
        ("wardgate.attempts", json!(2)),
    ] {
        assert_eq!(attributes[key], value, "{key} of {server}");
    }
    for key in [
        "jsonrpc.request.id",
        "mcp.session.id",
        "mcp.protocol.version",
    ] {
        assert!(attributes[key].is_string(), "{key} of {server}");
    }
    assert_eq!(server["resource"]["service.name"], "wardgate", "{server}");
    assert_eq!(server["resource"]["deployment.environment.name"], "test");
    let events = event_names(server);
    assert!(
        events.contains(&"wardgate.policy.decision".to_owned())
            && events.contains(&"wardgate.retry".to_owned()),
        "{events:?}"
    );
    let decision = server["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|event| {
            event["name"] == "wardgate.policy.decision"
                && event["attributes"]["question"] == "classify"
        })
        .unwrap_or_else(|| panic!("a classify decision on {server}"));
    assert_eq!(
        decision["attributes"]["answered_by"], "builtin",
        "{decision}"
    );
    assert!(
        decision["attributes"]["verdict"]
            .as_str()
            .unwrap_or_default()
            .contains("retry"),
        "{decision}"
    );
    assert!(decision["attributes"]["inputs"]
        .as_str()
        .unwrap_or_default()
        .contains("attempt"));
    assert!(decision["attributes"]["duration_us"].is_i64(), "{decision}");
    let retry = server["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|event| event["name"] == "wardgate.retry")
        .unwrap();
    assert_eq!(retry["attributes"]["attempt"], 1, "{retry}");

    // Its two attempts, each a CLIENT span: the first broken by the crash, the second
    // answered; the server saw the second's context.
    let server_id = server["span_id"].as_str().unwrap();
    let mut attempts: Vec<&Value> =
        span_named(&spans, TRACE, "SPAN_KIND_CLIENT", "tools/call meta")
            .into_iter()
            .filter(|span| span["parent_span_id"] == server_id)
            .collect();
    attempts.sort_by_key(|span| span["attributes"]["wardgate.attempt"].as_i64());
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    assert_eq!(attempts[0]["attributes"]["wardgate.attempt"], 1);
    assert_eq!(
        attempts[0]["status"]["code"], "STATUS_CODE_ERROR",
        "{}",
        attempts[0]
    );
    assert!(
        attempts[0]["attributes"]["error.type"].is_string(),
        "{}",
        attempts[0]
    );
    assert_eq!(attempts[1]["attributes"]["wardgate.attempt"], 2);
    assert_ne!(
        attempts[1]["status"]["code"], "STATUS_CODE_ERROR",
        "{}",
        attempts[1]
    );
    for attempt in &attempts {
        assert_eq!(
            attempt["attributes"]["network.transport"], "pipe",
            "{attempt}"
        );
        assert_eq!(
            attempt["attributes"]["wardgate.server"], "local",
            "{attempt}"
        );
        assert_eq!(
            attempt["attributes"]["gen_ai.tool.name"], "meta",
            "{attempt}"
        );
    }
    assert_eq!(
        ids(&from_stdio["traceparent"]),
        (
            TRACE.to_owned(),
            attempts[1]["span_id"].as_str().unwrap().to_owned()
        ),
        "the stdio server saw {from_stdio}"
    );
    assert_eq!(from_stdio["tracestate"], "client=1", "{from_stdio}");
    assert!(
        from_stdio.get("baggage").is_none(),
        "baggage is not forwarded unless configured: {from_stdio}"
    );

    // The HTTP call: its CLIENT span's context in `_meta` and in the POST's header.
    let server = span_named(&spans, TRACE, "SPAN_KIND_SERVER", "tools/call web__meta");
    assert_eq!(server.len(), 1, "{spans:#?}");
    let client_spans: Vec<&Value> =
        span_named(&spans, TRACE, "SPAN_KIND_CLIENT", "tools/call meta")
            .into_iter()
            .filter(|span| span["parent_span_id"] == server[0]["span_id"])
            .collect();
    assert_eq!(client_spans.len(), 1, "{spans:#?}");
    assert_eq!(client_spans[0]["attributes"]["network.transport"], "tcp");
    let expected = (
        TRACE.to_owned(),
        client_spans[0]["span_id"].as_str().unwrap().to_owned(),
    );
    assert_eq!(ids(&from_http["traceparent"]), expected, "{from_http}");
    assert_eq!(ids(&from_http["http_traceparent"]), expected, "{from_http}");

    // The header's context, for a client that sends none in `_meta`.
    let server = span_named(
        &spans,
        HEADER_TRACE,
        "SPAN_KIND_SERVER",
        "tools/call web__meta",
    );
    assert_eq!(server.len(), 1, "{spans:#?}");
    assert_eq!(server[0]["parent_span_id"], HEADER_PARENT);
    assert_eq!(
        server[0]["attributes"]["mcp.protocol.version"],
        "2026-07-28"
    );
    assert!(
        server[0]["attributes"]["mcp.session.id"].is_null(),
        "{}",
        server[0]
    );
    assert_eq!(
        ids(&from_header["traceparent"]).0,
        HEADER_TRACE,
        "{from_header}"
    );

    // The crash and the restart: statuses the call saw, as events of its span, and the
    // supervisor's status changes as spans of their own; its crash decision too.
    let server_span = span_named(&spans, TRACE, "SPAN_KIND_SERVER", "tools/call local__meta")[0];
    let seen_statuses: Vec<&Value> = server_span["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["name"] == "wardgate.server.status")
        .map(|event| &event["attributes"]["status"])
        .collect();
    assert!(
        seen_statuses.contains(&&json!("online")),
        "{seen_statuses:?}"
    );
    assert!(
        seen_statuses.len() >= 2,
        "the call saw the restart: {seen_statuses:?}"
    );
    let own = |name: &str| {
        spans.iter().any(|span| {
            span["kind"] == "SPAN_KIND_INTERNAL"
                && span["name"] == name
                && span["attributes"]["wardgate.server"] == "local"
        })
    };
    assert!(
        own("server local restarting"),
        "the status change's span: {spans:#?}"
    );
    assert!(
        own("server local crash"),
        "the crash decision's span: {spans:#?}"
    );

    // Metrics by the conventions, over OTLP and on /metrics.
    let metrics_sent: BTreeMap<String, Value> = receiver
        .of("metric")
        .into_iter()
        .map(|metric| (metric["name"].as_str().unwrap().to_owned(), metric))
        .collect();
    for name in [
        "mcp.server.operation.duration",
        "mcp.client.operation.duration",
        "mcp.server.session.duration",
    ] {
        let metric = metrics_sent
            .get(name)
            .unwrap_or_else(|| panic!("{name} in {:?}", metrics_sent.keys()));
        assert_eq!(metric["unit"], "s", "{metric}");
        assert_eq!(metric["kind"], "histogram", "{metric}");
    }
    for name in [
        "mcp_server_operation_duration_seconds_bucket",
        "mcp_client_operation_duration_seconds_bucket",
        "wardgate_requests_total",
    ] {
        assert!(metrics.contains(name), "{name} on /metrics:\n{metrics}");
    }

    // Log lines as OTLP records, with the trace they were logged in.
    let logs = receiver.of("log");
    assert!(
        logs.iter().any(|log| log["trace_id"] == TRACE
            && log["body"]
                .as_str()
                .is_some_and(|body| body.contains("retrying"))),
        "the retry's log line with its trace: {logs:#?}"
    );

    // The status page: the decision's trace, and where to show it.
    assert_eq!(classify["trace_id"], TRACE, "{classify}");
    assert_eq!(
        about["trace_url"], "http://traces.example/trace/{trace_id}",
        "{about}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_telemetry_nothing_is_exported_and_a_clients_context_passes_through_unchanged() {
    let receiver = Receiver::start().await;
    // An endpoint in the environment, turned off by OTEL_SDK_DISABLED.
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        ("OTEL_SDK_DISABLED", "true"),
    ];
    let (mut process, client, seen, _web) = call_web_meta(&env).await;
    assert_eq!(
        seen["traceparent"],
        format!("00-{TRACE}-{PARENT}-01"),
        "{seen}"
    );
    assert_eq!(seen["tracestate"], "client=1", "{seen}");
    assert_eq!(
        seen["http_traceparent"],
        format!("00-{TRACE}-{PARENT}-01"),
        "{seen}"
    );
    assert!(seen.get("baggage").is_none(), "{seen}");
    drop(client);
    stop(&mut process).await;
    assert_eq!(
        receiver.records(),
        Vec::<Value>::new(),
        "nothing is exported"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standard_variables_alone_turn_traces_on_with_their_service_sampler_and_baggage() {
    let receiver = Receiver::start().await;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        ("OTEL_SERVICE_NAME", "gateway-east"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment.name=staging",
        ),
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "1.0"),
        ("OTEL_PROPAGATORS", "tracecontext,baggage"),
        ("OTEL_METRICS_EXPORTER", "none"),
        ("OTEL_LOGS_EXPORTER", "none"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let (mut process, client, seen, _web) = call_web_meta(&env).await;
    assert_eq!(ids(&seen["traceparent"]).0, TRACE, "{seen}");
    // A client that sends no context starts a trace at the gateway.
    let untraced = client
        .call_tool(call("web__meta", json!({})))
        .await
        .expect("web__meta without context");
    let started = ids(&self::seen(&untraced)["traceparent"]).0;
    assert_ne!(started, TRACE);
    assert_ne!(
        ids(&seen["traceparent"]).1,
        PARENT,
        "the gateway's span is the parent: {seen}"
    );
    assert_eq!(
        seen["baggage"], "user=alice",
        "baggage, as OTEL_PROPAGATORS asks: {seen}"
    );
    drop(client);
    stop(&mut process).await;
    let spans = receiver.of("span");
    let server = span_named(&spans, TRACE, "SPAN_KIND_SERVER", "tools/call web__meta");
    assert_eq!(server.len(), 1, "{spans:#?}");
    assert_eq!(server[0]["resource"]["service.name"], "gateway-east");
    assert_eq!(
        server[0]["resource"]["deployment.environment.name"],
        "staging"
    );
    let root = span_named(&spans, &started, "SPAN_KIND_SERVER", "tools/call web__meta");
    assert_eq!(root.len(), 1, "{spans:#?}");
    assert_eq!(
        root[0]["parent_span_id"], "",
        "a new trace's root: {}",
        root[0]
    );
    assert!(
        receiver.of("metric").is_empty(),
        "OTEL_METRICS_EXPORTER=none"
    );
    assert!(receiver.of("log").is_empty(), "OTEL_LOGS_EXPORTER=none");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsampled_request_makes_no_span_and_tells_the_server_so() {
    let receiver = Receiver::start().await;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        ("OTEL_TRACES_SAMPLER", "always_off"),
        ("OTEL_METRICS_EXPORTER", "none"),
        ("OTEL_LOGS_EXPORTER", "none"),
    ];
    let (mut process, client, seen, _web) = call_web_meta(&env).await;
    // The client's context goes on as it came.
    assert_eq!(
        seen["traceparent"],
        format!("00-{TRACE}-{PARENT}-01"),
        "{seen}"
    );
    // A client without one: the server is told the trace is not sampled.
    let untraced = client
        .call_tool(call("web__meta", json!({})))
        .await
        .expect("web__meta without context");
    let told = self::seen(&untraced)["traceparent"].clone();
    let (trace, _) = ids(&told);
    assert!(
        told.as_str().unwrap().ends_with("-00") && trace != TRACE,
        "{told}"
    );
    drop(client);
    stop(&mut process).await;
    assert!(receiver.of("span").is_empty(), "{:#?}", receiver.of("span"));
}
