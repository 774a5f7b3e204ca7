//! TOML files that break a rule: each error's key, line, message and fix.

use super::{assert_error, toml, toml_error};

#[test]
fn unknown_keys_are_errors_with_a_suggestion_and_line() {
    let error = toml_error("[servers.github]\ncomand = \"npx\"\nargs = []\n");
    assert_error(
        &error,
        "servers.github.comand",
        Some(2),
        "did you mean `command`?",
        "rename",
    );
    assert_eq!(
        error.to_string(),
        "/etc/wardgate/wardgate.toml:2: servers.github.comand: unknown key `comand` in \
         `servers.github`; did you mean `command`?\n  fix: rename `comand` to `command`"
    );

    let error = toml_error("[gateway]\nrequest_timout = 5\n[servers.a]\ncommand = \"x\"\n");
    assert_error(
        &error,
        "gateway.request_timout",
        Some(2),
        "`request_timeout`",
        "",
    );

    let error = toml_error("[server.a]\ncommand = \"x\"\n");
    assert_error(&error, "server", Some(1), "did you mean `servers`?", "");

    let error = toml_error("[gateway]\nexpose_admin_tool = true\n[servers.a]\ncommand = \"x\"\n");
    assert_error(
        &error,
        "gateway.expose_admin_tool",
        Some(2),
        "did you mean `expose_admin_tools`?",
        "rename",
    );
}

#[test]
fn unknown_keys_in_policy_tables_are_errors_with_a_suggestion() {
    let error =
        toml_error("[policies.strict]\nmodule = \"p.wasm\"\n[servers.a]\ncommand = \"x\"\n");
    assert_error(
        &error,
        "policies.strict.module",
        Some(2),
        "unknown key `module` in `policies.strict`",
        "keys known here are: path, shadow, params",
    );

    let error = toml_error("[servers.a]\ncommand = \"x\"\npolicyy = \"strict\"\n");
    assert_error(
        &error,
        "servers.a.policyy",
        Some(3),
        "did you mean `policy`?",
        "rename",
    );
}

#[test]
fn a_server_needs_exactly_one_of_command_and_url() {
    let both = "[servers.gh]\ncommand = \"npx\"\nurl = \"https://x.example\"\n";
    let error = toml_error(both);
    assert_error(
        &error,
        "servers.gh.url",
        Some(3),
        "\"gh\" has both",
        "not both",
    );

    let error = toml_error("[servers.gh]\nargs = [\"x\"]\n");
    assert_error(
        &error,
        "servers.gh",
        Some(1),
        "\"gh\" has neither",
        "add `command`",
    );
}

#[test]
fn transport_must_fit_command_or_url() {
    let error = toml_error("[servers.a]\ncommand = \"x\"\ntransport = \"sse\"\n");
    assert_error(
        &error,
        "servers.a.transport",
        Some(3),
        "always speaks stdio",
        "url",
    );

    let stdio_url = "[servers.a]\nurl = \"https://a.example\"\ntransport = \"stdio\"\n";
    let error = toml_error(stdio_url);
    assert_error(
        &error,
        "servers.a.transport",
        Some(3),
        "stdio needs",
        "streamable-http",
    );

    let config = toml("[servers.a]\ncommand = \"x\"\ntransport = \"stdio\"\n").unwrap();
    assert_eq!(config.servers["a"].transport.kind(), "stdio");
}

#[test]
fn unknown_transports_are_errors_with_a_suggestion() {
    let error = toml_error("[servers.a]\nurl = \"https://a\"\ntransport = \"streamable_http\"\n");
    assert_error(
        &error,
        "servers.a.transport",
        Some(3),
        "did you mean \"streamable-http\"",
        "",
    );

    // `http` is a JSON client spelling; TOML keeps to the canonical names.
    let error = toml_error("[servers.a]\nurl = \"https://a\"\ntransport = \"carrier-pigeon\"\n");
    assert_error(
        &error,
        "servers.a.transport",
        Some(3),
        "unknown transport",
        "stdio, ",
    );
}

#[test]
fn settings_of_the_other_transport_are_errors() {
    let error = toml_error("[servers.a]\nurl = \"https://a\"\nargs = [\"x\"]\n");
    assert_error(
        &error,
        "servers.a.args",
        Some(3),
        "only to servers with a `command`",
        "",
    );
    let error = toml_error("[servers.a]\nurl = \"https://a\"\nenv = { A = \"1\" }\n");
    assert_error(
        &error,
        "servers.a.env",
        Some(3),
        "`env` applies only",
        "headers",
    );
    let error = toml_error("[servers.a]\nurl = \"https://a\"\ncwd = \"x\"\n");
    assert_error(&error, "servers.a.cwd", Some(3), "`cwd` applies only", "");
    let error = toml_error("[servers.a]\ncommand = \"x\"\nheaders = { A = \"1\" }\n");
    assert_error(
        &error,
        "servers.a.headers",
        Some(3),
        "only to servers with a `url`",
        "env",
    );
}

#[test]
fn bad_server_names_are_errors() {
    let error = toml_error("[servers.\"my server\"]\ncommand = \"x\"\n");
    assert_error(
        &error,
        "servers.\"my server\"",
        Some(1),
        "only letters",
        "\"my-server\"",
    );

    let error = toml_error("[servers.\"\"]\ncommand = \"x\"\n");
    assert_error(&error, "servers.\"\"", Some(1), "cannot be empty", "");

    let error = toml_error("[servers.my__server]\ncommand = \"x\"\n");
    assert_error(
        &error,
        "servers.my__server",
        Some(1),
        "contains the separator",
        "my-server",
    );

    let custom = "[gateway]\nseparator = \"-\"\n[servers.my-server]\ncommand = \"x\"\n";
    let error = toml_error(custom);
    assert_error(
        &error,
        "servers.my-server",
        Some(3),
        "separator \"-\"",
        "\"my_server\"",
    );
}

#[test]
fn bad_separators_are_errors() {
    let error = toml_error("[gateway]\nseparator = \"\"\n[servers.a]\ncommand = \"x\"\n");
    assert_error(
        &error,
        "gateway.separator",
        Some(2),
        "cannot join",
        "\"__\"",
    );
    let error = toml_error("[gateway]\nseparator = \" / \"\n[servers.a]\ncommand = \"x\"\n");
    assert_error(&error, "gateway.separator", Some(2), "cannot join", "");
}

#[test]
fn bad_durations_are_errors() {
    let cases = [
        ("\"0s\"", "zero"),
        ("0", "not a positive"),
        ("-5", "not a positive"),
        ("\"-5s\"", "negative"),
        ("1.5", "whole number"),
        ("\"soon\"", "not a duration"),
        ("true", "found a boolean"),
    ];
    for (value, message) in cases {
        let text = format!("[servers.a]\ncommand = \"x\"\n\nstartup_timeout = {value}\n");
        let error = toml_error(&text);
        assert_error(&error, "servers.a.startup_timeout", Some(4), message, "");
    }
    let error = toml_error("[gateway]\nshutdown_grace = \"0ms\"\n[servers.a]\ncommand = \"x\"\n");
    assert_error(
        &error,
        "gateway.shutdown_grace",
        Some(2),
        "zero",
        "\"500ms\"",
    );
}

#[test]
fn wrong_types_are_errors() {
    let error = toml_error("[servers.a]\ncommand = 5\n");
    assert_error(
        &error,
        "servers.a.command",
        Some(2),
        "expected a string, found an integer",
        "quotes",
    );
    let error = toml_error("[servers.a]\ncommand = \"x\"\nargs = \"-y\"\n");
    assert_error(
        &error,
        "servers.a.args",
        Some(3),
        "expected an array of strings",
        "",
    );
    let error = toml_error("[servers.a]\ncommand = \"x\"\nargs = [\"-y\", 2]\n");
    assert_error(&error, "servers.a.args[1]", Some(3), "found an integer", "");
    let error = toml_error("[servers.a]\ncommand = \"x\"\nenabled = \"yes\"\n");
    assert_error(
        &error,
        "servers.a.enabled",
        Some(3),
        "expected true or false",
        "",
    );
    let error = toml_error("servers = \"x\"\n");
    assert_error(
        &error,
        "servers",
        Some(1),
        "expected a table, found a string",
        "",
    );
    let error = toml_error("[[servers.a]]\ncommand = \"x\"\n");
    assert_error(&error, "servers.a", Some(1), "found an array", "");
}

#[test]
fn no_servers_is_an_error() {
    let error = toml_error("[gateway]\nseparator = \"__\"\n");
    assert_error(
        &error,
        "servers",
        None,
        "no servers",
        "add a [servers.NAME] table",
    );
    let error = toml_error("");
    assert_error(&error, "servers", None, "no servers", "[servers.NAME]");
}

#[test]
fn syntax_errors_carry_their_line() {
    let error = toml_error("[servers.a]\ncommand = \"x\"\nargs = [\n");
    assert_eq!(error.key, "");
    assert!(error.message.starts_with("invalid TOML"), "{error}");
    assert!(error.line.is_some(), "{error}");

    let error = toml_error("[servers.a]\ncommand = \"x\"\ncommand = \"y\"\n");
    assert_error(&error, "", Some(3), "duplicate key", "TOML syntax");
}

#[test]
fn empty_command_is_an_error() {
    let error = toml_error("[servers.a]\ncommand = \"\"\n");
    assert_error(&error, "servers.a.command", Some(2), "empty", "");
}

#[test]
fn urls_must_be_http() {
    let error = toml_error("[servers.a]\nurl = \"ftp://a.example\"\n");
    assert_error(
        &error,
        "servers.a.url",
        Some(2),
        "not an http:// or https:// URL",
        "https://",
    );
    let error = toml_error("[servers.a]\nurl = \"https://\"\n");
    assert_error(&error, "servers.a.url", Some(2), "not an http", "");
}

#[test]
fn bad_header_and_env_names_are_errors() {
    let error = toml_error("[servers.a]\nurl = \"https://a\"\nheaders = { \"X Bad\" = \"1\" }\n");
    assert_error(
        &error,
        "servers.a.headers.\"X Bad\"",
        Some(3),
        "name of an HTTP header",
        "",
    );
    let error = toml_error("[servers.a]\ncommand = \"x\"\nenv = { \"A=B\" = \"1\" }\n");
    assert_error(
        &error,
        "servers.a.env.\"A=B\"",
        Some(3),
        "environment variable",
        "",
    );
}
