//! The fuzz target of an upstream's JSON-RPC session: a stdio server's lines through the
//! gateway's client of it (a client's lines are `wardgate_downstream::fuzzing`'s).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};

use crate::catalogue::{Catalogue, Snapshot};
use crate::sessions::Sessions;
use crate::upstream::stdio::ServerOutput;
use crate::upstream::{Links, StreamFault, UpstreamHandler};

/// The lines of `data`, each with its `\n`.
pub fn lines(data: &[u8]) -> Vec<&[u8]> {
    data.split_inclusive(|&byte| byte == b'\n').collect()
}

/// The `id` of a JSON-RPC message, as its JSON text, and whether it is a request.
pub fn id_of(line: &[u8]) -> Option<(String, bool)> {
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
            Default::default(),
        );
        let links = Links::new(
            "fuzzed",
            "fuzzed",
            1,
            Arc::default(),
            Arc::new(Sessions::default()),
            None,
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
