//! The sessions a per-client instance serves.

use std::collections::BTreeSet;
use std::sync::Mutex;

use super::{SessionId, Sessions};

/// The sessions a per-client instance serves: its owner's session, or the sessions of its
/// owner's identity that used it. Small (one client's sessions), and each leaves it when
/// it ends.
#[derive(Debug, Default)]
pub struct Audience(Mutex<BTreeSet<SessionId>>);

impl Audience {
    pub fn add(&self, id: SessionId) {
        crate::lock::lock(&self.0).insert(id);
    }

    pub fn remove(&self, id: SessionId) {
        crate::lock::lock(&self.0).remove(&id);
    }

    pub fn contains(&self, id: SessionId) -> bool {
        crate::lock::lock(&self.0).contains(&id)
    }

    pub fn sessions(&self) -> BTreeSet<SessionId> {
        crate::lock::lock(&self.0).clone()
    }
}

impl Sessions {
    /// Whether any of `ids` is subscribed to `uri`.
    pub fn any_subscribed(&self, ids: &BTreeSet<SessionId>, uri: &str) -> bool {
        let sessions = self.lock();
        ids.iter().any(|id| {
            sessions
                .get(id)
                .is_some_and(|session| session.subscriptions.contains(uri))
        })
    }
}
