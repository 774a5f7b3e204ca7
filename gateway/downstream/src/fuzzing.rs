//! Entry points for the fuzz targets in `fuzz/` that reach the client-facing side: a
//! client's JSON-RPC lines through the gateway's own MCP server (`client_message`), and
//! access tokens checked as `/mcp` checks them (`jwt`). The engine's targets are
//! `wardgate_engine::fuzzing`'s.
//!
//! Not an API (hidden from the docs); only `fuzz/` calls it. The async entry points expect a
//! current-thread runtime on a paused clock (the targets build one).

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
use tokio::sync::watch;

use wardgate_engine::commands::{CommandError, CommandQueue, CommandTarget, QueueSettings};
use wardgate_engine::config::{Config, OAuthSettings, TransportConfig};
use wardgate_engine::failure::UpstreamError;
use wardgate_engine::fuzzing::{id_of, lines};
use wardgate_engine::gateway::Gateway;
use wardgate_engine::lock::lock;
use wardgate_engine::upstream::{memory, Connection, Connector, Links};

use crate::http::jwt::JwtVerifier;
use crate::SessionHandler;

/// Serves a client session whose lines are `data`'s over the gateway's own MCP server (the
/// one stdio and Streamable HTTP clients reach), with one upstream server in memory and
/// the admin tools on: the 2025-11-25 tasks' rewrites of the lines (`runs`), rmcp's
/// framing and decoding, then the gateway's handling of each
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
    let handler = crate::Traced::new(SessionHandler::new(gateway.clone(), commands));
    let session = tokio::spawn(async move {
        // As `serve_stdio` serves a client: through the 2025-11-25 tasks' rewrites.
        let (read, write) = tokio::io::split(gateway_side);
        if let Ok(running) = handler.serve(crate::runs::lines(read, write)).await {
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
        _command: &'a wardgate_engine::commands::Command,
    ) -> BoxFuture<'a, Result<Value, CommandError>> {
        Box::pin(async { Ok(Value::Null) })
    }
}

/// The test issuer's Ed25519 key (PKCS#8), made for the fuzz target and trusted nowhere.
const TEST_KEY: &[u8] = &[
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
    0x91, 0xa9, 0x26, 0x5a, 0x7f, 0x6a, 0xe9, 0x55, 0xdd, 0x78, 0xb5, 0x64, 0xdd, 0x20, 0x92, 0xf9,
    0x85, 0x23, 0xaa, 0xa6, 0xf3, 0xfd, 0x68, 0x85, 0x3a, 0x8e, 0x5d, 0xbc, 0x74, 0x8c, 0x31, 0x4a,
];

/// The test issuer's published keys: [`TEST_KEY`]'s public half.
const TEST_JWKS: &str = r#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"fuzz","alg":"EdDSA","use":"sig","x":"hl6YBc__GoM6sCebn3o-HPSZtMCDJLVl7Elr_LIUCWk"}]}"#;

fn test_issuer() -> OAuthSettings {
    OAuthSettings {
        issuer: "https://issuer.invalid/".to_owned(),
        resource: "https://gateway.invalid/mcp".to_owned(),
        // Never fetched: the clock is paused, so the keys never age, and a token naming
        // an unknown key sees the last (successful) fetch's outcome. Were it fetched, the
        // discard port on loopback refuses at once.
        jwks_url: Some("http://127.0.0.1:9/jwks".to_owned()),
        client_claim: "client_id".to_owned(),
        grant: wardgate_engine::config::Grant::All,
        scopes: BTreeMap::new(),
        tool_discovery: None,
    }
}

/// Checks OAuth access tokens as `/mcp` does. The first byte picks what the rest is: a token
/// (any text) checked against the test issuer's keys; the claims of a token the test issuer
/// signs, so the checks after the signature's see any claims; or a JWKS document, against
/// which a well-formed token is checked. Run every input on the same runtime: the verifier
/// of the test issuer's keys is made once (making one costs more than many checks) and its
/// keys must not age, which they do not on a paused clock that never has to wait.
pub async fn jwt(data: &[u8]) {
    static TEST_ISSUER: std::sync::OnceLock<JwtVerifier> = std::sync::OnceLock::new();
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (jwks, token) = match mode % 3 {
        0 => (TEST_JWKS.as_bytes(), text.to_owned()),
        1 => {
            let Ok(claims) = serde_json::from_str::<Value>(text) else {
                return;
            };
            let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
            header.kid = Some("fuzz".to_owned());
            let key = jsonwebtoken::EncodingKey::from_ed_der(TEST_KEY);
            let token = jsonwebtoken::encode(&header, &claims, &key).expect("the test key signs");
            (TEST_JWKS.as_bytes(), token)
        }
        _ => {
            let claims = serde_json::json!({
                "iss": "https://issuer.invalid/",
                "aud": "https://gateway.invalid/mcp",
                "exp": 4_102_444_800_u64,
                "client_id": "fuzz",
                "scope": "mcp:read",
            });
            let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
            header.kid = Some("fuzz".to_owned());
            let key = jsonwebtoken::EncodingKey::from_ed_der(TEST_KEY);
            let token = jsonwebtoken::encode(&header, &claims, &key).expect("the test key signs");
            (rest, token)
        }
    };
    let fresh;
    let verifier = if jwks == TEST_JWKS.as_bytes() {
        TEST_ISSUER.get_or_init(|| {
            JwtVerifier::with_keys(test_issuer(), jwks).expect("the test issuer's keys")
        })
    } else {
        let Ok(verifier) = JwtVerifier::with_keys(test_issuer(), jwks) else {
            return;
        };
        fresh = verifier;
        &fresh
    };
    if let Ok(claims) = verifier.verify(&token).await {
        // The cache of verified tokens answers the second time.
        let again = verifier.verify(&token).await.expect("verified once");
        assert_eq!(claims.holder, again.holder);
    }
}

#[cfg(test)]
mod tests {
    use wardgate_engine::fuzzing::seeds;

    // Every seed runs through its target's entry point in `cargo test`, so the entry points
    // keep working between fuzz runs, and a seed added for a fixed crash stays fixed.

    #[tokio::test(start_paused = true)]
    async fn jwt_seeds_pass() {
        for (_, seed) in seeds("jwt") {
            super::jwt(&seed).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn client_seeds_are_answered() {
        for (name, seed) in seeds("client_message") {
            let answered = super::client_messages(&seed).await;
            if name == "calls.jsonl" {
                assert_eq!(answered, 4, "{name}");
            }
        }
    }
}
