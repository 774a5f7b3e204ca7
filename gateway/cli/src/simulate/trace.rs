//! `--trace FILE.json`: a user's own world to replay, in the JSON format of [`TRACE_HELP`].

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use wardgate_policy::{ExitInfo, FailureKind, TransportKind};

use super::{CallHints, Happening, Script, WorldEvent};

/// The trace format, as `wardgate policy simulate --help` prints it.
///
/// A trace is the world the policy faces, not the decisions: the simulator turns each
/// event into the calls of `RecoveryPolicy` the engine would make, at the simulated time.
pub const TRACE_HELP: &str = "\
TRACE FORMAT (--trace FILE.json)
  A JSON array of events, or {\"transport\": \"stdio\" | \"streamable-http\" | \"sse\",
  \"end_ms\": N, \"events\": [...]}. Every event has \"at_ms\" (milliseconds from the start)
  and \"event\", one of these (with its optional fields):

    up                      the server answers normally again (ends down, slow, auth, crash_loop)
    down      kind          connects, calls and probes fail with `kind`
    slow                    connects succeed; calls and probes time out
    auth      status        connects and calls get HTTP 401 (the default) or 403
    crash     signal|code   the process dies now (default signal 9; over HTTP the connection closes)
    crash_loop  every_ms, signal|code
                            from now on every start dies `every_ms` after it
    call      idempotent, read_only
                            a tool call arrives (both hints default to false)
    call_failed  kind, reached, idempotent, read_only
                            a tool call arrives and its first attempt fails with `kind`
    operator_reconnect      an operator runs `wardgate reconnect`
    end                     stop here (default: 5 minutes after the last event)

  Kinds: connect_refused, timed_out, dns, connection_reset, connection_closed, session_expired,
  protocol, other, http_status (with \"status\"), json_rpc (with \"code\"), process_exited (with
  \"code\" or \"signal\"). \"reached\" (the request may have reached the server) defaults to
  false for connect_refused and dns, true otherwise. The server starts healthy and connects at
  0; events run in at_ms order, ties in file order. The transport defaults to stdio when the
  trace has crash events, else streamable-http.

  Example: [{\"at_ms\": 0, \"event\": \"call_failed\", \"kind\": \"connect_refused\"},
            {\"at_ms\": 1500, \"event\": \"crash\", \"signal\": 9},
            {\"at_ms\": 60000, \"event\": \"end\"}]";

/// A trace file that cannot be replayed; the message names the file, the event and the fix.
#[derive(Debug)]
pub struct TraceError {
    pub path: PathBuf,
    pub message: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "trace file {}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for TraceError {}

const MAX_BYTES: u64 = 16 << 20;
const MAX_EVENTS: usize = 100_000;
/// Thirty days: far beyond any scenario, small enough that no sum overflows.
const MAX_TIME_MS: u64 = 30 * 24 * 3_600_000;
const DEFAULT_TAIL_MS: u64 = 5 * 60_000;

/// Reads and validates the trace at `path`.
pub fn load_trace(path: &Path) -> Result<Script, TraceError> {
    let error = |message: String| TraceError {
        path: path.to_path_buf(),
        message,
    };
    let size = std::fs::metadata(path)
        .map_err(|source| {
            error(format!(
                "cannot read it ({source}); pass an existing JSON file"
            ))
        })?
        .len();
    if size > MAX_BYTES {
        return Err(error(format!(
            "{size} bytes is over the 16 MiB limit; split the trace"
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|source| error(format!("cannot read it ({source}); pass a UTF-8 JSON file")))?;
    let json: Value =
        serde_json::from_str(&text).map_err(|source| error(format!("not valid JSON: {source}")))?;
    let name = path.file_name().map_or_else(
        || "trace".into(),
        |name| name.to_string_lossy().into_owned(),
    );
    parse(&json, name).map_err(error)
}

fn parse(json: &Value, name: String) -> Result<Script, String> {
    let (header, events) = match json {
        Value::Array(events) => (None, events),
        Value::Object(object) => {
            only(object, "the top level", &["transport", "end_ms", "events"])?;
            let Some(Value::Array(events)) = object.get("events") else {
                return Err("the top-level object needs \"events\": [...]".into());
            };
            (Some(object), events)
        }
        _ => return Err("expected a JSON array of events, or an object with \"events\"".into()),
    };
    if events.len() > MAX_EVENTS {
        return Err(format!(
            "{} events is over the limit of {MAX_EVENTS}",
            events.len()
        ));
    }
    let mut happenings = Vec::new();
    let mut end_event = None;
    for (index, event) in events.iter().enumerate() {
        let place = format!("events[{index}]");
        let Value::Object(object) = event else {
            return Err(format!(
                "{place} is not an object; write {{\"at_ms\": 0, \"event\": \"up\"}}"
            ));
        };
        let at_ms =
            number(object, &place, "at_ms")?.ok_or_else(|| format!("{place} has no \"at_ms\""))?;
        if at_ms > MAX_TIME_MS {
            return Err(format!("{place}: at_ms {at_ms} is past the 30-day limit"));
        }
        match parse_event(object, &place)? {
            Some(event) => happenings.push(Happening { at_ms, event }),
            None if end_event.is_some() => {
                return Err(format!("{place}: a second \"end\"; keep one"))
            }
            None => end_event = Some(at_ms),
        }
    }
    // A stable sort: events at the same time keep their order in the file.
    happenings.sort_by_key(|happening| happening.at_ms);
    let last_ms = happenings.last().map_or(0, |happening| happening.at_ms);
    let end_field = match header {
        Some(object) => number(object, "the top level", "end_ms")?,
        None => None,
    };
    let end_ms = match (end_field, end_event) {
        (Some(_), Some(_)) => {
            return Err("both \"end_ms\" and an \"end\" event; give the end once".into())
        }
        (Some(end_ms), None) | (None, Some(end_ms)) => end_ms,
        (None, None) => last_ms + DEFAULT_TAIL_MS,
    };
    if end_ms > MAX_TIME_MS {
        return Err(format!("the end ({end_ms} ms) is past the 30-day limit"));
    }
    if end_ms < last_ms {
        return Err(format!(
            "the end ({end_ms} ms) comes before the last event ({last_ms} ms); move the end later"
        ));
    }
    let crashes = happenings.iter().any(|happening| {
        matches!(
            happening.event,
            WorldEvent::Crash { .. } | WorldEvent::CrashLoop { .. }
        )
    });
    let transport = match header.and_then(|object| object.get("transport")) {
        None if crashes => TransportKind::Stdio,
        None => TransportKind::StreamableHttp,
        Some(Value::String(name)) => match name.as_str() {
            "stdio" => TransportKind::Stdio,
            "streamable-http" => TransportKind::StreamableHttp,
            "sse" => TransportKind::Sse,
            other => {
                return Err(format!(
                    "unknown transport \"{other}\"; use stdio, streamable-http or sse"
                ))
            }
        },
        Some(_) => {
            return Err("\"transport\" must be a string: stdio, streamable-http or sse".into())
        }
    };
    let summary = format!("{} events replayed from the trace", happenings.len());
    Ok(Script {
        name,
        summary,
        transport,
        events: happenings,
        end_ms,
    })
}

/// One event; `None` for `end`.
fn parse_event(object: &Map<String, Value>, place: &str) -> Result<Option<WorldEvent>, String> {
    let name = match object.get("event") {
        Some(Value::String(name)) => name.as_str(),
        _ => {
            return Err(format!(
                "{place} needs \"event\": a string such as \"down\" or \"crash\""
            ))
        }
    };
    let place = format!("{place} (\"{name}\")");
    let place = place.as_str();
    const KIND_FIELDS: [&str; 5] = ["at_ms", "event", "kind", "status", "code"];
    let event = match name {
        "up" | "slow" | "operator_reconnect" | "end" => {
            only(object, place, &["at_ms", "event"])?;
            match name {
                "up" => WorldEvent::Up,
                "slow" => WorldEvent::Slow,
                "operator_reconnect" => WorldEvent::OperatorReconnect,
                _ => return Ok(None),
            }
        }
        "down" => {
            only(object, place, &[&KIND_FIELDS[..], &["signal"]].concat())?;
            WorldEvent::Down { kind: kind(object, place)? }
        }
        "auth" => {
            only(object, place, &["at_ms", "event", "status"])?;
            match number(object, place, "status")?.unwrap_or(401) {
                status @ (401 | 403) => WorldEvent::AuthRejected { status: status as u16 },
                other => return Err(format!("{place}: status {other} is not an auth failure; use 401 or 403, or a \"down\" event with \"kind\": \"http_status\""))
            }
        }
        "crash" => {
            only(object, place, &["at_ms", "event", "code", "signal"])?;
            WorldEvent::Crash { exit: exit(object, place)? }
        }
        "crash_loop" => {
            only(object, place, &["at_ms", "event", "every_ms", "code", "signal"])?;
            let every_ms = number(object, place, "every_ms")?.filter(|&every| (1..=MAX_TIME_MS).contains(&every));
            let every_ms = every_ms.ok_or_else(|| format!("{place} needs \"every_ms\": the uptime of each start in ms, at least 1"))?;
            WorldEvent::CrashLoop { every_ms, exit: exit(object, place)? }
        }
        "call" | "call_failed" => {
            let hints = CallHints {
                idempotent: flag(object, place, "idempotent")?.unwrap_or(false),
                read_only: flag(object, place, "read_only")?.unwrap_or(false),
            };
            let fails_with = if name == "call" {
                only(object, place, &["at_ms", "event", "idempotent", "read_only"])?;
                None
            } else {
                only(object, place, &[&KIND_FIELDS[..], &["signal", "reached", "idempotent", "read_only"]].concat())?;
                let kind = kind(object, place)?;
                let default_reached = !matches!(kind, FailureKind::ConnectRefused | FailureKind::Dns);
                Some((kind, flag(object, place, "reached")?.unwrap_or(default_reached)))
            };
            WorldEvent::Call { hints, fails_with }
        }
        other => return Err(format!(
            "{place}: unknown event \"{other}\"; use up, down, slow, auth, crash, crash_loop, call, call_failed, operator_reconnect or end"
        )),
    };
    Ok(Some(event))
}

fn kind(object: &Map<String, Value>, place: &str) -> Result<FailureKind, String> {
    let Some(Value::String(name)) = object.get("kind") else {
        return Err(format!(
            "{place} needs \"kind\", such as \"connect_refused\""
        ));
    };
    let needs = |field: &str| format!("{place}: kind \"{name}\" needs \"{field}\"");
    Ok(match name.as_str() {
        "connect_refused" => FailureKind::ConnectRefused,
        "timed_out" => FailureKind::TimedOut,
        "dns" => FailureKind::Dns,
        "connection_reset" => FailureKind::ConnectionReset,
        "connection_closed" => FailureKind::ConnectionClosed,
        "session_expired" => FailureKind::SessionExpired,
        "protocol" => FailureKind::Protocol,
        "other" => FailureKind::Other,
        "http_status" => match number(object, place, "status")? {
            Some(status @ 100..=599) => FailureKind::HttpStatus(status as u16),
            Some(status) => return Err(format!("{place}: status {status} is not an HTTP status (100-599)")),
            None => return Err(needs("status")),
        },
        "json_rpc" => match object.get("code").and_then(Value::as_i64).and_then(|code| i32::try_from(code).ok()) {
            Some(code) => FailureKind::JsonRpc { code },
            None => return Err(needs("code")),
        },
        "process_exited" => {
            let exit = exit(object, place)?;
            FailureKind::ProcessExited {
                code: exit.code,
                signal: exit.signal,
            }
        }
        other => return Err(format!(
            "{place}: unknown kind \"{other}\"; use connect_refused, timed_out, dns, connection_reset, connection_closed, session_expired, protocol, other, http_status, json_rpc or process_exited"
        )),
    })
}

/// `"signal": 9` or `"code": 1`; a bare crash is a SIGKILL.
fn exit(object: &Map<String, Value>, place: &str) -> Result<ExitInfo, String> {
    let small = |field: &str| -> Result<Option<i32>, String> {
        match object.get(field) {
            None => Ok(None),
            Some(value) => value
                .as_i64()
                .and_then(|number| i32::try_from(number).ok())
                .map(Some)
                .ok_or_else(|| format!("{place}: \"{field}\" must be an integer")),
        }
    };
    match (small("code")?, small("signal")?) {
        (None, None) => Ok(ExitInfo {
            code: None,
            signal: Some(9),
        }),
        (code, signal) => Ok(ExitInfo { code, signal }),
    }
}

fn number(object: &Map<String, Value>, place: &str, field: &str) -> Result<Option<u64>, String> {
    match object.get(field) {
        None => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or_else(|| {
            format!("{place}: \"{field}\" must be a non-negative integer, not {value}")
        }),
    }
}

fn flag(object: &Map<String, Value>, place: &str, field: &str) -> Result<Option<bool>, String> {
    match object.get(field) {
        None => Ok(None),
        Some(Value::Bool(value)) => Ok(Some(*value)),
        Some(value) => Err(format!(
            "{place}: \"{field}\" must be true or false, not {value}"
        )),
    }
}

/// Refuses unknown fields: a typo such as "sigal" must not silently change the trace.
fn only(object: &Map<String, Value>, place: &str, allowed: &[&str]) -> Result<(), String> {
    match object.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(format!(
            "{place}: unknown field \"{key}\"; expected {}",
            allowed.join(", ")
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> Result<Script, String> {
        parse(&serde_json::from_str(text).unwrap(), "t.json".into())
    }

    #[test]
    fn the_documented_example_parses() {
        let script = parse_text(
            r#"[{"at_ms":0,"event":"call_failed","kind":"connect_refused"},{"at_ms":1500,"event":"crash","signal":9}]"#,
        )
        .unwrap();
        assert_eq!(script.transport, TransportKind::Stdio);
        assert_eq!(script.end_ms, 1500 + DEFAULT_TAIL_MS);
        assert_eq!(
            script.events[0].event,
            WorldEvent::Call {
                hints: CallHints::default(),
                fails_with: Some((FailureKind::ConnectRefused, false))
            }
        );
    }

    #[test]
    fn mistakes_name_the_event_and_the_fix() {
        let typo = parse_text(r#"[{"at_ms":0,"event":"crash","sigal":9}]"#).unwrap_err();
        assert!(
            typo.contains("events[0]") && typo.contains("sigal") && typo.contains("signal"),
            "{typo}"
        );
        let unknown = parse_text(r#"[{"at_ms":0,"event":"explode"}]"#).unwrap_err();
        assert!(
            unknown.contains("explode") && unknown.contains("crash_loop"),
            "{unknown}"
        );
        let negative = parse_text(r#"[{"at_ms":-1,"event":"up"}]"#).unwrap_err();
        assert!(negative.contains("at_ms"), "{negative}");
    }
}
