//! The runtimes the async targets run each input on.

use std::future::Future;

/// A current-thread runtime whose clock is paused: time moves only when every task waits on
/// a timer, so timeouts cost no real time and a run does not depend on the machine's speed.
fn paused() -> tokio::runtime::Runtime {
    log_to_nowhere();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

/// Runs `future` to its end on a runtime of its own, so no task of one input outlives it.
#[allow(dead_code)]
pub fn fresh<F: Future>(future: F) -> F::Output {
    paused().block_on(future)
}

/// Runs `future` to its end on the runtime every input of this process runs on, for targets
/// whose state is made once.
#[allow(dead_code)]
pub fn shared<F: Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = paused();
    }
    RUNTIME.with(|runtime| runtime.block_on(future))
}

/// Formats the gateway's own log lines at debug level and throws them away, as a gateway
/// run with `--log-level debug` would format them: what a log line shows of a peer's text
/// (escaped, cut) is part of handling it. Other crates' lines stay off: rmcp's would cost
/// more than the gateway's work.
fn log_to_nowhere() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let gateway_lines = tracing_subscriber::filter::filter_fn(|metadata| {
            metadata.target().starts_with("wardgate") && *metadata.level() <= tracing::Level::DEBUG
        });
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(std::io::sink)
            .with_filter(gateway_lines);
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer));
    });
}
