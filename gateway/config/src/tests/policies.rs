//! Recovery policies: `[policies.NAME]`, `policy = "NAME"` and `params`, in TOML and JSON.

use std::collections::BTreeMap;
use std::path::Path;

use super::{assert_error, json, json_error, toml, toml_error};
use crate::Config;

const POLICIES: &str = r#"
[gateway]
policy = "patient"

[policies.patient]
path = "policies/patient.wasm"
params = { max_attempts = 5, reconnect_jitter = 0.2, verbose = true, mode = "calm" }

[policies.strict]
path = "/opt/wardgate/strict.wasm"

[servers.github]
command = "npx"
policy = "strict"
params = { max_crashes = 5 }

[servers.native]
command = "native"
policy = "builtin"

[servers.plain]
url = "https://plain.example/mcp"
params = { max_attempts = 2, restart_delay_ms = 1_000 }
"#;

fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|&(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

#[test]
fn toml_policies_parse_with_params_as_text() {
    let config = toml(POLICIES).unwrap();
    assert_eq!(config.gateway.default_policy.as_deref(), Some("patient"));
    assert_eq!(
        config.policies.keys().collect::<Vec<_>>(),
        ["patient", "strict"]
    );
    let patient = &config.policies["patient"];
    assert_eq!(patient.name, "patient");
    assert_eq!(
        patient.path,
        Path::new("/etc/wardgate/policies/patient.wasm")
    );
    assert_eq!(
        patient.params,
        params(&[
            ("max_attempts", "5"),
            ("mode", "calm"),
            ("reconnect_jitter", "0.2"),
            ("verbose", "true"),
        ])
    );
    let strict = &config.policies["strict"];
    assert_eq!(strict.path, Path::new("/opt/wardgate/strict.wasm"));
    assert!(strict.params.is_empty());

    let github = &config.servers["github"];
    assert_eq!(github.policy.as_deref(), Some("strict"));
    assert_eq!(github.params, params(&[("max_crashes", "5")]));
    assert_eq!(github.effective_policy(&config.gateway), Some("strict"));

    let native = &config.servers["native"];
    assert_eq!(native.policy.as_deref(), Some("builtin"));
    assert_eq!(native.effective_policy(&config.gateway), None);

    let plain = &config.servers["plain"];
    assert_eq!(plain.policy, None);
    assert_eq!(
        plain.params,
        params(&[("max_attempts", "2"), ("restart_delay_ms", "1000")])
    );
    assert_eq!(plain.effective_policy(&config.gateway), Some("patient"));
}

#[test]
fn without_policies_every_server_gets_the_builtin() {
    let config = toml("[servers.a]\ncommand = \"x\"\n").unwrap();
    assert!(config.policies.is_empty());
    assert_eq!(config.gateway.default_policy, None);
    let server = &config.servers["a"];
    assert_eq!((server.policy.as_deref(), server.params.len()), (None, 0));
    assert_eq!(server.effective_policy(&config.gateway), None);

    // `builtin` as the gateway default needs no table either, and stays builtin per server.
    let text = "[gateway]\npolicy = \"builtin\"\n[servers.a]\ncommand = \"x\"\n";
    let config = toml(text).unwrap();
    assert_eq!(config.gateway.default_policy.as_deref(), Some("builtin"));
    assert_eq!(config.servers["a"].effective_policy(&config.gateway), None);
}

#[test]
fn json_policies_parse_like_toml() {
    let text = r#"{
  "gateway": { "policy": "patient" },
  "policies": {
    "patient": { "path": "policies/patient.wasm", "params": { "max_attempts": 5, "reconnect_jitter": 0.2 } },
    "strict": { "path": "/opt/wardgate/strict.wasm" }
  },
  "mcpServers": {
    "github": { "command": "npx", "policy": "strict", "params": { "max_crashes": 5, "note": "x y" } },
    "native": { "command": "native", "policy": "builtin" },
    "plain": { "url": "https://plain.example/mcp", "params": { "restart": false, "factor": 2.0 } }
  }
}"#;
    let config = json(text).unwrap();
    assert_eq!(config.gateway.default_policy.as_deref(), Some("patient"));
    let patient = &config.policies["patient"];
    assert_eq!(
        patient.path,
        Path::new("/home/tester/policies/patient.wasm")
    );
    assert_eq!(
        patient.params,
        params(&[("max_attempts", "5"), ("reconnect_jitter", "0.2")])
    );
    let github = &config.servers["github"];
    assert_eq!(github.effective_policy(&config.gateway), Some("strict"));
    assert_eq!(
        github.params,
        params(&[("max_crashes", "5"), ("note", "x y")])
    );
    assert_eq!(
        config.servers["native"].effective_policy(&config.gateway),
        None
    );
    let plain = &config.servers["plain"];
    assert_eq!(plain.effective_policy(&config.gateway), Some("patient"));
    // `2.0` is stored as `2`, which reads back as an integer or a float alike.
    assert_eq!(
        plain.params,
        params(&[("factor", "2"), ("restart", "false")])
    );

    let error = json_error(
        r#"{"policies": {"p": {"path": "p.wasm"}}, "mcpServers": {"a": {"command": "x", "policy": "q"}}}"#,
    );
    assert_error(
        &error,
        "mcpServers.a.policy",
        Some(1),
        "policy \"q\" is not defined",
        "builtin, p",
    );
}

#[test]
fn relative_policy_paths_resolve_against_the_config_directory() {
    let text = |path: &str| {
        format!("[policies.p]\npath = \"{path}\"\n[servers.a]\ncommand = \"x\"\npolicy = \"p\"\n")
    };
    let path_of = |config: Config| config.policies["p"].path.clone();
    assert_eq!(
        path_of(toml(&text("./policies/./p.wasm")).unwrap()),
        Path::new("/etc/wardgate/policies/p.wasm")
    );
    assert_eq!(
        path_of(toml(&text("/srv/p.wasm")).unwrap()),
        Path::new("/srv/p.wasm")
    );
    assert_eq!(
        path_of(toml(&text("${HOME}/p.wasm")).unwrap()),
        Path::new("/home/tester/p.wasm")
    );
    let error = toml_error(&text("${POLICY_DIR}/p.wasm"));
    assert_error(
        &error,
        "policies.p.path",
        Some(2),
        "`POLICY_DIR` is not set",
        "export POLICY_DIR",
    );
    let error = toml_error(&text(""));
    assert_error(&error, "policies.p.path", Some(2), "empty", ".wasm");
}

#[test]
fn a_missing_policy_file_is_not_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wardgate.toml");
    let text = "[gateway]\npolicy = \"p\"\n[policies.p]\npath = \"absent.wasm\"\n\
                [servers.a]\ncommand = \"x\"\n";
    std::fs::write(&path, text).unwrap();
    let config = Config::load(&path).unwrap();
    assert_eq!(config.policies["p"].path, dir.path().join("absent.wasm"));
    assert!(config.policies["p"].path.is_absolute());
}

#[test]
fn an_unknown_policy_name_is_an_error_with_a_suggestion() {
    let text = "[policies.strict]\npath = \"s.wasm\"\n[policies.patient]\npath = \"p.wasm\"\n\
                [servers.a]\ncommand = \"x\"\npolicy = \"strcit\"\n";
    let error = toml_error(text);
    assert_error(
        &error,
        "servers.a.policy",
        Some(7),
        "policy \"strcit\" is not defined; did you mean \"strict\"?",
        "the defined policies are: patient, strict",
    );

    let text = "[gateway]\npolicy = \"lenient\"\n[policies.strict]\npath = \"s.wasm\"\n\
                [servers.a]\ncommand = \"x\"\n";
    let error = toml_error(text);
    assert_error(
        &error,
        "gateway.policy",
        Some(2),
        "the defined policies are: strict",
        "use one of: builtin, strict",
    );

    let error = toml_error("[servers.a]\ncommand = \"x\"\npolicy = \"builtn\"\n");
    assert_error(
        &error,
        "servers.a.policy",
        Some(3),
        "did you mean \"builtin\"?",
        "no policies are defined",
    );
}

#[test]
fn builtin_is_reserved() {
    let error = toml_error("[policies.builtin]\npath = \"b.wasm\"\n[servers.a]\ncommand = \"x\"\n");
    assert_error(
        &error,
        "policies.builtin",
        Some(1),
        "`builtin` is reserved",
        "policy = \"builtin\"",
    );
    let error = json_error(
        r#"{"policies": {"builtin": {"path": "b.wasm"}}, "mcpServers": {"a": {"command": "x"}}}"#,
    );
    assert_error(&error, "policies.builtin", Some(1), "reserved", "");
}

#[test]
fn bad_policy_tables_are_errors() {
    let error = toml_error("[policies.p]\nparams = { a = 1 }\n[servers.a]\ncommand = \"x\"\n");
    assert_error(
        &error,
        "policies.p",
        Some(1),
        "policy \"p\" has no `path`",
        "path = \"policies/p.wasm\"",
    );
    let error =
        toml_error("[policies.\"my policy\"]\npath = \"p.wasm\"\n[servers.a]\ncommand = \"x\"\n");
    assert_error(
        &error,
        "policies.\"my policy\"",
        Some(1),
        "only letters",
        "\"my-policy\"",
    );
    let error = toml_error("[policies.p]\npath = 5\n[servers.a]\ncommand = \"x\"\n");
    assert_error(&error, "policies.p.path", Some(2), "expected a string", "");
    let error = toml_error("policies = 5\n[servers.a]\ncommand = \"x\"\n");
    assert_error(&error, "policies", Some(1), "expected a table", "");
}

#[test]
fn param_values_must_be_scalars() {
    let cases = [
        ("{ max = [1, 2] }", "servers.a.params.max", "is an array"),
        ("{ max = { a = 1 } }", "servers.a.params.max", "is a table"),
        (
            "{ at = 1979-05-27 }",
            "servers.a.params.at",
            "found a date-time",
        ),
        ("{ j = nan }", "servers.a.params.j", "finite number"),
        (
            "5",
            "servers.a.params",
            "expected a table of names to strings",
        ),
    ];
    for (value, key, message) in cases {
        let text = format!("[servers.a]\ncommand = \"x\"\nparams = {value}\n");
        assert_error(&toml_error(&text), key, Some(3), message, "");
    }
    let nested = "[servers.a]\ncommand = \"x\"\n[servers.a.params.limits]\nmax = 5\n";
    assert_error(
        &toml_error(nested),
        "servers.a.params.limits",
        Some(3),
        "a parameter holds one value",
        "single string, number or boolean",
    );
    let error = json_error(r#"{"mcpServers": {"a": {"command": "x", "params": {"n": null}}}}"#);
    assert_error(&error, "mcpServers.a.params.n", Some(1), "found null", "");
    let error = json_error(r#"{"mcpServers": {"a": {"command": "x", "params": {"n": {}}}}}"#);
    assert_error(&error, "mcpServers.a.params.n", Some(1), "is an object", "");
}

#[test]
fn param_names_are_words() {
    let text = "[policies.p]\npath = \"p.wasm\"\nparams = { \"max-attempts\" = 5 }\n\
                [servers.a]\ncommand = \"x\"\n";
    assert_error(
        &toml_error(text),
        "policies.p.params.max-attempts",
        Some(3),
        "only letters, digits and '_'",
        "\"max_attempts\"",
    );
    let text = "[servers.a]\ncommand = \"x\"\nparams = { \"\" = 5 }\n";
    assert_error(
        &toml_error(text),
        "servers.a.params.\"\"",
        Some(3),
        "parameter name \"\"",
        "",
    );
}

#[test]
fn summary_shows_policies_and_each_servers_policy_and_params() {
    let summary = toml(POLICIES).unwrap().summary();
    let expected = "\
config: /etc/wardgate/wardgate.toml
gateway: separator \"__\", request timeout 1m, startup timeout 30s, lists wait 10s for starting servers, shutdown grace 3s (then SIGTERM, and SIGKILL 10s later), tools of unavailable servers hidden, tools found by tools/list, admin tools off, default policy patient
http (with --listen):
  hosts: the listener's address, localhost, 127.0.0.1 and [::1]; allowed_hosts adds: nothing (a request naming another Host is refused with 403: add the DNS name clients use)
  origins: requests without Origin (not from a web page) pass; loopback pages (http://localhost:*, http://127.0.0.1:*) pass on a loopback listener only; allowed_origins adds: nothing (any other Origin is refused with 403)
  limits: bodies up to 8388608 bytes, sessions idle 5m are closed, 1024 sessions at most (64 per client), rate 50/s per client, bursts of 100
auth: none (every client of --listen may use every server; a listener other machines can reach refuses to start: add [gateway.auth], or allow_anonymous = true if that is meant)

policy patient
  path: /etc/wardgate/policies/patient.wasm
  params: max_attempts = 5, mode = calm, reconnect_jitter = 0.2, verbose = true

policy strict
  path: /opt/wardgate/strict.wasm

server github (stdio)
  command: npx
  timeouts: startup 30s (gateway default), request 1m (gateway default)
  policy: strict
  params: max_crashes = 5

server native (stdio)
  command: native
  timeouts: startup 30s (gateway default), request 1m (gateway default)
  policy: builtin

server plain (streamable-http)
  url: https://plain.example/mcp
  timeouts: startup 30s (gateway default), request 1m (gateway default)
  policy: patient (gateway default)
  params: max_attempts = 2, mode = calm (policy default), reconnect_jitter = 0.2 (policy default), restart_delay_ms = 1000, verbose = true (policy default)
";
    assert_eq!(summary, expected);

    let text = "[servers.a]\ncommand = \"x\"\nparams = { note = \"two words\" }\n";
    let summary = toml(text).unwrap().summary();
    assert!(
        summary.contains("  params: note = \"two words\"\n"),
        "{summary}"
    );
}

#[test]
fn a_shadow_module_is_kept_apart_from_its_policy_and_checked_like_a_path() {
    let config = toml(
        "[policies.live]\npath = \"live.wasm\"\nshadow = \"candidates/strict.wasm\"\n\n[policies.other]\npath = \"other.wasm\"\n\n[servers.s]\ncommand = \"x\"\npolicy = \"live\"\n",
    )
    .unwrap();
    assert_eq!(
        config.shadows,
        BTreeMap::from([(
            "live".to_owned(),
            Path::new("/etc/wardgate/candidates/strict.wasm").to_path_buf()
        )])
    );
    // The policy itself is the same with or without a shadow: binding one restarts nothing.
    let without = toml(
        "[policies.live]\npath = \"live.wasm\"\n\n[policies.other]\npath = \"other.wasm\"\n\n[servers.s]\ncommand = \"x\"\npolicy = \"live\"\n",
    )
    .unwrap();
    assert_eq!(config.policies, without.policies);
    assert!(config
        .summary()
        .contains("shadow: /etc/wardgate/candidates/strict.wasm (asked every question"));
    let error = toml_error(
        "[policies.p]\npath = \"p.wasm\"\nshadow = \"\"\n\n[servers.s]\ncommand = \"x\"\n",
    );
    assert_error(
        &error,
        "policies.p.shadow",
        Some(3),
        "shadow path is empty",
        "remove `shadow`",
    );
}
