//! The runtimes the async targets run each input on.

use std::future::Future;

/// A current-thread runtime whose clock is paused: time moves only when every task waits on
/// a timer, so timeouts cost no real time and a run does not depend on the machine's speed.
fn paused() -> tokio::runtime::Runtime {
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
