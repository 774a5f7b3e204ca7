//! In-memory upstream connections for tests that script their servers (the supervisor's
//! unit tests, `tests/it/agreement.rs`): any rmcp `ServerHandler` served over a pipe in
//! this process, behind the same `Connection` the real transports give, with a stand-in
//! process whose exit the test decides.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{ClientRequest, JsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::Transport;
use rmcp::{RoleClient, ServerHandler, ServiceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use wardgate_policy::{ExitInfo, FailureKind};

use super::{Connection, Links, ProcessControl, ProcessEnd, StreamFault, UpstreamHandler};
use crate::failure::{Classified, UpstreamError};

/// The stand-in for a stdio server's process: it "exits" when told to, and its server stops.
#[derive(Clone)]
pub struct MemoryProcess {
    exit: Arc<watch::Sender<Option<ProcessEnd>>>,
    server: CancellationToken,
}

impl MemoryProcess {
    /// The process exits (once; later calls change nothing) and its server stops serving.
    pub fn end(&self, exit: ExitInfo) {
        self.exit.send_if_modified(|current| {
            current
                .is_none()
                .then(|| {
                    *current = Some(ProcessEnd {
                        exit,
                        last_words: Vec::new(),
                    })
                })
                .is_some()
        });
        self.server.cancel();
    }
}

impl ProcessControl for MemoryProcess {
    fn exit_watch(&self) -> watch::Receiver<Option<ProcessEnd>> {
        self.exit.subscribe()
    }
    fn stream_fault(&self) -> StreamFault {
        StreamFault::default()
    }
    fn kill(&self) {
        self.end(ExitInfo {
            code: None,
            signal: Some(9),
        });
    }
    fn shutdown(&self, _grace: Duration, _kill_grace: Duration) -> BoxFuture<'_, ExitInfo> {
        let exit = ExitInfo {
            code: Some(0),
            signal: None,
        };
        self.end(exit);
        Box::pin(async move { exit })
    }
}

/// Serve `handler` in this process and connect to it as the gateway would (`initialize`
/// included). `stdio`: the connection has a process, as a stdio server's does; the
/// returned `MemoryProcess` ends it (or, for HTTP, just stops the server).
pub async fn connect<H: ServerHandler>(
    handler: H,
    links: Arc<Links>,
    stdio: bool,
) -> Result<(Connection, MemoryProcess), UpstreamError> {
    connect_scripted(
        handler,
        links,
        stdio,
        Arc::new(|_: &ClientRequest| Delivery::Deliver),
    )
    .await
}

/// What the connection does with one request the gateway sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The server gets it.
    Deliver,
    /// It is lost on the way: the server never sees it, and it is never answered.
    Lose,
    /// Sending it fails, as a real transport's send fails (refused, reset, HTTP 401 ...),
    /// with a failure of this kind, in these words.
    Fail { kind: FailureKind, message: String },
}

/// Decides each request's [`Delivery`], in the order the gateway sends them.
pub type Deliveries = Arc<dyn Fn(&ClientRequest) -> Delivery + Send + Sync>;

/// [`connect`], with every request (`initialize` too) delivered as `deliveries` says.
pub async fn connect_scripted<H: ServerHandler>(
    handler: H,
    links: Arc<Links>,
    stdio: bool,
    deliveries: Deliveries,
) -> Result<(Connection, MemoryProcess), UpstreamError> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (client_read, client_write) = tokio::io::split(client_io);
    let server = CancellationToken::new();
    let token = server.clone();
    tokio::spawn(async move {
        if let Ok(running) = handler
            .serve_with_ct(tokio::io::split(server_io), token)
            .await
        {
            let _ = running.waiting().await;
        }
    });
    let service = UpstreamHandler {
        links: links.clone(),
    }
    .serve(Scripted {
        inner: AsyncRwTransport::new(client_read, client_write),
        deliveries,
    })
    .await
    .map_err(|error| UpstreamError::new(&links.server, FailureKind::Protocol, error.to_string()))?;
    let process = MemoryProcess {
        exit: Arc::new(watch::channel(None).0),
        server,
    };
    let control: Option<Box<dyn ProcessControl>> =
        stdio.then(|| Box::new(process.clone()) as Box<dyn ProcessControl>);
    let connection = Connection {
        service,
        process: control,
        links,
    };
    Ok((connection, process))
}

/// The gateway's end of an in-memory connection, delivering each request as scripted.
struct Scripted<T> {
    inner: T,
    deliveries: Deliveries,
}

impl<T: Transport<RoleClient, Error = std::io::Error>> Transport<RoleClient> for Scripted<T> {
    type Error = Classified;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Classified>> + Send + 'static {
        let delivery = match &item {
            JsonRpcMessage::Request(request) => (self.deliveries)(&request.request),
            _ => Delivery::Deliver,
        };
        let delivered = (delivery == Delivery::Deliver).then(|| self.inner.send(item));
        async move {
            match (delivered, delivery) {
                (Some(sending), _) => sending.await.map_err(|error| Classified::new(None, error)),
                (None, Delivery::Fail { kind, message }) => {
                    Err(Classified::new(Some(kind), std::io::Error::other(message)))
                }
                (None, _) => Ok(()),
            }
        }
    }

    fn receive(
        &mut self,
    ) -> impl std::future::Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    async fn close(&mut self) -> Result<(), Classified> {
        self.inner
            .close()
            .await
            .map_err(|error| Classified::new(None, error))
    }
}
