//! Valid TOML files: the documented example, defaults, `cwd` resolution and `load`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{json, test_env, toml};
use crate::{Config, GatewaySettings, TransportConfig};

const EXAMPLE: &str = r#"
[gateway]
separator = "__"
request_timeout = "60s"
startup_timeout = 30
shutdown_grace = "3s"
kill_grace = "20s"
list_unavailable_tools = true
expose_admin_tools = true

[servers.github]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
relist_interval = "90s"
env = { GITHUB_TOKEN = "${GITHUB_TOKEN}" }
cwd = "."
startup_timeout = "2m"
enabled = true

[servers.remote]
url = "https://example.com/mcp"
headers = { Authorization = "Bearer ${API_TOKEN}" }
transport = "streamable-http"

[servers.legacy]
url = "http://127.0.0.1:8080/sse"
transport = "sse"
request_timeout = "500ms"
enabled = false
"#;

#[test]
fn the_documented_example_parses() {
    let config = toml(EXAMPLE).unwrap();
    assert_eq!(config.source, Path::new("/etc/wardgate/wardgate.toml"));
    assert_eq!(config.gateway.startup_timeout, Duration::from_secs(30));
    assert!(config.gateway.list_unavailable_tools);
    assert!(config.gateway.expose_admin_tools);
    assert!(config.summary().contains("admin tools exposed"));
    assert_eq!(config.gateway.kill_grace, Duration::from_secs(20));
    let relist = config.servers["github"].relist_interval;
    assert_eq!(relist, Some(Duration::from_secs(90)));
    assert!(
        config
            .summary()
            .contains("re-list: every 1m 30s, whether or not"),
        "{}",
        config.summary()
    );
    // Unset: every 5 minutes for a server that does not announce its list changes.
    let remote = &config.servers["remote"];
    assert_eq!(remote.relist_interval, None);
    assert_eq!(
        remote.effective_relist_interval(false),
        Some(crate::DEFAULT_RELIST_INTERVAL)
    );
    assert_eq!(remote.effective_relist_interval(true), None);
    assert!(
        config.summary().contains("SIGKILL 20s later"),
        "{}",
        config.summary()
    );
    assert_eq!(config.servers.len(), 3);

    let github = &config.servers["github"];
    assert_eq!(github.name, "github");
    assert!(github.enabled);
    assert_eq!(github.startup_timeout, Some(Duration::from_secs(120)));
    assert_eq!(github.request_timeout, None);
    assert_eq!(github.transport.kind(), "stdio");
    let TransportConfig::Stdio {
        command,
        args,
        env,
        cwd,
        ..
    } = &github.transport
    else {
        panic!("github is stdio");
    };
    assert_eq!(command, "npx");
    assert_eq!(args, &["-y", "@modelcontextprotocol/server-github"]);
    assert_eq!(env["GITHUB_TOKEN"].expose(), "ghp_SECRET_github");
    assert_eq!(cwd.as_deref(), Some(Path::new("/etc/wardgate")));

    let remote = &config.servers["remote"];
    let TransportConfig::StreamableHttp { url, headers, .. } = &remote.transport else {
        panic!("remote is streamable-http");
    };
    assert_eq!(url, "https://example.com/mcp");
    assert_eq!(headers["Authorization"].expose(), "Bearer SECRET_api");

    let legacy = &config.servers["legacy"];
    assert_eq!(legacy.transport.kind(), "sse");
    assert!(!legacy.enabled);
    assert_eq!(legacy.request_timeout, Some(Duration::from_millis(500)));
    assert_eq!(
        legacy.effective_startup_timeout(&config.gateway),
        Duration::from_secs(30)
    );
}

#[test]
fn gateway_settings_default_when_absent() {
    let config = toml("[servers.a]\nurl = \"https://a.example/mcp\"\n").unwrap();
    assert_eq!(config.gateway, GatewaySettings::default());
    assert_eq!(config.gateway.separator, "__");
    assert_eq!(config.gateway.request_timeout, Duration::from_secs(60));
    assert_eq!(config.gateway.shutdown_grace, Duration::from_secs(3));
    // The seeds' number: SIGKILL 10 s after SIGTERM.
    assert_eq!(config.gateway.kill_grace, Duration::from_secs(10));
    let server = &config.servers["a"];
    assert!(server.enabled);
    assert_eq!(server.transport.kind(), "streamable-http");
}

#[test]
fn relative_cwd_resolves_against_the_config_directory() {
    let config = toml("[servers.a]\ncommand = \"srv\"\ncwd = \"tools/./a\"\n").unwrap();
    let TransportConfig::Stdio { cwd, shown, .. } = &config.servers["a"].transport else {
        panic!("stdio");
    };
    assert_eq!(cwd.as_deref(), Some(Path::new("/etc/wardgate/tools/a")));
    assert_eq!(shown.cwd.as_deref(), Some("/etc/wardgate/tools/a"));

    let config = toml("[servers.a]\ncommand = \"srv\"\ncwd = \"/srv/a\"\n").unwrap();
    let TransportConfig::Stdio { cwd, .. } = &config.servers["a"].transport else {
        panic!("stdio");
    };
    assert_eq!(cwd.as_deref(), Some(Path::new("/srv/a")));
}

#[test]
fn load_reads_the_file_and_makes_its_path_absolute() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wardgate.toml");
    std::fs::write(&path, "[servers.a]\ncommand = \"srv\"\ncwd = \"sub\"\n").unwrap();
    let config = Config::load(&path).unwrap();
    let TransportConfig::Stdio { cwd, .. } = &config.servers["a"].transport else {
        panic!("stdio");
    };
    assert_eq!(cwd.as_deref(), Some(dir.path().join("sub").as_path()));

    let missing = Config::load(&dir.path().join("absent.toml")).unwrap_err();
    assert!(missing.message.contains("cannot read"), "{missing}");
    assert_eq!(missing.file, dir.path().join("absent.toml"));
}

#[test]
fn parse_does_not_depend_on_the_process_environment() {
    // Same text, different lookups: only the closure decides.
    let text = "[servers.a]\ncommand = \"${WARDGATE_TEST_ONLY_IN_CLOSURE}\"\n";
    let path = PathBuf::from("/w.toml");
    let only_ours =
        |name: &str| (name == "WARDGATE_TEST_ONLY_IN_CLOSURE").then(|| "srv".to_owned());
    let found = Config::parse(&path, text, &only_ours).unwrap();
    assert!(
        matches!(&found.servers["a"].transport, TransportConfig::Stdio { command, .. } if command == "srv")
    );
    assert!(Config::parse(&path, text, &test_env).is_err());
}

#[test]
fn toml_integer_spellings_are_seconds() {
    let text = "[gateway]\nrequest_timeout = 1_000\nstartup_timeout = 0x10\n[servers.a]\ncommand = \"x\"\n";
    let config = toml(text).unwrap();
    assert_eq!(config.gateway.request_timeout, Duration::from_secs(1000));
    assert_eq!(config.gateway.startup_timeout, Duration::from_secs(16));
}

#[test]
fn startup_wait_defaults_to_ten_seconds_and_may_be_zero() {
    let default = toml("[servers.a]\ncommand = \"x\"\n").unwrap();
    assert_eq!(default.gateway.startup_wait, Duration::from_secs(10));
    let off = toml("[gateway]\nstartup_wait = \"0s\"\n[servers.a]\ncommand = \"x\"\n").unwrap();
    assert_eq!(off.gateway.startup_wait, Duration::ZERO);
    assert!(off.summary().contains("lists wait 0s for starting servers"));
    let json =
        json(r#"{"gateway": {"startup_wait": "2s"}, "mcpServers": {"a": {"command": "x"}}}"#);
    assert_eq!(json.unwrap().gateway.startup_wait, Duration::from_secs(2));
    // Other durations still refuse zero: a zero timeout would fail every request at once.
    assert!(toml("[gateway]\nstartup_timeout = \"0s\"\n[servers.a]\ncommand = \"x\"\n").is_err());
}

#[test]
fn tool_discovery_is_a_gateway_setting_and_a_clients_own() {
    let config = toml(
        "[gateway]\ntool_discovery = \"search\"\n\n\
         [gateway.auth.clients.agent]\ntoken = \"${GITHUB_TOKEN}\"\ntool_discovery = \"list\"\n\n\
         [servers.s]\ncommand = \"x\"\n",
    );
    let config = config.unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(config.gateway.tool_discovery, crate::ToolDiscovery::Search);
    assert_eq!(
        config.gateway.auth.clients[0].tool_discovery,
        Some(crate::ToolDiscovery::List)
    );
    let summary = config.summary();
    assert!(
        summary.contains("tools found by search (discover_tools, call_tool)"),
        "{summary}"
    );
    assert!(summary.contains("finds tools by tools/list"), "{summary}");
    assert_eq!(
        toml("[servers.s]\ncommand = \"x\"\n")
            .unwrap()
            .gateway
            .tool_discovery,
        crate::ToolDiscovery::List
    );
    let error =
        super::toml_error("[gateway]\ntool_discovery = \"all\"\n[servers.s]\ncommand = \"x\"\n");
    super::assert_error(
        &error,
        "gateway.tool_discovery",
        Some(2),
        "tool_discovery = \"all\" is not a way to find tools",
        "use \"list\"",
    );
}
