//! Nothing taken from the environment, and no env or header value, is ever displayed.

use super::{json, toml};
use crate::{Secret, TransportConfig};

const SECRET_CONFIG: &str = r#"
[servers.github]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github", "--token=${GITHUB_TOKEN}", "two words"]
env = { GITHUB_TOKEN = "${GITHUB_TOKEN}", LITERAL_KEY = "SECRET_literal" }
cwd = "."
startup_timeout = "2m"

[servers.remote]
url = "https://example.com/${API_TOKEN}/mcp"
headers = { Authorization = "Bearer ${API_TOKEN}", "X-Key" = "SECRET_header" }

[servers.off]
url = "https://off.example/sse"
transport = "sse"
enabled = false
"#;

#[track_caller]
fn assert_no_secret(text: &str) {
    assert!(!text.contains("SECRET"), "a secret leaked into:\n{text}");
}

#[test]
fn secrets_print_as_redacted() {
    let secret = Secret::new("SECRET_value");
    assert_eq!(format!("{secret}"), "<redacted>");
    assert_eq!(format!("{secret:?}"), "<redacted>");
    assert_eq!(secret.expose(), "SECRET_value");
}

#[test]
fn summary_shows_what_would_run_without_secrets() {
    let config = toml(SECRET_CONFIG).unwrap();
    let summary = config.summary();
    assert_no_secret(&summary);
    let expected = "\
config: /etc/wardgate/wardgate.toml
gateway: separator \"__\", request timeout 1m, startup timeout 30s, lists wait 10s for starting servers, shutdown grace 3s (then SIGTERM, and SIGKILL 10s later), tools of unavailable servers hidden, tools found by tools/list, admin tools off, default policy builtin
http (with --listen):
  hosts: the listener's address, localhost, 127.0.0.1 and [::1]; allowed_hosts adds: nothing (a request naming another Host is refused with 403: add the DNS name clients use)
  origins: requests without Origin (not from a web page) pass; loopback pages (http://localhost:*, http://127.0.0.1:*) pass on a loopback listener only; allowed_origins adds: nothing (any other Origin is refused with 403)
  limits: bodies up to 8388608 bytes, sessions idle 5m are closed, 1024 sessions at most (64 per client), rate 50/s per client, bursts of 100
auth: none (every client of --listen may use every server; a listener other machines can reach refuses to start: add [gateway.auth], or allow_anonymous = true if that is meant)

server github (stdio)
  command: npx -y @modelcontextprotocol/server-github --token=${GITHUB_TOKEN} 'two words'
  cwd: /etc/wardgate
  env: GITHUB_TOKEN, LITERAL_KEY (values hidden)
  timeouts: startup 2m, request 1m (gateway default)
  policy: builtin (gateway default)

server off (sse, disabled)
  url: https://off.example/sse
  timeouts: startup 30s (gateway default), request 1m (gateway default)
  policy: builtin (gateway default)

server remote (streamable-http)
  url: https://example.com/${API_TOKEN}/mcp
  headers: Authorization, X-Key (values hidden)
  timeouts: startup 30s (gateway default), request 1m (gateway default)
  policy: builtin (gateway default)
";
    assert_eq!(summary, expected);
}

#[test]
fn debug_output_has_no_secrets() {
    let config = toml(SECRET_CONFIG).unwrap();
    let debug = format!("{config:?}");
    assert_no_secret(&debug);
    assert_no_secret(&format!("{config:#?}"));
    assert!(debug.contains("--token=${GITHUB_TOKEN}"), "{debug}");
    assert!(debug.contains("GITHUB_TOKEN"), "{debug}");
    assert!(debug.contains("<redacted>"), "{debug}");
    for server in config.servers.values() {
        assert_no_secret(&format!("{:?}", server.transport));
        assert_no_secret(&server.transport.describe());
    }
}

#[test]
fn json_literal_secrets_stay_hidden() {
    let text = r#"{"mcpServers": {"a": {"command": "x", "env": {"TOKEN": "SECRET_in_file"}},
        "b": {"url": "https://b", "headers": {"Authorization": "SECRET_in_file"}}}}"#;
    let config = json(text).unwrap();
    assert_no_secret(&config.summary());
    assert_no_secret(&format!("{config:?}"));
}

#[test]
fn describe_gives_the_command_line_or_url() {
    let config = toml(SECRET_CONFIG).unwrap();
    assert_eq!(
        config.servers["github"].transport.describe(),
        "npx -y @modelcontextprotocol/server-github --token=${GITHUB_TOKEN} 'two words'"
    );
    assert_eq!(
        config.servers["remote"].transport.describe(),
        "https://example.com/${API_TOKEN}/mcp"
    );
}

#[test]
fn an_oauth_client_id_from_the_environment_is_shown_as_written() {
    // Found by the `config` fuzz target: `Debug` and `summary()` showed the variable's value.
    let config = toml(
        "[servers.linear]\nurl = \"https://mcp.linear.app/mcp\"\n\
         [servers.linear.oauth]\nclient_id = \"${API_TOKEN}\"\nclient_secret = \"${GITHUB_TOKEN}\"\n",
    )
    .unwrap();
    let TransportConfig::StreamableHttp {
        oauth: Some(oauth), ..
    } = &config.servers["linear"].transport
    else {
        panic!("not an OAuth server: {config:?}");
    };
    // What signs in is the value; what is shown is the text as written.
    assert_eq!(oauth.client_id.as_deref(), Some("SECRET_api"));
    assert_no_secret(&format!("{config:?}"));
    let summary = config.summary();
    assert_no_secret(&summary);
    assert!(summary.contains("oauth: client ${API_TOKEN};"), "{summary}");
}

#[test]
fn the_client_credentials_grant_needs_the_client_s_id_and_secret() {
    let config = toml(
        "[servers.m2m]\nurl = \"https://m2m.example/mcp\"\n\
         [servers.m2m.oauth]\ngrant = \"client_credentials\"\nclient_id = \"svc\"\nclient_secret = \"${GITHUB_TOKEN}\"\n",
    )
    .unwrap();
    let TransportConfig::StreamableHttp {
        oauth: Some(oauth), ..
    } = &config.servers["m2m"].transport
    else {
        panic!("not an OAuth server: {config:?}");
    };
    assert!(oauth.client_credentials);
    assert_no_secret(&format!("{config:?}"));
    let error = super::toml_error(
        "[servers.m2m]\nurl = \"https://m2m.example/mcp\"\n\
         [servers.m2m.oauth]\ngrant = \"client_credentials\"\nclient_id = \"svc\"\n",
    );
    super::assert_error(
        &error,
        "servers.m2m.oauth.grant",
        Some(4),
        "needs `client_id` and `client_secret`",
        "add the client's `client_id` and `client_secret`",
    );
    let error = super::toml_error(
        "[servers.m2m]\nurl = \"https://m2m.example/mcp\"\n\
         [servers.m2m.oauth]\ngrant = \"password\"\n",
    );
    super::assert_error(
        &error,
        "servers.m2m.oauth.grant",
        Some(4),
        "unknown OAuth grant \"password\"",
        "client_credentials",
    );
}
