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
        mcp: format!("http://127.0.0.1:{listen}/mcp"),
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

/// The sign-in command the gateway prints for `server` of the config at `config`.
fn login_command(config: &std::path::Path, server: &str) -> String {
    format!("wardgate --config {} auth login {server}", config.display())
}

/// `wardgate auth ARGS...` on `config`: its exit status and its stdout and stderr.
async fn auth(config: &std::path::Path, state: &std::path::Path, args: &[&str]) -> (bool, String) {
    let output = Command::new(wardgate())
        .arg("--config")
        .arg(config)
        .arg("auth")
        .args(args)
        .env("WARDGATE_STATE_DIR", state)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run wardgate auth");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// A refresh grant with `refresh`, as the client `client_id` would ask for one.
async fn refresh_grant(issuer: &str, refresh: &str, client_id: &str) -> reqwest::StatusCode {
    reqwest::Client::new()
        .post(format!("{issuer}/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "grant_type=refresh_token&refresh_token={refresh}&client_id={client_id}"
        ))
        .send()
        .await
        .unwrap()
        .status()
}

/// The stored refresh token, access token and client id of the sign-in in `file`.
fn stored_tokens(file: &std::path::Path) -> (String, String, String) {
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let credentials = &stored["credentials"];
    let field = |value: &Value| value.as_str().unwrap().to_owned();
    (
        field(&credentials["token_response"]["refresh_token"]),
        field(&credentials["token_response"]["access_token"]),
        field(&credentials["client_id"]),
    )
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
        // 404: not configured yet (a reload is on its way).
        assert!(code == 200 || code == 404, "{code}: {answer}");
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
    let command = login_command(&config_path, "up");
    let waiting = until_status(&admin, "up", "requires_reauth").await;
    assert!(
        waiting["reason"].as_str().unwrap().contains(&command),
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
    let (refresh, access, client_id) = stored_tokens(&file);
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
    assert!(text.contains(&command), "{text}");
    let needs = until_status(&admin, "up", "requires_reauth").await;
    assert!(
        needs["reason"].as_str().unwrap().contains(&command),
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

#[tokio::test]
async fn a_token_the_server_rejects_is_refreshed_once_and_signing_out_shows_everywhere() {
    let upstream_listen = format!("127.0.0.1:{}", free_port());
    let resource = format!("http://{upstream_listen}/mcp");
    // The server accepts a token for 3 s, but the provider tells the client it lives an
    // hour: only the server's 401 shows that it ran out.
    let (_provider, issuer) = crate::node::start_oidc_provider_with(
        free_port(),
        &resource,
        3,
        &["--claimed-expires-in", "3600"],
    )
    .await;
    let (_upstream, _upstream_config) = upstream(&issuer, &resource, &upstream_listen).await;
    let state = tempfile::tempdir().unwrap();
    // The gateway starts without the OAuth server; a reload adds it (and with it the
    // watching of its sign-ins).
    let local = format!(
        "[gateway]\nstartup_wait = \"2s\"\n\n{}",
        stdio_server("local", &[])
    );
    let config = config(&local);
    let log = state.path().join("gateway.log");
    let config_path = config.path.clone();
    let command = login_command(&config_path, "up");
    let (admin, mcp) = gateway(config, state.path(), &log).await;
    until_status(&admin, "local", "online").await;
    std::fs::write(
        &config_path,
        format!("{local}\n[servers.up]\nurl = {resource:?}\noauth = {{}}\n"),
    )
    .unwrap();

    // Before sign-in: the admin API and `auth status` say it is needed, and how; a server
    // without OAuth has no sign-in.
    let waiting = until_status(&admin, "up", "requires_reauth").await;
    assert_eq!(
        waiting["sign_in"],
        serde_json::json!({"signed_in": false, "needed": true, "command": command}),
        "{waiting}"
    );
    assert_eq!(admin.server("local").await["sign_in"], Value::Null);
    let (ok, said) = auth(&config_path, state.path(), &["status"]).await;
    assert!(
        ok && said.contains(&format!("up: not signed in; run `{command}`")),
        "{said}"
    );

    login(&config_path, state.path(), "up").await;
    let online = until_status(&admin, "up", "online").await;
    assert_eq!(online["sign_in"]["signed_in"], true, "{online}");
    assert_eq!(online["sign_in"]["needed"], false, "{online}");
    let file = state.path().join("oauth/up.json");
    let (refresh, access, client_id) = stored_tokens(&file);
    let (ok, said) = auth(&config_path, state.path(), &["status", "--json"]).await;
    assert!(ok, "{said}");
    let listed: Value = serde_json::from_str(&said).unwrap();
    let up = &listed["servers"][0];
    assert_eq!(
        (up["server"].as_str(), up["signed_in"].as_bool()),
        (Some("up"), Some(true)),
        "{listed}"
    );
    assert!(up["access_token_expires_at"].is_string(), "{listed}");
    assert!(
        !said.contains(&access) && !said.contains(&refresh),
        "auth status printed a token"
    );

    // The token runs out without the client knowing: the server answers 401 (once the 3 s
    // and its 30 s of tolerated clock skew have passed), and eight calls that meet it cause
    // one refresh, none of them failing.
    let (client, _) = crate::harness::http_client(&mcp).await;
    let first = client
        .call_tool(call(
            "up__alpha__echo",
            serde_json::json!({"text": "first"}),
        ))
        .await
        .expect("a call with a fresh token");
    assert!(text_of(&first).contains("first"));
    tokio::time::sleep(Duration::from_secs(34)).await;
    let before = stats(&issuer).await["refresh_token"].as_u64().unwrap_or(0);
    let calls = (0..8).map(|_| {
        client.call_tool(call(
            "up__alpha__echo",
            serde_json::json!({"text": "rejected"}),
        ))
    });
    for result in futures::future::join_all(calls).await {
        let result = result.expect("a call whose token the server rejected");
        assert!(text_of(&result).contains("rejected"), "{result:?}");
    }
    let after = stats(&issuer).await["refresh_token"].as_u64().unwrap_or(0);
    assert_eq!(
        after - before,
        1,
        "8 calls that met a rejected token refreshed {} times",
        after - before
    );
    let (_, renewed, _) = stored_tokens(&file);
    assert_ne!(renewed, access, "the renewed token was not stored");

    // A health check exercises the credentials, and says they were accepted.
    let (code, checked) = admin.post("/servers/up/health-check", None).await;
    assert_eq!(code, 200, "{checked}");
    assert_eq!(checked["result"]["has_credentials"], true, "{checked}");
    assert_eq!(
        checked["result"]["credentials_validated"], true,
        "{checked}"
    );

    // Signing out revokes the grant at the authorization server and forgets the tokens.
    let (rotated, _, _) = stored_tokens(&file);
    let (ok, said) = auth(&config_path, state.path(), &["logout", "up"]).await;
    assert!(ok && said.contains("revoked"), "{said}");
    assert!(!file.exists());
    let refused = refresh_grant(&issuer, &rotated, &client_id).await;
    assert_eq!(
        refused,
        reqwest::StatusCode::BAD_REQUEST,
        "a revoked refresh token still works"
    );
    let (_, said) = auth(&config_path, state.path(), &["status", "--json"]).await;
    let listed: Value = serde_json::from_str(&said).unwrap();
    assert_eq!(listed["servers"][0]["signed_in"], false, "{listed}");

    // The running gateway notices: the next call fails with the command, the server waits
    // for a sign-in, and the admin API and the status page say so.
    let failed = client
        .call_tool(call("up__alpha__echo", serde_json::json!({"text": "gone"})))
        .await;
    assert!(format!("{failed:?}").contains(&command), "{failed:?}");
    let waiting = until_status(&admin, "up", "requires_reauth").await;
    assert_eq!(
        waiting["sign_in"],
        serde_json::json!({"signed_in": false, "needed": true, "command": command}),
        "{waiting}"
    );
    let mut browser = crate::browser::Browser::start("1280x900", "light").await;
    assert_eq!(browser.goto(&format!("{}/", admin.url)).await, 200);
    browser.wait("body[data-ready=\"true\"]").await;
    let row = "[data-server-row=\"up\"]";
    browser
        .wait_attr(row, "data-status", "requires_reauth")
        .await;
    let shown = browser
        .wait_text(&format!("{row} .sign-in-command"), &command)
        .await;
    assert_eq!(shown.trim(), command);
    // Shown once, beside the tag: the reason and the last error do not repeat it.
    let times = browser
        .eval(&format!(
            "document.querySelector('{row}').innerText.split({}).length - 1",
            serde_json::to_string(&command).unwrap()
        ))
        .await;
    assert_eq!(times, 1, "the row shows the command {times} times");
    browser.screenshot("status-page-sign-in.png", false).await;
    assert_eq!(browser.page_errors().await, Vec::<String>::new());
    browser.close().await;

    let logged = std::fs::read_to_string(&log).unwrap();
    for (name, secret) in [
        ("refresh", &refresh),
        ("rotated", &rotated),
        ("access", &access),
        ("renewed", &renewed),
    ] {
        if let Some(line) = logged.lines().find(|line| line.contains(secret.as_str())) {
            panic!(
                "the {name} token reached the log: {}",
                line.replace(secret.as_str(), "<TOKEN>")
            );
        }
    }
}
