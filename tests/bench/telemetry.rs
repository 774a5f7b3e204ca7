//! Benchmark: what OpenTelemetry costs a call, measured as the lean-client benchmark
//! measures (`tools/call echo` on `@modelcontextprotocol/server-everything` over stdio,
//! through `wardgate --listen`, 16 lean keep-alive clients), in one run:
//! - telemetry off (no `[gateway.telemetry]`, no `OTEL_*` variable);
//! - traces, metrics and logs exported over OTLP/HTTP, every trace sampled;
//! - the same with 1 % of traces sampled (`parentbased_traceidratio`, 0.01);
//! - with `WARDGATE_BENCH_BASELINE=/path/to/wardgate`, an earlier build (telemetry off), so
//!   "off" is compared with the gateway before telemetry existed.
//!
//! The collector is a sink in this process that answers every OTLP export with 200 and
//! counts the bytes, so its own work is not on the gateway's cores. The targets are
//! measured in rounds, one after another in each round, and each figure is the median of
//! its rounds: the noise of a 2-core machine falls on all of them alike.
//!
//! Run: `cargo bench -p wardgate-tests --bench telemetry`.

#[path = "../support/gateway_binary.rs"]
mod gateway_binary;
#[path = "../support/lean_bench.rs"]
mod lean_bench;
#[path = "../support/lean_client.rs"]
mod lean_client;
#[path = "../support/measure.rs"]
mod measure;
#[path = "../support/node.rs"]
mod node;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http_body_util::BodyExt;
use lean_bench::{interleaved, print_targets, Target};

const CLIENTS: usize = 16;
const PER_CLIENT: usize = 1000;
const ROUNDS: usize = 9;

/// An OTLP/HTTP endpoint that takes everything: requests and bytes received.
#[derive(Default)]
struct Sink {
    requests: AtomicU64,
    bytes: AtomicU64,
}

async fn start_sink() -> (String, Arc<Sink>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let sink = Arc::new(Sink::default());
    let counted = sink.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let sink = counted.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let sink = sink.clone();
                        async move {
                            let body = request.into_body().collect().await?.to_bytes();
                            sink.requests.fetch_add(1, Ordering::Relaxed);
                            sink.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                            let answer = hyper::Response::builder()
                                .header("content-type", "application/x-protobuf")
                                .body(http_body_util::Full::new(bytes::Bytes::new()))
                                .unwrap();
                            Ok::<_, hyper::Error>(answer)
                        }
                    },
                );
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    (url, sink)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let everything = node::server_everything();
        let everything = everything.to_str().unwrap();
        let (sink_url, sink) = start_sink().await;
        let dir = tempfile::tempdir().unwrap();
        let server = format!(
            "[servers.everything]\ncommand = \"node\"\nargs = [{everything:?}, \"stdio\"]\n"
        );
        let off = dir.path().join("off.toml");
        std::fs::write(&off, &server).unwrap();
        let traced = |ratio: &str| {
            let path = dir.path().join(format!("traced-{ratio}.toml"));
            std::fs::write(
                &path,
                format!(
                    "[gateway.telemetry]\nendpoint = {sink_url:?}\nsampler = \"parentbased_traceidratio\"\nsample_ratio = {ratio}\n\n{server}"
                ),
            )
            .unwrap();
            path
        };
        let all = traced("1.0");
        let some = traced("0.01");
        let wardgate: PathBuf = gateway_binary::gateway_binary();
        let mut targets = Vec::new();
        if let Ok(baseline) = std::env::var("WARDGATE_BENCH_BASELINE") {
            targets.push(Target::start(Path::new(&baseline), "baseline build, telemetry off", &off, &[]).await);
        }
        targets.push(Target::start(&wardgate, "telemetry off", &off, &[]).await);
        targets.push(Target::start(&wardgate, "OTLP traces+metrics+logs, 100 % sampled", &all, &[]).await);
        targets.push(Target::start(&wardgate, "OTLP traces+metrics+logs, 1 % sampled", &some, &[]).await);
        // Where the cost is (`WARDGATE_BENCH_SPLIT=1`): each signal alone, every trace sampled.
        if std::env::var_os("WARDGATE_BENCH_SPLIT").is_some() {
            let none = |signal: &'static str| (signal, "none".to_owned());
            let traces_only = [none("OTEL_METRICS_EXPORTER"), none("OTEL_LOGS_EXPORTER")];
            let metrics_only = [none("OTEL_TRACES_EXPORTER"), none("OTEL_LOGS_EXPORTER")];
            targets.push(Target::start(&wardgate, "split: traces only, 100 % sampled", &all, &traces_only).await);
            targets.push(Target::start(&wardgate, "split: metrics only", &all, &metrics_only).await);
        }

        println!(
            "tools/call echo on server-everything (stdio) through wardgate --listen; {CLIENTS} lean keep-alive clients x {PER_CLIENT} calls; median of {ROUNDS} rounds, targets interleaved"
        );
        interleaved(&mut targets, "everything__echo", CLIENTS, PER_CLIENT, ROUNDS).await;
        print_targets(&targets, "p50", |f| f.p50_us);
        let named = |name: &str| targets.iter().find(|target| target.name.starts_with(name));
        let of = |name: &str| named(name).map(|target| target.median(|f| f.calls_per_second));
        let cpu_of = |name: &str| {
            named(name)
                .filter(|target| !target.cpu_per_call_us.is_empty())
                .map(|target| lean_bench::median(&target.cpu_per_call_us))
        };
        if let Some(off) = of("telemetry off") {
            for (name, limit) in [("OTLP traces+metrics+logs, 100", 0.95), ("OTLP traces+metrics+logs, 1 %", 0.98)] {
                if let Some(on) = of(name) {
                    println!("{name}…: calls/s / telemetry off = {:.3} (target >= {limit:.2})", on / off);
                }
                if let (Some(on), Some(off)) = (cpu_of(name), cpu_of("telemetry off")) {
                    println!("{name}…: the gateway's CPU per call / telemetry off = {:.3} ({:+.1} us)", on / off, on - off);
                }
            }
            if let Some(baseline) = of("baseline") {
                println!("telemetry off / baseline build: calls/s {:.3} (target: within the noise, ~1.00)", off / baseline);
            }
        }
        println!(
            "the sink received {} OTLP requests, {} KiB",
            sink.requests.load(Ordering::Relaxed),
            sink.bytes.load(Ordering::Relaxed) / 1024
        );
    });
}
