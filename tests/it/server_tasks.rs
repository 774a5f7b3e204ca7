//! A 2025-11-25 server's own tasks (`tests/conformance/tasks-2025-server.mjs`, on the
//! TypeScript SDK v1's tasks API), over a stdio upstream and a Streamable HTTP one that
//! answers with JSON bodies or with event streams: a client's task runs as the server's
//! task, past the server's
//! request timeout; a tool the server runs only as a task can be called plainly; a
//! cancelled task is cancelled at the server; a tool the server does not run as a task is
//! run as the gateway's own task; a stdio server's task that died with its process reads
//! as failed, naming the server.

use serde_json::{json, Value};

use crate::conformance::suite::{node, start_listener, tasks_2025_server};
use crate::harness::*;
use crate::tasks_2025::post;

const VERSION: &str = "2025-11-25";

/// The gateway's config: the server as `ts`, a request timeout shorter than the task.
fn config_for(server: &str) -> ConfigFile {
    config(&format!(
        "[gateway]\nrequest_timeout = \"2s\"\n\n[servers.ts]\n{server}\n"
    ))
}

struct Client {
    url: String,
    session: String,
    next: u64,
}

impl Client {
    async fn connect(url: &str) -> Client {
        let (session, initialized) = post(
            url,
            VERSION,
            None,
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": VERSION, "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}),
        )
        .await;
        assert_eq!(
            initialized["result"]["protocolVersion"], VERSION,
            "{initialized}"
        );
        Client {
            url: url.to_owned(),
            session: session.expect("a session"),
            next: 1,
        }
    }

    async fn ask(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let (_, answer) = post(
            &self.url,
            VERSION,
            Some(&self.session),
            json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}),
        )
        .await;
        answer
    }

    async fn text_of(&mut self, tool: &str, arguments: Value) -> String {
        let answer = self
            .ask("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{tool}: {answer}"))
            .to_owned()
    }

    /// Call `tool` as a task; the gateway's task id.
    async fn as_task(&mut self, tool: &str, arguments: Value) -> String {
        let created = self
            .ask(
                "tools/call",
                json!({"name": tool, "arguments": arguments, "task": {"ttl": 60000}}),
            )
            .await;
        created["result"]["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("{tool}: a task: {created}"))
            .to_owned()
    }

    /// The task's status once it is no longer `working` (within 30 s).
    async fn settled(&mut self, task: &str) -> Value {
        for _ in 0..150 {
            let got = self.ask("tasks/get", json!({"taskId": task})).await;
            if got["result"]["status"] != "working" {
                return got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        panic!("task {task} still working after 30 s");
    }
}

async fn check(url: &str, how: &str) {
    let mut client = Client::connect(url).await;

    // A task of three seconds, past the server's two-second request timeout: the server's
    // own task runs it, followed by short requests.
    let task = client.as_task("ts__delay", json!({"ms": 3000})).await;
    assert!(task.starts_with("ts__"), "{how}: {task}");
    let settled = client.settled(&task).await;
    assert_eq!(settled["result"]["status"], "completed", "{how}: {settled}");
    let result = client.ask("tasks/result", json!({"taskId": task})).await;
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.starts_with("completed after 3000 ms in task "),
        "{how}: the server's task ran it: {result}"
    );

    // A tool the server runs only as a task, called plainly.
    let text = client.text_of("ts__delay", json!({"ms": 200})).await;
    assert!(
        text.starts_with("completed after 200 ms in task "),
        "{how}: {text}"
    );
    let text = client
        .text_of("ts__delay_optional", json!({"ms": 100}))
        .await;
    assert!(text.starts_with("completed after 100 ms"), "{how}: {text}");

    // A task cancelled by its client is cancelled at the server.
    let long = client.as_task("ts__delay", json!({"ms": 30000})).await;
    let cancelled = client.ask("tasks/cancel", json!({"taskId": long})).await;
    assert_eq!(
        cancelled["result"]["status"], "cancelled",
        "{how}: {cancelled}"
    );
    let mut statuses = String::new();
    for _ in 0..100 {
        statuses = client.text_of("ts__statuses", json!({})).await;
        if statuses.contains("cancelled") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        statuses.contains("cancelled"),
        "{how}: the server's task was cancelled: {statuses}"
    );

    // A tool the server does not run as a task: the gateway runs it as a task of its own.
    let plain = client.as_task("ts__plain", json!({})).await;
    let settled = client.settled(&plain).await;
    assert_eq!(settled["result"]["status"], "completed", "{how}: {settled}");
    let result = client.ask("tasks/result", json!({"taskId": plain})).await;
    assert_eq!(
        result["result"]["content"][0]["text"], "plain answer",
        "{how}: {result}"
    );
}

#[tokio::test]
async fn a_2025_11_25_server_s_own_tasks_run_the_gateway_s_over_stdio_and_http() {
    let stdio = config_for(&format!(
        "command = {:?}\nargs = [{:?}, \"--stdio\"]",
        node(),
        tasks_2025_server()
    ));
    let (_gateway, url) = spawn_gateway_http(&stdio).await;
    check(&url, "over stdio").await;

    // The process dies under a task: the task fails, and says why.
    let mut client = Client::connect(&url).await;
    let doomed = client.as_task("ts__delay", json!({"ms": 30000})).await;
    let crashed = client
        .ask("tools/call", json!({"name": "ts__crash", "arguments": {}}))
        .await;
    assert!(crashed.get("error").is_some(), "{crashed}");
    let settled = client.settled(&doomed).await;
    assert_eq!(settled["result"]["status"], "failed", "{settled}");
    let why = settled["result"]["statusMessage"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("server \"ts\" lost the task it ran for this call: its process ended"),
        "says what became of it: {settled}"
    );

    for (flags, how) in [
        (&["--port", "0"][..], "over HTTP, with JSON answers"),
        (
            &["--port", "0", "--sse"][..],
            "over HTTP, with event streams",
        ),
    ] {
        let (_server, server_url) = start_listener(&tasks_2025_server(), flags).await;
        let http = config_for(&format!(
            "url = {server_url:?}\ntransport = \"streamable-http\""
        ));
        let (_gateway, url) = spawn_gateway_http(&http).await;
        check(&url, how).await;
    }
}
