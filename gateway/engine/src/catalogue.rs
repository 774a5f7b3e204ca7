//! The aggregate catalogue: every visible server's tools, prompts and resources under namespaced names.
//!
//! Naming rules (deterministic, documented in the README):
//! - a tool or prompt `t` of server `s` is listed as `s{separator}t`;
//! - characters outside `[A-Za-z0-9_.-]` become `_`, and names longer than 128
//!   characters are cut and given a short hash of the original, so every listed
//!   name is a valid MCP tool name;
//! - if two originals still map to one name, servers and names are taken in sorted
//!   order and the later ones get `_2`, `_3`, ... — the same config always yields
//!   the same names;
//! - a resource URI `u` of server `s` is listed as `wardgate://s/u`, and an MCP App's
//!   `ui://r` as `ui://s/r` (reversible: server names contain no `/`), resource
//!   templates likewise; a tool's `_meta` pointing at its app's `ui://` resource is
//!   rewritten to match (`catalogue/uri.rs`).

mod changes;
mod uri;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};

pub use changes::{Changed, Counts};
pub use uri::{namespace_uri, split_uri, UI_SCHEME, URI_SCHEME};

/// What one server offered at its last successful discovery.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
}

/// Where a namespaced tool goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRoute {
    pub server: String,
    pub name: String,
    pub idempotent: bool,
    pub read_only: bool,
}

/// Where a namespaced prompt goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptRoute {
    pub server: String,
    pub name: String,
}

const MAX_NAME_LEN: usize = 128;

/// The aggregate view clients list from.
#[derive(Debug, Default)]
pub struct Catalogue {
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
    tool_routes: HashMap<String, ToolRoute>,
    prompt_routes: HashMap<String, PromptRoute>,
}

impl Catalogue {
    /// Build from every server's last good snapshot, by server name. All of them are
    /// routable (a call is how a down server's recovery is noticed); only the `visible`
    /// ones are listed. Names are assigned over all servers, so they do not change when a
    /// server comes and goes.
    pub fn build(
        separator: &str,
        snapshots: &BTreeMap<String, (Arc<Snapshot>, bool)>,
    ) -> Catalogue {
        let mut catalogue = Catalogue::default();
        let mut taken_tools = HashSet::new();
        let mut taken_prompts = HashSet::new();
        for (server, (snapshot, visible)) in snapshots {
            let visible = *visible;
            let mut tools: Vec<&Tool> = snapshot.tools.iter().collect();
            tools.sort_by(|a, b| a.name.cmp(&b.name));
            for tool in tools {
                let name = unique_name(
                    &mut taken_tools,
                    &format!("{server}{separator}{}", tool.name),
                );
                let annotations = tool.annotations.as_ref();
                catalogue.tool_routes.insert(
                    name.clone(),
                    ToolRoute {
                        server: server.clone(),
                        name: tool.name.to_string(),
                        idempotent: annotations.and_then(|a| a.idempotent_hint).unwrap_or(false),
                        read_only: annotations.and_then(|a| a.read_only_hint).unwrap_or(false),
                    },
                );
                if visible {
                    let mut listed = tool.clone();
                    listed.name = name.into();
                    if let Some(meta) = &mut listed.meta {
                        uri::namespace_tool_meta(server, meta);
                    }
                    catalogue.tools.push(listed);
                }
            }
            let mut prompts: Vec<&Prompt> = snapshot.prompts.iter().collect();
            prompts.sort_by(|a, b| a.name.cmp(&b.name));
            for prompt in prompts {
                let name = unique_name(
                    &mut taken_prompts,
                    &format!("{server}{separator}{}", prompt.name),
                );
                catalogue.prompt_routes.insert(
                    name.clone(),
                    PromptRoute {
                        server: server.clone(),
                        name: prompt.name.clone(),
                    },
                );
                if visible {
                    let mut listed = prompt.clone();
                    listed.name = name;
                    catalogue.prompts.push(listed);
                }
            }
            if !visible {
                continue;
            }
            for resource in &snapshot.resources {
                let mut listed = resource.clone();
                listed.uri = namespace_uri(server, &resource.uri);
                catalogue.resources.push(listed);
            }
            for template in &snapshot.templates {
                let mut listed = template.clone();
                listed.uri_template = namespace_uri(server, &template.uri_template);
                catalogue.templates.push(listed);
            }
        }
        catalogue
    }

    pub fn tool(&self, name: &str) -> Option<&ToolRoute> {
        self.tool_routes.get(name)
    }

    /// Every tool of `server` as `(exposed name, original name)`, sorted by exposed name.
    pub fn tools_of(&self, server: &str) -> Vec<(String, String)> {
        let mut tools: Vec<(String, String)> = self
            .tool_routes
            .iter()
            .filter(|(_, route)| route.server == server)
            .map(|(exposed, route)| (exposed.clone(), route.name.clone()))
            .collect();
        tools.sort();
        tools
    }

    pub fn prompt(&self, name: &str) -> Option<&PromptRoute> {
        self.prompt_routes.get(name)
    }

    /// Does any tool or prompt name lead to `server`?
    pub fn routes_to(&self, server: &str) -> bool {
        self.tool_routes
            .values()
            .any(|route| route.server == server)
            || self
                .prompt_routes
                .values()
                .any(|route| route.server == server)
    }
}

fn sanitize(name: &str) -> String {
    let mut clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() > MAX_NAME_LEN {
        let hash = fnv1a(name.as_bytes());
        clean.truncate(MAX_NAME_LEN - 9);
        clean.push_str(&format!("_{:08x}", hash as u32));
    }
    clean
}

fn unique_name(taken: &mut HashSet<String>, wanted: &str) -> String {
    let base = sanitize(wanted);
    let mut name = base.clone();
    let mut n = 2;
    while !taken.insert(name.clone()) {
        let suffix = format!("_{n}");
        let mut stem = base.clone();
        stem.truncate(MAX_NAME_LEN - suffix.len());
        name = stem + &suffix;
        n += 1;
    }
    name
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ byte as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use rmcp::model::MetaObject;
    use serde_json::json;

    use super::*;

    fn tool(name: &str) -> Tool {
        Tool::new(name.to_owned(), "d", Arc::new(serde_json::Map::new()))
    }

    fn snapshots(entries: &[(&str, &[&str])]) -> BTreeMap<String, (Arc<Snapshot>, bool)> {
        entries
            .iter()
            .map(|(server, tools)| {
                let snapshot = Snapshot {
                    tools: tools.iter().map(|name| tool(name)).collect(),
                    ..Default::default()
                };
                (server.to_string(), (Arc::new(snapshot), true))
            })
            .collect()
    }

    #[test]
    fn tools_are_namespaced_and_routed_back() {
        let catalogue = Catalogue::build("__", &snapshots(&[("a", &["x"]), ("b", &["x"])]));
        let names: Vec<_> = catalogue.tools.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["a__x", "b__x"]);
        assert_eq!(catalogue.tool("b__x").unwrap().server, "b");
        assert_eq!(catalogue.tool("b__x").unwrap().name, "x");
    }

    #[test]
    fn invalid_characters_and_collisions_are_resolved_deterministically() {
        let catalogue = Catalogue::build(
            "__",
            &snapshots(&[("a", &["has space", "has_space", "ünï"])]),
        );
        let names: Vec<_> = catalogue.tools.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["a__has_space", "a__has_space_2", "a___n_"]);
        assert_eq!(catalogue.tool("a__has_space").unwrap().name, "has space");
        assert_eq!(catalogue.tool("a__has_space_2").unwrap().name, "has_space");
    }

    #[test]
    fn hidden_servers_stay_routable_and_keep_their_names() {
        let mut all = snapshots(&[("a", &["x y"]), ("b", &["x_y"])]);
        let shown = Catalogue::build("__", &all);
        all.get_mut("a").unwrap().1 = false;
        let hidden = Catalogue::build("__", &all);
        let names: Vec<_> = hidden.tools.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["b__x_y"]);
        assert_eq!(hidden.tool("a__x_y").unwrap().server, "a");
        assert_eq!(shown.tool("b__x_y"), hidden.tool("b__x_y"));
    }

    #[test]
    fn long_names_are_cut_with_a_hash() {
        let long = "x".repeat(300);
        let catalogue = Catalogue::build("__", &snapshots(&[("a", &[long.as_str()])]));
        assert_eq!(catalogue.tools[0].name.len(), MAX_NAME_LEN);
        assert_eq!(catalogue.tool(&catalogue.tools[0].name).unwrap().name, long);
    }

    /// One server `s` with an MCP App: a tool pointing at it (by every key hosts read),
    /// a tool without one, the app's resource, a plain resource and a `ui://` template.
    fn app_snapshot() -> Snapshot {
        let meta_of = |value: serde_json::Value| match value {
            serde_json::Value::Object(object) => MetaObject(object),
            other => panic!("not an object: {other}"),
        };
        let show = tool("show").with_meta(meta_of(json!({
            "ui": {"resourceUri": "ui://app/view.html", "prefersBorder": true},
            "ui/resourceUri": "ui://app/view.html",
            "openai/outputTemplate": "ui://app/view.html",
            "openai/toolInvocation/invoking": "Loading"
        })));
        let plain = tool("plain").with_meta(meta_of(json!({"ui": {"resourceUri": "https://x/y"}})));
        Snapshot {
            tools: vec![show, plain, tool("bare")],
            resources: vec![
                Resource::new("ui://app/view.html", "view")
                    .with_mime_type("text/html;profile=mcp-app")
                    .with_meta(meta_of(json!({"ui": {"csp": {"connectDomains": []}}}))),
                Resource::new("file:///readme", "readme"),
            ],
            templates: vec![ResourceTemplate::new("ui://app/{page}.html", "pages")],
            ..Default::default()
        }
    }

    #[test]
    fn an_app_keeps_its_ui_scheme_and_its_tool_points_at_it() {
        let snapshot = Arc::new(app_snapshot());
        let all = BTreeMap::from([("s".to_owned(), (snapshot.clone(), true))]);
        let catalogue = Catalogue::build("__", &all);

        let show = catalogue
            .tools
            .iter()
            .find(|t| t.name == "s__show")
            .unwrap();
        let meta = serde_json::to_value(show.meta.as_ref().unwrap()).unwrap();
        assert_eq!(
            meta,
            json!({
                "ui": {"resourceUri": "ui://s/app/view.html", "prefersBorder": true},
                "ui/resourceUri": "ui://s/app/view.html",
                "openai/outputTemplate": "ui://s/app/view.html",
                "openai/toolInvocation/invoking": "Loading"
            })
        );
        let plain = catalogue
            .tools
            .iter()
            .find(|t| t.name == "s__plain")
            .unwrap();
        assert_eq!(
            plain.meta, snapshot.tools[1].meta,
            "a non-ui URI is not an app's"
        );
        let bare = catalogue
            .tools
            .iter()
            .find(|t| t.name == "s__bare")
            .unwrap();
        assert_eq!(bare.meta, None);
        // The tool still routes to its original name; the snapshot is not changed.
        assert_eq!(catalogue.tool("s__show").unwrap().name, "show");
        assert_eq!(
            snapshot.tools[0].meta.as_ref().unwrap()["ui/resourceUri"],
            "ui://app/view.html"
        );

        let uris: Vec<_> = catalogue.resources.iter().map(|r| r.uri.as_str()).collect();
        assert_eq!(
            uris,
            ["ui://s/app/view.html", "wardgate://s/file:///readme"]
        );
        let view = &catalogue.resources[0];
        assert_eq!(view.mime_type.as_deref(), Some("text/html;profile=mcp-app"));
        assert_eq!(
            view.meta, snapshot.resources[0].meta,
            "_meta.ui passes unchanged"
        );
        assert_eq!(
            catalogue.templates[0].uri_template,
            "ui://s/app/{page}.html"
        );
        // What the tool points at is what reading goes back to.
        let pointed = meta["ui"]["resourceUri"].as_str().unwrap();
        assert_eq!(pointed, view.uri);
        assert_eq!(
            split_uri(pointed),
            Some(("s", "ui://app/view.html".to_owned()))
        );
    }
}
