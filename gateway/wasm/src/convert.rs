//! Conversions between `wardgate-policy`'s vocabulary and the WIT types, and the checks an answer must pass.

use std::collections::BTreeMap;

use wardgate_policy as policy;

use crate::bindings as wit;

/// Longest delay or interval the host accepts from a module: one day. Anything longer is
/// a bug in the module (or an overflow), not a plan.
pub const MAX_DELAY_MS: u64 = 86_400_000;

/// The server as the module sees it: the policy-wide parameters overlaid by the server's own.
pub(crate) fn server_context(
    server: &policy::ServerContext,
    module_params: &BTreeMap<String, String>,
) -> wit::ServerContext {
    let params = if module_params.is_empty() {
        server
            .params
            .iter()
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect()
    } else {
        merged_params(server, module_params).into_iter().collect()
    };
    wit::ServerContext {
        name: server.name.clone(),
        transport: match server.transport {
            policy::TransportKind::Stdio => wit::TransportKind::Stdio,
            policy::TransportKind::StreamableHttp => wit::TransportKind::StreamableHttp,
            policy::TransportKind::Sse => wit::TransportKind::Sse,
        },
        params,
    }
}

/// Policy-wide parameters with the server's own on top (a server's value wins).
pub(crate) fn merged_params(
    server: &policy::ServerContext,
    module_params: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut params = module_params.clone();
    params.extend(
        server
            .params
            .iter()
            .map(|(key, value)| (key.clone(), value.clone())),
    );
    params
}

fn exit_info(exit: &policy::ExitInfo) -> wit::ExitInfo {
    wit::ExitInfo {
        code: exit.code,
        signal: exit.signal,
    }
}

pub(crate) fn failed_request(failure: &policy::FailedRequest) -> wit::FailedRequest {
    use policy::FailureKind as Kind;
    wit::FailedRequest {
        operation: match failure.operation {
            policy::Operation::Initialize => wit::Operation::Initialize,
            policy::Operation::List => wit::Operation::List,
            policy::Operation::Call => wit::Operation::Call,
            policy::Operation::Probe => wit::Operation::Probe,
        },
        kind: match failure.kind {
            Kind::ConnectRefused => wit::FailureKind::ConnectRefused,
            Kind::TimedOut => wit::FailureKind::TimedOut,
            Kind::Dns => wit::FailureKind::Dns,
            Kind::ConnectionReset => wit::FailureKind::ConnectionReset,
            Kind::ConnectionClosed => wit::FailureKind::ConnectionClosed,
            Kind::HttpStatus(status) => wit::FailureKind::HttpStatus(status),
            Kind::SessionExpired => wit::FailureKind::SessionExpired,
            Kind::JsonRpc { code } => wit::FailureKind::JsonRpc(code),
            Kind::ProcessExited { code, signal } => {
                wit::FailureKind::ProcessExited(wit::ExitInfo { code, signal })
            }
            Kind::Protocol => wit::FailureKind::Protocol,
            Kind::Other => wit::FailureKind::Other,
        },
        message: failure.message.clone(),
        attempt: failure.attempt,
        may_have_reached_server: failure.may_have_reached_server,
        idempotent: failure.idempotent,
        read_only: failure.read_only,
    }
}

pub(crate) fn probe_outcome(probe: &policy::ProbeOutcome) -> wit::ProbeOutcome {
    wit::ProbeOutcome {
        succeeded: probe.succeeded,
        latency_ms: probe.latency_ms,
        consecutive_failures: probe.consecutive_failures,
        consecutive_successes: probe.consecutive_successes,
    }
}

pub(crate) fn crash_report(crash: &policy::CrashReport) -> wit::CrashReport {
    wit::CrashReport {
        exit: exit_info(&crash.exit),
        uptime_ms: crash.uptime_ms,
        now_ms: crash.now_ms,
        recent_crashes_ms: crash.recent_crashes_ms.clone(),
    }
}

/// A delay the host accepts, or why not.
fn delay(what: &str, delay_ms: u64) -> Result<u64, String> {
    if delay_ms > MAX_DELAY_MS {
        Err(format!(
            "{what} of {delay_ms} ms is longer than the {MAX_DELAY_MS} ms (one day) the host accepts"
        ))
    } else {
        Ok(delay_ms)
    }
}

pub(crate) fn retry_verdict(verdict: wit::RetryVerdict) -> Result<policy::RetryVerdict, String> {
    Ok(match verdict {
        wit::RetryVerdict::RetryAfter(delay_ms) => policy::RetryVerdict::RetryAfter {
            delay_ms: delay("retry-after", delay_ms)?,
        },
        wit::RetryVerdict::GiveUp(status) => policy::RetryVerdict::GiveUp {
            status: match status {
                wit::FailureStatus::Offline => policy::FailureStatus::Offline,
                wit::FailureStatus::Error => policy::FailureStatus::Error,
                wit::FailureStatus::RequiresReauth => policy::FailureStatus::RequiresReauth,
            },
        },
    })
}

pub(crate) fn reconnect_verdict(
    verdict: wit::ReconnectVerdict,
) -> Result<policy::ReconnectVerdict, String> {
    Ok(match verdict {
        wit::ReconnectVerdict::RetryAfter(delay_ms) => policy::ReconnectVerdict::RetryAfter {
            delay_ms: delay("retry-after", delay_ms)?,
        },
        wit::ReconnectVerdict::Stop => policy::ReconnectVerdict::Stop,
    })
}

pub(crate) fn health_verdict(verdict: wit::HealthVerdict) -> Result<policy::HealthVerdict, String> {
    Ok(match verdict {
        wit::HealthVerdict::Healthy => policy::HealthVerdict::Healthy,
        wit::HealthVerdict::Degraded => policy::HealthVerdict::Degraded,
        wit::HealthVerdict::Unhealthy => policy::HealthVerdict::Unhealthy,
    })
}

pub(crate) fn probe_plan(plan: wit::ProbePlan) -> Result<policy::ProbeSchedule, String> {
    // A zero interval would probe in a busy loop; a zero timeout would fail every probe.
    if plan.interval_ms == 0 || plan.timeout_ms == 0 {
        return Err(format!(
            "probe plan with interval {} ms and timeout {} ms: both must be at least 1 ms",
            plan.interval_ms, plan.timeout_ms
        ));
    }
    Ok(policy::ProbeSchedule {
        interval_ms: delay("probe interval", plan.interval_ms)?,
        timeout_ms: delay("probe timeout", plan.timeout_ms)?,
    })
}

pub(crate) fn crash_verdict(verdict: wit::CrashVerdict) -> Result<policy::CrashVerdict, String> {
    Ok(match verdict {
        wit::CrashVerdict::RestartAfter(delay_ms) => policy::CrashVerdict::RestartAfter {
            delay_ms: delay("restart-after", delay_ms)?,
        },
        wit::CrashVerdict::GiveUp => policy::CrashVerdict::GiveUp,
    })
}

/// A description fit to show operators: short, single-line fields.
pub(crate) fn description(description: wit::Description) -> Result<policy::Description, String> {
    let field = |name: &str, value: &str, min: usize, max: usize| -> Result<(), String> {
        let length = value.chars().count();
        if length < min || length > max {
            return Err(format!(
                "{name} has {length} characters; {min} to {max} are allowed"
            ));
        }
        if value.chars().any(char::is_control) {
            return Err(format!("{name} contains control characters"));
        }
        Ok(())
    };
    field("name", &description.name, 1, 64)?;
    field("version", &description.version, 1, 64)?;
    field("intent", &description.intent, 0, 256)?;
    Ok(policy::Description {
        name: description.name,
        version: description.version,
        intent: description.intent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn description_of(name: &str, version: &str, intent: &str) -> wit::Description {
        wit::Description {
            name: name.into(),
            version: version.into(),
            intent: intent.into(),
        }
    }

    #[test]
    fn delays_up_to_one_day_are_accepted_and_longer_ones_rejected() {
        assert!(retry_verdict(wit::RetryVerdict::RetryAfter(MAX_DELAY_MS)).is_ok());
        assert!(retry_verdict(wit::RetryVerdict::RetryAfter(MAX_DELAY_MS + 1)).is_err());
        assert!(reconnect_verdict(wit::ReconnectVerdict::RetryAfter(u64::MAX)).is_err());
        assert!(crash_verdict(wit::CrashVerdict::RestartAfter(0)).is_ok());
    }

    #[test]
    fn a_probe_plan_needs_a_positive_interval_and_timeout() {
        let plan = |interval_ms, timeout_ms| wit::ProbePlan {
            interval_ms,
            timeout_ms,
        };
        assert!(probe_plan(plan(1, 1)).is_ok());
        assert!(probe_plan(plan(0, 1)).is_err());
        assert!(probe_plan(plan(1, 0)).is_err());
        assert!(probe_plan(plan(1, MAX_DELAY_MS + 1)).is_err());
    }

    #[test]
    fn a_description_must_be_short_single_line_text() {
        assert!(description(description_of("default", "0.1.0", "")).is_ok());
        assert!(description(description_of("", "0.1.0", "x")).is_err());
        assert!(description(description_of("a\nb", "0.1.0", "x")).is_err());
        assert!(description(description_of("d", &"9".repeat(65), "x")).is_err());
        assert!(description(description_of("d", "1", &"i".repeat(257))).is_err());
    }

    #[test]
    fn a_servers_own_parameters_override_the_policy_wide_ones() {
        let mut server = policy::ServerContext::new("s", policy::TransportKind::Sse);
        server.params.insert("max_crashes".into(), "9".into());
        let module_params = BTreeMap::from([
            ("max_crashes".to_string(), "4".to_string()),
            ("max_attempts".to_string(), "2".to_string()),
        ]);
        let context = server_context(&server, &module_params);
        assert_eq!(
            context.params,
            [
                ("max_attempts".to_string(), "2".to_string()),
                ("max_crashes".to_string(), "9".to_string())
            ]
        );
        assert!(matches!(context.transport, wit::TransportKind::Sse));
    }
}
