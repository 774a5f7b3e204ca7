//! Where a client's request goes: a name the catalogue does not know yet waits for the
//! server that may own it, reads are forwarded as freely retried, and what `initialize`
//! and unknown names tell a client.

use rmcp::model::*;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use wardgate_policy::Operation;

use super::SessionHandler;
use wardgate_engine::catalogue::{Catalogue, Snapshot};
use wardgate_engine::config::Grant;
use wardgate_engine::gateway::Slot;
use wardgate_engine::router::{self, CallHints};
use wardgate_engine::sessions::SessionId;

impl SessionHandler {
    /// Forward a request that changes nothing on the server (retried freely).
    pub(super) async fn forward_read_only(
        &self,
        slot: &Slot,
        session: SessionId,
        request: ClientRequest,
        context: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, McpError> {
        let hints = CallHints {
            idempotent: true,
            read_only: true,
        };
        router::forward(
            &self.gateway,
            slot,
            session,
            Operation::Call,
            hints,
            request,
            context,
        )
        .await
    }

    /// Where the tool or prompt `name` goes. A name the catalogue does not know yet, in the
    /// namespace of a configured server (`server{separator}...`), may belong to a server
    /// that has not been discovered: still starting, or down since the start. Wait for it
    /// (within the request timeout; a down server is woken, as any call wakes it), then
    /// look again.
    pub(super) async fn route<R>(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
        find: impl Fn(&Catalogue, &str) -> Option<R>,
    ) -> Result<Option<R>, McpError> {
        let catalogue = self.gateway.catalogue();
        if let Some(route) = find(&catalogue, name) {
            return Ok(Some(route));
        }
        let separator = self.gateway.settings.separator.as_str();
        let Some(slot) = catalogue
            .server_of_prefixed(name, separator)
            .and_then(|server| self.gateway.slot(server))
        else {
            // An unprefixed server's name, perhaps, of one still starting: wait until each
            // has settled (started or failed), then look again. Once none is starting, an
            // unknown name costs nothing more.
            let mut waited = false;
            for server in catalogue.unprefixed() {
                if let Some(slot) = self.gateway.slot(server).filter(|slot| slot.is_starting()) {
                    slot.wait_settled().await;
                    waited = true;
                }
            }
            if waited {
                // A server that settled online was in the catalogue before it said so.
                return Ok(find(&self.gateway.catalogue(), name));
            }
            return Ok(None);
        };
        slot.wait_settled().await;
        router::until_usable(&self.gateway, &slot, self.session, context).await?;
        if let Some(route) = find(&self.gateway.catalogue(), name) {
            return Ok(Some(route));
        }
        // A server is in the catalogue before anyone sees it online (`Supervisor::feed_with`).
        Ok(find(&self.gateway.catalogue(), name))
    }

    /// Whether `completion/complete` is worth advertising: a server offers it, or one has
    /// not been reached yet and may (a client asks at once; a server that turns out not to
    /// offer it gives an empty completion).
    pub(super) fn offers_completions(&self) -> bool {
        self.any_server_may_offer(|snapshot| snapshot.completions)
    }

    /// Whether a server offers what `offers` looks for in its snapshot, or one has not been
    /// reached yet and may (a client asks at once).
    pub(super) fn any_server_may_offer(&self, offers: impl Fn(&Snapshot) -> bool) -> bool {
        self.gateway.slots().iter().any(|slot| {
            let snapshot = slot.snapshot();
            offers(&snapshot) || (slot.config.enabled && *snapshot == Snapshot::default())
        })
    }

    /// What `initialize` tells a client about the gateway: the servers it may use.
    pub(super) fn instructions(&self, grant: Option<&Grant>) -> String {
        let slots = self.gateway.slots();
        let names: Vec<&str> = slots
            .iter()
            .map(|slot| slot.name.as_str())
            .filter(|name| grant.is_none_or(|grant| grant.allows_server_any(name)))
            .collect();
        let unprefixed: Vec<&str> = slots
            .iter()
            .filter(|slot| slot.config.prefix.is_empty() && names.contains(&slot.name.as_str()))
            .map(|slot| slot.name.as_str())
            .collect();
        let own = if unprefixed.is_empty() {
            String::new()
        } else {
            format!(
                " except those of {}, which keep their own names",
                unprefixed.join(", ")
            )
        };
        format!(
            "Wardgate gateway in front of {} MCP servers ({}); tool and prompt names are \"server{}name\"{own}.",
            names.len(),
            names.join(", "),
            self.gateway.settings.separator
        )
    }

    pub(super) fn unknown_tool(&self, name: &str) -> McpError {
        let separator = &self.gateway.settings.separator;
        let catalogue = self.gateway.catalogue();
        let prefixed = catalogue
            .server_of_prefixed(name, separator)
            .map(str::to_owned)
            .or_else(|| {
                name.split_once(separator.as_str())
                    .filter(|_| catalogue.unprefixed().is_empty())
                    .map(|(server, _)| server.to_owned())
            });
        let hint = match prefixed.as_deref() {
            Some(server) => match self.gateway.slot(server) {
                Some(slot) if !slot.status().is_online() => {
                    return router::unavailable(
                        &slot,
                        &slot.status(),
                        Some(&format!(
                            "its tool list is not available, so \"{name}\" cannot be routed"
                        )),
                    );
                }
                Some(_) => format!("server \"{server}\" has no such tool"),
                None => format!("no server named \"{server}\" is configured"),
            },
            None if catalogue.unprefixed().is_empty() => {
                format!("tool names have the form server{separator}tool")
            }
            None => "no server lists it".to_owned(),
        };
        McpError::invalid_params(
            format!("unknown tool \"{name}\": {hint}; call tools/list for the names"),
            None,
        )
    }

    /// `(server, the server's own URI)` for a URI a client uses.
    pub(super) fn resource_route(&self, uri: &str) -> Result<(String, String), McpError> {
        self.gateway.catalogue().resource_owner(uri).ok_or_else(|| {
            let hint = if self.gateway.catalogue().unprefixed().is_empty() {
                "it is not a gateway URI; use the URIs from resources/list (wardgate://SERVER/...)"
            } else {
                "no server lists it or a template it matches, and it is not a gateway URI; use the URIs from resources/list"
            };
            McpError::resource_not_found(format!("resource URI {uri:?}: {hint}"), Some(serde_json::json!({ "uri": uri })))
        })
    }
}
