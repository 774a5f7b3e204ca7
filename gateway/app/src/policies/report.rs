//! Reporting what happens to policy modules: each load, rejection and fault is recorded in
//! its book (for the admin API) and becomes a gateway event (log, clients, subscribers).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use wardgate_engine::events::GatewayEvent;
use wardgate_engine::Gateway;
use wardgate_wasm::PolicyEvent;

use super::book::PolicyBook;

/// From now on, record each of `book`'s module events in the book and announce it on
/// `gateway`. Faults are announced once per module version and kind: a broken module faults
/// on every decision, and one event says all there is to say.
pub fn report_events(gateway: &Arc<Gateway>, book: &Arc<PolicyBook>) {
    let announced = Arc::new(Mutex::new(HashSet::new()));
    for policy in book.managed() {
        let gateway = Arc::downgrade(gateway);
        let announced = announced.clone();
        let book = Arc::downgrade(book);
        policy.set_event_sink(move |event| {
            if let Some(book) = book.upgrade() {
                book.observe(&event);
            }
            let Some(gateway) = gateway.upgrade() else {
                return;
            };
            let event = match event {
                PolicyEvent::Loaded {
                    policy,
                    path,
                    description,
                    ..
                } => GatewayEvent::PolicyLoaded {
                    policy,
                    path: path.display().to_string(),
                    module: description.name,
                    version: description.version,
                },
                PolicyEvent::Rejected {
                    policy,
                    path,
                    reason,
                } => GatewayEvent::PolicyRejected {
                    policy,
                    path: path.display().to_string(),
                    reason,
                },
                PolicyEvent::Faulted { policy, fault } => {
                    let key = (fault.module_version.clone(), format!("{:?}", fault.kind));
                    if !wardgate_engine::lock::lock(&announced).insert(key) {
                        return;
                    }
                    GatewayEvent::PolicyFaulted {
                        policy,
                        decision: fault.decision.as_str().to_owned(),
                        fault: fault.to_string(),
                    }
                }
            };
            gateway.emit(event);
        });
    }
}

/// Announce how `book`'s first load went: it ran before `report_events` was wired. For a
/// book a config reload loaded; at start, the first load is only logged.
pub fn announce_first_loads(gateway: &Gateway, book: &PolicyBook) {
    for policy in book.list() {
        let Some(path) = policy.path.clone() else {
            continue; // builtin
        };
        let event = if policy.loaded {
            GatewayEvent::PolicyLoaded {
                policy: policy.name,
                path,
                module: policy.module.unwrap_or_default(),
                version: policy.version.unwrap_or_default(),
            }
        } else {
            GatewayEvent::PolicyRejected {
                policy: policy.name,
                path,
                reason: policy
                    .record
                    .last_rejection
                    .map(|rejection| rejection.reason)
                    .unwrap_or_else(|| "the module did not load".to_owned()),
            }
        };
        gateway.emit(event);
    }
}
