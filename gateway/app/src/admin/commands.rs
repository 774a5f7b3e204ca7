//! The command queue over HTTP: `POST /commands`, `GET /commands[/ID]`, and the shorthands
//! that submit one command at priority high and answer when it is done.

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use wardgate_engine::commands::{Command, CommandRecord, CommandRequest, CommandState, Priority};

use super::reply::{self, Response};
use super::routes::query_value;
use super::Admin;

/// A command body is a few hundred bytes; anything much larger is a mistake.
const MAX_BODY: usize = 64 * 1024;

const EXAMPLE: &str = r#"{"type": "reconnect", "server": "NAME", "priority": "high"}"#;

/// The command behind `POST /servers/NAME/ACTION`.
pub fn for_action(action: &str, server: &str) -> Option<Command> {
    let server = server.to_owned();
    Some(match action {
        "reconnect" => Command::Reconnect { server },
        "restart" => Command::Restart { server },
        "enable" => Command::Enable { server },
        "disable" => Command::Disable { server },
        "health-check" | "health_check" => Command::HealthCheck { server },
        _ => return None,
    })
}

/// Submit at priority high and wait for the outcome: 200 with the record when it completed,
/// 409 with the record (whose `error` says why) when it failed or expired.
pub async fn run_now(admin: &Admin, command: Command) -> Response {
    let submitted = submit_request(
        admin,
        CommandRequest {
            command,
            priority: Priority::High,
            correlation_id: None,
        },
    )
    .await;
    finished(admin, submitted).await
}

pub async fn reload_policies(admin: &Admin) -> Response {
    run_now(admin, Command::ReloadPolicies).await
}

pub async fn submit(admin: &Admin, request: Request<Incoming>, query: &str) -> Response {
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(error) => {
            return reply::error(
                StatusCode::BAD_REQUEST,
                &format!("could not read the request body ({error}); send one JSON command of at most {MAX_BODY} bytes, such as {EXAMPLE}"),
            )
        }
    };
    let command: CommandRequest = match serde_json::from_slice(&body) {
        Ok(command) => command,
        Err(error) => {
            return reply::error(
                StatusCode::BAD_REQUEST,
                &format!("the body is not a command ({error}); send JSON such as {EXAMPLE}; types: configure, spawn, kill, restart, reconnect, enable, disable, health_check (each with \"server\"), reload_policies, shadow_policy (with \"policy\", and \"path\" to bind or none to unbind), promote_shadow, rollback_policy (each with \"policy\"); priorities: immediate, high, normal, low"),
            )
        }
    };
    let submitted = submit_request(admin, command).await;
    if matches!(query_value(query, "wait"), Some("true" | "1" | "")) {
        finished(admin, submitted).await
    } else {
        reply::json(StatusCode::ACCEPTED, &submitted.answer(&submitted.record))
    }
}

/// A submitted command, and in a fleet where it went.
struct Submitted {
    record: CommandRecord,
    /// `{"command": ROW, "member": NAME}` when it went through the fleet's table;
    /// `{"queue": "local", "why": …}` when the database could not take it; `None` outside
    /// a fleet.
    fleet: Option<serde_json::Value>,
}

impl Submitted {
    /// The answer for `record` (this command, now or later): the record, and in a fleet its
    /// route as `fleet`.
    fn answer(&self, record: &CommandRecord) -> serde_json::Value {
        let mut answer = serde_json::to_value(record).unwrap_or_default();
        if let (Some(fleet), Some(object)) = (&self.fleet, answer.as_object_mut()) {
            object.insert("fleet".to_owned(), fleet.clone());
        }
        answer
    }
}

/// Submit as every operator interface does (`CommandQueue::submit_operator`): in a fleet,
/// through the fleet's command table (the command still runs here, on the local queue);
/// else, or while the database is away, to the local queue.
async fn submit_request(admin: &Admin, request: CommandRequest) -> Submitted {
    let routed = admin.queue.submit_operator(request).await;
    Submitted {
        record: routed.record,
        fleet: routed.via,
    }
}

pub fn list(admin: &Admin) -> Response {
    reply::ok(&serde_json::json!({ "commands": admin.queue.list() }))
}

pub fn get(admin: &Admin, id: &str) -> Response {
    match admin.queue.get(id) {
        Some(record) => reply::ok(&record),
        None => unknown_command(id),
    }
}

async fn finished(admin: &Admin, submitted: Submitted) -> Response {
    let Some(record) = admin.queue.wait(&submitted.record.id).await else {
        return unknown_command(&submitted.record.id);
    };
    let status = match record.state {
        CommandState::Completed => StatusCode::OK,
        CommandState::Failed | CommandState::Expired => StatusCode::CONFLICT,
        // Still under way: the gateway is shutting down.
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    reply::json(status, &submitted.answer(&record))
}

fn unknown_command(id: &str) -> Response {
    reply::not_found(&format!(
        "no command with id {id:?}; GET /commands lists the commands the gateway remembers"
    ))
}
