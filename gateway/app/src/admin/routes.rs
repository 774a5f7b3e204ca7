//! Routing: one match over (method, path) to the handler of each endpoint.

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use tokio_util::sync::CancellationToken;

use super::auth::Access;
use super::reply::{self, Response};
use super::{commands, metrics, page, servers, Admin};
use wardgate_engine::commands::Command;

const ENDPOINTS: &str = "GET / (the status page), /gateway, /servers, /servers/NAME, /events, /decisions (?format=jsonl to export), /decisions/stream, /live, /policies, /policies/NAME/shadow, /commands, /commands/ID, /metrics, /healthz, /readyz; POST /commands, /servers/NAME/{reconnect,restart,enable,disable,health-check}, /policies/reload, /policies/NAME/{promote-shadow,rollback}";

pub async fn handle(
    admin: &Admin,
    request: Request<Incoming>,
    access: Access,
    stop: CancellationToken,
) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().trim_end_matches('/').to_owned();
    let query = request.uri().query().unwrap_or("").to_owned();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let get = method == Method::GET || method == Method::HEAD;
    let post = method == Method::POST;
    if get {
        if let Some(asset) = page::asset(&path) {
            return page::serve(asset, request.headers());
        }
    }
    match segments.as_slice() {
        ["gateway"] if get => page::gateway(admin),
        ["decisions"] if get => decisions(admin, &query),
        ["decisions", "stream"] if get => reply::stream(
            "text/event-stream",
            admin.policies.decisions().feed().stream(
                after(&request, &query),
                query_value(&query, "follow") != Some("false"),
                stop,
            ),
        ),
        ["live"] if get => live(admin, &query, stop),
        ["healthz"] if get => reply::ok(&serde_json::json!({ "status": "alive" })),
        ["readyz"] if get => readyz(admin, access),
        ["servers"] if get => servers::list(admin),
        ["servers", name] if get => servers::detail(admin, name),
        ["servers", name, action] if post => servers::act(admin, name, action).await,
        ["events"] if get => events(admin, &request, &query, stop),
        ["policies"] if get => reply::ok(&serde_json::json!({ "policies": admin.policies.list() })),
        ["policies", "reload"] if post => commands::reload_policies(admin).await,
        ["policies", name, "shadow"] if get => match admin.policies.shadow_report(name) {
            Ok(report) => reply::ok(&report),
            Err(why) => reply::not_found(&why),
        },
        ["policies", name, "promote-shadow"] if post => {
            let policy = (*name).to_owned();
            commands::run_now(admin, Command::PromoteShadow { policy }).await
        }
        ["policies", name, "rollback"] if post => {
            let policy = (*name).to_owned();
            commands::run_now(admin, Command::RollbackPolicy { policy }).await
        }
        ["metrics"] if get => metrics::render(admin),
        ["commands"] if get => commands::list(admin),
        ["commands"] if post => commands::submit(admin, request, &query).await,
        ["commands", id] if get => commands::get(admin, id),
        ["healthz" | "readyz" | "servers" | "events" | "policies" | "metrics" | "gateway"
        | "decisions"]
        | ["servers", _]
        | ["decisions", "stream"]
        | ["commands", _] => reply::method_not_allowed(&method, &path, "GET"),
        ["policies", _, "shadow"] => reply::method_not_allowed(&method, &path, "GET"),
        ["servers", _, _]
        | ["policies", "reload"]
        | ["policies", _, "promote-shadow" | "rollback"] => {
            reply::method_not_allowed(&method, &path, "POST")
        }
        ["commands"] => reply::method_not_allowed(&method, &path, "GET, POST"),
        _ => reply::not_found(&format!(
            "no admin endpoint at {path}; the endpoints are {ENDPOINTS}"
        )),
    }
}

/// 200 when the config is loaded (it is, or the gateway would not serve) and every
/// configured policy module is loaded; 503 with the reasons otherwise.
/// Ready once every policy module has loaded; the reasons (policy names and load errors)
/// only for the operator, not for an anonymous probe.
fn readyz(admin: &Admin, access: Access) -> Response {
    let reasons = admin.policies.not_ready();
    if reasons.is_empty() {
        reply::ok(&serde_json::json!({ "ready": true }))
    } else if access == Access::Operator {
        reply::json(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({ "ready": false, "reasons": reasons }),
        )
    } else {
        reply::json(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({ "ready": false }),
        )
    }
}

/// `GET /events[?follow=false]`: Server-Sent Events, replaying the kept events after
/// `Last-Event-ID` (or `?after=N`) first.
fn events(
    admin: &Admin,
    request: &Request<Incoming>,
    query: &str,
    stop: CancellationToken,
) -> Response {
    let follow = query_value(query, "follow") != Some("false");
    reply::stream(
        "text/event-stream",
        admin.events.stream(after(request, query), follow, stop),
    )
}

/// Where a stream resumes: after `Last-Event-ID`, else `?after=N`, else from the start.
fn after(request: &Request<Incoming>, query: &str) -> u64 {
    request
        .headers()
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse().ok())
        .or_else(|| query_value(query, "after").and_then(|value| value.parse().ok()))
        .unwrap_or(0)
}

/// `GET /live?events_after=N&decisions_after=M`: `/events` and `/decisions/stream` as one
/// stream (what the status page follows: one connection per tab, not two).
fn live(admin: &Admin, query: &str, stop: CancellationToken) -> Response {
    let after = |key| {
        query_value(query, key)
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    };
    let events = admin
        .events
        .stream(after("events_after"), true, stop.clone());
    let decisions =
        admin
            .policies
            .decisions()
            .feed()
            .stream(after("decisions_after"), true, stop.clone());
    let shadows = admin
        .policies
        .shadows()
        .seen()
        .stream(after("shadows_after"), true, stop);
    let merged = crate::feed::merge(crate::feed::merge(events, decisions), shadows);
    reply::stream("text/event-stream", merged)
}

/// `GET /decisions[?after=N][&server=NAME][&format=jsonl]`: the kept decisions, oldest
/// first, with the shadow verdicts given on them; as JSON lines (one decision a line, what
/// `policy simulate --replay` reads), with `format=jsonl`.
fn decisions(admin: &Admin, query: &str) -> Response {
    let after = query_value(query, "after")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    let server = query_value(query, "server");
    let decisions: Vec<_> = admin
        .policies
        .decisions()
        .feed()
        .since(after)
        .into_iter()
        .filter(|decision| server.is_none_or(|server| decision.item.server == server))
        .collect();
    match query_value(query, "format") {
        None | Some("json") => {}
        Some("jsonl") => {
            let mut lines = String::new();
            for decision in &decisions {
                lines.push_str(&serde_json::to_string(decision).unwrap_or_default());
                lines.push('\n');
            }
            return reply::text(StatusCode::OK, "application/jsonl; charset=utf-8", lines);
        }
        Some(other) => {
            return reply::error(
                StatusCode::BAD_REQUEST,
                &format!("format {other:?} is not one /decisions gives; use format=json (the default) or format=jsonl"),
            )
        }
    }
    // The verdicts on the decisions given, and on any later ones (a shadow answers after
    // the decision it was asked about is recorded).
    let shadows: Vec<_> = admin
        .policies
        .shadows()
        .seen()
        .since(0)
        .into_iter()
        .filter(|seen| seen.item.decision > after)
        .filter(|seen| server.is_none_or(|server| seen.item.server == server))
        .collect();
    reply::ok(&serde_json::json!({ "decisions": decisions, "shadows": shadows }))
}

/// The value of `key` in a query string (no percent-decoding: the API's values are plain).
pub fn query_value<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .find(|(name, _)| *name == key)
        .map(|(_, value)| value)
}
