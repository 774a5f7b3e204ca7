//! A connection's subscriptions, kept by its supervisor: a 2026-07-28 server's
//! `subscriptions/listen` stream (list changes and the resource updates clients are
//! subscribed to), and clients' subscriptions renewed on a new connection.

use std::sync::Arc;

use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::RoleClient;

use crate::upstream::handler::Links;

/// A 2026-07-28 server sends list changes and resource updates only on a
/// `subscriptions/listen` stream: keep one open for the connection's life (until `stop`),
/// asking for the list changes its capabilities offer and for updates of the resources
/// clients are subscribed to (`subscriptions`, the slot's; when they change, the stream is
/// opened again with the new set, the new one before the old one ends, so no update falls
/// between them).
pub async fn listen_for_changes(
    peer: rmcp::Peer<RoleClient>,
    links: Arc<Links>,
    subscriptions: tokio::sync::watch::Receiver<std::collections::BTreeSet<String>>,
    listened: tokio::sync::watch::Sender<std::collections::BTreeSet<String>>,
    stop: tokio_util::sync::CancellationToken,
) {
    // Whatever a stream of an earlier connection took, this one has taken nothing yet,
    // and once it ends nothing is taken.
    listened.send_replace(Default::default());
    listen(peer, links, subscriptions, &listened, stop).await;
    listened.send_replace(Default::default());
}

async fn listen(
    peer: rmcp::Peer<RoleClient>,
    links: Arc<Links>,
    mut subscriptions: tokio::sync::watch::Receiver<std::collections::BTreeSet<String>>,
    listened: &tokio::sync::watch::Sender<std::collections::BTreeSet<String>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let capabilities = peer
        .peer_info()
        .map(|info| info.capabilities.clone())
        .unwrap_or_default();
    let mut current: Option<rmcp::service::Subscription> = None;
    loop {
        let uris: Vec<String> = subscriptions.borrow_and_update().iter().cloned().collect();
        let mut wanted = SubscriptionFilter::builder()
            .tools_list_changed()
            .prompts_list_changed()
            .resources_list_changed()
            .build();
        if !uris.is_empty() {
            wanted.resource_subscriptions = Some(uris);
        }
        let filter = wanted.supported_by(&capabilities);
        let next = if filter == SubscriptionFilter::default() {
            None
        } else {
            match peer.listen(filter).await {
                Ok(subscription) => {
                    let taken = subscription
                        .acknowledged()
                        .resource_subscriptions
                        .iter()
                        .flatten()
                        .cloned()
                        .collect();
                    listened.send_replace(taken);
                    Some(subscription)
                }
                Err(error) => {
                    tracing::warn!(server = %links.server, "could not listen for list changes and resource updates (subscriptions/listen): {error}; the gateway sees new tools on the next reconnection");
                    None
                }
            }
        };
        if let Some(mut previous) = std::mem::replace(&mut current, next) {
            let _ = previous.cancel().await;
        }
        let changed = loop {
            let Some(subscription) = current.as_mut() else {
                // Nothing to listen for now: wait for a subscription or the end.
                tokio::select! {
                    _ = stop.cancelled() => return,
                    changed = subscriptions.changed() => break changed.is_ok(),
                }
            };
            tokio::select! {
                _ = stop.cancelled() => {
                    if let Some(mut subscription) = current.take() {
                        let _ = subscription.cancel().await;
                    }
                    return;
                }
                changed = subscriptions.changed() => break changed.is_ok(),
                next = subscription.next() => match next {
                    Ok(Some(
                        ServerNotification::ToolListChangedNotification(_)
                        | ServerNotification::PromptListChangedNotification(_)
                        | ServerNotification::ResourceListChangedNotification(_),
                    )) => {
                        links.list_changed();
                    }
                    Ok(Some(ServerNotification::ResourceUpdatedNotification(update))) => {
                        links.resource_updated(&update.params.uri);
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => return,
                    Err(error) => {
                        tracing::debug!(server = %links.server, "the subscriptions/listen stream ended: {error}");
                        return;
                    }
                }
            }
        };
        if !changed {
            return;
        }
    }
}

/// Renew clients' resource subscriptions on a new connection: a 2026-07-28 server's by
/// waiting for its listen stream to take them, a handshake-era server's by
/// `resources/subscribe`, one by one.
#[expect(
    deprecated,
    reason = "resources/subscribe is how handshake-era upstreams are subscribed to (SEP-2577)"
)]
pub async fn renew_subscriptions(
    peer: &rmcp::Peer<RoleClient>,
    slot: &crate::slot::Slot,
    modern: bool,
    uris: &[String],
) {
    if modern {
        for uri in uris {
            slot.until_listened(uri, std::time::Duration::from_secs(3600))
                .await;
        }
        return;
    }
    for uri in uris {
        if let Err(error) = peer
            .subscribe(rmcp::model::SubscribeRequestParams::new(uri))
            .await
        {
            tracing::warn!(server = %slot.name, "could not renew a resource subscription after reconnecting: {error}");
        }
    }
}
