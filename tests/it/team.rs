//! A gateway a team can expose: Host and Origin rules, bearer tokens of named clients, OAuth
//! access tokens from a real OpenID provider (npm `oidc-provider`), grants, per-server tool
//! filters, limits, TLS, and secrets that never reach the log. Everything over real sockets,
//! with clients that ask at once.
//!
//! Why this file is long: one test per rule of a team gateway (Host, Origin, tokens, OAuth,
//! grants), sharing the token and request helpers.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::ErrorCode;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::harness::*;
use crate::measure::{free_port, rss_kib};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
const TOKEN_A: &str = "token-a-0123456789abcdef0123456789";
const TOKEN_B: &str = "token-b-fedcba9876543210fedcba9876";
/// Two named clients, their tokens from `TOKEN_A` and `TOKEN_B`, allowed everything.
const TWO_CLIENTS: &str = "[gateway.auth.clients.agent-a]\ntoken = \"${TOKEN_A}\"\n\n\
                           [gateway.auth.clients.agent-b]\ntoken = \"${TOKEN_B}\"\n";

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// A POST of `body` to `url` as MCP clients send one, with these headers added.
fn post(
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<reqwest::Body>,
) -> reqwest::RequestBuilder {
    let mut request = http()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request
}

/// A POST in session `session` (protocol 2025-06-18), with these headers added.
fn post_in(
    url: &str,
    session: &str,
    headers: &[(&str, &str)],
    body: impl Into<reqwest::Body>,
) -> reqwest::RequestBuilder {
    post(url, headers, body)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-06-18")
}

/// POST an `initialize` with these headers; the status, the session id and the body.
async fn initialize(url: &str, headers: &[(&str, &str)]) -> (u16, Option<String>, String) {
    let request = post(url, headers, INITIALIZE);
    let response = request.send().await.expect("the gateway answered");
    let status = response.status().as_u16();
    let session = response
        .headers()
        .get("mcp-session-id")
        .map(|value| value.to_str().unwrap().to_owned());
    let retry_after = response.headers().get("retry-after").is_some();
    let mut body = response.text().await.unwrap_or_default();
    if retry_after {
        body.push_str(" [retry-after]");
    }
    (status, session, body)
}

/// An rmcp client presenting `token`.
fn two_servers(extra: &str) -> ConfigFile {
    config(&format!(
        "{extra}\n{}{}",
        stdio_server("alpha", &[]),
        stdio_server("beta", &[])
    ))
}

/// `/mcp` on an address other machines can reach, with no `[gateway.auth]`: the gateway
/// refuses to start, naming the address and both fixes, unless anonymous access is said to
/// be meant (the flag or the setting); with credentials configured it starts as it is.
#[tokio::test]
async fn an_exposed_listener_without_auth_refuses_to_start_unless_anonymous_is_meant() {
    let anonymous = two_servers("");
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new(wardgate())
            .arg("--config")
            .arg(&anonymous.path)
            .args(["--listen", "0.0.0.0:0"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the gateway gave up at once")
    .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("refusing to serve MCP on 0.0.0.0:")
            && stderr.contains("[gateway.auth.clients.NAME]")
            && stderr.contains("[gateway.auth.oauth]")
            && stderr.contains("--allow-anonymous")
            && !stderr.contains("serving MCP"),
        "{stderr}"
    );

    // The ways to say it is meant, and credentials: each gateway serves.
    let in_config = two_servers("[gateway.http]\nallow_anonymous = true\n");
    let with_tokens = two_servers(TWO_CLIENTS);
    for (config, args, env) in [
        (&anonymous, &["--allow-anonymous"][..], &[][..]),
        (&in_config, &[][..], &[][..]),
        (
            &with_tokens,
            &[][..],
            &[("TOKEN_A", TOKEN_A), ("TOKEN_B", TOKEN_B)][..],
        ),
    ] {
        let args: Vec<&str> = ["--listen", "0.0.0.0:0"]
            .iter()
            .chain(args)
            .copied()
            .collect();
        let (_gateway, url) = spawn_gateway_listening(config, &args, env).await;
        let url = url.replace("0.0.0.0", "127.0.0.1");
        let (status, _, _) = initialize(&url, &[]).await;
        let expected = if env.is_empty() { 200 } else { 401 };
        assert_eq!(status, expected, "{args:?}");
    }
}

#[tokio::test]
async fn a_foreign_origin_or_host_is_refused_and_loopback_pages_pass() {
    let config = two_servers(
        "[gateway.http]\nallowed_origins = [\"https://app.example.com\"]\nallowed_hosts = [\"mcp.example.com\"]\n",
    );
    let (_gateway, url) = spawn_gateway_http(&config).await;
    let (status, _, body) = initialize(&url, &[("origin", "http://evil.example.com")]).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("allowed_origins"), "{body}");
    // Whatever else the request carries.
    let (status, _, _) = initialize(
        &url,
        &[
            ("origin", "http://evil.example.com"),
            ("host", "mcp.example.com"),
        ],
    )
    .await;
    assert_eq!(status, 403);
    for allowed in [
        "http://localhost:5173",
        "http://127.0.0.1:3000",
        "https://app.example.com",
    ] {
        let (status, session, body) = initialize(&url, &[("origin", allowed)]).await;
        assert_eq!(status, 200, "{allowed}: {body}");
        assert!(session.is_some());
    }
    let (status, _, _) = initialize(&url, &[("origin", "https://app.example.com:8443")]).await;
    assert_eq!(status, 403, "another port is another origin");
    let (status, _, _) = initialize(&url, &[]).await;
    assert_eq!(status, 200, "no Origin: not a web page");

    let (status, _, body) = initialize(&url, &[("host", "other.example.com")]).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("allowed_hosts"), "{body}");
    let (status, _, body) = initialize(&url, &[("host", "mcp.example.com:8080")]).await;
    assert_eq!(status, 200, "a configured name, any port: {body}");
}

#[tokio::test]
async fn bearer_tokens_name_clients_whose_grants_filter_lists_and_refuse_calls() {
    let config = two_servers(
        "[gateway.auth.clients.agent-a]\ntoken = \"${TOKEN_A}\"\nallow = [\"alpha\"]\n\n\
         [gateway.auth.clients.agent-b]\ntoken = \"${TOKEN_B}\"\nallow = [\"beta__echo\"]\n",
    );
    let (_gateway, url) =
        spawn_gateway_http_with_env(&config, &[("TOKEN_A", TOKEN_A), ("TOKEN_B", TOKEN_B)]).await;

    let (status, _, body) = initialize(&url, &[]).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("bearer token"), "{body}");
    let (status, _, body) = initialize(
        &url,
        &[("authorization", "Bearer not-a-token-of-anyone-here")],
    )
    .await;
    assert_eq!(status, 401, "{body}");

    // Both ask at once.
    let a = client_with_token(&url, TOKEN_A).await;
    let b = client_with_token(&url, TOKEN_B).await;
    let a_tools = list_at_once(&a, &["alpha__echo"]).await;
    assert!(
        a_tools.iter().all(|name| name.starts_with("alpha__")),
        "{a_tools:?}"
    );
    assert!(a_tools.len() > 1, "{a_tools:?}");
    let b_tools = list_at_once(&b, &["beta__echo"]).await;
    assert_eq!(b_tools, ["beta__echo"]);

    let echoed = b
        .call_tool(call("beta__echo", serde_json::json!({"text": "hi"})))
        .await
        .expect("a granted call");
    assert_eq!(text_of(&echoed), "hi");
    let refused = b
        .call_tool(call("alpha__echo", serde_json::json!({"text": "hi"})))
        .await
        .expect_err("a call outside the grant");
    let rmcp::ServiceError::McpError(error) = refused else {
        panic!("{refused:?}");
    };
    assert_eq!(error.code, ErrorCode(-32011));
    assert!(error.message.contains("agent-b"), "{}", error.message);
    assert!(error.message.contains("alpha__echo"), "{}", error.message);
    let refused = b
        .call_tool(call("beta__add", serde_json::json!({"a": 1, "b": 2})))
        .await
        .expect_err("another tool of a granted server");
    assert!(format!("{refused:?}").contains("-32011"), "{refused:?}");

    // Prompts and resources follow the same grants.
    let prompt = b
        .get_prompt(rmcp::model::GetPromptRequestParams::new("alpha__greet"))
        .await
        .expect_err("a prompt of a server outside the grant");
    assert!(format!("{prompt:?}").contains("-32011"), "{prompt:?}");
    let readme = "wardgate://alpha/fake://alpha/readme";
    let read = b
        .read_resource(rmcp::model::ReadResourceRequestParams::new(readme))
        .await
        .expect_err("a resource of a server outside the grant");
    assert!(format!("{read:?}").contains("-32011"), "{read:?}");
    let b_resources = b.list_all_resources().await.unwrap();
    assert!(b_resources.is_empty(), "{b_resources:?}");
    let a_resources = a.list_all_resources().await.unwrap();
    assert!(
        a_resources.iter().any(|resource| resource.uri == readme),
        "{a_resources:?}"
    );
    a.read_resource(rmcp::model::ReadResourceRequestParams::new(readme))
        .await
        .expect("a resource of a granted server");
    // Each is told only of the servers it may use.
    let told = b
        .peer_info()
        .and_then(|info| info.instructions.clone())
        .unwrap_or_default();
    assert!(told.contains("(beta)") && !told.contains("alpha"), "{told}");
}

/// A client of `url` with `token`, and what it hears.
async fn client_hearing(url: &str, token: &str) -> (Client, TestClient) {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned()),
    );
    let handler = TestClient::default();
    let client = tokio::time::timeout(Duration::from_secs(20), handler.clone().serve(transport))
        .await
        .expect("initialize in time")
        .expect("initialize succeeded");
    (client, handler)
}

/// The gateway's `tools_changed` events a client heard, in order.
fn tools_changed_heard(heard: &Heard) -> Vec<serde_json::Value> {
    heard
        .logs
        .iter()
        .filter(|log| log["logger"] == "wardgate" && log["data"]["event"] == "tools_changed")
        .map(|log| log["data"].clone())
        .collect()
}

/// A restricted client hears of its own servers only: events and list changes about other
/// servers never reach it, and `tools_changed` counts what it can list; a client allowed
/// everything hears every change with the whole catalogue's counts.
#[tokio::test]
async fn events_and_list_changes_reach_a_client_only_for_its_servers_with_its_own_counts() {
    const TOKEN_ALL: &str = "token-all-00112233445566778899aabb";
    let config = two_servers(
        "[gateway.auth.clients.agent-a]\ntoken = \"${TOKEN_A}\"\nallow = [\"alpha\"]\n\n\
         [gateway.auth.clients.agent-b]\ntoken = \"${TOKEN_B}\"\nallow = [\"beta__echo\"]\n\n\
         [gateway.auth.clients.operator]\ntoken = \"${TOKEN_ALL}\"\n",
    );
    let (_gateway, url) = spawn_gateway_http_with_env(
        &config,
        &[
            ("TOKEN_A", TOKEN_A),
            ("TOKEN_B", TOKEN_B),
            ("TOKEN_ALL", TOKEN_ALL),
        ],
    )
    .await;
    let (operator, everything) = client_hearing(&url, TOKEN_ALL).await;
    list_at_once(&operator, &["alpha__echo", "beta__echo"]).await;
    // Connected once both servers are listed, so they hear no list change of the start.
    let (a, heard_by_a) = client_hearing(&url, TOKEN_A).await;
    let (b, heard_by_b) = client_hearing(&url, TOKEN_B).await;
    list_at_once(&a, &["alpha__echo"]).await;
    list_at_once(&b, &["beta__echo"]).await;

    // beta changes, then alpha, then beta again: each client's stream is in order, so what
    // it heard of the last change of its own servers says it heard everything before.
    for (server, tool) in [
        ("beta", "new_beta"),
        ("alpha", "new_alpha"),
        ("beta", "newer_beta"),
    ] {
        let added = operator
            .call_tool(call(
                &format!("{server}__add_tool"),
                serde_json::json!({ "name": tool }),
            ))
            .await
            .unwrap();
        assert_eq!(text_of(&added), "ok");
        let listed = format!("{server}__{tool}");
        let names = wait_for_tools(&operator, &[&listed], Duration::from_secs(20)).await;
        assert!(names.contains(&listed), "{names:?}");
    }
    let total = (
        operator.list_all_tools().await.unwrap().len(),
        operator.list_all_prompts().await.unwrap().len(),
        operator.list_all_resources().await.unwrap().len(),
    );
    let counts = |event: &serde_json::Value| {
        (
            event["tools"].as_u64().unwrap_or(u64::MAX) as usize,
            event["prompts"].as_u64().unwrap_or(u64::MAX) as usize,
            event["resources"].as_u64().unwrap_or(u64::MAX) as usize,
        )
    };

    // agent-a may use alpha: of the three changes it hears alpha's, with its own counts.
    let own = (
        a.list_all_tools().await.unwrap().len(),
        a.list_all_prompts().await.unwrap().len(),
        a.list_all_resources().await.unwrap().len(),
    );
    assert!(own.0 < total.0 && own.2 < total.2, "{own:?} of {total:?}");
    assert!(
        heard_by_a
            .until(Duration::from_secs(20), |heard| {
                tools_changed_heard(heard)
                    .iter()
                    .any(|event| event["servers"] == serde_json::json!(["alpha"]))
            })
            .await,
        "agent-a never heard alpha's change: {:?}",
        heard_by_a.heard(|heard| heard.logs.clone())
    );
    let heard = heard_by_a.heard(tools_changed_heard);
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert_eq!(counts(&heard[0]), own, "{heard:?}");
    assert_eq!(heard_by_a.heard(|heard| heard.tools_changed), 1);
    let logs = heard_by_a.heard(|heard| heard.logs.clone());
    assert!(
        !serde_json::to_string(&logs).unwrap().contains("beta"),
        "{logs:?}"
    );

    // agent-b may use beta__echo only: it hears both of beta's changes, never alpha's, and
    // counts the one tool it can list.
    assert!(
        heard_by_b
            .until(Duration::from_secs(20), |heard| {
                tools_changed_heard(heard).len() >= 2
            })
            .await,
        "{:?}",
        heard_by_b.heard(|heard| heard.logs.clone())
    );
    let heard = heard_by_b.heard(tools_changed_heard);
    assert_eq!(heard.len(), 2, "{heard:?}");
    for event in &heard {
        assert_eq!(event["servers"], serde_json::json!(["beta"]), "{heard:?}");
        assert_eq!(counts(event), (1, 0, 0), "{heard:?}");
    }
    assert_eq!(heard_by_b.heard(|heard| heard.tools_changed), 2);
    let logs = heard_by_b.heard(|heard| heard.logs.clone());
    assert!(
        !serde_json::to_string(&logs).unwrap().contains("alpha"),
        "{logs:?}"
    );

    // The operator hears all three (after what it may have heard of the start), with the
    // whole catalogue's counts.
    let newer_beta =
        |heard: &[serde_json::Value]| heard.last().is_some_and(|event| counts(event) == total);
    assert!(
        everything
            .until(Duration::from_secs(20), |heard| {
                newer_beta(&tools_changed_heard(heard))
            })
            .await,
        "{:?}",
        everything.heard(tools_changed_heard)
    );
    let heard = everything.heard(tools_changed_heard);
    let heard = &heard[heard.len().saturating_sub(3)..];
    let servers: Vec<&serde_json::Value> = heard.iter().map(|event| &event["servers"]).collect();
    assert_eq!(
        servers,
        [
            &serde_json::json!(["beta"]),
            &serde_json::json!(["alpha"]),
            &serde_json::json!(["beta"])
        ],
        "{heard:?}"
    );
    assert_eq!(counts(heard.last().unwrap()), total, "{heard:?}");
}

#[tokio::test]
async fn a_session_is_its_clients_own() {
    let config = two_servers(TWO_CLIENTS);
    let (_gateway, url) =
        spawn_gateway_http_with_env(&config, &[("TOKEN_A", TOKEN_A), ("TOKEN_B", TOKEN_B)]).await;
    let bearer_a = format!("Bearer {TOKEN_A}");
    let bearer_b = format!("Bearer {TOKEN_B}");
    let (status, session, _) = initialize(&url, &[("authorization", &bearer_a)]).await;
    assert_eq!(status, 200);
    let session = session.expect("a session");
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    let send = |bearer: String| post_in(&url, &session, &[("authorization", &bearer)], ping).send();
    let own = send(bearer_a.clone()).await.unwrap();
    assert!(own.status().is_success(), "{}", own.status());
    let stolen = send(bearer_b.clone()).await.unwrap();
    assert_eq!(stolen.status().as_u16(), 404, "another client's session id");
    // An unknown id gets the very same answer: ids cannot be probed.
    let stolen = stolen.text().await.unwrap();
    let unknown = post_in(
        &url,
        "no-such-session",
        &[("authorization", &bearer_b)],
        ping,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(unknown.status().as_u16(), 404);
    assert_eq!(unknown.text().await.unwrap(), stolen);
}

#[tokio::test]
async fn tools_allow_and_deny_hide_tools_from_everyone() {
    let config = config(&format!(
        "{}[servers.alpha.tools]\nallow = [\"echo\", \"a*\"]\ndeny = [\"add_tool\"]\n\n{}",
        stdio_server("alpha", &[]),
        stdio_server("beta", &[])
    ));
    let (_gateway, url) = spawn_gateway_http(&config).await;
    let (client, _) = http_client(&url).await;
    let tools = list_at_once(&client, &["alpha__echo", "beta__echo"]).await;
    let alpha: Vec<&String> = tools.iter().filter(|t| t.starts_with("alpha__")).collect();
    assert_eq!(alpha, ["alpha__add", "alpha__echo"], "{tools:?}");
    assert!(tools.contains(&"beta__add_tool".to_owned()), "{tools:?}");
    let hidden = client
        .call_tool(call("alpha__add_tool", serde_json::json!({"name": "x"})))
        .await
        .expect_err("a hidden tool cannot be called");
    assert!(format!("{hidden:?}").contains("no such tool"), "{hidden:?}");
}

#[tokio::test]
async fn a_client_over_its_rate_gets_429_with_retry_after_and_others_are_served() {
    let config = two_servers(&format!(
        "[gateway.http]\nrate_limit = 1\nrate_burst = 2\n\n{TWO_CLIENTS}"
    ));
    let (_gateway, url) =
        spawn_gateway_http_with_env(&config, &[("TOKEN_A", TOKEN_A), ("TOKEN_B", TOKEN_B)]).await;
    let bearer_a = format!("Bearer {TOKEN_A}");
    let mut refused = None;
    for _ in 0..10 {
        let (status, _, body) = initialize(&url, &[("authorization", &bearer_a)]).await;
        if status == 429 {
            refused = Some(body);
            break;
        }
        assert_eq!(status, 200, "{body}");
    }
    let body = refused.expect("ten requests at once exceed 1/s with bursts of 2");
    assert!(
        body.contains("rate_limit") && body.contains("[retry-after]"),
        "{body}"
    );
    let (status, _, body) =
        initialize(&url, &[("authorization", &format!("Bearer {TOKEN_B}"))]).await;
    assert_eq!(status, 200, "another client keeps its own rate: {body}");
}

#[tokio::test]
async fn session_caps_refuse_clearly_and_expired_sessions_give_their_room_back() {
    let config = two_servers(&format!(
        "[gateway.http]\nmax_sessions = 3\nmax_sessions_per_client = 2\nmax_body_bytes = 4096\n\n{TWO_CLIENTS}"
    ));
    let (_gateway, url) = spawn_gateway_http_with_env(
        &config,
        &[
            ("TOKEN_A", TOKEN_A),
            ("TOKEN_B", TOKEN_B),
            ("WARDGATE_SESSION_IDLE_MS", "1500"),
        ],
    )
    .await;
    let a = format!("Bearer {TOKEN_A}");
    let b = format!("Bearer {TOKEN_B}");
    for _ in 0..2 {
        let (status, _, body) = initialize(&url, &[("authorization", &a)]).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, _, body) = initialize(&url, &[("authorization", &a)]).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("max_sessions_per_client"), "{body}");
    let (status, _, body) = initialize(&url, &[("authorization", &b)]).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = initialize(&url, &[("authorization", &b)]).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("max_sessions") && body.contains("[retry-after]"),
        "{body}"
    );

    // A body over the cap, declared or chunked, is 413 and changes nothing.
    let big = format!("{{\"pad\": \"{}\"}}", "x".repeat(8192));
    let chunked = reqwest::Body::wrap_stream(futures::stream::iter(vec![Ok::<_, std::io::Error>(
        big.clone().into_bytes(),
    )]));
    let response = post(&url, &[("authorization", &b)], chunked)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    assert!(response.text().await.unwrap().contains("max_body_bytes"));

    // Abandoned sessions expire, and their room comes back.
    let mut served = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (status, _, _) = initialize(&url, &[("authorization", &a)]).await;
        if status == 200 {
            served = true;
            break;
        }
    }
    assert!(served, "the abandoned sessions never expired");
}

/// A real OpenID provider on 127.0.0.1, issuing JWT access tokens for `resource`.
struct Provider {
    process: Child,
    issuer: String,
}

impl Provider {
    async fn start(port: u16, resource: &str) -> Provider {
        let (process, issuer) = crate::node::start_oidc_provider(port, resource, 300).await;
        Provider { process, issuer }
    }

    async fn token(&self, client: &str, secret: &str, scope: &str) -> String {
        crate::node::oidc_token(&self.issuer, client, secret, scope).await
    }

    async fn stop(mut self) {
        drop(self.process.stdin.take());
        let _ = tokio::time::timeout(Duration::from_secs(5), self.process.wait()).await;
        let _ = self.process.kill().await;
    }
}

/// A gateway whose stderr goes to a file the test reads afterwards; its MCP URL.
async fn gateway_logging_to(
    config: &ConfigFile,
    listen: &str,
    env: &[(&str, &str)],
    log: &std::path::Path,
) -> (Child, String) {
    let file = std::fs::File::create(log).unwrap();
    let process = Command::new(wardgate())
        .envs(env.iter().copied())
        .arg("--config")
        .arg(&config.path)
        .args(["--listen", listen, "--log-level", "debug"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn wardgate");
    for _ in 0..200 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("serving MCP over Streamable HTTP") {
            return (process, format!("http://{listen}/mcp"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the gateway did not start:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// An access token's client is its issuer, subject and client together; a token without
/// `sub` (or with an empty one) is its client's, apart from a user whose `sub` is that
/// client's id; one naming neither is refused. Shown by a per-client session cap of 1:
/// each distinct holder opens its session, a second session of one holder is refused.
#[tokio::test]
async fn oauth_tokens_without_sub_are_their_clients_and_never_a_users_of_that_name() {
    let gateway_port = free_port();
    let listen = format!("127.0.0.1:{gateway_port}");
    let resource = format!("http://{listen}/mcp");
    let provider = Provider::start(free_port(), &resource).await;
    let config = two_servers(&format!(
        "[gateway.http]\nmax_sessions_per_client = 1\n\n\
         [gateway.auth.oauth]\nissuer = {:?}\nresource = {resource:?}\n",
        provider.issuer
    ));
    let log = config.dir.path().join("gateway.log");
    let (_gateway, url) = gateway_logging_to(&config, &listen, &[], &log).await;
    let open = |token: String| {
        let url = url.clone();
        async move { initialize(&url, &[("authorization", &format!("Bearer {token}"))]).await }
    };

    // service-a and service-b: no sub; empty-a and empty-b: sub ""; portal: the user
    // "service-a" through the client portal (tests/node/oidc.mjs).
    for client in ["service-a", "portal", "service-b", "empty-a", "empty-b"] {
        let token = provider.token(client, "secret", "mcp:read").await;
        let (status, _, body) = open(token).await;
        assert_eq!(status, 200, "{client}'s first session: {body}");
    }
    for client in ["service-a", "empty-b"] {
        let token = provider.token(client, "secret", "mcp:read").await;
        let (status, _, body) = open(token).await;
        assert_eq!(status, 429, "{client}'s second session: {body}");
    }

    let token = provider.token("nobody", "secret", "mcp:read").await;
    let (status, _, body) = open(token).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body.contains("neither a subject") && body.contains("nor a client"),
        "{body}"
    );
    provider.stop().await;
}

#[tokio::test]
async fn oauth_access_tokens_from_a_real_provider_are_checked_and_scopes_grant_servers() {
    let gateway_port = free_port();
    let listen = format!("127.0.0.1:{gateway_port}");
    let resource = format!("http://{listen}/mcp");
    let provider_port = free_port();
    let provider = Provider::start(provider_port, &resource).await;
    let config = two_servers(&format!(
        "[gateway.auth.oauth]\nissuer = {:?}\nresource = {resource:?}\n\n\
         [gateway.auth.oauth.scopes]\n\"mcp:read\" = [\"alpha\"]\n\"mcp:admin\" = [\"alpha\", \"beta\"]\n\n\
         [gateway.auth.clients.ci]\ntoken = \"${{TOKEN_A}}\"\n",
        provider.issuer
    ));
    let log = config.dir.path().join("gateway.log");
    let (_gateway, url) = gateway_logging_to(&config, &listen, &[("TOKEN_A", TOKEN_A)], &log).await;

    // Protected Resource Metadata, and a 401 that points at it.
    let metadata: serde_json::Value = http()
        .get(format!(
            "http://{listen}/.well-known/oauth-protected-resource/mcp"
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(metadata["resource"], resource.as_str());
    assert_eq!(
        metadata["authorization_servers"][0],
        provider.issuer.as_str()
    );
    let response = post(&url, &[], INITIALIZE).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let challenge = response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"http://{listen}/.well-known/oauth-protected-resource/mcp\""
        )),
        "{challenge}"
    );

    // A token with mcp:read sees alpha only; one with mcp:admin sees both.
    let read = provider.token("agent-a", "secret-a", "mcp:read").await;
    let admin = provider.token("agent-b", "secret-b", "mcp:admin").await;
    let reader = client_with_token(&url, &read).await;
    let tools = list_at_once(&reader, &["alpha__echo"]).await;
    assert!(
        tools.iter().all(|name| name.starts_with("alpha__")),
        "{tools:?}"
    );
    let refused = reader
        .call_tool(call("beta__echo", serde_json::json!({"text": "x"})))
        .await
        .expect_err("beta is not granted by mcp:read");
    assert!(format!("{refused:?}").contains("agent-a"), "{refused:?}");
    let operator = client_with_token(&url, &admin).await;
    let tools = list_at_once(&operator, &["alpha__echo", "beta__echo"]).await;
    assert!(tools.contains(&"beta__echo".to_owned()), "{tools:?}");
    // The static client token works beside OAuth.
    let ci = client_with_token(&url, TOKEN_A).await;
    assert!(!list_at_once(&ci, &["alpha__echo"]).await.is_empty());

    // A token with none of the granting scopes: 403 insufficient_scope.
    let write_only = provider.token("agent-a", "secret-a", "mcp:write").await;
    let (status, _, body) =
        initialize(&url, &[("authorization", &format!("Bearer {write_only}"))]).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("mcp:admin") && body.contains("mcp:read"),
        "{body}"
    );

    // A tampered token is refused.
    let mut tampered: Vec<char> = read.chars().collect();
    let at = tampered.len() - 20;
    tampered[at] = if tampered[at] == 'A' { 'B' } else { 'A' };
    let tampered: String = tampered.into_iter().collect();
    let (status, _, body) =
        initialize(&url, &[("authorization", &format!("Bearer {tampered}"))]).await;
    assert_eq!(status, 401, "{body}");

    // A token from another issuer (same keys' shape, other iss) is refused.
    let stranger = Provider::start(0, &resource).await;
    let foreign = stranger.token("agent-a", "secret-a", "mcp:read").await;
    let (status, _, body) =
        initialize(&url, &[("authorization", &format!("Bearer {foreign}"))]).await;
    assert_eq!(status, 401, "{body}");
    stranger.stop().await;

    // The provider restarts with new keys: new tokens work (the keys are fetched again),
    // tokens of the old key no longer do.
    provider.stop().await;
    let provider = Provider::start(provider_port, &resource).await;
    let rotated = provider.token("agent-a", "secret-a", "mcp:read").await;
    // The keys are fetched again at most once a second: a first try may come too soon
    // after the stranger's token made the gateway look.
    let mut accepted = None;
    for _ in 0..20 {
        let (status, _, body) =
            initialize(&url, &[("authorization", &format!("Bearer {rotated}"))]).await;
        accepted = Some((status, body));
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (status, body) = accepted.unwrap();
    assert_eq!(status, 200, "a token signed with the new key: {body}");
    let (status, _, body) = initialize(&url, &[("authorization", &format!("Bearer {read}"))]).await;
    assert_eq!(status, 401, "a token of a retired key: {body}");
    assert!(body.contains("key"), "{body}");
    provider.stop().await;

    // Nothing secret reached the log, at debug level.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("client connected"), "the log is the real one");
    for secret in [TOKEN_A, &read, &admin, &write_only, &rotated, &foreign] {
        assert!(!text.contains(secret), "a token reached the log");
        // Nor any of its parts (a JWT's signature, say).
        for part in secret.split('.').filter(|part| part.len() > 20) {
            assert!(!text.contains(part), "part of a token reached the log");
        }
    }
}

#[tokio::test]
async fn tls_serves_https_with_the_given_certificate() {
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let config = two_servers("");
    let cert = config.dir.path().join("cert.pem");
    let key = config.dir.path().join("key.pem");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let (_gateway, url) = spawn_gateway_listening(
        &config,
        &[
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert!(url.starts_with("https://"), "{url}");
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(certified.cert.pem().as_bytes()).unwrap()])
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let response = client
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(INITIALIZE)
        .send()
        .await
        .expect("a TLS request");
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.text().await.unwrap().contains("wardgate"));
    // Plain HTTP on the TLS port is not served.
    let plain = url.replacen("https://", "http://", 1);
    let answer = http()
        .post(&plain)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(INITIALIZE)
        .send()
        .await;
    assert!(
        answer.is_err(),
        "plain HTTP was answered on the TLS port: {answer:?}"
    );
    // A bad key file is refused at startup with the file named.
    let output = Command::new(wardgate())
        .arg("--config")
        .arg(&config.path)
        .args(["--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&cert)
        .arg("--tls-key")
        .arg(&config.path)
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("wardgate.toml") && stderr.contains("--tls-key"),
        "{stderr}"
    );
}

/// A server that answers every request with a redirect to `target`, counting them.
async fn redirector(
    target: String,
) -> (
    u16,
    Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = served.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let target = target.clone();
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 65536];
                let _ = stream.read(&mut buffer).await;
                let reply = format!(
                    "HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    (port, served, task)
}

#[tokio::test]
async fn a_streamable_http_server_redirecting_elsewhere_never_gets_the_configured_headers() {
    // The other origin records every request that reaches it.
    let heard = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other_port = other.local_addr().unwrap().port();
    {
        let heard = heard.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = other.accept().await {
                let mut buffer = vec![0u8; 65536];
                let read = stream.read(&mut buffer).await.unwrap_or(0);
                heard
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buffer[..read]).into_owned());
                let _ = stream
                    .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
    }
    let (port, redirected, _redirector) =
        redirector(format!("http://localhost:{other_port}/mcp")).await;
    let config = config(&format!(
        "[servers.moved]\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ Authorization = \"Bearer ${{UPSTREAM_TOKEN}}\", X-Api-Key = \"${{UPSTREAM_TOKEN}}\" }}\n\n{}",
        stdio_server("alpha", &[])
    ));
    let (_gateway, url) =
        spawn_gateway_http_with_env(&config, &[("UPSTREAM_TOKEN", "upstream-secret-0123456789")])
            .await;
    let (client, _) = http_client(&url).await;
    let error = client
        .call_tool(call("moved__echo", serde_json::json!({"text": "x"})))
        .await
        .expect_err("the server cannot be reached");
    let text = format!("{error:?}");
    assert!(text.contains("moved"), "{text}");
    assert!(
        text.contains("another origin"),
        "the reason is named: {text}"
    );
    assert!(!text.contains("upstream-secret"), "{text}");
    assert!(
        redirected.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "the gateway never tried the server"
    );
    let heard = heard.lock().unwrap().clone();
    assert!(
        heard.is_empty(),
        "the gateway followed a redirect to another origin: {heard:?}"
    );
}

/// A small deterministic generator (xorshift), so a failure replays exactly.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn base64url(&mut self, bytes: &[u8]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let mut word = [0u8; 3];
            word[..chunk.len()].copy_from_slice(chunk);
            let n = (word[0] as u32) << 16 | (word[1] as u32) << 8 | word[2] as u32;
            for i in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }

    /// A JWT-shaped token, a malformed one, or noise.
    fn token(&mut self) -> String {
        let headers = [
            r#"{"alg":"none","typ":"JWT"}"#.to_owned(),
            r#"{"alg":"HS256","kid":"k"}"#.to_owned(),
            r#"{"alg":"RS256"}"#.to_owned(),
            format!(
                r#"{{"alg":"RS256","kid":"{}"}}"#,
                "k".repeat(self.below(5000))
            ),
            format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)),
            r#"{"alg":"ES256","kid":"\u0000\u001b[31m"}"#.to_owned(),
            String::from_utf8_lossy(&[0xff, 0xfe, 0x00, 0x7b]).into_owned(),
        ];
        match self.below(5) {
            0 => {
                let header = headers[self.below(headers.len())].clone();
                let claims = format!(
                    r#"{{"iss":"x","aud":"y","exp":{},"client_id":"{}"}}"#,
                    self.next() % 5_000_000_000,
                    "c".repeat(self.below(100))
                );
                let signature: Vec<u8> = (0..self.below(300)).map(|_| self.next() as u8).collect();
                format!(
                    "{}.{}.{}",
                    self.base64url(header.as_bytes()),
                    self.base64url(claims.as_bytes()),
                    self.base64url(&signature)
                )
            }
            1 => {
                let parts = 1 + self.below(6);
                (0..parts)
                    .map(|_| {
                        let bytes: Vec<u8> =
                            (0..self.below(64)).map(|_| self.next() as u8).collect();
                        self.base64url(&bytes)
                    })
                    .collect::<Vec<_>>()
                    .join(".")
            }
            2 => "x".repeat(self.below(40_000)),
            3 => (0..self.below(200))
                .map(|_| (b'!' + self.below(94) as u8) as char)
                .collect(),
            _ => TOKEN_A[..self.below(TOKEN_A.len())].to_owned(),
        }
    }
}

#[tokio::test]
async fn hostile_credentials_hosts_and_origins_are_refused_and_the_gateway_serves_on() {
    // OAuth with an issuer nobody serves: JWT-shaped tokens also meet keys that cannot be had.
    let dead = free_port();
    let config = two_servers(&format!(
        "[gateway.auth.clients.agent-a]\ntoken = \"${{TOKEN_A}}\"\n\n\
         [gateway.auth.oauth]\nissuer = \"http://127.0.0.1:{dead}\"\nresource = \"http://127.0.0.1/mcp\"\n"
    ));
    let (mut gateway, url) = spawn_gateway_http_with_env(&config, &[("TOKEN_A", TOKEN_A)]).await;
    let mut random = Random(0x5eed_1234_abcd_9876);
    let schemes = ["Bearer ", "bearer ", "Basic ", "", "Bearer  ", "Bearer\t"];
    for round in 0..300 {
        let token = random.token();
        let scheme = schemes[random.below(schemes.len())];
        let mut request = http()
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(INITIALIZE);
        if let Ok(value) = reqwest::header::HeaderValue::from_str(&format!("{scheme}{token}")) {
            request = request.header("authorization", value);
        }
        if round % 7 == 0 {
            request = request.header(
                "origin",
                format!(
                    "http://{}",
                    random.token().chars().take(50).collect::<String>()
                ),
            );
        }
        if round % 11 == 0 {
            let host: String = random.token().chars().take(80).collect();
            if let Ok(value) = reqwest::header::HeaderValue::from_str(&host) {
                request = request.header("host", value);
            }
        }
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                assert!(
                    matches!(status, 400 | 401 | 403 | 431 | 503),
                    "round {round}: a hostile credential got {status}"
                );
            }
            // A header block the server refuses to read may close the connection.
            Err(error) => assert!(!error.is_timeout(), "round {round}: {error}"),
        }
    }
    assert!(gateway.try_wait().unwrap().is_none(), "the gateway exited");
    let client = client_with_token(&url, TOKEN_A).await;
    assert!(!list_at_once(&client, &["alpha__echo"]).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_stream_cannot_grow_the_gateways_memory() {
    let config = config(&stdio_server("alpha", &[]));
    let (gateway, url) = spawn_gateway_http(&config).await;
    let pid = gateway.id().unwrap();
    // The stalled client: a session subscribed to a resource with a 20 kB URI, whose
    // standalone stream it opens on a socket with a small buffer and never reads.
    let original = format!("fake://alpha/items/{}", "x".repeat(20_000));
    let uri = format!("wardgate://alpha/{original}");
    let (status, session, body) = initialize(&url, &[]).await;
    assert_eq!(status, 200, "{body}");
    let session = session.unwrap();
    let send = |body: String| post_in(&url, &session, &[], body).send();
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned())
        .await
        .unwrap();
    let subscribed = send(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": uri}})
            .to_string(),
    )
    .await
    .unwrap();
    assert!(subscribed.status().is_success());
    let answer = subscribed.text().await.unwrap();
    assert!(
        !answer.contains("\"error\""),
        "{}",
        answer.replace(&"x".repeat(20_000), "X…")
    );
    let address: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(address).await.unwrap();
    stalled
        .write_all(
            format!(
                "GET /mcp HTTP/1.1\r\nHost: {address}\r\naccept: text/event-stream\r\nmcp-session-id: {session}\r\nmcp-protocol-version: 2025-06-18\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();

    // Another client makes the server announce 4000 updates of that resource (80 MB).
    let (client, _) = http_client(&url).await;
    let touch = call("alpha__touch", serde_json::json!({"uri": original.clone()}));
    client.call_tool(touch.clone()).await.expect("touch");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kib(pid);
    for _ in 0..4000 {
        client.call_tool(touch.clone()).await.expect("touch");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let grown_mib = rss_kib(pid).saturating_sub(before) / 1024;
    eprintln!("the gateway grew by {grown_mib} MiB");
    // Unbounded, the gateway would hold ~80 MB of unread notifications; bounded, at most
    // its outbox (1024 of them, ~20 MB) and rmcp's small channels.
    assert!(
        grown_mib < 40,
        "the gateway grew by {grown_mib} MiB for a client that reads nothing"
    );
    // Everyone else is served as before.
    let echoed = client
        .call_tool(call(
            "alpha__echo",
            serde_json::json!({"text": "still here"}),
        ))
        .await
        .unwrap();
    assert_eq!(text_of(&echoed), "still here");
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_sessions_expire_and_their_memory_is_used_again() {
    let config = config(&stdio_server("alpha", &[]));
    let (gateway, url) =
        spawn_gateway_http_with_env(&config, &[("WARDGATE_SESSION_IDLE_MS", "1000")]).await;
    let pid = gateway.id().unwrap();
    let open = |count: usize| {
        let url = url.clone();
        async move {
            let mut last = String::new();
            for _ in 0..count {
                let (status, session, body) = initialize(&url, &[]).await;
                assert_eq!(status, 200, "{body}");
                last = session.expect("a session");
            }
            last
        }
    };
    open(10).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let start = rss_kib(pid);
    let abandoned = open(300).await;
    let first = rss_kib(pid);
    // Abandoned: no request, no stream. They expire after the idle time.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let gone = post_in(
        &url,
        &abandoned,
        &[],
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(
        gone.status().as_u16(),
        404,
        "an abandoned session did not expire"
    );
    open(300).await;
    let second = rss_kib(pid);
    let grown_first = first.saturating_sub(start);
    let grown_second = second.saturating_sub(first);
    eprintln!("300 abandoned sessions: +{grown_first} KiB; 300 more after they expired: +{grown_second} KiB");
    assert!(
        grown_second <= grown_first / 2,
        "the memory of expired sessions was not used again: +{grown_first} KiB, then +{grown_second} KiB"
    );
}

/// A 2026-07-28 client's `subscriptions/listen` stream hears list changes of its own
/// servers only: another server's change, made first, never reaches it.
#[tokio::test]
async fn a_listen_stream_hears_list_changes_of_its_client_s_servers_only() {
    use rmcp::model::{ProtocolVersion, ServerNotification, SubscriptionFilter};
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    const TOKEN_ALL: &str = "token-all-00112233445566778899aabb";
    let config = two_servers(
        "[gateway.auth.clients.agent-a]\ntoken = \"${TOKEN_A}\"\nallow = [\"alpha\"]\n\n\
         [gateway.auth.clients.operator]\ntoken = \"${TOKEN_ALL}\"\n",
    );
    let (_gateway, url) =
        spawn_gateway_http_with_env(&config, &[("TOKEN_A", TOKEN_A), ("TOKEN_ALL", TOKEN_ALL)])
            .await;
    let (operator, _) = client_hearing(&url, TOKEN_ALL).await;
    list_at_once(&operator, &["alpha__echo", "beta__echo"]).await;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(TOKEN_A.to_owned()),
    );
    let modern = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    };
    let a = ().serve_with_lifecycle(transport, modern).await.expect("a 2026-07-28 client connects");
    let mut stream = a
        .listen(SubscriptionFilter::builder().tools_list_changed().build())
        .await
        .expect("subscriptions/listen");
    // beta changes first, and the operator sees it, before alpha changes at all.
    for (server, tool) in [("beta", "new_beta"), ("alpha", "new_alpha")] {
        operator
            .call_tool(call(
                &format!("{server}__add_tool"),
                serde_json::json!({ "name": tool }),
            ))
            .await
            .unwrap();
        let listed = format!("{server}__{tool}");
        let names = wait_for_tools(&operator, &[&listed], Duration::from_secs(20)).await;
        assert!(names.contains(&listed), "{names:?}");
    }
    // Both changes were sent before the operator saw them: agent-a's stream holds alpha's
    // only. (Quiet for 3 s after the first counts as nothing more: a late second one could
    // only make this pass wrongly, never fail wrongly.)
    let mut heard = 0;
    loop {
        let wait = if heard == 0 { 20 } else { 3 };
        match tokio::time::timeout(Duration::from_secs(wait), stream.next()).await {
            Ok(Ok(Some(ServerNotification::ToolListChangedNotification(_)))) => heard += 1,
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None) | Err(_)) | Err(_) => break,
        }
    }
    assert_eq!(heard, 1, "list changes on agent-a's stream (alpha's only)");
    let names: Vec<String> = a
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|tool| tool.name.to_string())
        .collect();
    assert!(
        names.contains(&"alpha__new_alpha".to_owned())
            && !names.iter().any(|name| name.starts_with("beta__")),
        "{names:?}"
    );
    let _ = stream.cancel().await;
}
