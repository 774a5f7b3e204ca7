//! `${VAR}` expansion through whole config files: where it applies, escapes, and errors.

use std::path::Path;

use super::{assert_error, toml, toml_error};
use crate::TransportConfig;

#[test]
fn references_expand_in_command_args_env_and_cwd() {
    let text = r#"
[servers.a]
command = "${HOME}/bin/server"
args = ["--token", "${GITHUB_TOKEN}", "--literal", "$${NOT_EXPANDED}", "plain"]
env = { TOKEN = "${GITHUB_TOKEN}", LITERAL = "x" }
cwd = "${HOME}/work"
"#;
    let config = toml(text).unwrap();
    let TransportConfig::Stdio {
        command,
        args,
        env,
        cwd,
        shown,
        inherit_env,
    } = &config.servers["a"].transport
    else {
        panic!("stdio");
    };
    assert_eq!(command, "/home/tester/bin/server");
    assert!(
        !inherit_env,
        "a server inherits only a minimal environment unless it asks"
    );
    assert_eq!(
        args,
        &[
            "--token",
            "ghp_SECRET_github",
            "--literal",
            "${NOT_EXPANDED}",
            "plain"
        ]
    );
    assert_eq!(env["TOKEN"].expose(), "ghp_SECRET_github");
    assert_eq!(env["LITERAL"].expose(), "x");
    assert_eq!(cwd.as_deref(), Some(Path::new("/home/tester/work")));
    // What may be shown keeps references unexpanded, and shows plain values as they are.
    assert_eq!(shown.command, "${HOME}/bin/server");
    assert_eq!(
        shown.args,
        [
            "--token",
            "${GITHUB_TOKEN}",
            "--literal",
            "${NOT_EXPANDED}",
            "plain"
        ]
    );
    assert_eq!(shown.cwd.as_deref(), Some("${HOME}/work"));
}

#[test]
fn references_expand_in_url_and_headers() {
    let text = r#"
[servers.a]
url = "https://api.example/${API_TOKEN}/mcp"
headers = { Authorization = "Bearer ${API_TOKEN}", "X-Price" = "$$5 and $${literal}" }
transport = "sse"
"#;
    let config = toml(text).unwrap();
    let TransportConfig::Sse {
        url,
        headers,
        shown_url,
    } = &config.servers["a"].transport
    else {
        panic!("sse");
    };
    assert_eq!(url, "https://api.example/SECRET_api/mcp");
    assert_eq!(shown_url, "https://api.example/${API_TOKEN}/mcp");
    assert_eq!(headers["Authorization"].expose(), "Bearer SECRET_api");
    assert_eq!(headers["X-Price"].expose(), "$$5 and ${literal}");
}

#[test]
fn names_and_other_settings_are_not_expanded() {
    let text = "[servers.a]\ncommand = \"x\"\nenv = { \"${HOME}\" = \"1\" }\n";
    let config = toml(text).unwrap();
    let TransportConfig::Stdio { env, .. } = &config.servers["a"].transport else {
        panic!("stdio");
    };
    assert!(env.contains_key("${HOME}"), "env names are taken literally");
}

#[test]
fn missing_variables_are_errors_naming_variable_key_and_fix() {
    let text = "[servers.github]\ncommand = \"npx\"\nenv = { GITHUB_TOKEN = \"${GH_TOKEN}\" }\n";
    let error = toml_error(text);
    assert_error(
        &error,
        "servers.github.env.GITHUB_TOKEN",
        Some(3),
        "environment variable `GH_TOKEN` is not set",
        "export GH_TOKEN or remove the reference",
    );
    assert_eq!(
        error.to_string(),
        "/etc/wardgate/wardgate.toml:3: servers.github.env.GITHUB_TOKEN: environment variable \
         `GH_TOKEN` is not set\n  fix: export GH_TOKEN or remove the reference"
    );

    for (field, value) in [
        ("command", "\"${MISSING}\""),
        ("args", "[\"ok\", \"${MISSING}\"]"),
        ("cwd", "\"${MISSING}\""),
    ] {
        let text = format!("[servers.a]\ncommand = \"x\"\n{field} = {value}\n");
        let text = text.replacen("command = \"x\"\ncommand", "command", 1);
        let error = toml_error(&text);
        assert!(
            error.key.starts_with(&format!("servers.a.{field}")),
            "{error}"
        );
        assert!(error.message.contains("`MISSING`"), "{error}");
    }

    let text = "[servers.a]\nurl = \"https://a/${MISSING}\"\nheaders = { A = \"${X}\" }\n";
    assert_error(
        &toml_error(text),
        "servers.a.url",
        Some(2),
        "`MISSING`",
        "export MISSING",
    );
    let text = "[servers.a]\nurl = \"https://a\"\nheaders = { A = \"${X}\" }\n";
    assert_error(
        &toml_error(text),
        "servers.a.headers.A",
        Some(3),
        "`X`",
        "export X",
    );
}

#[test]
fn disabled_servers_still_need_their_variables() {
    let text = "[servers.a]\ncommand = \"${MISSING}\"\nenabled = false\n";
    let error = toml_error(text);
    assert_error(
        &error,
        "servers.a.command",
        Some(2),
        "`MISSING`",
        "the server is disabled",
    );
}

#[test]
fn empty_variables_count_as_set() {
    let config = toml("[servers.a]\ncommand = \"x\"\nargs = [\"${EMPTY}\"]\n").unwrap();
    let TransportConfig::Stdio { args, .. } = &config.servers["a"].transport else {
        panic!("stdio");
    };
    assert_eq!(args, &[""]);
}

#[test]
fn malformed_references_are_errors() {
    let error = toml_error("[servers.a]\ncommand = \"x\"\nargs = [\"${HOME\"]\n");
    assert_error(
        &error,
        "servers.a.args[0]",
        Some(3),
        "no closing `}`",
        "`$${`",
    );
    let error = toml_error("[servers.a]\ncommand = \"x\"\nargs = [\"${input:key}\"]\n");
    assert_error(
        &error,
        "servers.a.args[0]",
        Some(3),
        "`${input:key}` is not",
        "${NAME}",
    );
}

#[test]
fn expanded_urls_are_checked() {
    // The message shows the URL as written, not the expanded value.
    let error = toml_error("[servers.a]\nurl = \"${API_TOKEN}\"\n");
    assert_error(
        &error,
        "servers.a.url",
        Some(2),
        "\"${API_TOKEN}\" is not an http",
        "",
    );
    assert!(!error.to_string().contains("SECRET"), "{error}");
}

#[test]
fn header_values_cannot_hold_line_breaks() {
    let error = toml_error("[servers.a]\nurl = \"https://a\"\nheaders = { A = \"x\\r\\ny\" }\n");
    assert_error(
        &error,
        "servers.a.headers.A",
        Some(3),
        "the value contains a line break",
        "",
    );
    // A multi-line environment value (a PEM key, say) is fine.
    assert!(toml("[servers.a]\ncommand = \"x\"\nenv = { KEY = \"a\\nb\" }\n").is_ok());
}
