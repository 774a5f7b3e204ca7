//! How servers' items are named downstream: `prefix` (default the server's name, `""` for
//! none) and `[servers.NAME.rename]`; collisions said, never suffixed.

use std::time::Duration;

use rmcp::model::*;
use serde_json::json;

use crate::harness::*;

/// `[servers.NAME]` for a stdio fake named NAME, with these extra lines.
fn fake_server(name: &str, flags: &[&str], extra: &str) -> String {
    let mut args = vec!["--name", name];
    args.extend_from_slice(flags);
    format!(
        "[servers.{name}]\ncommand = {:?}\nargs = {args:?}\n{extra}\n",
        fake()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprefixed_server_is_listed_called_and_read_under_its_own_names() {
    let text = format!(
        "{}{}{}",
        fake_server("own", &["--app"], "prefix = \"\""),
        fake_server("web", &[], ""),
        fake_server(
            "files",
            &[],
            "\n[servers.files.rename]\necho = \"files_echo\""
        ),
    );
    let running = gateway_stdio(config(&text)).await;
    let peer = running.client.peer();
    // Asked at once: the names of servers still starting are waited for.
    let names = list_at_once(
        &running.client,
        &["echo", "show_view", "web__echo", "files_echo", "files__add"],
    )
    .await;
    assert!(
        !names
            .iter()
            .any(|name| name == "own__echo" || name == "files__echo"),
        "{names:?}"
    );
    for (tool, text) in [
        ("echo", "own"),
        ("files_echo", "renamed"),
        ("web__echo", "web"),
    ] {
        let result = peer
            .call_tool(call(tool, json!({"text": text})))
            .await
            .unwrap_or_else(|error| panic!("{tool}: {error}"));
        assert_eq!(text_of(&result), text);
    }

    // Prompts likewise.
    let prompts = peer.list_all_prompts().await.unwrap();
    let prompt_names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert!(
        prompt_names.contains(&"greet") && prompt_names.contains(&"web__greet"),
        "{prompt_names:?}"
    );
    let mut get = GetPromptRequestParams::new("greet");
    get.arguments = json!({"name": "Ada"}).as_object().cloned();
    let rendered = serde_json::to_string(&peer.get_prompt(get).await.unwrap().messages).unwrap();
    assert!(rendered.contains("Hello, Ada from own"), "{rendered}");

    // Resources keep their URIs; reads route by the catalogue: a listed URI, and one a
    // template stands for.
    let resources = peer.list_all_resources().await.unwrap();
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert!(
        uris.contains(&"fake://own/readme")
            && uris.contains(&"ui://own/view.html")
            && uris.contains(&"wardgate://web/fake://web/readme"),
        "{uris:?}"
    );
    let templates = peer.list_all_resource_templates().await.unwrap();
    assert!(
        templates
            .iter()
            .any(|t| t.uri_template == "fake://own/items/{id}"),
        "{templates:?}"
    );
    for (uri, wanted) in [
        ("fake://own/readme", "readme of own"),
        ("fake://own/items/7", "item 7 of own"),
        ("wardgate://web/fake://web/readme", "readme of web"),
    ] {
        let read = peer
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
            .unwrap_or_else(|error| panic!("{uri}: {error}"));
        match &read.contents[0] {
            ResourceContents::TextResourceContents { text, uri: got, .. } => {
                assert_eq!((text.as_str(), got.as_str()), (wanted, uri));
            }
            other => panic!("{uri}: {other:?}"),
        }
    }

    // An MCP App of an unprefixed server keeps its `ui://` URI both ways.
    let tools = peer.list_all_tools().await.unwrap();
    let show_view = tools.iter().find(|tool| tool.name == "show_view").unwrap();
    let meta = serde_json::to_value(&show_view.meta).unwrap();
    assert_eq!(meta["ui"]["resourceUri"], "ui://own/view.html", "{meta}");
    let view = peer
        .read_resource(ReadResourceRequestParams::new("ui://own/view.html"))
        .await
        .unwrap();
    assert!(serde_json::to_string(&view)
        .unwrap()
        .contains("ui://own/view.html"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collision_with_an_unprefixed_server_is_said_naming_both_and_never_suffixed() {
    let text = format!(
        "{}{}",
        fake_server("a", &[], "prefix = \"\""),
        fake_server(
            "b",
            &[],
            "prefix = \"\"\n\n[servers.b.rename]\nadd = \"b_add\""
        ),
    );
    let running = gateway_stdio(config(&text)).await;
    let names = list_at_once(&running.client, &["echo", "b_add"]).await;
    assert!(
        !names.iter().any(|name| name.ends_with("_2")),
        "no silent suffix: {names:?}"
    );
    // The first server (in name order) keeps the name; the other's prompt is not listed.
    let mut get = GetPromptRequestParams::new("greet");
    get.arguments = json!({"name": "Ada"}).as_object().cloned();
    let rendered = serde_json::to_string(
        &running
            .client
            .peer()
            .get_prompt(get)
            .await
            .unwrap()
            .messages,
    )
    .unwrap();
    assert!(rendered.contains("Hello, Ada from a"), "{rendered}");
    // Told once per item, naming both servers and both items.
    assert!(
        until_event(&running, "name_collision", Duration::from_secs(30)).await,
        "no name_collision event"
    );
    let collisions = events(&running, "name_collision");
    let echo = collisions
        .iter()
        .find(|event| event["kind"] == "tool" && event["listed"] == "echo")
        .unwrap_or_else(|| panic!("{collisions:?}"));
    assert_eq!(
        (
            &echo["server"],
            &echo["item"],
            &echo["left_out_server"],
            &echo["left_out_item"]
        ),
        (&json!("a"), &json!("echo"), &json!("b"), &json!("echo"))
    );
    let reason = echo["reason"].as_str().unwrap();
    assert!(
        reason.contains("prefix") && reason.contains("[servers.b.rename]"),
        "{reason}"
    );
    let echoes = collisions
        .iter()
        .filter(|event| event["kind"] == "tool" && event["listed"] == "echo")
        .count();
    assert_eq!(echoes, 1, "{collisions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_are_advertised_and_routed_to_the_owner_with_its_own_names() {
    let text = format!(
        "{}{}",
        fake_server("own", &[], "prefix = \"\""),
        fake_server("web", &[], ""),
    );
    let running = gateway_stdio(config(&text)).await;
    let peer = running.client.peer();
    let capabilities = &peer.peer_info().unwrap().capabilities;
    assert!(capabilities.completions.is_some(), "{capabilities:?}");
    let complete = |reference: Reference, name: &str, value: &str| {
        CompleteRequestParams::new(reference, ArgumentInfo::new(name, value))
    };
    for (reference, argument, typed, wanted) in [
        (
            Reference::for_prompt("web__greet"),
            "name",
            "A",
            vec!["Ada@web", "Alan@web"],
        ),
        (
            Reference::for_prompt("greet"),
            "name",
            "G",
            vec!["Grace@own"],
        ),
        (
            Reference::for_resource("wardgate://web/fake://web/items/{id}"),
            "id",
            "1",
            vec!["1@web", "12@web"],
        ),
        (
            Reference::for_resource("fake://own/items/{id}"),
            "id",
            "7",
            vec!["7@own"],
        ),
    ] {
        let shown = format!("{reference:?}");
        let result = peer
            .complete(complete(reference, argument, typed))
            .await
            .unwrap_or_else(|error| panic!("{shown}: {error}"));
        assert_eq!(result.completion.values, wanted, "{shown}");
    }
    let error = peer
        .complete(complete(
            Reference::for_prompt("nobody__greet"),
            "name",
            "A",
        ))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("unknown prompt"), "{error}");
}
