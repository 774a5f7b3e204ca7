//! The fuzz targets of JSON-RPC sessions: a client's lines through the gateway's own MCP
//! server, and an upstream stdio server's lines through the gateway's client of it.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::*;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};

use crate::catalogue::{Catalogue, Snapshot};
use crate::commands::{CommandError, CommandQueue, CommandTarget, QueueSettings};
use crate::config::{Config, TransportConfig};
use crate::downstream::SessionHandler;
use crate::failure::UpstreamError;
use crate::gateway::Gateway;
use crate::lock::lock;
use crate::sessions::Sessions;
use crate::upstream::stdio::ServerOutput;
use crate::upstream::{memory, Connection, Connector, Links, StreamFault, UpstreamHandler};

/// The lines of `data`, each with its `\n`.
fn lines(data: &[u8]) -> Vec<&[u8]> {
    data.split_inclusive(|&byte| byte == b'\n').collect()
}

/// The `id` of a JSON-RPC message, as its JSON text, and whether it is a request.
fn id_of(line: &[u8]) -> Option<(String, bool)> {
    let message: Value = serde_json::from_slice(line).ok()?;
    let id = message.get("id")?.to_string();
    Some((id, message.get("method").is_some()))
}

/// The longest line the fuzzed stdio server may send: small, so the fuzzer reaches the cut.
const FUZZ_LINE_LIMIT: usize = 4096;

/// Plays an upstream stdio server whose every line after the handshake is `data`'s, to the
/// gateway's client of it: the line limit in front of rmcp, rmcp's framing and decoding,
/// the gateway's handler of what servers send (progress, logs, list changes, requests for
/// sampling, elicitation and roots), discovery of tools, prompts and resources, and the
/// catalogue built from what was discovered. A response line is held back until the
/// gateway has sent the request it answers, so responses meet their requests. Returns how
/// many tools the catalogue lists, or `None` when the handshake or discovery failed.
pub async fn server_messages(data: &[u8]) -> Option<usize> {
    let (gateway_side, server_side) = tokio::io::duplex(1 << 20);
    let (gateway_read, gateway_write) = tokio::io::split(gateway_side);
    let (server_read, mut server_write) = tokio::io::split(server_side);
    let sent = watch::channel(HashSet::<String>::new()).0;
    let script = {
        let lines: Vec<Vec<u8>> = lines(data).into_iter().map(<[u8]>::to_vec).collect();
        async move {
            let mut from_gateway = BufReader::new(server_read).lines();
            // The handshake: answer `initialize` with the version it asked for.
            let Ok(Some(initialize)) = from_gateway.next_line().await else {
                return;
            };
            let Ok(initialize) = serde_json::from_str::<Value>(&initialize) else {
                return;
            };
            let answer = serde_json::json!({
                "jsonrpc": "2.0",
                "id": initialize["id"],
                "result": {
                    "protocolVersion": initialize["params"]["protocolVersion"],
                    "capabilities": {
                        "tools": {"listChanged": true},
                        "prompts": {"listChanged": true},
                        "resources": {"subscribe": true, "listChanged": true},
                        "logging": {},
                    },
                    "serverInfo": {"name": "fuzzed", "version": "0"},
                },
            });
            let _ = server_write
                .write_all(format!("{answer}\n").as_bytes())
                .await;
            // Everything the gateway sends from now on is read, so it never blocks.
            let mut requests = sent.subscribe();
            tokio::spawn(async move {
                while let Ok(Some(line)) = from_gateway.next_line().await {
                    if let Some((id, true)) = id_of(line.as_bytes()) {
                        sent.send_modify(|sent| {
                            sent.insert(id);
                        });
                    }
                }
            });
            for line in lines {
                if let Some((id, false)) = id_of(&line) {
                    let asked = requests.wait_for(|sent| sent.contains(&id));
                    let _ = tokio::time::timeout(Duration::from_secs(1), asked).await;
                }
                if server_write.write_all(&line).await.is_err() {
                    return;
                }
            }
            let _ = server_write.shutdown().await;
        }
    };
    let gateway = async {
        let stdout = ServerOutput::new(
            gateway_read,
            "fuzzed",
            FUZZ_LINE_LIMIT,
            StreamFault::default(),
        );
        let links = Links::new(
            "fuzzed",
            "fuzzed",
            1,
            Arc::default(),
            Arc::new(Sessions::default()),
            mpsc::unbounded_channel().0,
        );
        let service = UpstreamHandler { links }
            .serve((stdout, gateway_write))
            .await
            .ok()?;
        let discovered = crate::supervisor::discover("fuzzed", service.peer()).await;
        let listed = discovered.ok().map(catalogue_of);
        let _ = service.waiting().await;
        listed
    };
    let run = async { tokio::join!(script, gateway).1 };
    tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .ok()
        .flatten()
}

/// The catalogue the gateway would build from one server's `snapshot`, listed as clients
/// see it; how many tools it lists.
fn catalogue_of(snapshot: Snapshot) -> usize {
    let snapshots = BTreeMap::from([("fuzzed".to_owned(), (Arc::new(snapshot), true))]);
    let catalogue = Catalogue::build("__", &snapshots, &Default::default());
    let tools = catalogue.tools_of("fuzzed");
    for (name, _) in &tools {
        assert!(
            catalogue.tool(name).is_some(),
            "listed tool {name:?} does not route"
        );
    }
    tools.len()
}

/// Serves a client session whose lines are `data`'s over the gateway's own MCP server (the
/// one stdio and Streamable HTTP clients reach), with one upstream server in memory and
/// the admin tools on: rmcp's framing and decoding, then the gateway's handling of each
/// request (names and URIs split into server and item, the client's grant, forwarding,
/// pagination, subscriptions, the admin tools). Unless `data` opens with its own
/// `initialize` or `server/discover`, the session opens with a plain `initialize` first.
/// Each run has a gateway of its own, so one input cannot change the next one's. Returns
/// how many of the input's requests were answered.
pub async fn client_messages(data: &[u8]) -> usize {
    const CONFIG: &str = "[gateway]\nexpose_admin_tools = true\n\
                          [servers.notes]\ncommand = \"notes\"\n";
    let config = Config::parse(Path::new("fuzz.toml"), CONFIG, &|_| None).expect("the config");
    let gateway = Gateway::start_with(
        &config,
        |_| Arc::new(wardgate_policy::Builtin::default()),
        Arc::new(InMemory),
    );
    let commands = CommandQueue::start(Arc::new(NoCommands), QueueSettings::default());
    gateway.startup_settled().await;

    let (client_side, gateway_side) = tokio::io::duplex(1 << 20);
    let (client_read, mut client_write) = tokio::io::split(client_side);
    let handler = SessionHandler::new(gateway.clone(), commands);
    let session = tokio::spawn(async move {
        if let Ok(running) = handler.serve(tokio::io::split(gateway_side)).await {
            let _ = running.waiting().await;
        }
    });
    let answered = Arc::new(Mutex::new(HashSet::<String>::new()));
    let (answer_seen, mut answers) = watch::channel(());
    let reader = {
        let answered = answered.clone();
        tokio::spawn(async move {
            let mut from_gateway = BufReader::new(client_read).lines();
            while let Ok(Some(line)) = from_gateway.next_line().await {
                if let Some((id, false)) = id_of(line.as_bytes()) {
                    lock(&answered).insert(id);
                    answer_seen.send_replace(());
                }
            }
        })
    };

    let mut lines = lines(data);
    let opens_itself = lines.first().is_some_and(|first| {
        let first = String::from_utf8_lossy(first);
        first.contains("\"initialize\"") || first.contains("\"server/discover\"")
    });
    let handshake = [
        r#"{"jsonrpc":"2.0","id":"fuzz-open","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{},"sampling":{},"elicitation":{}},"clientInfo":{"name":"fuzz","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    ]
    .map(|line| format!("{line}\n"));
    if !opens_itself {
        let _ = client_write.write_all(handshake[0].as_bytes()).await;
        let opened = answers.wait_for(|_| lock(&answered).contains("\"fuzz-open\""));
        let _ = tokio::time::timeout(Duration::from_secs(5), opened).await;
        let _ = client_write.write_all(handshake[1].as_bytes()).await;
    }
    let mut asked = Vec::new();
    for line in lines.drain(..) {
        if let Some((id, true)) = id_of(line) {
            asked.push(id);
        }
        if client_write.write_all(line).await.is_err() {
            break;
        }
    }
    // Every request is answered (or has timed out, on the paused clock) before the client
    // hangs up, so its handling runs to the end.
    let all_answered = answers.wait_for(|_| {
        let answered = lock(&answered);
        asked.iter().all(|id| answered.contains(id))
    });
    let _ = tokio::time::timeout(Duration::from_secs(120), all_answered).await;
    let _ = client_write.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_secs(10), session).await;
    reader.abort();
    gateway.shutdown().await;
    let answered = lock(&answered);
    asked.iter().filter(|id| answered.contains(*id)).count()
}

/// The upstream server of [`client_messages`]: one tool that echoes its arguments, served
/// in memory.
struct InMemory;

impl Connector for InMemory {
    fn connect<'a>(
        &'a self,
        _transport: &'a TransportConfig,
        links: Arc<Links>,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<Connection, UpstreamError>> {
        Box::pin(async move {
            let (connection, _process) = memory::connect(EchoServer, links, true).await?;
            Ok(connection)
        })
    }
}

struct EchoServer;

impl ServerHandler for EchoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "echo",
            "answers with its arguments",
            Arc::new(Default::default()),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = serde_json::to_string(&request.arguments).unwrap_or_default();
        Ok(CallToolResult::success(vec![ContentBlock::text(arguments)]).into())
    }
}

/// The operator command queue's target in [`client_messages`]: every command succeeds at
/// once and changes nothing.
struct NoCommands;

impl CommandTarget for NoCommands {
    fn execute<'a>(
        &'a self,
        _command: &'a crate::commands::Command,
    ) -> BoxFuture<'a, Result<Value, CommandError>> {
        Box::pin(async { Ok(Value::Null) })
    }
}
