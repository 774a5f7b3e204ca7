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

/// `client_key_file`: a private key signs the client's assertions (`private_key_jwt`); its
/// contents are never shown, and a key without its client, beside a secret, unreadable or
/// of an unknown algorithm is an error naming the fix.
#[test]
fn a_client_key_file_authenticates_the_client_and_its_key_is_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("client.pem");
    std::fs::write(
        &key,
        "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgSECRETSECRET\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let table = |extra: &str| {
        format!(
            "[servers.m2m]\nurl = \"https://m2m.example/mcp\"\n\
             [servers.m2m.oauth]\ngrant = \"client_credentials\"\n{extra}client_key_file = {:?}\n",
            key.display().to_string()
        )
    };
    let config = toml(&table(
        "client_id = \"svc\"\nclient_key_algorithm = \"ES256\"\n",
    ))
    .unwrap();
    let TransportConfig::StreamableHttp {
        oauth: Some(oauth), ..
    } = &config.servers["m2m"].transport
    else {
        panic!("not an OAuth server: {config:?}");
    };
    assert!(oauth.client_credentials && oauth.client_secret.is_none());
    let client_key = oauth.client_key.as_ref().expect("a key");
    assert_eq!(client_key.algorithm, crate::KeyAlgorithm::Es256);
    for shown in [format!("{config:?}"), config.summary()] {
        assert!(!shown.contains("SECRETSECRET"), "{shown}");
    }
    assert!(
        config
            .summary()
            .contains("authenticated by ES256 assertions signed with the key in"),
        "{}",
        config.summary()
    );
    let error = super::toml_error(&table(""));
    assert!(error.message.contains("without a `client_id`"), "{error}");
    let error = super::toml_error(&table(
        "client_id = \"svc\"\nclient_secret = \"${GITHUB_TOKEN}\"\n",
    ));
    assert!(
        error
            .message
            .contains("both `client_secret` and `client_key_file`"),
        "{error}"
    );
    let error = super::toml_error(&table(
        "client_id = \"svc\"\nclient_key_algorithm = \"HS256\"\n",
    ));
    assert!(error.fix.contains("ES256"), "{error}");
    let error = super::toml_error(
        &table("client_id = \"svc\"\n").replace("grant = \"client_credentials\"\n", ""),
    );
    assert!(
        error
            .message
            .contains("without grant = \"client_credentials\""),
        "{error}"
    );
    std::fs::write(
        &key,
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIA==\n-----END EC PRIVATE KEY-----\n",
    )
    .unwrap();
    let error = super::toml_error(&table(
        "client_id = \"svc\"\nclient_key_algorithm = \"RS256\"\n",
    ));
    assert!(
        error
            .message
            .contains("holds an EC key, which cannot sign RS256"),
        "{error}"
    );
    assert!(error.fix.contains("ES256"), "{error}");
    std::fs::write(&key, "not a key").unwrap();
    let error = super::toml_error(&table("client_id = \"svc\"\n"));
    assert!(
        error.message.contains("holds no PEM private key"),
        "{error}"
    );
    std::fs::remove_file(&key).unwrap();
    let error = super::toml_error(&table("client_id = \"svc\"\n"));
    assert!(
        error.message.contains("cannot read the client key"),
        "{error}"
    );
}

/// `grant = "enterprise_managed"`: the IdP's settings and the ID token's file are all
/// needed, the IdP's secret is never shown, and IdP settings without the grant are an error.
#[test]
fn the_enterprise_managed_grant_needs_its_idp_and_never_shows_its_secrets() {
    let table = |extra: &str| {
        format!(
            "[servers.xaa]\nurl = \"https://xaa.example/mcp\"\n\
             [servers.xaa.oauth]\n{extra}"
        )
    };
    let full = "grant = \"enterprise_managed\"\nclient_id = \"gateway\"\nclient_secret = \"${GITHUB_TOKEN}\"\n\
                idp_issuer = \"https://idp.example\"\nidp_token_endpoint = \"https://idp.example/token\"\n\
                idp_client_id = \"gw-at-idp\"\nidp_client_secret = \"${API_TOKEN}\"\nid_token_file = \"id-token\"\n";
    let config = toml(&table(full)).unwrap();
    let TransportConfig::StreamableHttp {
        oauth: Some(oauth), ..
    } = &config.servers["xaa"].transport
    else {
        panic!("not an OAuth server: {config:?}");
    };
    let idp = oauth.enterprise.as_ref().expect("an enterprise IdP");
    assert!(oauth.machine() && !oauth.client_credentials);
    assert_eq!(
        idp.id_token_file,
        std::path::Path::new("/etc/wardgate/id-token")
    );
    assert_no_secret(&format!("{config:?}"));
    assert_no_secret(&config.summary());
    assert!(
        config.summary().contains("enterprise-managed"),
        "{}",
        config.summary()
    );
    let error = super::toml_error(&table(&full.replace("id_token_file = \"id-token\"\n", "")));
    assert!(error.message.contains("needs `id_token_file`"), "{error}");
    let error = super::toml_error(&table(&full.replace(
        "client_id = \"gateway\"\nclient_secret = \"${GITHUB_TOKEN}\"\n",
        "",
    )));
    assert!(error.message.contains("needs `client_id`"), "{error}");
    let error = super::toml_error(&table("idp_issuer = \"https://idp.example\"\n"));
    assert!(
        error
            .message
            .contains("without grant = \"enterprise_managed\""),
        "{error}"
    );
}
