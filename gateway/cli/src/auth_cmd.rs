//! `wardgate auth login|status|logout`: signing in to servers that use OAuth.
//!
//! Login follows the MCP authorization spec for clients, through rmcp's `auth` module:
//! the server's 401 names its Protected Resource Metadata, which names the authorization
//! server; the gateway registers itself there (dynamic client registration) unless the
//! config gives a `client_id`; the person signs in in a browser (authorization code with
//! PKCE S256 and the server's URL as the `resource`); the answer comes back to a loopback
//! port this command listens on, and the tokens go to the server's 0600 file in the state
//! directory. A running gateway watches that directory and reconnects the server.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use rmcp::transport::auth::{
    AuthorizationManager, AuthorizationMetadata, AuthorizationRequest, AuthorizationSession,
    StoredCredentials,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wardgate_config::{Config, OAuthClient, TransportConfig};
use wardgate_engine::upstream::oauth::{self, TokenFile};

use crate::args::AuthCommand;

/// How long login waits for the browser's answer.
const WAIT: Duration = Duration::from_secs(300);

/// Run `command` for the gateway of `config`; a fleet member's servers include the fleet's,
/// as the member last applied them on this machine.
pub async fn run(
    command: AuthCommand,
    config: &Path,
    fleet_url: Option<String>,
) -> anyhow::Result<std::process::ExitCode> {
    let config = Config::load(config).map_err(|error| anyhow::anyhow!("{error}"))?;
    let config = wardgate_app::fleet_port::with_cached_fleet(config, fleet_url)?;
    match command {
        AuthCommand::Login { server, no_browser } => {
            let (url, client) = oauth_server(&config, &server)?;
            login(&server, &url, &client, !no_browser).await?;
        }
        AuthCommand::Status { json } => status(&config, json)?,
        AuthCommand::Logout { server } => {
            let (url, client) = oauth_server(&config, &server)?;
            logout(&server, &url, &client).await?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The URL and OAuth client of `server`, or why it has none.
fn oauth_server(config: &Config, server: &str) -> anyhow::Result<(String, OAuthClient)> {
    let found = config
        .servers
        .values()
        .find(|s| s.name == server)
        .with_context(|| {
            let names: Vec<&str> = config.servers.values().map(|s| s.name.as_str()).collect();
            let fleet = if config.fleet.is_some() {
                " or in the fleet's servers this member last applied (a server just added to the fleet is known here once the member has applied it)"
            } else {
                ""
            };
            format!(
                "no server {server:?} in {}{fleet}; its servers: {}",
                config.source.display(),
                names.join(", ")
            )
        })?;
    match &found.transport {
        TransportConfig::StreamableHttp {
            url,
            oauth: Some(client),
            ..
        } => Ok((url.clone(), client.clone())),
        _ => anyhow::bail!(
            "server {server:?} does not sign in with OAuth; give it a `url` and an `[servers.{server}.oauth]` table (`oauth = {{}}` registers the gateway by itself)"
        ),
    }
}

async fn login(server: &str, url: &str, client: &OAuthClient, browser: bool) -> anyhow::Result<()> {
    if let Some(idp) = &client.enterprise {
        println!(
            "{server} gets its tokens from an enterprise IdP (`grant = \"enterprise_managed\"`): the gateway exchanges the ID token in {} for them itself; sign in to {} so that file holds a current ID token",
            idp.id_token_file.display(),
            idp.issuer
        );
        return Ok(());
    }
    if client.client_credentials {
        println!(
            "{server} gets its tokens by the client credentials grant (`grant = \"client_credentials\"`): the gateway asks for them itself, and there is nothing to sign in"
        );
        return Ok(());
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("could not listen on a loopback port for the sign-in's answer")?;
    let redirect = format!(
        "http://127.0.0.1:{}/callback",
        listener.local_addr()?.port()
    );

    let (mut manager, metadata) = discover(server, url).await?;
    let file = TokenFile::new(server, url);
    manager.set_credential_store(file.clone());
    manager.set_metadata(metadata);
    let mut request = AuthorizationRequest::new(redirect.clone()).with_client_name("Wardgate");
    // Step-up: a server that refused the token for its scope (403 insufficient_scope) named
    // the scope it needs; ask for that with what was configured and granted before.
    let wanted = file.wanted();
    let mut scopes = client.scopes.clone();
    if !wanted.is_empty() {
        let granted = file
            .expiry()
            .map(|(_, granted)| granted)
            .unwrap_or_default();
        for scope in granted.into_iter().chain(wanted) {
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        eprintln!(
            "{server} asked for a wider scope; signing in with: {}",
            scopes.join(" ")
        );
    }
    if !scopes.is_empty() {
        request = request.with_scopes(scopes.iter().cloned());
    }
    if let Some(id) = &client.client_id {
        request = request.with_preregistered_client(id.clone());
        if let Some(secret) = &client.client_secret {
            request = request.with_client_secret(secret.expose());
        }
    }
    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, error)| error)
        .with_context(|| match &client.client_id {
            Some(_) => format!("could not start signing in to {server}"),
            None => format!("could not register the gateway with the authorization server of {server}; if it offers no dynamic registration, register a client there and set `client_id` in [servers.{server}.oauth]"),
        })?;
    let address = session.get_authorization_url().to_owned();
    eprintln!(
        "To sign in to {server}, open this URL in a browser (waiting up to {} minutes):",
        WAIT.as_secs() / 60
    );
    println!("{address}");
    if browser {
        open_browser(&address);
    }
    let answer = tokio::time::timeout(WAIT, callback(&listener))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "no answer from the browser within {} minutes; run `{}` again",
                WAIT.as_secs() / 60,
                client.login
            )
        })??;
    session
        .handle_callback_url(&format!("http://127.0.0.1{answer}"))
        .await
        .with_context(|| format!("the authorization server did not give tokens for {server}"))?;
    anyhow::ensure!(
        file.read().is_some(),
        "the tokens for {server} were not stored in {}",
        file.path.display()
    );
    file.forget_wanted();
    println!(
        "signed in to {server}; tokens in {} (a running gateway reconnects it by itself)",
        file.path.display()
    );
    Ok(())
}

/// The authorization server of the server at `url`, found as the spec has it: from the
/// server's own 401 (its Protected Resource Metadata), then that server's metadata.
async fn discover(
    server: &str,
    url: &str,
) -> anyhow::Result<(AuthorizationManager, AuthorizationMetadata)> {
    let challenge = challenge(url).await;
    let manager = oauth::manager(url)
        .await
        .with_context(|| format!("could not prepare sign-in for {server} ({url})"))?;
    let metadata = oauth::resolve(&manager, url, challenge.as_deref())
        .await
        .with_context(|| format!("could not find the authorization server of {server}: it published no OAuth metadata (its 401's resource_metadata, /.well-known/oauth-protected-resource, or the authorization server's /.well-known documents)"))?;
    Ok((manager, metadata))
}

/// Forget `server`'s tokens: first revoke them at its authorization server when it offers
/// revocation (RFC 7009: the refresh token, which also ends the grant's access tokens at
/// most servers), then delete the file. A revocation that fails is said, and the file goes
/// all the same.
async fn logout(server: &str, url: &str, client: &OAuthClient) -> anyhow::Result<()> {
    let file = TokenFile::new(server, url);
    let stored = file.read();
    let revoked = match &stored {
        Some(stored) => revoke(server, url, client, stored).await,
        None => Ok(false),
    };
    let removed = file
        .remove()
        .with_context(|| format!("could not remove {}", file.path.display()))?;
    if !removed {
        println!("{server} was not signed in");
        return Ok(());
    }
    match revoked {
        Ok(true) => println!(
            "signed out of {server}: its authorization server revoked the tokens, and they are gone from {}",
            file.path.display()
        ),
        Ok(false) => println!(
            "signed out of {server}: its tokens are gone from {} (its authorization server offers no revocation, so it may still list the grant)",
            file.path.display()
        ),
        Err(error) => {
            eprintln!("could not revoke the tokens of {server} at its authorization server: {error:#}");
            println!(
                "signed out of {server}: its tokens are gone from {}, but the authorization server may still honour them until they expire",
                file.path.display()
            );
        }
    }
    Ok(())
}

/// RFC 7009 revocation of the stored refresh token (the access token when there is none);
/// `false` when the authorization server names no revocation endpoint.
async fn revoke(
    server: &str,
    url: &str,
    client: &OAuthClient,
    stored: &StoredCredentials,
) -> anyhow::Result<bool> {
    let Some((token, hint)) = TokenFile::revocable(stored) else {
        return Ok(false);
    };
    let (_, metadata) = discover(server, url).await?;
    let Some(endpoint) = metadata
        .additional_fields
        .get("revocation_endpoint")
        .and_then(|value| value.as_str())
    else {
        return Ok(false);
    };
    let mut form = vec![("token", token.as_str()), ("token_type_hint", hint)];
    let mut request = reqwest::Client::new()
        .post(endpoint)
        .timeout(Duration::from_secs(10));
    // The client that holds the grant authenticates as it does at the token endpoint: with
    // its secret when the config gives one for it, else (a public client) by its id.
    match (&client.client_id, &client.client_secret) {
        (Some(id), Some(secret)) if *id == stored.client_id => {
            request = request.basic_auth(id, Some(secret.expose()));
        }
        _ => form.push(("client_id", stored.client_id.as_str())),
    }
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let answer = request
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .with_context(|| format!("{endpoint} did not answer"))?;
    let status = answer.status();
    anyhow::ensure!(
        status.is_success(),
        "{endpoint} answered {status}: {}",
        answer
            .text()
            .await
            .unwrap_or_default()
            .chars()
            .take(300)
            .collect::<String>()
    );
    Ok(true)
}

/// The `WWW-Authenticate` of the server's answer to a request without a token.
async fn challenge(url: &str) -> Option<String> {
    let answer = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()?;
    answer
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// Wait for the browser to come back to `/callback`; its path and query.
async fn callback(listener: &tokio::net::TcpListener) -> anyhow::Result<String> {
    loop {
        let (mut stream, _) = listener.accept().await?;
        let mut head = Vec::new();
        let mut buffer = [0u8; 2048];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer)).await {
                Ok(Ok(0)) | Err(_) => break,
                Ok(Ok(read)) => head.extend_from_slice(&buffer[..read]),
                Ok(Err(_)) => break,
            }
        }
        let text = String::from_utf8_lossy(&head);
        let target = text
            .lines()
            .next()
            .and_then(|line| line.split_whitespace().nth(1))
            .unwrap_or("")
            .to_owned();
        if !target.starts_with("/callback") {
            let _ = stream
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            continue;
        }
        let refused = target.contains("error=");
        let body = if refused {
            "Sign-in was refused; see the terminal."
        } else {
            "Signed in. You can close this tab."
        };
        let _ = stream
            .write_all(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await;
        if refused {
            let query = target.split_once('?').map(|(_, query)| query).unwrap_or("");
            let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect();
            let find = |key: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            anyhow::bail!(
                "the authorization server refused the sign-in: {} {}",
                find("error"),
                find("error_description")
            );
        }
        return Ok(target);
    }
}

/// Open `address` in the desktop's browser, when there is a desktop; quietly nothing else.
fn open_browser(address: &str) {
    let program = if cfg!(target_os = "macos") {
        "open"
    } else if std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some()
    {
        "xdg-open"
    } else {
        return;
    };
    let _ = std::process::Command::new(program)
        .arg(address)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

fn status(config: &Config, json: bool) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for server in config.servers.values() {
        let TransportConfig::StreamableHttp {
            url,
            oauth: Some(client),
            ..
        } = &server.transport
        else {
            continue;
        };
        let file = TokenFile::new(&server.name, url);
        let stored = file.expiry();
        let expires_at = stored
            .as_ref()
            .and_then(|(at, _)| *at)
            .map(|at| humantime::format_rfc3339_seconds(at).to_string());
        rows.push(serde_json::json!({
            "server": server.name,
            "signed_in": stored.is_some(),
            "access_token_expires_at": expires_at,
            "scopes": stored.map(|(_, scopes)| scopes).unwrap_or_default(),
            "login": client.login,
        }));
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "servers": rows }))?
        );
        return Ok(());
    }
    if rows.is_empty() {
        println!("no server signs in with OAuth; give one an `[servers.NAME.oauth]` table");
    }
    for row in rows {
        let server = row["server"].as_str().unwrap_or("");
        if row["signed_in"] == true {
            println!(
                "{server}: signed in; access token expires {} (refreshed by the gateway)",
                row["access_token_expires_at"]
                    .as_str()
                    .unwrap_or("(not said)")
            );
        } else {
            println!(
                "{server}: not signed in; run `{}`",
                row["login"].as_str().unwrap_or("")
            );
        }
    }
    Ok(())
}
