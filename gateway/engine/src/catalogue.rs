//! The aggregate catalogue: every visible server's tools, prompts and resources under the
//! names clients use.
//!
//! Why this file is long: the naming rules (prefixes, renames, sanitizing, collisions) and
//! the lookups that invert them must agree, and read best side by side; the tests that pin
//! each rule follow them.
//!
//! Naming rules (deterministic, documented in the README's Names section):
//! - a tool or prompt `t` of a server whose prefix is `p` (its name unless `prefix` says
//!   otherwise) is listed as `p{separator}t`; of a server with `prefix = ""`, as `t`; one
//!   renamed in `[servers.NAME.rename]`, as the name given there;
//! - characters outside `[A-Za-z0-9_.-]` become `_`, and names longer than 128
//!   characters are cut and given a short hash of the original, so every listed
//!   name is a valid MCP tool name;
//! - two items of one server, or of two prefixed servers, that still map to one name: the
//!   servers and names are taken in sorted order and the later ones get `_2`, `_3`, ...;
//! - two servers' items that map to one name where either is unprefixed or renamed: a
//!   collision ([`Collision`]), never a suffix; the later server's item is not listed or
//!   routed, and the gateway says so, naming both;
//! - a resource URI `u` of a prefixed server is listed as `wardgate://p/u`, and an MCP
//!   App's `ui://r` as `ui://p/r` (reversible: prefixes contain no `/`), resource templates
//!   likewise; a tool's `_meta` pointing at its app's `ui://` resource is rewritten to
//!   match (`catalogue/uri.rs`). An unprefixed server's URIs are listed as they are, and a
//!   read of one is routed by the catalogue ([`Catalogue::resource_owner`]).

mod changes;
mod uri;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};

/// The configured server a slot's name belongs to: `SERVER` of a per-client instance's
/// `SERVER#N` (a configured name has no `#`).
pub fn server_of(name: &str) -> &str {
    name.split_once('#').map_or(name, |(server, _)| server)
}

pub use changes::{Changed, Counts};
pub use uri::{namespace_uri, split_uri, UI_SCHEME, URI_SCHEME};

/// What one server offered at its last successful discovery.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
    /// The server answers `completion/complete` (its `completions` capability).
    pub completions: bool,
    /// The server offers the tasks extension (`io.modelcontextprotocol/tasks`).
    pub tasks: bool,
}

/// How one server's items are named downstream (`prefix` and `[servers.NAME.rename]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Naming {
    /// Empty: the server's items are listed under their own names and URIs.
    pub prefix: String,
    /// Original tool or prompt name → the whole name it is listed under.
    pub rename: BTreeMap<String, String>,
}

impl Naming {
    /// The server's name as its prefix, nothing renamed: the default.
    pub fn prefixed(server: &str) -> Naming {
        Naming {
            prefix: server.to_owned(),
            rename: BTreeMap::new(),
        }
    }
}

/// Each configured server's [`Naming`], by server name; a server missing here is prefixed
/// with its name.
pub type Namings = BTreeMap<String, Naming>;

/// Where a listed tool goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRoute {
    pub server: String,
    pub name: String,
    pub idempotent: bool,
    pub read_only: bool,
}

/// Where a listed prompt goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptRoute {
    pub server: String,
    pub name: String,
}

/// Two servers' items that would be listed under one name, where either is unprefixed or
/// renamed. The first keeps the name; the second is not listed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Collision {
    /// "tool", "prompt", "resource" or "resource template".
    pub kind: &'static str,
    pub listed: String,
    /// (server, original name or URI) that keeps the name.
    pub kept: (String, String),
    /// (server, original name or URI) that is left out.
    pub left_out: (String, String),
}

impl std::fmt::Display for Collision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {:?} of server {:?} and {} {:?} of server {:?} would both be listed as {:?}; only the first is listed. Give one server a prefix (`prefix = \"...\"`), or rename one item in [servers.{}.rename]",
            self.kind,
            self.kept.1,
            self.kept.0,
            self.kind,
            self.left_out.1,
            self.left_out.0,
            self.listed,
            self.left_out.0
        )
    }
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
    /// Every server's prefix, by server (configured servers and discovered ones).
    prefixes: HashMap<String, String>,
    /// The server of each non-empty prefix.
    by_prefix: HashMap<String, String>,
    /// Servers listed under their own names, sorted.
    unprefixed: Vec<String>,
    /// Unprefixed servers' resource URIs → their server.
    resource_owners: HashMap<String, String>,
    /// Unprefixed servers' resource templates with their server, in server order.
    template_owners: Vec<(String, String)>,
    /// Items left out because their names collide, sorted.
    pub collisions: Vec<Collision>,
}

/// The names taken so far in one list, with who took each.
#[derive(Default)]
struct Taken {
    /// listed name → (server, original, whether the name is free: unprefixed or renamed)
    by: HashMap<String, (String, String, bool)>,
}

impl Taken {
    /// The name `wanted` (already the whole listed name) for `original` of `server`: itself,
    /// a suffixed form, or — for a collision between servers where either name is free —
    /// `Err` with the collision.
    fn take(
        &mut self,
        kind: &'static str,
        server: &str,
        original: &str,
        wanted: &str,
        free: bool,
    ) -> Result<String, Box<Collision>> {
        let base = sanitize(wanted);
        if let Some((holder, held, held_free)) = self.by.get(&base) {
            if holder != server && (free || *held_free) {
                return Err(Box::new(Collision {
                    kind,
                    listed: base.clone(),
                    kept: (holder.clone(), held.clone()),
                    left_out: (server.to_owned(), original.to_owned()),
                }));
            }
        }
        let name = unique_name(&self.by, base);
        self.by
            .insert(name.clone(), (server.to_owned(), original.to_owned(), free));
        Ok(name)
    }
}

impl Catalogue {
    /// Build from every server's last good snapshot, by server name. All of them are
    /// routable (a call is how a down server's recovery is noticed); only the `visible`
    /// ones are listed. Names are assigned over all servers, so they do not change when a
    /// server comes and goes.
    pub fn build(
        separator: &str,
        snapshots: &BTreeMap<String, (Arc<Snapshot>, bool)>,
        namings: &Namings,
    ) -> Catalogue {
        let mut catalogue = Catalogue::default();
        let naming_of = |server: &str| {
            namings
                .get(server)
                .cloned()
                .unwrap_or_else(|| Naming::prefixed(server))
        };
        for server in namings.keys().chain(snapshots.keys()) {
            let prefix = naming_of(server).prefix;
            if prefix.is_empty() {
                if !catalogue.unprefixed.contains(server) {
                    catalogue.unprefixed.push(server.clone());
                }
            } else {
                catalogue.by_prefix.insert(prefix.clone(), server.clone());
            }
            catalogue.prefixes.insert(server.clone(), prefix);
        }
        catalogue.unprefixed.sort();
        let listed_name = |naming: &Naming, original: &str| -> (String, bool) {
            match naming.rename.get(original) {
                Some(renamed) => (renamed.clone(), true),
                None if naming.prefix.is_empty() => (original.to_owned(), true),
                None => (format!("{}{separator}{original}", naming.prefix), false),
            }
        };
        let mut taken_tools = Taken::default();
        let mut taken_prompts = Taken::default();
        let mut taken_resources = Taken::default();
        let mut taken_templates = Taken::default();
        let mut collisions = Vec::new();
        for (server, (snapshot, visible)) in snapshots {
            let visible = *visible;
            let naming = naming_of(server);
            let mut tools: Vec<&Tool> = snapshot.tools.iter().collect();
            tools.sort_by(|a, b| a.name.cmp(&b.name));
            for tool in tools {
                let (wanted, free) = listed_name(&naming, &tool.name);
                let name = match taken_tools.take("tool", server, &tool.name, &wanted, free) {
                    Ok(name) => name,
                    Err(collision) => {
                        collisions.push(*collision);
                        continue;
                    }
                };
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
                    if let (Some(meta), false) = (&mut listed.meta, naming.prefix.is_empty()) {
                        uri::namespace_tool_meta(&naming.prefix, meta);
                    }
                    catalogue.tools.push(listed);
                }
            }
            let mut prompts: Vec<&Prompt> = snapshot.prompts.iter().collect();
            prompts.sort_by(|a, b| a.name.cmp(&b.name));
            for prompt in prompts {
                let (wanted, free) = listed_name(&naming, &prompt.name);
                let name = match taken_prompts.take("prompt", server, &prompt.name, &wanted, free) {
                    Ok(name) => name,
                    Err(collision) => {
                        collisions.push(*collision);
                        continue;
                    }
                };
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
            if naming.prefix.is_empty() {
                // Listed as they are: one URI (or template) has one owner.
                for resource in &snapshot.resources {
                    let uri = &resource.uri;
                    match taken_resources.take("resource", server, uri, uri, true) {
                        Ok(_) => {
                            catalogue
                                .resource_owners
                                .insert(uri.clone(), server.clone());
                            if visible {
                                catalogue.resources.push(resource.clone());
                            }
                        }
                        Err(collision) => collisions.push(*collision),
                    }
                }
                for template in &snapshot.templates {
                    let text = &template.uri_template;
                    match taken_templates.take("resource template", server, text, text, true) {
                        Ok(_) => {
                            catalogue
                                .template_owners
                                .push((text.clone(), server.clone()));
                            if visible {
                                catalogue.templates.push(template.clone());
                            }
                        }
                        Err(collision) => collisions.push(*collision),
                    }
                }
                continue;
            }
            if !visible {
                continue;
            }
            for resource in &snapshot.resources {
                let mut listed = resource.clone();
                listed.uri = namespace_uri(&naming.prefix, &resource.uri);
                catalogue.resources.push(listed);
            }
            for template in &snapshot.templates {
                let mut listed = template.clone();
                listed.uri_template = namespace_uri(&naming.prefix, &template.uri_template);
                catalogue.templates.push(listed);
            }
        }
        collisions.sort();
        catalogue.collisions = collisions;
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

    /// `server`'s prefix: its name unless configured otherwise; empty when unprefixed.
    pub fn prefix_of<'a>(&'a self, server: &'a str) -> &'a str {
        self.prefixes.get(server).map_or(server, String::as_str)
    }

    /// The server whose namespace a listed tool or prompt name is in, by its prefix; for a
    /// name the catalogue does not know yet.
    pub fn server_of_prefixed<'a>(&'a self, name: &str, separator: &str) -> Option<&'a str> {
        // Prefixes contain no separator: the first one ends the prefix.
        let (prefix, _) = name.split_once(separator)?;
        self.by_prefix.get(prefix).map(String::as_str)
    }

    /// Servers listed under their own names.
    pub fn unprefixed(&self) -> &[String] {
        &self.unprefixed
    }

    /// The item a grant judges for the tool or prompt `listed` of `server`: the listed name
    /// without the server's prefix and separator.
    pub fn grant_item<'a>(&self, server: &str, listed: &'a str, separator: &str) -> &'a str {
        let prefix = self.prefix_of(server);
        if prefix.is_empty() {
            return listed;
        }
        listed
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix(separator))
            .unwrap_or(listed)
    }

    /// `(server, the server's own URI)` for a URI a client uses: an unprefixed server's
    /// listed resource; a prefixed server's `wardgate://PREFIX/…` or `ui://PREFIX/…`; an
    /// unprefixed server's template the URI matches; else, with one unprefixed server,
    /// that one.
    pub fn resource_owner(&self, uri: &str) -> Option<(String, String)> {
        if let Some(server) = self.resource_owners.get(uri) {
            return Some((server.clone(), uri.to_owned()));
        }
        if let Some((prefix, original)) = split_uri(uri) {
            if let Some(server) = self.by_prefix.get(prefix) {
                return Some((server.clone(), original));
            }
        }
        if let Some((_, server)) = self
            .template_owners
            .iter()
            .find(|(template, _)| uri::matches_template(template, uri))
        {
            return Some((server.clone(), uri.to_owned()));
        }
        match self.unprefixed.as_slice() {
            [only] => Some((only.clone(), uri.to_owned())),
            _ => None,
        }
    }
}

/// The URI a client uses for `uri` of a server whose prefix is `prefix`.
pub fn listed_uri(prefix: &str, uri: &str) -> String {
    if prefix.is_empty() {
        uri.to_owned()
    } else {
        namespace_uri(prefix, uri)
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

/// `base` (a sanitized name), or, when it is taken, `base_2`, `base_3`, … (cut to fit).
fn unique_name<V>(taken: &HashMap<String, V>, base: String) -> String {
    let mut name = base.clone();
    let mut n = 2;
    while taken.contains_key(&name) {
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

    impl Catalogue {
        /// Every server prefixed with its name.
        fn build_default(
            separator: &str,
            snapshots: &BTreeMap<String, (Arc<Snapshot>, bool)>,
        ) -> Catalogue {
            Catalogue::build(separator, snapshots, &Namings::new())
        }
    }

    fn naming(prefix: &str, rename: &[(&str, &str)]) -> Naming {
        Naming {
            prefix: prefix.to_owned(),
            rename: rename
                .iter()
                .map(|(from, to)| (from.to_string(), to.to_string()))
                .collect(),
        }
    }

    fn listed(catalogue: &Catalogue) -> Vec<String> {
        catalogue.tools.iter().map(|t| t.name.to_string()).collect()
    }

    #[test]
    fn an_unprefixed_server_keeps_its_names_and_uris_and_routes_by_them() {
        let mut all = snapshots(&[("a", &["x", "y"]), ("b", &["x"])]);
        let a = Arc::make_mut(&mut all.get_mut("a").unwrap().0);
        a.resources = vec![Resource::new("test://static/1", "one")];
        a.templates = vec![ResourceTemplate::new("test://template/{id}/data", "t")];
        let namings = Namings::from([("a".to_owned(), naming("", &[]))]);
        let catalogue = Catalogue::build("__", &all, &namings);
        assert_eq!(listed(&catalogue), ["x", "y", "b__x"]);
        assert_eq!(catalogue.tool("x").unwrap().server, "a");
        assert_eq!(catalogue.tool("b__x").unwrap().name, "x");
        assert_eq!(catalogue.resources[0].uri, "test://static/1");
        assert_eq!(
            catalogue.templates[0].uri_template,
            "test://template/{id}/data"
        );
        let owner = |uri: &str| catalogue.resource_owner(uri);
        assert_eq!(
            owner("test://static/1"),
            Some(("a".into(), "test://static/1".into()))
        );
        assert_eq!(
            owner("test://template/9/data"),
            Some(("a".into(), "test://template/9/data".into()))
        );
        // The only unprefixed server owns what no one lists.
        assert_eq!(
            owner("test://other"),
            Some(("a".into(), "test://other".into()))
        );
        assert_eq!(
            owner("wardgate://b/file:///x"),
            Some(("b".into(), "file:///x".into()))
        );
        assert!(catalogue.collisions.is_empty());
        assert_eq!(catalogue.grant_item("a", "x", "__"), "x");
        assert_eq!(catalogue.grant_item("b", "b__x", "__"), "x");
    }

    #[test]
    fn a_collision_with_an_unprefixed_or_renamed_name_is_named_never_suffixed() {
        let all = snapshots(&[("a", &["x", "b__y"]), ("b", &["y", "z"]), ("c", &["x"])]);
        let namings = Namings::from([
            ("a".to_owned(), naming("", &[])),
            ("c".to_owned(), naming("", &[])),
            ("b".to_owned(), naming("b", &[("z", "x2")])),
        ]);
        let catalogue = Catalogue::build("__", &all, &namings);
        assert_eq!(listed(&catalogue), ["b__y", "x", "x2"]);
        assert_eq!(catalogue.tool("b__y").unwrap().server, "a");
        let collisions: Vec<String> = catalogue
            .collisions
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(collisions.len(), 2, "{collisions:?}");
        assert!(
            collisions[0].contains("tool \"b__y\" of server \"a\" and tool \"y\" of server \"b\""),
            "{collisions:?}"
        );
        assert!(
            collisions[1].contains("tool \"x\" of server \"a\" and tool \"x\" of server \"c\""),
            "{collisions:?}"
        );
        // Two prefixed servers' names still get a suffix (not a collision).
        let catalogue =
            Catalogue::build_default("__", &snapshots(&[("a", &["b__c"]), ("a__b", &["c"])]));
        assert!(catalogue.collisions.is_empty());
    }

    #[test]
    fn a_custom_prefix_names_tools_and_uris_and_routes_back() {
        let mut all = BTreeMap::from([("github".to_owned(), (Arc::new(app_snapshot()), true))]);
        Arc::make_mut(&mut all.get_mut("github").unwrap().0)
            .tools
            .push(tool("x"));
        let namings = Namings::from([("github".to_owned(), naming("gh", &[]))]);
        let catalogue = Catalogue::build("__", &all, &namings);
        assert!(listed(&catalogue).contains(&"gh__x".to_owned()));
        assert_eq!(
            catalogue.server_of_prefixed("gh__nothing_yet", "__"),
            Some("github")
        );
        assert_eq!(catalogue.resources[0].uri, "ui://gh/app/view.html");
        assert_eq!(
            catalogue.resource_owner("ui://gh/app/view.html"),
            Some(("github".into(), "ui://app/view.html".into()))
        );
        assert_eq!(
            listed_uri(catalogue.prefix_of("github"), "file:///r"),
            "wardgate://gh/file:///r"
        );
        assert_eq!(
            catalogue.resource_owner("wardgate://github/file:///r"),
            None
        );
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
        let catalogue = Catalogue::build_default("__", &snapshots(&[("a", &["x"]), ("b", &["x"])]));
        let names: Vec<_> = catalogue.tools.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["a__x", "b__x"]);
        assert_eq!(catalogue.tool("b__x").unwrap().server, "b");
        assert_eq!(catalogue.tool("b__x").unwrap().name, "x");
    }

    #[test]
    fn invalid_characters_and_collisions_are_resolved_deterministically() {
        let catalogue = Catalogue::build_default(
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
        let shown = Catalogue::build_default("__", &all);
        all.get_mut("a").unwrap().1 = false;
        let hidden = Catalogue::build_default("__", &all);
        let names: Vec<_> = hidden.tools.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["b__x_y"]);
        assert_eq!(hidden.tool("a__x_y").unwrap().server, "a");
        assert_eq!(shown.tool("b__x_y"), hidden.tool("b__x_y"));
    }

    #[test]
    fn long_names_are_cut_with_a_hash() {
        let long = "x".repeat(300);
        let catalogue = Catalogue::build_default("__", &snapshots(&[("a", &[long.as_str()])]));
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
        let catalogue = Catalogue::build_default("__", &all);

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
