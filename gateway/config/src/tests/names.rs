//! `prefix` and `[servers.NAME.rename]`: how a server's items are listed.

use super::{assert_error, toml, toml_error};

#[test]
fn a_prefix_defaults_to_the_server_s_name_and_may_be_empty_or_another_name() {
    let config = toml(
        r#"
[servers.everything]
command = "a"
prefix = ""

[servers.github]
command = "b"
prefix = "gh"

[servers.files]
command = "c"

[servers.files.rename]
"read file" = "read_file"
list = "files_list"
"#,
    )
    .unwrap();
    assert_eq!(config.servers["everything"].prefix, "");
    assert_eq!(config.servers["github"].prefix, "gh");
    assert_eq!(config.servers["files"].prefix, "files");
    assert_eq!(config.servers["files"].rename["read file"], "read_file");
    let summary = config.summary();
    assert!(
        summary.contains("listed as: its own names and URIs (prefix \"\")"),
        "{summary}"
    );
    assert!(
        summary.contains("listed as: gh__NAME (prefix \"gh\")"),
        "{summary}"
    );
    assert!(
        summary.contains(
            "listed as: files__NAME; renamed: list as files_list, read file as read_file"
        ),
        "{summary}"
    );
}

#[test]
fn two_servers_with_one_prefix_are_an_error_naming_both() {
    let error = toml_error(
        "[servers.a]\ncommand = \"a\"\nprefix = \"x\"\n\n[servers.x]\ncommand = \"b\"\n",
    );
    assert_error(
        &error,
        "servers.x",
        Some(5),
        "servers \"a\" and \"x\" both list their tools, prompts and resources under the prefix \"x\"",
        "give each server a prefix of its own",
    );
}

#[test]
fn a_bad_prefix_or_rename_says_what_to_write() {
    let error = toml_error("[servers.a]\ncommand = \"a\"\nprefix = \"a__b\"\n");
    assert_error(
        &error,
        "servers.a.prefix",
        Some(3),
        "prefix \"a__b\" of server \"a\" contains the separator \"__\"",
        "choose a prefix without the separator",
    );
    let error = toml_error("[servers.a]\ncommand = \"a\"\nprefix = \"a/b\"\n");
    assert_error(
        &error,
        "servers.a.prefix",
        Some(3),
        "has characters a tool name cannot hold",
        "letters, digits",
    );
    let error = toml_error(
        "[servers.a]\ncommand = \"a\"\n\n[servers.a.rename]\nx = \"same\"\ny = \"same\"\n",
    );
    assert_error(
        &error,
        "servers.a.rename.y",
        Some(6),
        "[servers.a.rename] lists both \"x\" and \"y\" as \"same\"",
        "give each a name of its own",
    );
    let error =
        toml_error("[servers.a]\ncommand = \"a\"\n\n[servers.a.rename]\nx = \"has space\"\n");
    assert_error(
        &error,
        "servers.a.rename.x",
        Some(5),
        "which is not a valid tool name",
        "1 to 128 letters",
    );
}
