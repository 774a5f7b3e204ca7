//! `GET /metrics`: the engine's metrics and the policy host's, in Prometheus text format.

use std::collections::BTreeMap;

use hyper::StatusCode;
use wardgate_engine::metrics::PolicyMetricsSample;

use super::reply::{self, Response};
use super::Admin;

pub fn render(admin: &Admin) -> Response {
    let samples: Vec<PolicyMetricsSample> = admin
        .policies
        .list()
        .into_iter()
        .map(|policy| {
            let faults = &policy.record.faults;
            let shadow = admin
                .policies
                .shadows()
                .current(&policy.name)
                .map(|shadow| shadow.counts())
                .unwrap_or_default()
                .into_iter()
                .flat_map(|(question, counts, dropped)| {
                    let question = question.name().to_owned();
                    [
                        ("agreed", counts.agreed),
                        ("disagreed", counts.disagreed),
                        ("fault", counts.faults),
                        ("dropped", dropped),
                    ]
                    .map(|(outcome, count)| ((question.clone(), outcome.to_owned()), count))
                })
                .collect();
            PolicyMetricsSample {
                shadow,
                module: match (&policy.module, &policy.version) {
                    (Some(module), Some(version)) => format!("{module} {version}"),
                    _ => String::new(),
                },
                policy: policy.name,
                decisions: policy.decisions.values().sum(),
                faults: BTreeMap::from([
                    ("timeout".to_owned(), faults.timeouts),
                    ("memory_exceeded".to_owned(), faults.memory_exceeded),
                    ("trap".to_owned(), faults.traps),
                    ("invalid_answer".to_owned(), faults.invalid_answers),
                    ("instantiate".to_owned(), faults.instantiation_failures),
                ]),
            }
        })
        .collect();
    reply::text(
        StatusCode::OK,
        "text/plain; version=0.0.4; charset=utf-8",
        admin.gateway.encode_metrics(&samples),
    )
}
