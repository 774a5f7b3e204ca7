//! Servers that sign in with OAuth, against a real authorization server (npm `oidc-provider`
//! through tests/node/oidc.mjs) in front of a Streamable HTTP server that checks its tokens
//! (a second Wardgate with `[gateway.auth.oauth]`). The person in the browser is this test:
//! it follows the authorization URL's redirects, with the cookies they set, to the login
//! command's loopback port.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};

use crate::admin::support::AdminGateway;
use crate::harness::{call, config, stdio_server, text_of, wardgate, ConfigFile};
use crate::measure::free_port;

const SETTLE: Duration = Duration::from_secs(30);

/// The upstream: a gateway that accepts only the provider's tokens for its own URL.
async fn upstream(issuer: &str, resource: &str, listen: &str) -> (Child, ConfigFile) {
    let config = config(&format!(
        "[gateway.auth.oauth]\nissuer = {issuer:?}\nresource = {resource:?}\n\n\
         [gateway.auth.oauth.scopes]\n\"mcp:read\" = [\"alpha\"]\n\n{}",
        stdio_server("alpha", &[])
    ));
    let process = Command::new(wardgate())
        .arg("--config")
        .arg(&config.path)
        .args(["--listen", listen])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the upstream gateway");
    (process, config)
}

/// The gateway under test, its stderr in `log`.
async fn gateway(
    config: ConfigFile,
    state: &std::path::Path,
    log: &std::path::Path,
) -> (AdminGateway, String) {
    let (listen, admin) = (free_port(), free_port());
    let process = Command::new(wardgate())
        .arg("--config")
        .arg(&config.path)
        .args(["--listen", &format!("127.0.0.1:{listen}")])
        .args(["--admin", &format!("127.0.0.1:{admin}")])
        .args(["--log-level", "debug"])
        .env("WARDGATE_STATE_DIR", state)
        .env_remove("WARDGATE_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn wardgate");
    let address = format!("127.0.0.1:{admin}");
    let gateway = AdminGateway {
        process,
        url: format!("http://{address}"),
        address,
        token: None,
        http: reqwest::Client::new(),
        config,
    };
    for _ in 0..200 {
        if gateway
            .http
            .get(format!("{}/healthz", gateway.url))
            .send()
            .await
            .is_ok()
        {
            return (gateway, format!("http://127.0.0.1:{listen}/mcp"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the gateway did not start:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// `wardgate auth login SERVER`, signing in as the browser would: follow the printed URL's
/// redirects (keeping cookies) until the provider sends the browser to the command's
/// loopback callback. Returns the command's stdout and stderr.
async fn login(config: &std::path::Path, state: &std::path::Path, server: &str) -> String {
    let mut command = Command::new(wardgate())
        .arg("--config")
        .arg(config)
        .args(["auth", "login", server, "--no-browser"])
        .env("WARDGATE_STATE_DIR", state)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn wardgate auth login");
    let mut stdout = tokio::io::BufReader::new(command.stdout.take().unwrap()).lines();
    let address = tokio::time::timeout(SETTLE, stdout.next_line())
        .await
        .expect("login printed its URL in time")
        .unwrap()
        .expect("login printed a URL");
    assert!(address.starts_with("http://127.0.0.1:"), "{address}");
    assert!(
        address.contains("code_challenge_method=S256") && address.contains("resource="),
        "{address}"
    );
    browse(&address).await;
    let mut rest = String::new();
    while let Ok(Some(line)) = stdout.next_line().await {
        rest.push_str(&line);
        rest.push('\n');
    }
    let output = command.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "login failed:\n{rest}{stderr}");
    format!("{rest}{stderr}")
}

/// A browser without a person: GET, keep cookies, follow `Location` to the end.
async fn browse(start: &str) {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut cookies: Vec<String> = Vec::new();
    let mut next = start.to_owned();
    for _ in 0..20 {
        let mut request = http.get(&next);
        if !cookies.is_empty() {
            request = request.header("cookie", cookies.join("; "));
        }
        let answer = request
            .send()
            .await
            .expect("the browser's request was answered");
        for value in answer.headers().get_all("set-cookie") {
            let pair = value
                .to_str()
                .unwrap()
                .split(';')
                .next()
                .unwrap()
                .to_owned();
            let name = pair.split('=').next().unwrap().to_owned();
            cookies.retain(|cookie| !cookie.starts_with(&format!("{name}=")));
            cookies.push(pair);
        }
        match answer.headers().get("location") {
            Some(location) => {
                let location = location.to_str().unwrap();
                next = if location.starts_with("http") {
                    location.to_owned()
                } else {
                    let origin: String = next.splitn(4, '/').take(3).collect::<Vec<_>>().join("/");
                    format!("{origin}{location}")
                };
            }
            None => {
                assert!(
                    answer.status().is_success(),
                    "the sign-in ended at {next}: {}",
                    answer.status()
                );
                return;
            }
        }
    }
    panic!("too many redirects signing in");
}

async fn stats(issuer: &str) -> Value {
    reqwest::get(format!("{issuer}/test/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn until_status(admin: &AdminGateway, server: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let (code, answer) = admin.get(&format!("/servers/{server}")).await;
        assert_eq!(code, 200, "{answer}");
        if answer["status"] == status || answer["info"]["status"] == status {
            return answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{server} never became {status}: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_server_signs_in_refreshes_its_token_and_comes_back_from_a_revoked_one() {
    let upstream_listen = format!("127.0.0.1:{}", free_port());
    let resource = format!("http://{upstream_listen}/mcp");
    // Access tokens live 4 s, so refreshes happen while the test calls.
    let (_provider, issuer) = crate::node::start_oidc_provider(free_port(), &resource, 4).await;
    let (_upstream, _upstream_config) = upstream(&issuer, &resource, &upstream_listen).await;
    let state = tempfile::tempdir().unwrap();
    let config = config(&format!(
        "[gateway]\nstartup_wait = \"2s\"\n\n[servers.up]\nurl = {resource:?}\n\n[servers.up.oauth]\nscopes = [\"mcp:read\"]\n"
    ));
    let log = state.path().join("gateway.log");
    let config_path = config.path.clone();
    let (admin, mcp) = gateway(config, state.path(), &log).await;

    // Not signed in: the server waits for a sign-in, and says how.
    let waiting = until_status(&admin, "up", "requires_reauth").await;
    assert!(
        waiting.to_string().contains("wardgate auth login up"),
        "{waiting}"
    );

    // Sign in; the running gateway reconnects the server by itself.
    let said = login(&config_path, state.path(), "up").await;
    assert!(said.contains("signed in to up"), "{said}");
    let file = state.path().join("oauth/up.json");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    until_status(&admin, "up", "online").await;

    // Calls go through, and keep going through across token expiries (refreshed).
    let (client, _) = crate::harness::http_client(&mcp).await;
    let started = stats(&issuer).await["refresh_token"].as_u64().unwrap_or(0);
    for _ in 0..12 {
        let result = client
            .call_tool(call("up__alpha__echo", serde_json::json!({"text": "hi"})))
            .await
            .expect("a call through the signed-in server");
        assert!(text_of(&result).contains("hi"), "{result:?}");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let refreshed = stats(&issuer).await["refresh_token"].as_u64().unwrap_or(0);
    assert!(refreshed > started, "no refresh in 8 s of 4 s tokens");

    // Many calls that meet an expired token: one refresh.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = stats(&issuer).await["refresh_token"].as_u64().unwrap_or(0);
    let calls = (0..8)
        .map(|_| client.call_tool(call("up__alpha__echo", serde_json::json!({"text": "many"}))));
    for result in futures::future::join_all(calls).await {
        assert!(text_of(&result.expect("a concurrent call")).contains("many"));
    }
    let after = stats(&issuer).await["refresh_token"].as_u64().unwrap_or(0);
    assert_eq!(
        after - before,
        1,
        "8 concurrent calls after expiry refreshed {} times",
        after - before
    );

    // The refresh token is revoked: once the access token runs out, the server needs a
    // sign-in, and calls fail at once saying how.
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let credentials = &stored["credentials"];
    let refresh = credentials["token_response"]["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let access = credentials["token_response"]["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let client_id = credentials["client_id"].as_str().unwrap().to_owned();
    let revoked = reqwest::Client::new()
        .post(format!("{issuer}/token/revocation"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={refresh}&client_id={client_id}"))
        .send()
        .await
        .unwrap();
    assert!(revoked.status().is_success(), "{}", revoked.status());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let failed = client
        .call_tool(call("up__alpha__echo", serde_json::json!({"text": "late"})))
        .await;
    let text = format!("{failed:?}");
    assert!(text.contains("wardgate auth login up"), "{text}");
    let needs = until_status(&admin, "up", "requires_reauth").await;
    assert!(
        needs.to_string().contains("wardgate auth login up"),
        "{needs}"
    );

    // Signing in again brings it back, with no restart.
    login(&config_path, state.path(), "up").await;
    until_status(&admin, "up", "online").await;
    let result = client
        .call_tool(call("up__alpha__echo", serde_json::json!({"text": "back"})))
        .await
        .expect("a call after signing in again");
    assert!(text_of(&result).contains("back"));

    // No token reached the log or an admin answer.
    let logged = std::fs::read_to_string(&log).unwrap();
    for secret in [&refresh, &access] {
        assert!(!logged.contains(secret.as_str()), "a token reached the log");
    }
    let (_, servers) = admin.get("/servers/up").await;
    assert!(!servers.to_string().contains(&access));
}
