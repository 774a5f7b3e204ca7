//! `wardgate --help`, `--version` and `wardgate check`.

use crate::harness::*;

fn run(args: &[&str]) -> std::process::Output {
    std::process::Command::new(wardgate())
        .args(args)
        .output()
        .expect("run wardgate")
}

#[test]
fn help_documents_every_flag() {
    let output = run(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--config",
        "--listen",
        "--allow-anonymous",
        "--log-level",
        "--log-format",
        "check",
    ] {
        assert!(
            help.contains(flag),
            "--help does not mention {flag}:\n{help}"
        );
    }
}

#[test]
fn version_prints_the_crate_version() {
    let output = run(&["--version"]);
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn check_prints_what_it_would_run_and_hides_secrets() {
    let config = config(&format!(
        "{}[servers.remote]\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = {{ Authorization = \"Bearer hunter2\" }}\n",
        stdio_server("local", &["--delay-ms", "1"])
    ));
    let output = run(&["check", "--config", config.path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("local") && stdout.contains("remote"),
        "{stdout}"
    );
    assert!(stdout.contains("wardgate-fake"), "{stdout}");
    assert!(
        !stdout.contains("hunter2"),
        "a secret leaked into check output:\n{stdout}"
    );
}

#[test]
fn check_rejects_a_bad_config_naming_file_key_and_fix() {
    let config = config("[servers.a]\ncomand = \"x\"\n");
    let output = run(&["check", config.path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("wardgate.toml"), "{stderr}");
    assert!(
        stderr.contains("comand") && stderr.contains("command"),
        "no did-you-mean: {stderr}"
    );
}

/// Every config in examples/ passes `check` on a fresh machine: no variable of the
/// tester's set (only PATH and HOME), and every command found.
#[test]
fn the_shipped_examples_are_valid() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(root.join("examples")).unwrap() {
        let path = entry.unwrap().path();
        let is_config = path
            .extension()
            .is_some_and(|extension| extension == "toml" || extension == "json");
        if !is_config {
            continue;
        }
        let output = std::process::Command::new(wardgate())
            .arg("check")
            .arg(&path)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("HOME", std::env::var_os("HOME").unwrap())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        checked.push(path.file_name().unwrap().to_string_lossy().into_owned());
    }
    checked.sort();
    assert_eq!(checked, ["claude_desktop_config.json", "quickstart.toml"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_log_level_shows_the_gateway_and_only_warnings_from_libraries() {
    let config = config(&stdio_server("s", &[]));
    let (mut process, mut lines, url, mut log) = at_the_default_log_level(&config).await;
    // A client's whole session: initialize, list, call, and notifications both ways.
    let (client, _) = http_client(&url).await;
    list_at_once(&client, &["s__echo"]).await;
    client
        .peer()
        .call_tool(call("s__echo", serde_json::json!({"text": "hello"})))
        .await
        .unwrap();
    client.cancel().await.unwrap();
    process.start_kill().unwrap();
    while let Ok(Some(line)) = lines.next_line().await {
        log.push(line);
    }
    let log = log.join("\n");
    assert!(
        log.contains("status_changed"),
        "status changes are shown:\n{log}"
    );
    for line in log.lines() {
        let level = line.split_whitespace().nth(1).unwrap_or("");
        if matches!(level, "INFO" | "DEBUG" | "TRACE") {
            let target = line.split_whitespace().nth(2).unwrap_or("");
            assert!(
                target.starts_with("wardgate"),
                "a library logged at {level} by default: {line}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_supplied_names_cannot_forge_or_flood_log_lines() {
    let config = config(&stdio_server("s", &[]));
    // The default level: the gateway's own lines, which name each client.
    let (mut process, mut lines, url, _) = at_the_default_log_level(&config).await;
    let forged = "evil\n2001-01-01T00:00:00.000000Z  INFO wardgate::events: forged line";
    let huge = "n".repeat(3 * 1024 * 1024);
    let http = reqwest::Client::new();
    for name in [forged, huge.as_str()] {
        let initialize = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": name, "version": "0"}}
        });
        let response = http
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
    }
    process.start_kill().unwrap();
    let mut log = String::new();
    while let Ok(Some(line)) = lines.next_line().await {
        log.push_str(&line);
        log.push('\n');
    }
    assert!(
        !log.lines().any(|line| line.starts_with("2001-01-01")),
        "a client name forged a log line:\n{log}"
    );
    assert!(
        log.contains("evil\\n2001"),
        "the name is logged escaped:\n{log}"
    );
    assert!(
        log.len() < 256 * 1024,
        "a 3 MiB client name wrote {} bytes of log",
        log.len()
    );
}

type LogLines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>;

/// `wardgate --listen 127.0.0.1:0` at the default log level: the process, the rest of its
/// log, its MCP URL, and the log lines up to the one that named it.
async fn at_the_default_log_level(
    config: &ConfigFile,
) -> (tokio::process::Child, LogLines, String, Vec<String>) {
    let mut process = tokio::process::Command::new(wardgate())
        .arg("--config")
        .arg(&config.path)
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("WARDGATE_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn wardgate");
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(process.stderr.take().unwrap()).lines();
    let mut log = Vec::new();
    loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the gateway logs where it serves");
        log.push(line.clone());
        if let Some(at) = line.find("http://") {
            let url = line[at..].split_whitespace().next().unwrap().to_owned();
            return (process, lines, url, log);
        }
    }
}

/// One run of `check` reports every mistake in the file, a program that is not there
/// among them, naming the PATH it searched.
#[test]
fn check_reports_every_error_and_a_missing_program_in_one_run() {
    let faulty = config(
        r#"[gateway]
request_timeout = "soon"

[servers.a]
comand = "x"

[servers.b]
command = "sh"
env = { TOKEN = "${WG_TEST_SURELY_UNSET_VARIABLE}" }

[servers.c]
url = "ftp://example.com/mcp"
"#,
    );
    let output = run(&["check", faulty.path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for expected in [
        "request_timeout",
        "comand",
        "WG_TEST_SURELY_UNSET_VARIABLE",
        "servers.c.url",
        "4 errors",
    ] {
        assert!(stderr.contains(expected), "{expected:?} missing: {stderr}");
    }

    // A config that is valid but names programs that are not there.
    let missing = config(
        r#"[servers.gone]
command = "/nonexistent/mcp-server"

[servers.unknown]
command = "wardgate-surely-not-a-program"

[servers.here]
command = "sh"
"#,
    );
    let output = std::process::Command::new(wardgate())
        .args(["check", missing.path.to_str().unwrap()])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("servers.gone.command") && stderr.contains("/nonexistent/mcp-server"),
        "{stderr}"
    );
    assert!(
        stderr.contains("servers.unknown.command")
            && stderr.contains("was not found on PATH (/usr/bin:/bin)"),
        "{stderr}"
    );
    assert!(!stderr.contains("servers.here"), "{stderr}");
}

/// A client's `token_file` and `--admin-token-file` that other users may read are refused,
/// by `check` as by the gateway, naming the file and the fix, never the token.
#[test]
fn token_files_other_users_can_read_are_refused_naming_the_file_and_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let config = config(
        "[gateway.auth.clients.agent]\ntoken_file = \"agent-token\"\n\n[servers.here]\ncommand = \"sh\"\n",
    );
    let token_file = config.dir.path().join("agent-token");
    std::fs::write(&token_file, "0123456789abcdef0123\n").unwrap();
    let set_mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    let path = config.path.to_str().unwrap();

    set_mode(&token_file, 0o644);
    let output = run(&["check", path]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("gateway.auth.clients.agent.token_file")
            && stderr.contains("can be read by other users")
            && stderr.contains(&format!("chmod 600 {}", token_file.display()))
            && !stderr.contains("0123456789abcdef"),
        "{stderr}"
    );
    set_mode(&token_file, 0o600);
    let output = run(&["check", path]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let admin_token_file = config.dir.path().join("admin-token");
    std::fs::write(&admin_token_file, "the-admin-token\n").unwrap();
    set_mode(&admin_token_file, 0o640);
    let admin_token_path = admin_token_file.to_str().unwrap();
    let output = run(&["--admin-token-file", admin_token_path, "check", path]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("can be read by other users")
            && stderr.contains(&format!("chmod 600 {admin_token_path}"))
            && !stderr.contains("the-admin-token"),
        "{stderr}"
    );
}

/// `--admin-token` on the command line is visible to every user in the process list: the
/// gateway says so once at startup, pointing at `--admin-token-file`; the variable is quiet.
#[tokio::test]
async fn an_admin_token_on_the_command_line_warns_that_it_is_visible() {
    let config = config(&stdio_server("alpha", &[]));
    // A stdio gateway whose client is gone at once: it starts, then shuts down.
    let gateway = |args: &[&str], env: &[(&str, &str)]| {
        let mut command = tokio::process::Command::new(wardgate());
        command
            .arg("--config")
            .arg(&config.path)
            .args(args)
            .env_remove("WARDGATE_ADMIN_TOKEN")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        async move {
            let output = tokio::time::timeout(std::time::Duration::from_secs(60), command.output())
                .await
                .expect("the gateway stopped when its stdin closed")
                .expect("run wardgate");
            String::from_utf8_lossy(&output.stderr).into_owned()
        }
    };
    let warnings = |stderr: &str| {
        stderr
            .lines()
            .filter(|line| line.contains("process list"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };

    let stderr = gateway(&["--admin-token", "visible-admin-token"], &[]).await;
    let found = warnings(&stderr);
    assert_eq!(found.len(), 1, "{stderr}");
    assert!(
        found[0].contains("WARN")
            && found[0].contains("--admin-token-file")
            && !found[0].contains("visible-admin-token"),
        "{stderr}"
    );

    let stderr = gateway(&[], &[("WARDGATE_ADMIN_TOKEN", "hidden-admin-token")]).await;
    assert!(warnings(&stderr).is_empty(), "{stderr}");
}
