//! Benchmark: the README's run command as a newcomer meets it. `wardgate --listen
//! 127.0.0.1:0` in an empty directory with an empty home (no config file anywhere, so the
//! built-in demo servers), and a client that asks at once: the time from the spawn to the
//! first complete `tools/list` and to the first successful `tools/call` (`math__add`).
//! Prints the median and the worst of several cold starts. `WARDGATE_BENCH_GATEWAY=path`
//! measures another build.
//!
//! Run: `cargo bench -p wardgate-tests --bench first_call`.

use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;
use tokio::io::{AsyncBufReadExt, BufReader};

#[path = "../support/gateway_binary.rs"]
mod gateway_binary;
#[path = "../support/newcomer.rs"]
mod newcomer;

const RUNS: usize = 7;
const DEMO_TOOLS: usize = 6;

/// One cold start: (to the first full tools/list, to the first call answered).
async fn cold_start() -> (Duration, Duration) {
    let home = tempfile::tempdir().unwrap();
    let wardgate = gateway_binary::gateway_binary();
    let started = Instant::now();
    let mut gateway = newcomer::spawn_with_no_config(&wardgate, home.path());
    let mut lines = BufReader::new(gateway.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the gateway listened");
        if let (true, Some(index)) = (line.contains("Streamable HTTP"), line.find("http://")) {
            break line[index..].split_whitespace().next().unwrap().to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url);
    let client = ().serve(transport).await.unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    assert_eq!(tools.len(), DEMO_TOOLS, "the first tools/list: {tools:?}");
    let listed = started.elapsed();
    let mut add = CallToolRequestParams::new("math__add");
    add.arguments = serde_json::json!({"a": 2, "b": 3}).as_object().cloned();
    client.peer().call_tool(add).await.expect("the first call");
    let called = started.elapsed();
    drop(client);
    let _ = gateway.kill().await;
    (listed, called)
}

fn median(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    (samples[samples.len() / 2], *samples.last().unwrap())
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (mut listed, mut called) = (Vec::new(), Vec::new());
    runtime.block_on(async {
        cold_start().await; // warm the page cache
        for _ in 0..RUNS {
            let (list, call) = cold_start().await;
            listed.push(list);
            called.push(call);
        }
    });
    let (list_median, list_worst) = median(listed);
    let (call_median, call_worst) = median(called);
    println!("first_call: {RUNS} cold starts of `wardgate --listen 127.0.0.1:0` with no config");
    println!(
        "  spawn -> first tools/list with all {DEMO_TOOLS} demo tools: median {:.0} ms, worst {:.0} ms",
        list_median.as_secs_f64() * 1e3,
        list_worst.as_secs_f64() * 1e3
    );
    println!(
        "  spawn -> first math__add answered:                 median {:.0} ms, worst {:.0} ms",
        call_median.as_secs_f64() * 1e3,
        call_worst.as_secs_f64() * 1e3
    );
}
