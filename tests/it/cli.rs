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

#[test]
fn the_shipped_examples_are_valid() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let quickstart = root.join("examples/quickstart.toml");
    let output = run(&["check", quickstart.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let claude = root.join("examples/claude_desktop_config.json");
    let output = std::process::Command::new(wardgate())
        .args(["check", claude.to_str().unwrap()])
        .env("REMOTE_TOKEN", "example-token")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("filesystem") && !stdout.contains("example-token"),
        "{stdout}"
    );
}
