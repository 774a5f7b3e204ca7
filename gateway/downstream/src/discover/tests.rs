//! Searching a catalogue of three servers, and unwrapping a `call_tool`.

use std::collections::BTreeMap;

use rmcp::model::ToolAnnotations;

use super::*;
use wardgate_engine::catalogue::{Namings, Snapshot};

fn tool(name: &str, description: &str) -> Tool {
    Tool::new(
        name.to_owned(),
        description.to_owned(),
        schema(json!({"type": "object", "properties": {"x": {"type": "string"}}})),
    )
}

fn catalogue() -> Catalogue {
    let mut snapshots = BTreeMap::new();
    let mut add = |server: &str, tools: Vec<Tool>, online: bool| {
        let snapshot = Snapshot {
            tools,
            ..Snapshot::default()
        };
        snapshots.insert(server.to_owned(), (Arc::new(snapshot), online));
    };
    add(
        "github",
        vec![
            tool("create_issue", "Create a new issue in a GitHub repository"),
            tool("search_issues", "Search for issues and pull requests"),
            tool("get_file_contents", "Get the contents of a file"),
        ],
        true,
    );
    add(
        "files",
        vec![
            tool("read_file", "Read the complete contents of a file")
                .annotate(ToolAnnotations::new().read_only(true)),
            tool("write_file", "Create a new file or overwrite one"),
        ],
        true,
    );
    add("down", vec![tool("read_issue", "Read an issue")], false);
    Catalogue::build("__", &snapshots, &Namings::new())
}

fn names(result: &CallToolResult) -> Vec<String> {
    let answer = result.structured_content.as_ref().expect("structured");
    answer["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

fn search(arguments: Value) -> CallToolResult {
    discover(&catalogue(), arguments.as_object(), |_, _| true).expect("a search")
}

#[test]
fn words_rank_name_matches_first_and_only_listed_tools_are_found() {
    let found = search(json!({"query": "issue"}));
    // Both name matches, best first, then by name; the offline server's tool is not listed.
    assert_eq!(
        names(&found),
        ["github__create_issue", "github__search_issues"]
    );
    let found = search(json!({"query": "file contents"}));
    assert_eq!(
        names(&found),
        [
            "github__get_file_contents",
            "files__read_file",
            "files__write_file"
        ]
    );
    let answer = found.structured_content.unwrap();
    assert_eq!(answer["total"], 3);
    assert!(answer["tools"][0].get("inputSchema").is_none(), "{answer}");
    assert_eq!(answer["tools"][0]["server"], "github");
}

#[test]
fn a_server_names_and_a_limit_narrow_and_names_bring_schemas_and_annotations() {
    assert_eq!(
        names(&search(json!({"server": "files"}))),
        ["files__read_file", "files__write_file"]
    );
    let described = search(json!({"names": ["files__read_file"]}));
    let answer = described.structured_content.unwrap();
    assert_eq!(answer["tools"][0]["inputSchema"]["type"], "object");
    assert_eq!(answer["tools"][0]["annotations"]["readOnlyHint"], true);
    let one = search(json!({"limit": 1}));
    let answer = one.structured_content.unwrap();
    assert_eq!(answer["total"], 5);
    assert_eq!(answer["truncated"], true);
    assert_eq!(answer["tools"].as_array().unwrap().len(), 1);
    assert!(search(json!({"query": "zebra quantum"}))
        .structured_content
        .unwrap()["tools"]
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn what_the_client_may_not_use_is_never_found() {
    let found = discover(
        &catalogue(),
        json!({"query": "file"}).as_object(),
        |_, server| server == "files",
    )
    .unwrap();
    assert_eq!(names(&found), ["files__read_file", "files__write_file"]);
}

#[test]
fn bad_arguments_name_what_is_accepted() {
    let error = discover(&catalogue(), json!({"querry": "x"}).as_object(), |_, _| {
        true
    })
    .expect_err("an unknown field");
    assert!(error.message.contains("querry"), "{}", error.message);
    assert!(
        error.message.contains("give query, server"),
        "{}",
        error.message
    );
}

#[test]
fn a_call_is_unwrapped_with_its_meta_and_may_name_a_server_tool_called_call_tool() {
    let mut request = CallToolRequestParams::new(CALL_TOOL);
    request.arguments = json!({"name": "files__read_file", "arguments": {"x": "a"}})
        .as_object()
        .cloned();
    let inner = unwrap_call(&request).unwrap();
    assert_eq!(inner.name, "files__read_file");
    assert_eq!(inner.arguments.unwrap()["x"], "a");
    // An unprefixed server's own `call_tool`: the unwrapped call names it, and goes the way
    // of every tools/call, which never takes it for the gateway's.
    request.arguments = json!({"name": CALL_TOOL}).as_object().cloned();
    assert_eq!(unwrap_call(&request).unwrap().name, CALL_TOOL);
    request.arguments = json!({"arguments": {}}).as_object().cloned();
    let error = unwrap_call(&request).expect_err("no name");
    assert!(error.message.contains("name"), "{}", error.message);
}
