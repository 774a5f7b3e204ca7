//! Tests of the config layer, through `Config::parse` as the engine and the CLI use it.

// TOML: the documented example, defaults, `cwd` resolution, `load`.
mod toml_files;
// TOML: every rule's error, with its key, line and fix.
mod toml_errors;
// JSON: Claude Desktop, Cursor, Claude Code and VS Code files, and their dialect rules.
mod json_files;
// `${VAR}` expansion in each field that takes it, and its errors.
mod env;
// Secrets: never in `summary()`, `Debug` or error messages.
mod secrets;
// Recovery policies: definitions, references, `params`, and how `summary()` shows them.
mod policies;
// Hostile text: deep nesting, huge strings, random token soup; errors, never a crash.
mod hostile;

mod names;
// `instances`: shared or per client, and the settings of per-client instances.
mod instances;

use std::path::Path;

use super::{Config, ConfigError};

/// Variables every test can reference; anything else is unset.
fn test_env(name: &str) -> Option<String> {
    match name {
        "GITHUB_TOKEN" => Some("ghp_SECRET_github".to_owned()),
        "API_TOKEN" => Some("SECRET_api".to_owned()),
        "HOME" => Some("/home/tester".to_owned()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

fn toml(text: &str) -> Result<Config, ConfigError> {
    Config::parse(Path::new("/etc/wardgate/wardgate.toml"), text, &test_env)
}

fn json(text: &str) -> Result<Config, ConfigError> {
    Config::parse(Path::new("/home/tester/mcp.json"), text, &test_env)
}

fn toml_error(text: &str) -> ConfigError {
    match toml(text) {
        Ok(config) => panic!("expected an error, parsed {config:#?}"),
        Err(error) => error,
    }
}

fn json_error(text: &str) -> ConfigError {
    match json(text) {
        Ok(config) => panic!("expected an error, parsed {config:#?}"),
        Err(error) => error,
    }
}

/// Asserts the parts of an error a user reads: where it is, and that message and fix say
/// the given things.
#[track_caller]
fn assert_error(error: &ConfigError, key: &str, line: Option<usize>, message: &str, fix: &str) {
    assert_eq!(error.key, key, "key of {error}");
    assert_eq!(error.line, line, "line of {error}");
    assert!(error.message.contains(message), "message of {error}");
    assert!(error.fix.contains(fix), "fix of {error}");
}
