//! Load-time checks of a module: it implements the world, links against the empty WASI context, describes itself and passes a self-check.

use std::path::Path;

use wardgate_policy::{
    CrashReport, ExitInfo, FailedRequest, FailureKind, Operation, ProbeOutcome, Question,
    ServerContext, TransportKind,
};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::Component;

use super::WasmPolicy;
use crate::bindings as wit;
use crate::convert;
use crate::error::{chain, PolicyLoadError};
use crate::fault::{Decision, FaultKind};
use crate::runtime::Runtime;
use crate::wasi::StoreState;

/// The exports of the world, in the order the self-check calls them: `describe`, then the
/// questions.
fn exports() -> impl Iterator<Item = &'static str> {
    std::iter::once("describe").chain(Question::ALL.into_iter().map(Question::wit_name))
}

/// Checks the component's exports and imports and prepares its instantiation.
pub(crate) fn link(
    runtime: &Runtime,
    path: &Path,
    component: &Component,
) -> Result<wit::RecoveryPolicyPre<StoreState>, PolicyLoadError> {
    let engine = &runtime.inner.engine;
    let ty = component.component_type();
    // Name what is missing before anything else: "does not export `crash`" is a better
    // error than the type checker's first complaint.
    let exported: Vec<&str> = ty.exports(engine).map(|(name, _)| name).collect();
    let missing: Vec<&str> = exports()
        .filter(|export| !exported.contains(export))
        .collect();
    if !missing.is_empty() {
        return Err(PolicyLoadError::MissingExport {
            path: path.to_path_buf(),
            export: missing.join("`, `"),
        });
    }
    let instance_pre = runtime
        .inner
        .linker
        .instantiate_pre(component)
        .map_err(|error| {
            let import =
                missing_import(&error).or_else(|| first_unknown_import(runtime, component));
            match import {
                Some(import) => PolicyLoadError::MissingImport {
                    path: path.to_path_buf(),
                    import,
                    reason: chain(&error),
                },
                None => PolicyLoadError::Instantiate {
                    path: path.to_path_buf(),
                    reason: chain(&error),
                },
            }
        })?;
    wit::RecoveryPolicyPre::new(instance_pre).map_err(|error| PolicyLoadError::WrongWorld {
        path: path.to_path_buf(),
        reason: chain(&error),
    })
}

/// The import named by wasmtime's "component imports instance `NAME`, but ..." error.
fn missing_import(error: &wasmtime::Error) -> Option<String> {
    let message = error.to_string();
    let rest = message.strip_prefix("component imports ")?;
    let start = rest.find('`')? + 1;
    let end = start + rest[start..].find('`')?;
    Some(rest[start..end].to_string())
}

/// Fallback when the error text changes shape: the first import that is not WASI.
fn first_unknown_import(runtime: &Runtime, component: &Component) -> Option<String> {
    imports(runtime, component)
        .into_iter()
        .find(|name| !name.starts_with("wasi:"))
}

/// The names of the instances and functions the component imports (not its type imports).
pub(crate) fn imports(runtime: &Runtime, component: &Component) -> Vec<String> {
    let engine = &runtime.inner.engine;
    component
        .component_type()
        .imports(engine)
        .filter(|(_, item)| !matches!(item.ty, ComponentItem::Type(_)))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// Calls `describe` and checks the answer.
pub(crate) fn describe(
    policy: &WasmPolicy,
) -> Result<wardgate_policy::Description, PolicyLoadError> {
    let answer = policy.run_at_load(|instance, store| {
        let description = instance.call_describe(store)?;
        Ok(convert::description(description))
    });
    answer.map_err(|fault| match fault {
        FaultKind::InvalidAnswer { reason } => PolicyLoadError::InvalidDescription {
            path: policy.path().to_path_buf(),
            reason,
        },
        FaultKind::Instantiate { message } => PolicyLoadError::Instantiate {
            path: policy.path().to_path_buf(),
            reason: message,
        },
        other => PolicyLoadError::SelfCheck {
            path: policy.path().to_path_buf(),
            decision: Decision::Describe.as_str(),
            reason: other.to_string(),
        },
    })
}

/// One call of every decision with ordinary inputs: a module that faults on these would
/// fault in production, so it is rejected before it can serve.
pub(crate) fn self_check(policy: &WasmPolicy) -> Result<(), PolicyLoadError> {
    let server = policy.wit_server(&ServerContext::new(
        "self-check",
        TransportKind::StreamableHttp,
    ));
    let failure = convert::failed_request(&FailedRequest {
        operation: Operation::Call,
        kind: FailureKind::ConnectRefused,
        message: "connection refused".into(),
        attempt: 1,
        may_have_reached_server: false,
        idempotent: false,
        read_only: false,
    });
    let probe = convert::probe_outcome(&ProbeOutcome {
        succeeded: false,
        latency_ms: 60_000,
        consecutive_failures: 1,
        consecutive_successes: 0,
    });
    let crash = convert::crash_report(&CrashReport {
        exit: ExitInfo {
            code: Some(1),
            signal: None,
        },
        uptime_ms: 1_000,
        now_ms: 600_000,
        recent_crashes_ms: vec![300_000],
    });
    let fail = |decision: Decision, fault: FaultKind| PolicyLoadError::SelfCheck {
        path: policy.path().to_path_buf(),
        decision: decision.as_str(),
        reason: fault.to_string(),
    };
    policy
        .run_at_load(|p, store| {
            Ok(convert::retry_verdict(
                p.call_classify(store, &server, &failure)?,
            ))
        })
        .map_err(|fault| fail(Decision::Question(Question::Classify), fault))?;
    policy
        .run_at_load(|p, store| {
            Ok(convert::reconnect_verdict(
                p.call_reconnect_delay(store, &server, 1, 42)?,
            ))
        })
        .map_err(|fault| fail(Decision::Question(Question::ReconnectDelay), fault))?;
    policy
        .run_at_load(|p, store| {
            Ok(convert::health_verdict(
                p.call_health(store, &server, probe)?,
            ))
        })
        .map_err(|fault| fail(Decision::Question(Question::Health), fault))?;
    policy
        .run_at_load(|p, store| {
            Ok(convert::probe_plan(
                p.call_probe_schedule(store, &server, 42)?,
            ))
        })
        .map_err(|fault| fail(Decision::Question(Question::ProbeSchedule), fault))?;
    policy
        .run_at_load(|p, store| {
            Ok(convert::crash_verdict(
                p.call_crash(store, &server, &crash)?,
            ))
        })
        .map_err(|fault| fail(Decision::Question(Question::Crash), fault))?;
    Ok(())
}
