//! What a server offers: its tools, prompts, resources and templates, asked for when a
//! connection opens (`discover`) and again after a list change (`refresh`).

use rmcp::{Peer, RoleClient};

use crate::announce::Announcer;
use crate::catalogue::Snapshot;
use crate::failure::UpstreamError;
use crate::slot::SlotWriter;

/// Ask a server for everything it offers, following pagination.
pub(crate) async fn discover(
    server: &str,
    peer: &Peer<RoleClient>,
) -> Result<Snapshot, UpstreamError> {
    let capabilities = peer
        .peer_info()
        .map(|info| info.capabilities.clone())
        .unwrap_or_default();
    let fail = |error: rmcp::ServiceError| UpstreamError::from_service(server, &error);
    let mut snapshot = Snapshot {
        completions: capabilities.completions.is_some(),
        tasks: capabilities.supports_tasks(),
        ..Snapshot::default()
    };
    if capabilities.tools.is_some() {
        snapshot.tools = peer.list_all_tools().await.map_err(fail)?;
    }
    if capabilities.prompts.is_some() {
        snapshot.prompts = peer.list_all_prompts().await.map_err(fail)?;
    }
    if capabilities.resources.is_some() {
        snapshot.resources = peer.list_all_resources().await.map_err(fail)?;
        snapshot.templates = peer.list_all_resource_templates().await.map_err(fail)?;
    }
    Ok(snapshot)
}

/// Re-discover (after list_changed or a recovery); a failure keeps the previous snapshot.
pub(super) async fn refresh(announcer: &Announcer, writer: &SlotWriter, peer: &Peer<RoleClient>) {
    let slot = writer.slot();
    let timeout = announcer.settings.request_timeout;
    match tokio::time::timeout(timeout, discover(&slot.name, peer)).await {
        Ok(Ok(snapshot)) => {
            writer.set_snapshot(snapshot);
            announcer.rebuild_catalogue();
        }
        Ok(Err(error)) => {
            tracing::warn!(server = %slot.name, "refresh failed; keeping the last snapshot: {}", error.message)
        }
        Err(_) => {
            tracing::warn!(server = %slot.name, "refresh timed out; keeping the last snapshot")
        }
    }
}
