//! MCP Apps (SEP-1865) through the gateway: a `ui://` resource keeps its scheme, and the tool that points at it points at its new address.
#![allow(deprecated)] // resources/subscribe is legacy-only in rmcp, and the gateway speaks legacy.

use std::time::Duration;

use rmcp::model::*;
use serde_json::json;

use crate::harness::*;

/// Server `apps` in the config runs a fake named `studio`, so the two names in the
/// address are told apart: upstream `ui://studio/view.html` is `ui://apps/studio/view.html`.
const VIEW: &str = "ui://apps/studio/view.html";
const UPSTREAM_VIEW: &str = "ui://studio/view.html";
const APP_MIME_TYPE: &str = "text/html;profile=mcp-app";
/// A plain server beside the app's: its resources keep their `wardgate://` addresses.
const PLAIN_README: &str = "wardgate://plain/fake://plain/readme";

fn app_and_plain() -> ConfigFile {
    let app = format!(
        "[servers.apps]\ncommand = {:?}\nargs = {:?}\n\n",
        fake(),
        ["--name", "studio", "--app"]
    );
    config(&format!("{app}{}", stdio_server("plain", &[])))
}

fn app_ui_meta() -> serde_json::Value {
    json!({"ui": {"prefersBorder": true, "csp": {"connectDomains": []}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_tool_points_at_its_ui_resource_under_the_gateway() {
    let running = gateway_stdio(app_and_plain()).await;
    let peer = running.client.peer();
    let names = list_at_once(&running.client, &["apps__show_view", "plain__echo"]).await;
    assert!(
        !names.iter().any(|name| name == "plain__show_view"),
        "a fake without --app offers no app: {names:?}"
    );

    // The tool points at the app's downstream address, by the current and the legacy key.
    let tools = peer.list_all_tools().await.expect("tools/list");
    let show_view = tools
        .iter()
        .find(|tool| tool.name == "apps__show_view")
        .expect("apps__show_view listed");
    let tool_meta = serde_json::to_value(&show_view.meta).unwrap();
    assert_eq!(tool_meta["ui"]["resourceUri"], VIEW, "{tool_meta}");
    assert_eq!(tool_meta["ui/resourceUri"], VIEW, "{tool_meta}");
    let result = peer
        .call_tool(call("apps__show_view", json!({})))
        .await
        .expect("tools/call");
    assert_eq!(text_of(&result), "show_view");

    // The app's resource is listed at that address, its MIME type and `_meta.ui` intact;
    // the other resources keep the `wardgate://` form.
    let resources = peer.list_all_resources().await.expect("resources/list");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    let view = resources
        .iter()
        .find(|r| r.uri == VIEW)
        .unwrap_or_else(|| panic!("{VIEW} not listed: {uris:?}"));
    assert_eq!(view.mime_type.as_deref(), Some(APP_MIME_TYPE));
    assert_eq!(serde_json::to_value(&view.meta).unwrap(), app_ui_meta());
    for plain in [PLAIN_README, "wardgate://apps/fake://studio/readme"] {
        assert!(uris.contains(&plain), "{plain} not listed: {uris:?}");
    }

    // Reading by the URI the tool names gives the HTML, under that same URI.
    let pointed = tool_meta["ui"]["resourceUri"].as_str().unwrap();
    let read = peer
        .read_resource(ReadResourceRequestParams::new(pointed))
        .await
        .expect("resources/read of the app");
    let [ResourceContents::TextResourceContents {
        uri,
        mime_type,
        text,
        meta,
        ..
    }] = read.contents.as_slice()
    else {
        panic!("expected one text content: {read:?}");
    };
    assert_eq!(uri, VIEW);
    assert_eq!(mime_type.as_deref(), Some(APP_MIME_TYPE));
    assert!(text.contains("view of studio"), "{text}");
    assert_eq!(serde_json::to_value(meta).unwrap(), app_ui_meta());

    // A plain resource still reads at its `wardgate://` address.
    let read = peer
        .read_resource(ReadResourceRequestParams::new(PLAIN_README))
        .await
        .expect("resources/read of a plain resource");
    let rendered = serde_json::to_value(&read.contents).unwrap();
    assert_eq!(rendered[0]["uri"], PLAIN_README, "{rendered}");
    assert_eq!(rendered[0]["text"], "readme of plain", "{rendered}");

    // The app's resource has one address: the `wardgate://` form of it is refused.
    let refused = peer
        .read_resource(ReadResourceRequestParams::new(format!(
            "wardgate://apps/{UPSTREAM_VIEW}"
        )))
        .await;
    assert!(refused.is_err(), "{refused:?}");

    // An update of the app's resource reaches a subscriber at the address it subscribed to.
    peer.subscribe(SubscribeRequestParams::new(VIEW))
        .await
        .expect("resources/subscribe");
    peer.call_tool(call("apps__touch", json!({"uri": UPSTREAM_VIEW})))
        .await
        .expect("tools/call touch");
    assert!(
        running
            .handler
            .until(Duration::from_secs(5), |heard| heard
                .resource_updates
                .iter()
                .any(|uri| uri == VIEW))
            .await,
        "update not relayed to {VIEW}: {:?}",
        running
            .handler
            .heard(|heard| heard.resource_updates.clone())
    );
}
