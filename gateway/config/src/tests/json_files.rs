//! JSON files as other MCP clients write them, and the JSON dialect's own rules.

use std::path::Path;
use std::time::Duration;

use super::{assert_error, json, json_error};
use crate::TransportConfig;

#[test]
fn claude_desktop_files_parse() {
    let text = r#"{
  "globalShortcut": "Ctrl+Space",
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"]
    },
    "github": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
      "env": { "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_literal_in_file" },
      "disabled": true,
      "autoApprove": ["get_issue"],
      "alwaysAllow": [],
      "timeout": 120,
      "description": "GitHub"
    }
  }
}"#;
    let config = json(text).unwrap();
    assert_eq!(config.source, Path::new("/home/tester/mcp.json"));
    assert_eq!(config.servers.len(), 2);
    assert!(config.servers["filesystem"].enabled);
    let github = &config.servers["github"];
    assert!(!github.enabled);
    assert_eq!(
        github.request_timeout, None,
        "a client's `timeout` is ignored"
    );
    let TransportConfig::Stdio { command, env, .. } = &github.transport else {
        panic!("stdio");
    };
    assert_eq!(command, "docker");
    assert_eq!(
        env["GITHUB_PERSONAL_ACCESS_TOKEN"].expose(),
        "ghp_literal_in_file"
    );
}

#[test]
fn cursor_and_claude_code_url_servers_parse() {
    let text = r#"{
  "mcpServers": {
    "remote": { "url": "https://mcp.example.com/mcp", "headers": { "Authorization": "Bearer ${API_TOKEN}" } },
    "events": { "type": "sse", "url": "https://mcp.example.com/sse" },
    "claude-code": { "type": "http", "url": "${BASE_URL:-https://fallback.example}/mcp" },
    "camel": { "transport": "streamableHttp", "url": "http://localhost:3000/mcp" },
    "local": { "type": "stdio", "command": "uvx", "args": ["mcp-server-time"] }
  }
}"#;
    let config = json(text).unwrap();
    let kinds: Vec<(&str, &str)> = config
        .servers
        .values()
        .map(|server| (server.name.as_str(), server.transport.kind()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("camel", "streamable-http"),
            ("claude-code", "streamable-http"),
            ("events", "sse"),
            ("local", "stdio"),
            ("remote", "streamable-http"),
        ]
    );
    let TransportConfig::StreamableHttp { url, .. } = &config.servers["claude-code"].transport
    else {
        panic!("http");
    };
    assert_eq!(url, "https://fallback.example/mcp");
}

#[test]
fn vscode_files_with_comments_and_trailing_commas_parse() {
    let text = r#"{
  // Inputs are prompted for by VS Code; the gateway never reads them.
  "inputs": [{ "type": "promptString", "id": "token", "password": true }],
  "servers": {
    /* a local server */
    "fetch": {
      "type": "stdio",
      "command": "uvx",
      "args": ["mcp-server-fetch", "--user-agent=a//b"],
      "env": { "TOKEN": "${env:API_TOKEN}" },
    },
    "docs": { "type": "http", "url": "https://docs.example/mcp", },
  },
}"#;
    let config = json(text).unwrap();
    let TransportConfig::Stdio { args, env, .. } = &config.servers["fetch"].transport else {
        panic!("stdio");
    };
    assert_eq!(
        args[1], "--user-agent=a//b",
        "`//` inside a string is not a comment"
    );
    assert_eq!(env["TOKEN"].expose(), "SECRET_api");
    assert_eq!(config.servers["docs"].transport.kind(), "streamable-http");
}

#[test]
fn vscode_input_references_are_explained() {
    let text = r#"{"servers": {"a": {"type": "http", "url": "https://a",
      "headers": {"Authorization": "Bearer ${input:token}"}}}}"#;
    let error = json_error(text);
    assert_error(
        &error,
        "servers.a.headers.Authorization",
        Some(2),
        "${input:token}",
        "${NAME}",
    );
}

#[test]
fn the_gateway_object_takes_the_toml_settings() {
    let text = r#"{
  "gateway": { "separator": "--", "request_timeout": "90s", "list_unavailable_tools": true },
  "mcpServers": { "a_b": { "command": "x", "startup_timeout": 5, "enabled": false } }
}"#;
    let config = json(text).unwrap();
    assert_eq!(config.gateway.separator, "--");
    assert_eq!(config.gateway.request_timeout, Duration::from_secs(90));
    assert!(config.gateway.list_unavailable_tools);
    assert_eq!(
        config.servers["a_b"].startup_timeout,
        Some(Duration::from_secs(5))
    );
    assert!(!config.servers["a_b"].enabled);

    let error = json_error("{\"gateway\": {\"separater\": \"-\"}, \"mcpServers\": {}}");
    assert_error(
        &error,
        "gateway.separater",
        Some(1),
        "did you mean `separator`?",
        "",
    );
}

#[test]
fn unknown_server_keys_are_errors_with_a_suggestion_and_line() {
    let text = "{\n  \"mcpServers\": {\n    \"a\": {\n      \"command\": \"x\",\n      \"autoAprove\": []\n    }\n  }\n}";
    let error = json_error(text);
    assert_error(
        &error,
        "mcpServers.a.autoAprove",
        Some(5),
        "did you mean `autoApprove`?",
        "",
    );

    let error =
        json_error("{\"mcpServers\": {\"a\": {\"command\": \"x\",\n \"envFile\": \".env\"}}}");
    assert_error(
        &error,
        "mcpServers.a.envFile",
        Some(2),
        "does not read .env files",
        "into \"env\"",
    );
}

#[test]
fn other_top_level_keys_are_ignored() {
    let text = r#"{"theme": "dark", "projects": {"x": {"mcpServers": 5}}, "mcpServers": {"a": {"command": "x"}}}"#;
    assert_eq!(json(text).unwrap().servers.len(), 1);
}

#[test]
fn conflicting_spellings_are_errors() {
    let text = r#"{"mcpServers": {"a": {"command": "x"}}, "servers": {"b": {"command": "y"}}}"#;
    assert_error(
        &json_error(text),
        "servers",
        Some(1),
        "both \"mcpServers\" and \"servers\"",
        "",
    );

    let text = r#"{"mcpServers": {"a": {"url": "https://a", "type": "sse", "transport": "sse"}}}"#;
    assert_error(
        &json_error(text),
        "mcpServers.a.type",
        Some(1),
        "both \"type\"",
        "",
    );

    let text = r#"{"mcpServers": {"a": {"command": "x", "enabled": true, "disabled": true}}}"#;
    assert_error(
        &json_error(text),
        "mcpServers.a.disabled",
        Some(1),
        "both",
        "",
    );
}

#[test]
fn transport_spellings_are_checked() {
    let text = r#"{"mcpServers": {"a": {"url": "https://a", "type": "streamablehttp"}}}"#;
    let error = json_error(text);
    assert_error(
        &error,
        "mcpServers.a.type",
        Some(1),
        "did you mean \"streamableHttp\"",
        "",
    );

    let text = r#"{"mcpServers": {"a": {"command": "x", "type": "http"}}}"#;
    assert_error(
        &json_error(text),
        "mcpServers.a.type",
        Some(1),
        "always speaks stdio",
        "",
    );
}

#[test]
fn no_servers_is_an_error() {
    let error = json_error(r#"{"mcpServers": {}}"#);
    assert_error(&error, "mcpServers", None, "no servers", "\"mcpServers\"");
    let error = json_error(r#"{"mcp": {"servers": {"a": {"command": "x"}}}}"#);
    assert_error(&error, "mcpServers", None, "no servers", "");
}

#[test]
fn wrong_types_use_json_words() {
    let error = json_error("{\"mcpServers\": {\"a\": \"npx\"}}");
    assert_error(
        &error,
        "mcpServers.a",
        Some(1),
        "expected an object, found a string",
        "",
    );
    let error =
        json_error("{\"mcpServers\": {\"a\": {\"command\": \"x\", \"env\": {\"PORT\": 8080}}}}");
    assert_error(
        &error,
        "mcpServers.a.env.PORT",
        Some(1),
        "found an integer",
        "double quotes",
    );
    let error = json_error("{\"mcpServers\": {\"a\": {\"command\": null}}}");
    assert_error(&error, "mcpServers.a.command", Some(1), "found null", "");
}

#[test]
fn syntax_errors_and_duplicates_carry_their_line() {
    let error = json_error("{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"\n  }\n");
    assert_eq!(error.key, "");
    assert!(error.message.starts_with("invalid JSON"), "{error}");
    assert!(!error.message.contains(" at line "), "{error}");
    assert!(error.line.is_some(), "{error}");

    let text = "{\"mcpServers\": {\n\"a\": {\"command\": \"x\"},\n\"a\": {\"command\": \"y\"}}}";
    assert_error(
        &json_error(text),
        "",
        Some(3),
        "duplicate key \"a\"",
        "remove one",
    );
}

#[test]
fn unclosed_block_comments_are_syntax_errors() {
    let error = json_error("{\"mcpServers\": {\"a\": {\"command\": \"x\"}}} /* trailing");
    assert!(error.message.starts_with("invalid JSON"), "{error}");
}

#[test]
fn a_byte_order_mark_is_ignored() {
    let text = "\u{feff}{\"mcpServers\": {\"a\": {\"command\": \"x\"}}}";
    assert_eq!(json(text).unwrap().servers.len(), 1);
}

#[test]
fn errors_after_parsing_point_at_the_json_line() {
    let text = "{\n  \"mcpServers\": {\n    \"gh\": {\n      \"command\": \"npx\",\n      \"env\": {\n        \"GITHUB_TOKEN\": \"${GH_TOKEN}\"\n      }\n    }\n  }\n}\n";
    let error = json_error(text);
    assert_error(
        &error,
        "mcpServers.gh.env.GITHUB_TOKEN",
        Some(6),
        "`GH_TOKEN` is not set",
        "export GH_TOKEN",
    );
    assert!(
        error.to_string().starts_with("/home/tester/mcp.json:6: "),
        "{error}"
    );

    let text = "{\"mcpServers\": {\n\"my server\": {\"command\": \"x\"}}}";
    assert_error(
        &json_error(text),
        "mcpServers.\"my server\"",
        Some(2),
        "only letters",
        "",
    );
}
