//! What one client hears of the catalogue: which servers a change touched, and how much of
//! the catalogue a grant lists.

use std::collections::{BTreeMap, BTreeSet};

use super::Catalogue;
use crate::config::Grant;

/// The servers whose listed entries differ between two catalogues, by list.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changed {
    pub tools: BTreeSet<String>,
    pub prompts: BTreeSet<String>,
    /// Resources and resource templates.
    pub resources: BTreeSet<String>,
}

impl Changed {
    /// Every server some list changed for.
    pub fn servers(&self) -> BTreeSet<String> {
        let mut all = self.tools.clone();
        all.extend(self.prompts.iter().cloned());
        all.extend(self.resources.iter().cloned());
        all
    }
}

/// How many tools, prompts and resources a client can list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub tools: usize,
    pub prompts: usize,
    pub resources: usize,
}

impl Catalogue {
    /// The servers whose tools, prompts or resources as listed differ in `next`.
    pub fn changed_servers(&self, next: &Catalogue) -> Changed {
        let tool_server = |catalogue: &Catalogue, name: &str| {
            catalogue.tool(name).map(|route| route.server.clone())
        };
        let prompt_server = |catalogue: &Catalogue, name: &str| {
            catalogue.prompt(name).map(|route| route.server.clone())
        };
        let uri_server = |catalogue: &Catalogue, uri: &str| {
            catalogue.resource_owner(uri).map(|(server, _)| server)
        };
        Changed {
            tools: differ(
                self,
                next,
                |c| &c.tools,
                |c, tool| tool_server(c, &tool.name),
            ),
            prompts: differ(
                self,
                next,
                |c| &c.prompts,
                |c, prompt| prompt_server(c, &prompt.name),
            ),
            resources: differ(
                self,
                next,
                |c| &c.resources,
                |c, resource| uri_server(c, &resource.uri),
            )
            .into_iter()
            .chain(differ(
                self,
                next,
                |c| &c.templates,
                |c, template| uri_server(c, &template.uri_template),
            ))
            .collect(),
        }
    }

    /// What a client that may use what `grant` allows can list, counted as its lists are
    /// filtered (the gateway's own admin tools aside).
    pub fn counts(&self, grant: &Grant, separator: &str) -> Counts {
        let listed = |server: Option<&str>, name: &str| {
            server.is_some_and(|server| {
                grant.allows(server, self.grant_item(server, name, separator))
            })
        };
        Counts {
            tools: self
                .tools
                .iter()
                .filter(|tool| {
                    listed(
                        self.tool(&tool.name).map(|route| route.server.as_str()),
                        &tool.name,
                    )
                })
                .count(),
            prompts: self
                .prompts
                .iter()
                .filter(|prompt| {
                    listed(
                        self.prompt(&prompt.name).map(|route| route.server.as_str()),
                        &prompt.name,
                    )
                })
                .count(),
            resources: self
                .resources
                .iter()
                .filter(|resource| {
                    self.resource_owner(&resource.uri)
                        .is_some_and(|(server, _)| grant.allows_server(&server))
                })
                .count(),
        }
    }
}

/// The servers whose entries of one list differ between `before` and `after` (an entry
/// whose server cannot be told counts for the server named "", which no client may use).
fn differ<T: PartialEq>(
    before: &Catalogue,
    after: &Catalogue,
    list: impl Fn(&Catalogue) -> &Vec<T>,
    server_of: impl Fn(&Catalogue, &T) -> Option<String>,
) -> BTreeSet<String> {
    let before = by_server(before, &list, &server_of);
    let after = by_server(after, &list, &server_of);
    before
        .keys()
        .chain(after.keys())
        .filter(|server| before.get(*server) != after.get(*server))
        .cloned()
        .collect()
}

fn by_server<'c, T>(
    catalogue: &'c Catalogue,
    list: &impl Fn(&Catalogue) -> &Vec<T>,
    server_of: &impl Fn(&Catalogue, &T) -> Option<String>,
) -> BTreeMap<String, Vec<&'c T>> {
    let mut grouped: BTreeMap<String, Vec<&'c T>> = BTreeMap::new();
    for entry in list(catalogue) {
        let server = server_of(catalogue, entry).unwrap_or_default();
        grouped.entry(server).or_default().push(entry);
    }
    grouped
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rmcp::model::{Resource, Tool};

    use super::*;
    use crate::catalogue::Snapshot;
    use crate::config::NamePattern;

    fn catalogue(servers: &[(&str, &[&str], bool)]) -> Catalogue {
        let snapshots = servers
            .iter()
            .map(|(server, tools, visible)| {
                let snapshot = Snapshot {
                    tools: tools
                        .iter()
                        .map(|name| {
                            Tool::new(name.to_string(), "d", Arc::new(serde_json::Map::new()))
                        })
                        .collect(),
                    resources: vec![Resource::new("file:///r", "r")],
                    ..Default::default()
                };
                (server.to_string(), (Arc::new(snapshot), *visible))
            })
            .collect();
        Catalogue::build("__", &snapshots, &Default::default())
    }

    fn set(servers: &[&str]) -> BTreeSet<String> {
        servers.iter().map(|server| server.to_string()).collect()
    }

    fn only(patterns: &[&str]) -> Grant {
        Grant::Only(
            patterns
                .iter()
                .map(|pattern| NamePattern::parse_known(pattern, "__", &["alpha", "beta"]))
                .collect(),
        )
    }

    #[test]
    fn a_change_names_the_servers_whose_lists_changed() {
        let before = catalogue(&[("alpha", &["echo"], true), ("beta", &["echo"], true)]);
        let added = catalogue(&[("alpha", &["echo"], true), ("beta", &["echo", "new"], true)]);
        let changed = before.changed_servers(&added);
        assert_eq!(changed.tools, set(&["beta"]));
        assert!(changed.prompts.is_empty() && changed.resources.is_empty());
        // A server that goes down leaves every list.
        let down = catalogue(&[("alpha", &["echo"], false), ("beta", &["echo"], true)]);
        let changed = before.changed_servers(&down);
        assert_eq!(changed.tools, set(&["alpha"]));
        assert_eq!(changed.resources, set(&["alpha"]));
        assert_eq!(changed.servers(), set(&["alpha"]));
        assert_eq!(before.changed_servers(&before), Changed::default());
    }

    #[test]
    fn counts_are_what_a_grant_lists() {
        let both = catalogue(&[("alpha", &["echo", "add"], true), ("beta", &["echo"], true)]);
        let all = Counts {
            tools: 3,
            prompts: 0,
            resources: 2,
        };
        assert_eq!(both.counts(&Grant::All, "__"), all);
        let alpha = Counts {
            tools: 2,
            prompts: 0,
            resources: 1,
        };
        assert_eq!(both.counts(&only(&["alpha"]), "__"), alpha);
        // One tool of a server: that tool, and none of its resources.
        let one = Counts {
            tools: 1,
            prompts: 0,
            resources: 0,
        };
        assert_eq!(both.counts(&only(&["beta__echo"]), "__"), one);
    }
}
