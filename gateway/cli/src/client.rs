//! The operator subcommands (`wardgate status`, `servers`, `reconnect`, ...): a client of a
//! running gateway's admin API that prints tables for people and JSON for scripts.

/// `println!` for the operator subcommands: a closed stdout (`wardgate events | head`) ends
/// the command quietly instead of panicking.
macro_rules! outln {
    () => {
        $crate::client::write_out("\n")?
    };
    ($($arg:tt)*) => {
        $crate::client::write_out(&format!("{}\n", format_args!($($arg)*)))?
    };
}

/// `print!`, likewise.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::client::write_out(&format!($($arg)*))?
    };
}

mod events;
mod policy;
#[cfg(feature = "fleet")]
pub use policy::shadow_verdict;
mod show;
mod table;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

use crate::args::{DecisionsCommand, OperatorCommand, PolicyCommand};

/// Run one operator subcommand against the gateway at `address` (or `WARDGATE_ADMIN`).
pub async fn run(
    command: &OperatorCommand,
    address: Option<&str>,
    token: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let client = AdminClient::new(address, token)?;
    let action = |verb: &str, name: &str| format!("/servers/{}/{verb}", encode_segment(name));
    let result = match command {
        OperatorCommand::Status(output) => show::status(&client, *output).await,
        OperatorCommand::Servers {
            name: Some(name),
            output,
        } => show::server(&client, name, *output).await,
        OperatorCommand::Servers { name: None, output } => show::servers(&client, *output).await,
        OperatorCommand::Reconnect(server) => {
            let path = action("reconnect", &server.name);
            show::command_done(&client, &path, server.output).await
        }
        OperatorCommand::Restart(server) => {
            let path = action("restart", &server.name);
            show::command_done(&client, &path, server.output).await
        }
        OperatorCommand::Enable(server) => {
            let path = action("enable", &server.name);
            show::command_done(&client, &path, server.output).await
        }
        OperatorCommand::Disable(server) => {
            let path = action("disable", &server.name);
            show::command_done(&client, &path, server.output).await
        }
        OperatorCommand::HealthCheck(server) => {
            let path = action("health-check", &server.name);
            show::command_done(&client, &path, server.output).await
        }
        OperatorCommand::Events { follow, output } => {
            events::print(&client, *follow, *output).await
        }
        OperatorCommand::Commands(output) => show::commands(&client, *output).await,
        OperatorCommand::Decisions(DecisionsCommand::Export { server, output }) => {
            policy::export(&client, server.as_deref(), output.as_deref()).await
        }
    };
    finish(result)
}

/// `wardgate policy reload|shadow|shadow-report|promote-shadow|rollback`: a running
/// gateway's policies.
pub async fn policy(
    command: &PolicyCommand,
    address: Option<&str>,
    token: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let client = AdminClient::new(address, token)?;
    let at = |policy: &str, what: &str| format!("/policies/{}/{what}", encode_segment(policy));
    let result = match command {
        PolicyCommand::Reload(output) => {
            show::command_done(&client, "/policies/reload", *output).await
        }
        PolicyCommand::Shadow {
            policy,
            module,
            output,
            ..
        } => policy::shadow(&client, policy, module.as_deref(), *output).await,
        PolicyCommand::ShadowReport { policy, output } => {
            policy::report(&client, &at(policy, "shadow"), *output).await
        }
        PolicyCommand::PromoteShadow { policy, output } => {
            show::command_done(&client, &at(policy, "promote-shadow"), *output).await
        }
        PolicyCommand::Rollback { policy, output } => {
            show::command_done(&client, &at(policy, "rollback"), *output).await
        }
        PolicyCommand::Check { .. } | PolicyCommand::Simulate(_) | PolicyCommand::New { .. } => {
            anyhow::bail!("this `wardgate policy` command does not talk to a gateway")
        }
    };
    finish(result)
}

/// A closed stdout is not a failure: whoever read the output had enough.
fn finish(result: anyhow::Result<()>) -> anyhow::Result<ExitCode> {
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(error) if error.is::<StdoutClosed>() => Ok(ExitCode::SUCCESS),
        Err(error) => Err(error),
    }
}

/// Whoever read our output stopped reading: not a failure of the command.
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Write to stdout; a closed pipe becomes [`StdoutClosed`].
pub fn write_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(error) => Err(anyhow::anyhow!("could not write to stdout: {error}")),
    }
}

/// A connection to one gateway's admin API.
pub struct AdminClient {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl AdminClient {
    /// `address` is `--admin`; without it, `WARDGATE_ADMIN`. Only the operator subcommands
    /// read that variable: an exported address must not make every gateway started from
    /// that shell try to bind it.
    pub fn new(address: Option<&str>, token: Option<&str>) -> anyhow::Result<AdminClient> {
        let from_env = std::env::var("WARDGATE_ADMIN").ok();
        let address = address
            .or(from_env.as_deref())
            .filter(|a| !a.trim().is_empty())
            .context(
            "which gateway? pass its admin address with --admin HOST:PORT or set WARDGATE_ADMIN \
             (start the gateway with --admin 127.0.0.1:PORT to serve the admin API)",
        )?;
        let address = address.trim().trim_end_matches('/');
        let base = if address.starts_with("http://") || address.starts_with("https://") {
            address.to_owned()
        } else {
            format!("http://{address}")
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .context("could not set up the HTTP client")?;
        Ok(AdminClient {
            base,
            token: token.filter(|t| !t.is_empty()).map(str::to_owned),
            http,
        })
    }

    /// GET a JSON document; a non-2xx answer is an error carrying the API's message.
    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let (status, body) = self.get_any(path).await?;
        answer(status, body)
    }

    /// GET a JSON document whatever the status (`/readyz` answers 503 with reasons).
    pub async fn get_any(&self, path: &str) -> anyhow::Result<(reqwest::StatusCode, Value)> {
        let request = self
            .http
            .get(self.url(path))
            .timeout(Duration::from_secs(30));
        let response = self.send(request).await?;
        read_json(response).await
    }

    /// POST and wait for the answer (operator actions wait until the command is done).
    pub async fn post(&self, path: &str) -> anyhow::Result<Value> {
        let response = self.send(self.http.post(self.url(path))).await?;
        let (status, body) = read_json(response).await?;
        answer(status, body)
    }

    /// POST a JSON body and wait for the answer.
    pub async fn post_json(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let response = self.send(self.http.post(self.url(path)).json(body)).await?;
        let (status, body) = read_json(response).await?;
        answer(status, body)
    }

    /// GET a text document whole (`/decisions?format=jsonl`).
    pub async fn get_text(&self, path: &str) -> anyhow::Result<String> {
        let response = self.send(self.http.get(self.url(path))).await?;
        let status = response.status();
        if !status.is_success() {
            let (status, body) = read_json(response).await?;
            answer(status, body)?;
            anyhow::bail!("the gateway answered {status}");
        }
        response
            .text()
            .await
            .with_context(|| format!("the gateway's answer ({status}) broke off"))
    }

    /// A streaming GET (Server-Sent Events).
    pub async fn stream(&self, path: &str) -> anyhow::Result<reqwest::Response> {
        let response = self.send(self.http.get(self.url(path))).await?;
        if response.status().is_success() {
            Ok(response)
        } else {
            let (status, body) = read_json(response).await?;
            answer(status, body)?;
            anyhow::bail!("the gateway answered {status}")
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<reqwest::Response> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        request
            .send()
            .await
            .map_err(|error| self.unreachable(error))
    }

    fn unreachable(&self, error: reqwest::Error) -> anyhow::Error {
        let mut cause = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(inner) = source {
            cause = inner.to_string();
            source = inner.source();
        }
        let address = self.base.trim_start_matches("http://");
        anyhow::anyhow!(
            "cannot reach the wardgate admin API at {} ({cause}); is the gateway running with --admin {address}? \
             Start it with `wardgate --config FILE --admin {address}`, or point this command at it with \
             --admin HOST:PORT or WARDGATE_ADMIN",
            self.base
        )
    }
}

async fn read_json(response: reqwest::Response) -> anyhow::Result<(reqwest::StatusCode, Value)> {
    let status = response.status();
    let text = response
        .text()
        .await
        .with_context(|| format!("the gateway's answer ({status}) broke off"))?;
    let body = serde_json::from_str(&text).unwrap_or_else(|_| {
        serde_json::json!({ "error": format!("the gateway answered {status} with something that is not JSON: {}", text.trim()) })
    });
    Ok((status, body))
}

/// The body of a 2xx answer; otherwise an error with the API's own message.
fn answer(status: reqwest::StatusCode, body: Value) -> anyhow::Result<Value> {
    if status.is_success() {
        return Ok(body);
    }
    match body.get("error").and_then(Value::as_str) {
        Some(message) => anyhow::bail!("{message}"),
        None => anyhow::bail!("the gateway answered {status}: {body}"),
    }
}

/// Percent-encode a server name for one path segment.
fn encode_segment(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// Print `value` as the JSON a script reads.
pub fn print_json(value: &Value) -> anyhow::Result<()> {
    outln!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
    Ok(())
}
