//! `wardgate auth login|status|logout`: signing in to servers that use OAuth. The protocol
//! (discovery, registration, the browser's answer on a loopback port, revocation) is the
//! engine's, beside the token store (`wardgate_engine::upstream::oauth::sign_in`); this is
//! the command's words: the address to open, the browser, and what happened.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use wardgate_config::{Config, OAuthClient, TransportConfig};
use wardgate_engine::upstream::oauth::sign_in::{self, SignedOut, Start};
use wardgate_engine::upstream::oauth::TokenFile;

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
    let config = wardgate_app::membership::with_cached_fleet(config, fleet_url)?;
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
    let sign_in = match sign_in::start(server, url, client).await? {
        Start::Unneeded(why) => {
            println!("{why}");
            return Ok(());
        }
        Start::Browser(sign_in) => sign_in,
    };
    if let Some(scopes) = sign_in.widened_scopes() {
        eprintln!(
            "{server} asked for a wider scope; signing in with: {}",
            scopes.join(" ")
        );
    }
    eprintln!(
        "To sign in to {server}, open this URL in a browser (waiting up to {} minutes):",
        WAIT.as_secs() / 60
    );
    println!("{}", sign_in.address());
    if browser {
        open_browser(sign_in.address());
    }
    let path = sign_in.finish(WAIT).await?;
    println!(
        "signed in to {server}; tokens in {} (a running gateway reconnects it by itself)",
        path.display()
    );
    Ok(())
}

/// Forget `server`'s tokens, revoking them first where its authorization server can.
async fn logout(server: &str, url: &str, client: &OAuthClient) -> anyhow::Result<()> {
    match sign_in::sign_out(server, url, client).await? {
        SignedOut::NotSignedIn => println!("{server} was not signed in"),
        SignedOut::Revoked(path) => println!(
            "signed out of {server}: its authorization server revoked the tokens, and they are gone from {}",
            path.display()
        ),
        SignedOut::NoRevocation(path) => println!(
            "signed out of {server}: its tokens are gone from {} (its authorization server offers no revocation, so it may still list the grant)",
            path.display()
        ),
        SignedOut::RevocationFailed(path, why) => {
            eprintln!("could not revoke the tokens of {server} at its authorization server: {why}");
            println!(
                "signed out of {server}: its tokens are gone from {}, but the authorization server may still honour them until they expire",
                path.display()
            );
        }
    }
    Ok(())
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
