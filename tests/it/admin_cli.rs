//! The operator subcommands (`wardgate status`, `servers`, `reconnect`, `events`, ...) against
//! a running gateway's admin API: tables for people, JSON for scripts, errors that say why.

use std::time::Duration;

use serde_json::Value;

use crate::admin::support::{start, AdminGateway};
use crate::harness::*;

const SETTLE: Duration = Duration::from_secs(20);

/// Run `wardgate ARGS` against `admin` (address and token from the environment, as an
/// operator's shell would have them).
async fn wardgate_cli(admin: &AdminGateway, args: &[&str]) -> std::process::Output {
    let mut command = tokio::process::Command::new(wardgate());
    command
        .args(args)
        .env("WARDGATE_ADMIN", &admin.address)
        .env_remove("WARDGATE_ADMIN_TOKEN")
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null());
    if let Some(token) = &admin.token {
        command.env("WARDGATE_ADMIN_TOKEN", token);
    }
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the CLI finished in time")
        .expect("run wardgate")
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn two_servers() -> ConfigFile {
    config(&format!(
        "{}{}",
        stdio_server("alpha", &["--tools-count", "2"]),
        stdio_server("broken", &["--exit-on-start", "7"])
    ))
}

/// The column where `header` starts in the table's first line, and in every row.
fn column_starts(table: &str, header: &str) -> Vec<Option<usize>> {
    table
        .lines()
        .map(|line| {
            let start = table.lines().next().unwrap().find(header)?;
            line.chars()
                .nth(start)
                .filter(|c| !c.is_whitespace())
                .map(|_| start)
        })
        .collect()
}

#[tokio::test]
async fn servers_prints_an_aligned_table_without_colour_when_piped() {
    let admin = start(two_servers(), &[], &[]).await;
    admin.wait_status("alpha", "online", SETTLE).await;
    admin
        .wait_status("broken", "permanently_failed", SETTLE)
        .await;
    let output = wardgate_cli(&admin, &["servers"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    let table = stdout(&output);
    assert!(!table.contains('\x1b'), "colour on a pipe:\n{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("STATUS"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("alpha") && lines[1].contains("online"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("broken") && lines[2].contains("permanently_failed"),
        "{table}"
    );
    for header in ["STATUS", "TRANSPORT", "PID", "TOOLS", "POLICY"] {
        let starts = column_starts(&table, header);
        assert!(
            starts.iter().all(Option::is_some),
            "{header} is not aligned:\n{table}"
        );
    }
}

#[tokio::test]
async fn status_summarizes_readiness_servers_and_policies() {
    let admin = start(two_servers(), &[], &[]).await;
    admin.wait_status("alpha", "online", SETTLE).await;
    admin
        .wait_status("broken", "permanently_failed", SETTLE)
        .await;
    let output = wardgate_cli(&admin, &["status"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("ready"), "{text}");
    assert!(text.contains("2: 1 online, 1 permanently_failed"), "{text}");
    assert!(text.contains("builtin"), "{text}");

    let output = wardgate_cli(&admin, &["status", "--json"]).await;
    let json: Value = serde_json::from_slice(&output.stdout).expect("status --json is JSON");
    assert_eq!(json["ready"], true);
    assert_eq!(json["servers"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn json_output_is_the_admin_api_answer() {
    let admin = start(two_servers(), &[], &[]).await;
    admin.wait_status("alpha", "online", SETTLE).await;
    let output = wardgate_cli(&admin, &["servers", "--json"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    let json: Value = serde_json::from_slice(&output.stdout).expect("servers --json is JSON");
    let names: Vec<&str> = json["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|server| server["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "broken"]);

    let output = wardgate_cli(&admin, &["servers", "alpha"]).await;
    let text = stdout(&output);
    assert!(
        text.contains("alpha__tool_0") && text.contains("tool_0"),
        "{text}"
    );
}

#[tokio::test]
async fn an_unknown_server_exits_non_zero_with_the_api_message() {
    let admin = start(two_servers(), &[], &[]).await;
    for args in [
        &["reconnect", "nope"][..],
        &["servers", "nope"],
        &["disable", "nope", "--json"],
    ] {
        let output = wardgate_cli(&admin, args).await;
        assert!(!output.status.success(), "{args:?} succeeded");
        let message = stderr(&output);
        assert!(
            message.contains("no server named \"nope\"") && message.contains("alpha"),
            "{args:?}: {message}"
        );
        assert!(
            stdout(&output).is_empty(),
            "{args:?} printed {}",
            stdout(&output)
        );
    }
}

#[tokio::test]
async fn an_unreachable_gateway_is_named_with_how_to_start_one() {
    let output = tokio::process::Command::new(wardgate())
        .args(["status", "--admin", "127.0.0.1:9"])
        .env_remove("WARDGATE_ADMIN")
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("127.0.0.1:9") && message.contains("--admin"),
        "{message}"
    );

    let output = tokio::process::Command::new(wardgate())
        .args(["servers"])
        .env_remove("WARDGATE_ADMIN")
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("WARDGATE_ADMIN"),
        "{}",
        stderr(&output)
    );
}

#[tokio::test]
async fn a_token_comes_from_the_environment_and_a_wrong_one_is_refused() {
    let admin = start(two_servers(), &["--admin-token", "tok-123"], &[]).await;
    let output = wardgate_cli(&admin, &["servers"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    let output = wardgate_cli(&admin, &["servers", "--admin-token", "nope"]).await;
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("token is wrong"),
        "{}",
        stderr(&output)
    );
}

#[tokio::test]
async fn events_prints_the_recent_events_and_exits() {
    let admin = start(two_servers(), &[], &[]).await;
    admin.wait_status("alpha", "online", SETTLE).await;
    let output = wardgate_cli(&admin, &["events"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.lines().any(|line| line.contains("status_changed")
            && line.contains("alpha")
            && line.contains("online")),
        "{text}"
    );
    let output = wardgate_cli(&admin, &["events", "--json"]).await;
    for line in stdout(&output).lines() {
        let event: Value = serde_json::from_str(line).expect("one JSON event per line");
        assert!(
            event["id"].as_u64().is_some() && event["event"].is_string(),
            "{event}"
        );
    }
}

#[tokio::test]
async fn actions_print_their_outcome_and_commands_lists_them() {
    let admin = start(two_servers(), &[], &[]).await;
    admin.wait_status("alpha", "online", SETTLE).await;
    let output = wardgate_cli(&admin, &["disable", "alpha"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).starts_with("disable alpha completed"),
        "{}",
        stdout(&output)
    );
    assert_eq!(admin.server("alpha").await["status"], "disabled");

    let output = wardgate_cli(&admin, &["enable", "alpha", "--json"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    let record: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(record["state"], "completed");
    assert_eq!(record["result"]["status"], "online");

    // A restart of a server that cannot start fails with the gateway's reason.
    let output = wardgate_cli(&admin, &["restart", "broken"]).await;
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("exited with code 7"),
        "{}",
        stderr(&output)
    );

    let output = wardgate_cli(&admin, &["commands"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    let table = stdout(&output);
    assert!(table.lines().next().unwrap().starts_with("ID"), "{table}");
    assert!(
        table.contains("disable alpha") && table.contains("enable alpha"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|line| line.contains("restart broken") && line.contains("failed")),
        "{table}"
    );
}

#[tokio::test]
async fn policy_reload_makes_a_module_that_was_missing_ready() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.wasm");
    let text = format!(
        "[gateway]\npolicy = \"live\"\n\n[policies.live]\npath = {live:?}\n\n{}",
        stdio_server("alpha", &[])
    );
    let admin = start(config(&text), &[], &[]).await;
    let output = wardgate_cli(&admin, &["status"]).await;
    assert!(stdout(&output).contains("not ready"), "{}", stdout(&output));
    let output = wardgate_cli(&admin, &["policy", "reload"]).await;
    assert!(
        !output.status.success(),
        "reloading a missing module must fail"
    );
    assert!(stderr(&output).contains("live"), "{}", stderr(&output));

    std::fs::copy(module("default"), &live).unwrap();
    let output = wardgate_cli(&admin, &["policy", "reload"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("reload_policies completed"),
        "{}",
        stdout(&output)
    );
    let (status, ready) = admin.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
}

#[tokio::test]
async fn events_follow_prints_live_events_as_they_happen() {
    use tokio::io::AsyncBufReadExt;
    let admin = start(two_servers(), &[], &[]).await;
    admin.wait_status("alpha", "online", SETTLE).await;
    let mut follower = tokio::process::Command::new(wardgate())
        .args(["events", "--follow", "--json"])
        .env("WARDGATE_ADMIN", &admin.address)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(follower.stdout.take().unwrap()).lines();
    let (status, _) = admin.post("/servers/alpha/disable", None).await;
    assert_eq!(status, 200);
    let found = tokio::time::timeout(SETTLE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let event: Value = serde_json::from_str(&line).unwrap();
            if event["event"] == "status_changed" && event["to"] == "disabled" {
                return event;
            }
        }
        panic!("the stream ended");
    })
    .await
    .expect("the disable was printed live");
    assert_eq!(found["server"], "alpha");
    assert!(
        follower.try_wait().unwrap().is_none(),
        "--follow keeps running"
    );
}
