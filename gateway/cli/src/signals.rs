//! The Unix signals a serving gateway acts on, sent to the application as its
//! [`Signal`]s: SIGHUP reloads, SIGINT and SIGTERM stop. Registered once, before serving
//! starts, so none is missed.

use tokio::signal::unix::{signal, Signal as Stream, SignalKind};
use wardgate_app::serve::Signal;

/// Start forwarding this process's signals; the application reads them from the receiver.
pub fn forward() -> tokio::sync::mpsc::Receiver<Signal> {
    let (sender, receiver) = tokio::sync::mpsc::channel(8);
    let mut interrupt = signal(SignalKind::interrupt()).ok();
    let mut terminate = signal(SignalKind::terminate()).ok();
    let mut hangup = signal(SignalKind::hangup()).ok();
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                _ = recv(&mut interrupt) => Signal::Stop("SIGINT"),
                _ = recv(&mut terminate) => Signal::Stop("SIGTERM"),
                _ = recv(&mut hangup) => Signal::Reload,
            };
            if sender.send(next).await.is_err() {
                break;
            }
        }
    });
    receiver
}

async fn recv(stream: &mut Option<Stream>) {
    match stream {
        Some(stream) => {
            stream.recv().await;
        }
        None => std::future::pending().await,
    }
}
