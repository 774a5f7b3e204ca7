//! What the client of one request may use: its grant, judged against the catalogue the
//! request found.

use std::sync::Arc;

use rmcp::model::ErrorCode;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

use super::{http, NOT_PERMITTED};
use wardgate_engine::catalogue::Catalogue;
use wardgate_engine::config::{Grant, ToolDiscovery};
use wardgate_engine::gateway::Gateway;

/// What the client of one request may use: its HTTP request's [`http::Identity`]; a stdio
/// client (and an HTTP client of a gateway without `[gateway.auth]`) may use everything. An
/// HTTP request that carries no identity when clients must authenticate may use nothing.
pub(super) struct Access {
    identity: Option<http::Identity>,
    /// `None`: everything.
    pub(super) grant: Option<Arc<Grant>>,
    /// How this client finds tools: its own setting, else the gateway's.
    pub(super) discovery: ToolDiscovery,
    separator: String,
    /// The catalogue as this request found it: whose each name and URI is.
    catalogue: Arc<Catalogue>,
}

impl Access {
    pub(super) fn of(context: &RequestContext<RoleServer>, gateway: &Gateway) -> Access {
        let parts = context.extensions.get::<::http::request::Parts>();
        let identity = parts
            .and_then(|parts| parts.extensions.get::<http::Identity>())
            .cloned();
        let grant = match (&identity, parts) {
            (Some(identity), _) => {
                (!matches!(*identity.grant, Grant::All)).then(|| identity.grant.clone())
            }
            (None, Some(_)) if gateway.settings.auth.required() => {
                Some(Arc::new(Grant::Only(Vec::new())))
            }
            (None, _) => None,
        };
        let discovery = identity
            .as_ref()
            .and_then(|identity| identity.tool_discovery)
            .unwrap_or(gateway.settings.tool_discovery);
        Access {
            identity,
            grant,
            discovery,
            separator: gateway.settings.separator.clone(),
            catalogue: gateway.catalogue(),
        }
    }

    pub(super) fn everything(&self) -> bool {
        self.grant.is_none()
    }

    /// The tool or prompt listed as `name` of `server` (the catalogue's route's server).
    pub(super) fn routed(&self, server: &str, name: &str) -> bool {
        self.grant.as_ref().is_none_or(|grant| {
            grant.allows(
                server,
                self.catalogue.grant_item(server, name, &self.separator),
            )
        })
    }

    /// A tool or prompt by its listed name: the server its route names, or for a name the
    /// catalogue does not know yet, the one its prefix names (as routing finds it; the
    /// route is checked again once known).
    pub(super) fn item(&self, server: Option<&str>, name: &str) -> bool {
        if self.grant.is_none() {
            return true;
        }
        match server.or_else(|| self.catalogue.server_of_prefixed(name, &self.separator)) {
            Some(server) => self.routed(server, name),
            // It may be an unprefixed server's, not discovered yet: judged once routed.
            None => !self.catalogue.unprefixed().is_empty(),
        }
    }

    /// A resource by its gateway URI.
    pub(super) fn resource(&self, uri: &str) -> bool {
        let Some(grant) = &self.grant else {
            return true;
        };
        self.catalogue
            .resource_owner(uri)
            .is_some_and(|(server, _)| grant.allows_server(&server))
    }

    pub(super) fn refusal(&self, what: &str, name: &str) -> McpError {
        let client = self.identity.as_ref().map_or_else(
            || "this client".to_owned(),
            |identity| format!("client {:?}", &*identity.name),
        );
        McpError::new(
            ErrorCode(NOT_PERMITTED),
            format!("{client} may not use the {what} \"{name}\"; an operator can add it to the client's `allow` list in [gateway.auth]"),
            Some(serde_json::json!({ "client": self.identity.as_ref().map(|identity| identity.name.to_string()) })),
        )
    }
}
