//! The first look, as a newcomer has it: the run command with no config, a server that says
//! why it fails, the restarts that follow, and the answer to an operator's reconnect.

use std::time::Duration;

use serde_json::json;
use tokio::process::Command;

use crate::admin::support::start;
use crate::harness::*;
use crate::newcomer::spawn_with_no_config;

/// Every tool of the built-in demo servers.
const DEMO_TOOLS: [&str; 6] = [
    "math__add",
    "math__crash",
    "math__multiply",
    "notes__echo",
    "notes__recall",
    "notes__remember",
];

/// `wardgate --listen 127.0.0.1:0` in an empty directory with an empty home: no config file
/// anywhere, so it serves the built-in demo. The client asks at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_config_the_demo_servers_answer_the_first_list_and_call() {
    let home = tempfile::tempdir().unwrap();
    let mut process = spawn_with_no_config(wardgate(), home.path());
    // The default log level: what a newcomer's terminal shows. The line that says how to
    // serve one's own servers comes before the one that says where it listens.
    let stderr = process.stderr.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
    let mut said_how = false;
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            eprintln!("{line}");
            said_how |= line.contains("built-in demo servers notes and math")
                && line.contains("--config FILE");
            if let (true, Some(index)) = (line.contains("Streamable HTTP"), line.find("http://")) {
                return line[index..].split_whitespace().next().unwrap().to_owned();
            }
        }
        panic!("the gateway exited before it listened");
    })
    .await
    .expect("the gateway listened");
    assert!(said_how, "no line said how to serve your own servers");
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("{line}");
        }
    });

    let (client, _) = http_client(&url).await;
    let names = tool_names(&client).await;
    assert_eq!(names, DEMO_TOOLS, "the first tools/list");
    let sum = client
        .peer()
        .call_tool(call("math__add", json!({"a": 2, "b": 3})))
        .await
        .expect("the first call");
    assert_eq!(text_of(&sum), "5");

    // The crash tool ends the math server; the call says so in the server's own words, and
    // the gateway brings it back.
    let crash = client
        .peer()
        .call_tool(call("math__crash", json!({})))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        crash.contains("exited with code 3") && crash.contains("math: crashing on request"),
        "{crash}"
    );
    let back = async {
        loop {
            if let Ok(result) = client
                .peer()
                .call_tool(call("math__multiply", json!({"a": 6, "b": 7})))
                .await
            {
                return text_of(&result);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let product = tokio::time::timeout(Duration::from_secs(60), back)
        .await
        .expect("the math server came back after its crash");
    assert_eq!(product, "42");
}

/// A server that prints why it cannot start and exits, with a secret in its environment
/// that it also prints. Each start appends a line to a file, so the starts can be counted
/// and their spacing read.
fn says_why(starts: &std::path::Path) -> String {
    format!(
        r#"[servers.billing]
command = "sh"
args = ["-c", "date +%s%N >> '{}'; echo \"token $BILLING_TOKEN was refused\" >&2; echo 'BILLING_API_KEY is not set' >&2; exit 1"]
env = {{ BILLING_TOKEN = "${{WG_TEST_BILLING_TOKEN}}" }}
"#,
        starts.display()
    )
}

const SECRET: &str = "sk-live-do-not-show-4242";

fn start_times(starts: &std::path::Path) -> Vec<u64> {
    std::fs::read_to_string(starts)
        .unwrap_or_default()
        .lines()
        .map(|line| line.trim().parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_says_why_it_fails_is_heard_everywhere_and_backs_off() {
    let scratch = tempfile::tempdir().unwrap();
    let starts = scratch.path().join("starts");
    let admin = start(
        config(&says_why(&starts)),
        &[],
        &[("WG_TEST_BILLING_TOKEN", SECRET)],
    )
    .await;
    let failed = admin
        .wait_status("billing", "permanently_failed", Duration::from_secs(90))
        .await;

    // One process per attempt, and failed starts spaced by the default schedule: 2 s, then
    // 4 s (lower bounds the gateway enforces, whatever the machine's speed).
    let times = start_times(&starts);
    assert_eq!(times.len(), 3, "starts: {times:?}");
    let gaps: Vec<u64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]) / 1_000_000)
        .collect();
    assert!(gaps[0] >= 2_000 && gaps[1] >= 4_000, "gaps in ms: {gaps:?}");

    // The status reason and /servers.
    let reason = failed["reason"].as_str().unwrap_or_default().to_owned();
    assert!(
        reason.contains("exited with code 1") && reason.contains("BILLING_API_KEY is not set"),
        "{failed}"
    );
    assert!(reason.contains("token *** was refused"), "{reason}");
    let (_, detail) = admin.get("/servers/billing").await;
    let (_, list) = admin.get("/servers").await;
    for shown in [detail.to_string(), list.to_string()] {
        assert!(shown.contains("BILLING_API_KEY is not set"), "{shown}");
        assert!(!shown.contains(SECRET), "the secret was shown: {shown}");
    }

    // `wardgate servers NAME`.
    let output = Command::new(wardgate())
        .args(["--admin", &admin.address, "servers", "billing"])
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(printed.contains("BILLING_API_KEY is not set"), "{printed}");
    assert!(!printed.contains(SECRET), "{printed}");

    // A call's error: message and data.
    let (client, _) = http_client(&admin.mcp).await;
    let error = client
        .peer()
        .call_tool(call("billing__charge", json!({})))
        .await
        .unwrap_err();
    let rmcp::ServiceError::McpError(error) = error else {
        panic!("not a JSON-RPC error: {error}");
    };
    assert!(
        error.message.contains("BILLING_API_KEY is not set"),
        "{}",
        error.message
    );
    let data = error.data.expect("data");
    assert_eq!(data["status"], "permanently_failed", "{data}");
    assert!(
        data["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("BILLING_API_KEY is not set")),
        "{data}"
    );
    assert!(!error.message.contains(SECRET) && !data.to_string().contains(SECRET));

    // The operator's reconnect: its answer says what it just did, and asks for nothing
    // it already did but the fix.
    let output = Command::new(wardgate())
        .args(["--admin", &admin.address, "reconnect", "billing"])
        .output()
        .await
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        said.contains("server \"billing\": the reconnect made 3 starts in")
            && said.contains("each failed; it is permanently_failed")
            && said.contains("permanently_failed")
            && said.contains("BILLING_API_KEY is not set")
            && said.contains("fix the cause, then run `wardgate reconnect billing` again"),
        "{said}"
    );
    assert!(!said.contains(SECRET), "{said}");
    assert_eq!(start_times(&starts).len(), 6, "three more starts, one each");
}
