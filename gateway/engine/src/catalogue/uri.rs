//! How a server's resource URIs are addressed downstream, MCP Apps' `ui://` resources included.
//!
//! A URI `u` of server `s` becomes `wardgate://s/u`, except a `ui://REST` URI, which becomes
//! `ui://s/REST`: MCP Apps (SEP-1865) hosts render only `ui://` resources, so an app's
//! resource must keep the scheme. Both forms are reversible because server names contain no
//! `/`, and every URI has exactly one downstream address, so a subscription made with it
//! matches the `resources/updated` notifications sent for it.

use rmcp::model::MetaObject;
use serde_json::Value;

/// The scheme of every re-addressed URI that is not an MCP App's.
pub const URI_SCHEME: &str = "wardgate://";
/// The scheme of MCP Apps' UI resources, kept downstream.
pub const UI_SCHEME: &str = "ui://";

/// Tool `_meta` keys that hold the URI of the tool's UI resource, besides `ui.resourceUri`
/// (the current key): the deprecated flat key, still written by the official helper and
/// read by hosts, and the OpenAI Apps SDK's.
const FLAT_UI_KEYS: [&str; 2] = ["ui/resourceUri", "openai/outputTemplate"];

/// `ui://SERVER/REST` for `ui://REST`, `wardgate://SERVER/ORIGINAL` for anything else.
pub fn namespace_uri(server: &str, uri: &str) -> String {
    match uri.strip_prefix(UI_SCHEME) {
        Some(rest) => format!("{UI_SCHEME}{server}/{rest}"),
        None => format!("{URI_SCHEME}{server}/{uri}"),
    }
}

/// The inverse of [`namespace_uri`]: `(server, original uri)`. `None` for a URI that
/// [`namespace_uri`] never yields, including `wardgate://s/ui://…` (the address of a
/// `ui://` resource is `ui://s/…`, and only that one).
pub fn split_uri(uri: &str) -> Option<(&str, String)> {
    if let Some(rest) = uri.strip_prefix(UI_SCHEME) {
        let (server, rest) = rest.split_once('/')?;
        return (!server.is_empty()).then(|| (server, format!("{UI_SCHEME}{rest}")));
    }
    let rest = uri.strip_prefix(URI_SCHEME)?;
    let (server, original) = rest.split_once('/')?;
    let addressable =
        !server.is_empty() && !original.is_empty() && !original.starts_with(UI_SCHEME);
    addressable.then(|| (server, original.to_owned()))
}

/// Points a tool's MCP App at the app's downstream address: each of `ui.resourceUri`,
/// `ui/resourceUri` and `openai/outputTemplate` that holds a `ui://` URI is namespaced.
/// Everything else in `_meta` is left as it is.
pub fn namespace_tool_meta(server: &str, meta: &mut MetaObject) {
    if let Some(Value::Object(ui)) = meta.get_mut("ui") {
        namespace_ui_uri(server, ui.get_mut("resourceUri"));
    }
    for key in FLAT_UI_KEYS {
        namespace_ui_uri(server, meta.get_mut(key));
    }
}

fn namespace_ui_uri(server: &str, value: Option<&mut Value>) {
    if let Some(Value::String(uri)) = value {
        if uri.starts_with(UI_SCHEME) {
            *uri = namespace_uri(server, uri);
        }
    }
}

/// Whether `uri` is one of the URIs the RFC 6570 `template` stands for, closely enough to
/// route a read: literal text must match exactly, and each `{…}` expression matches a run
/// of characters (without `/`, `?` or `#` unless the expression is `{+…}` or `{#…}`, or
/// `{/…}`, `{?…}` and `{&…}`, which carry their own separators).
pub fn matches_template(template: &str, uri: &str) -> bool {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        parts.push(Part::Literal(&rest[..open]));
        let expression = &rest[open + 1..open + close];
        parts.push(Part::Expression(matches!(
            expression.chars().next(),
            Some('+' | '#' | '/' | '?' | '&')
        )));
        rest = &rest[open + close + 1..];
    }
    parts.push(Part::Literal(rest));
    matches_parts(&parts, uri)
}

#[derive(Debug, Clone, Copy)]
enum Part<'t> {
    Literal(&'t str),
    /// Whether the expression may stand for `/`, `?` and `#` too.
    Expression(bool),
}

fn matches_parts(parts: &[Part<'_>], uri: &str) -> bool {
    match parts.split_first() {
        None => uri.is_empty(),
        Some((Part::Literal(text), rest)) => uri
            .strip_prefix(text)
            .is_some_and(|uri| matches_parts(rest, uri)),
        Some((Part::Expression(reserved), rest)) => {
            // Every split point, shortest first; templates are short.
            for (at, character) in uri.char_indices() {
                if matches_parts(rest, &uri[at..]) {
                    return true;
                }
                if !reserved && matches!(character, '/' | '?' | '#') {
                    return false;
                }
            }
            matches_parts(rest, "")
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn meta(value: Value) -> MetaObject {
        match value {
            Value::Object(object) => MetaObject(object),
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn uris_match_templates_as_routing_needs() {
        assert!(matches_template(
            "test://template/{id}/data",
            "test://template/7/data"
        ));
        assert!(matches_template("test://x/{id}", "test://x/abc"));
        assert!(!matches_template("test://x/{id}", "test://x/a/b"));
        assert!(matches_template("file:///{+path}", "file:///a/b/c.txt"));
        assert!(!matches_template("test://x/{id}", "test://y/1"));
        assert!(matches_template("test://static", "test://static"));
        assert!(!matches_template("test://static", "test://static/more"));
        assert!(matches_template("test://{a}-{b}", "test://1-2"));
    }

    #[test]
    fn uris_round_trip() {
        let uri = namespace_uri("files", "file:///tmp/a.txt");
        assert_eq!(uri, "wardgate://files/file:///tmp/a.txt");
        assert_eq!(
            split_uri(&uri),
            Some(("files", "file:///tmp/a.txt".to_owned()))
        );
        assert_eq!(split_uri("file:///x"), None);
        assert_eq!(split_uri("wardgate://files"), None);
        assert_eq!(split_uri("wardgate://files/"), None);
        assert_eq!(split_uri("wardgate:///file:///x"), None);
    }

    #[test]
    fn ui_uris_keep_their_scheme_and_round_trip() {
        for (original, downstream) in [
            ("ui://app/view.html", "ui://s/app/view.html"),
            ("ui://dashboard", "ui://s/dashboard"),
            ("ui://", "ui://s/"),
            ("ui://a/b?c=d#e", "ui://s/a/b?c=d#e"),
        ] {
            assert_eq!(namespace_uri("s", original), downstream);
            assert_eq!(split_uri(downstream), Some(("s", original.to_owned())));
        }
    }

    #[test]
    fn ui_addresses_are_canonical() {
        // The old form of a `ui://` address is refused, so one resource has one address.
        assert_eq!(split_uri("wardgate://s/ui://app/view.html"), None);
        // Not the scheme hosts render (schemes are matched as written, like hosts do).
        assert_eq!(
            namespace_uri("s", "UI://app/view.html"),
            "wardgate://s/UI://app/view.html"
        );
        // No server, or no `/` after it.
        assert_eq!(split_uri("ui:///view.html"), None);
        assert_eq!(split_uri("ui://s"), None);
    }

    #[test]
    fn a_ui_uri_of_an_unknown_server_still_splits() {
        // Whether the server exists is the router's question ("no server named ...").
        assert_eq!(
            split_uri("ui://nobody/view.html"),
            Some(("nobody", "ui://view.html".to_owned()))
        );
    }

    #[test]
    fn tool_meta_points_at_the_namespaced_app() {
        let mut tool_meta = meta(json!({
            "ui": {
                "resourceUri": "ui://app/view.html",
                "visibility": ["model", "app"],
                "csp": {"connectDomains": ["https://api.example.com"]}
            },
            "ui/resourceUri": "ui://app/view.html",
            "openai/outputTemplate": "ui://widget",
            "openai/widgetAccessible": true,
            "other/uri": "ui://not-an-app-key",
            "count": 3
        }));
        namespace_tool_meta("s", &mut tool_meta);
        assert_eq!(
            Value::Object(tool_meta.0),
            json!({
                "ui": {
                    "resourceUri": "ui://s/app/view.html",
                    "visibility": ["model", "app"],
                    "csp": {"connectDomains": ["https://api.example.com"]}
                },
                "ui/resourceUri": "ui://s/app/view.html",
                "openai/outputTemplate": "ui://s/widget",
                "openai/widgetAccessible": true,
                "other/uri": "ui://not-an-app-key",
                "count": 3
            })
        );
    }

    #[test]
    fn tool_meta_without_a_ui_uri_is_untouched() {
        let original = json!({
            "ui": {"resourceUri": "https://example.com/view.html"},
            "ui/resourceUri": 7,
            "openai/outputTemplate": null
        });
        let mut tool_meta = meta(original.clone());
        namespace_tool_meta("s", &mut tool_meta);
        assert_eq!(Value::Object(tool_meta.0), original);

        let mut not_an_object = meta(json!({"ui": "ui://app/view.html"}));
        namespace_tool_meta("s", &mut not_an_object);
        assert_eq!(
            Value::Object(not_an_object.0),
            json!({"ui": "ui://app/view.html"})
        );
    }
}
