//! Hostile config text: deep nesting, huge strings, control characters, random token soup.
//! Every input must come back as a config or an error, never as a panic or a stack overflow
//! (a config edit on a running gateway goes through this parser).

use std::path::Path;

use crate::Config;

fn parse_json(text: &str) -> bool {
    Config::parse(Path::new("/tmp/hostile.json"), text, &|_| None).is_ok()
}

fn parse_toml(text: &str) -> bool {
    Config::parse(Path::new("/tmp/hostile.toml"), text, &|_| None).is_ok()
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    for depth in [65, 1_000, 100_000] {
        let arrays = format!(
            r#"{{"mcpServers": {{"a": {{"command": "x", "args": {}{}}}}}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert!(!parse_json(&arrays));
        let objects = format!(
            r#"{{"mcpServers": {{"a": {{"command": "x", "env": {}1{}}}}}}}"#,
            r#"{"k": "#.repeat(depth),
            "}".repeat(depth)
        );
        assert!(!parse_json(&objects));
        let toml = format!(
            "[servers.a]\ncommand = \"x\"\nargs = {}{}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert!(!parse_toml(&toml));
        let inline = format!(
            "[servers.a]\ncommand = \"x\"\nenv = {}1{}\n",
            "{k=".repeat(depth),
            "}".repeat(depth)
        );
        assert!(!parse_toml(&inline));
    }
}

#[test]
fn huge_strings_and_control_characters_are_handled() {
    let huge = "x".repeat(8 * 1024 * 1024);
    assert!(parse_json(&format!(
        r#"{{"mcpServers": {{"a": {{"command": "{huge}"}}}}}}"#
    )));
    // Accepted or refused, each of these comes back.
    parse_json(&format!(
        r#"{{"mcpServers": {{"{huge}": {{"command": "x"}}}}}}"#
    ));
    parse_toml(&format!("[servers.a]\ncommand = \"x\"\n{huge} = 1\n"));
    parse_toml("[servers.a]\ncommand = \"\u{1b}[31m\"\nargs = [\"\u{7f}\"]\n");
    assert!(!parse_json(
        "{\"mcpServers\": {\"a\": {\"command\": \"x\"}}}\u{0}"
    ));
}

/// A fixed-seed generator, so a failure reproduces.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 as usize
    }
}

#[test]
fn random_token_soup_never_panics() {
    const JSON: &[&str] = &[
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        "\"mcpServers\"",
        "\"servers\"",
        "\"command\"",
        "\"url\"",
        "\"args\"",
        "\"env\"",
        "\"gateway\"",
        "\"x\"",
        "\"${HOME}\"",
        "\"$${\"",
        "1",
        "-1",
        "1e999",
        "true",
        "null",
        "/*",
        "*/",
        "//",
        "\n",
        "\"\\u0000\"",
        "\"\\ud800\"",
        " ",
        "\"a\"",
    ];
    const TOML: &[&str] = &[
        "[",
        "]",
        "[[",
        "]]",
        "{",
        "}",
        "=",
        ",",
        "\n",
        "servers",
        ".",
        "a",
        "command",
        "url",
        "args",
        "env",
        "gateway",
        "\"x\"",
        "'y'",
        "\"\"\"",
        "1",
        "-1",
        "inf",
        "nan",
        "true",
        "1979-05-27",
        "#",
        "\"${X}\"",
        " ",
        "startup_wait",
        "\"0s\"",
        "\\",
    ];
    let mut random = XorShift(0x9e37_79b9_7f4a_7c15);
    for round in 0..4_000 {
        let (tokens, parse): (&[&str], fn(&str) -> bool) = if round % 2 == 0 {
            (JSON, parse_json)
        } else {
            (TOML, parse_toml)
        };
        let length = random.next() % 80;
        let text: String = (0..length)
            .map(|_| tokens[random.next() % tokens.len()])
            .collect();
        // Either answer is fine; a panic fails the test and names the input.
        let outcome = std::panic::catch_unwind(|| parse(&text));
        assert!(outcome.is_ok(), "the parser panicked on {text:?}");
    }
}
