//! A gateway started with `--admin 127.0.0.1:0`, and a small JSON client of its admin API.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::{Child, Command};

use crate::harness::*;

/// A running gateway with its admin API.
pub struct AdminGateway {
    /// Owned so the gateway is killed when the test ends.
    #[allow(dead_code)]
    pub process: Child,
    /// `http://127.0.0.1:PORT` of the admin API.
    pub url: String,
    /// `127.0.0.1:PORT`, as `--admin` takes it.
    pub address: String,
    pub token: Option<String>,
    /// Where it serves MCP (`http://127.0.0.1:PORT/mcp`).
    pub mcp: String,
    pub http: reqwest::Client,
    #[allow(dead_code)]
    pub config: ConfigFile,
}

/// Start `wardgate --listen 127.0.0.1:0 --admin 127.0.0.1:0` plus `args`, with `env` set, and
/// wait until both endpoints are listening.
pub async fn start(config: ConfigFile, args: &[&str], env: &[(&str, &str)]) -> AdminGateway {
    let mut command = Command::new(wardgate());
    without_telemetry(&mut command)
        .arg("--config")
        .arg(&config.path)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--log-level",
            "info,wardgate=debug",
        ]);
    if !args.contains(&"--admin") {
        command.args(["--admin", "127.0.0.1:0"]);
    }
    let mut process = command
        .args(args)
        .env_remove("WARDGATE_ADMIN")
        .env_remove("WARDGATE_ADMIN_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn wardgate");
    let mut urls = urls_in_log(
        &mut process,
        &["admin API at http://", "Streamable HTTP"],
        Duration::from_secs(30),
    )
    .await;
    let mcp = urls.pop().unwrap();
    let url = urls.pop().unwrap();
    // A gateway bound to 0.0.0.0 is reached on loopback.
    let address = url
        .trim_start_matches("http://")
        .replace("0.0.0.0", "127.0.0.1");
    let token = args
        .iter()
        .position(|arg| *arg == "--admin-token")
        .map(|index| args[index + 1].to_owned())
        .or_else(|| {
            env.iter()
                .find(|(key, _)| *key == "WARDGATE_ADMIN_TOKEN")
                .map(|(_, value)| value.to_string())
        });
    AdminGateway {
        process,
        url: format!("http://{address}"),
        address,
        token,
        mcp,
        http: reqwest::Client::new(),
        config,
    }
}

impl AdminGateway {
    /// Poll `GET /commands/ID` until the command has finished.
    pub async fn finished(&self, id: &str) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (status, record) = self.get(&format!("/commands/{id}")).await;
            assert_eq!(status, 200, "{record}");
            if matches!(
                record["state"].as_str(),
                Some("completed" | "failed" | "expired")
            ) {
                return record;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{id} never finished: {record}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.url));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// The answer to a GET sent without the token, as a browser or a stranger sends it.
    pub async fn get_anonymously(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .expect("admin API answered")
    }

    /// Status and JSON body of a GET.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        send(self.request(reqwest::Method::GET, path)).await
    }

    /// Status and JSON body of a POST with an optional JSON body.
    pub async fn post(&self, path: &str, body: Option<Value>) -> (u16, Value) {
        let request = self.request(reqwest::Method::POST, path);
        let request = match body {
            Some(body) => request.json(&body),
            None => request,
        };
        send(request).await
    }

    /// The body of a GET as text (`/metrics`, `/events?follow=false`).
    pub async fn get_text(&self, path: &str) -> String {
        self.request(reqwest::Method::GET, path)
            .send()
            .await
            .unwrap_or_else(|error| panic!("GET {path}: {error}"))
            .text()
            .await
            .unwrap_or_else(|error| panic!("GET {path}: {error}"))
    }

    /// The server named `name` in `GET /servers`.
    pub async fn server(&self, name: &str) -> Value {
        let (status, body) = self.get("/servers").await;
        assert_eq!(status, 200, "{body}");
        body["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|server| server["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no server {name} in {body}"))
    }

    /// Wait until `name` has `status`; returns its entry.
    pub async fn wait_status(&self, name: &str, status: &str, limit: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let server = self.server(name).await;
            if server["status"] == status {
                return server;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} never became {status}: {server}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl AdminGateway {
    /// Wait until `policy` has made at least one decision (a supervisor asks for its probe
    /// schedule once its server serves).
    pub async fn wait_decisions(&self, policy: &str, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let (_, body) = self.get("/policies").await;
            let made: u64 = body["policies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|entry| entry["name"] == policy)
                .flat_map(|entry| entry["decisions"].as_object().cloned().unwrap_or_default())
                .filter_map(|(_, count)| count.as_u64())
                .sum();
            if made >= 1 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "policy {policy} made no decision: {body}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

pub async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.expect("admin API answered");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|_| panic!("admin answer {status} is not JSON: {text}"));
    (status, body)
}
