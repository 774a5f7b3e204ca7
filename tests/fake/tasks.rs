//! `--tasks`: the tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) on a
//! 2026-07-28 fake, with the fixtures the conformance suite's `tasks-*` scenarios call
//! (0.2.0-alpha.12, as their descriptions name them), run by rmcp's `TaskManager`.
//!
//! A call creates a task only for a request that declares the extension (in its `_meta`
//! client capabilities); a task-supporting tool otherwise runs synchronously, and one that
//! requires a task is refused with -32021.

use std::time::Duration;

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock,
        CreateTaskResult, ElicitRequest, ElicitRequestParams, ElicitationSchema, InputRequest,
        InputRequiredResult, Tool,
    },
    service::RequestContext,
    task_manager::{TaskContext, TaskExit, TaskFuture, TaskManager, TaskOptions},
    ErrorData as McpError, RoleServer,
};
use serde_json::json;

use crate::arguments::Arguments;

/// How long a task is kept after it is created.
const TTL_MS: u64 = 600_000;
/// The poll interval a task suggests.
const POLL_INTERVAL_MS: u64 = 200;

/// The tools `--tasks` adds.
pub fn tools() -> Vec<Tool> {
    let object = |properties: serde_json::Value| {
        let mut schema = rmcp::model::JsonObject::new();
        schema.insert("type".into(), json!("object"));
        schema.insert("properties".into(), properties);
        std::sync::Arc::new(schema)
    };
    vec![
        Tool::new(
            "greet",
            "Sync only: answers `Hello, {name}!`.",
            object(json!({"name": {"type": "string"}})),
        ),
        Tool::new(
            "slow_compute",
            "Task-supporting: sleeps `seconds` (default 1), then answers with `label`; \
             a task cancelled meanwhile settles as cancelled.",
            object(
                json!({"seconds": {"type": "integer", "minimum": 0}, "label": {"type": "string"}}),
            ),
        ),
        Tool::new(
            "failing_job",
            "Requires a task: after about a second, a tool error (isError).",
            object(json!({})),
        ),
        Tool::new(
            "protocol_error_job",
            "Task-supporting: after half a second, a protocol error (the task fails).",
            object(json!({})),
        ),
        Tool::new(
            "confirm_delete",
            "Task-supporting: asks the client to confirm (one elicitation), then answers.",
            object(json!({"target": {"type": "string"}})),
        ),
        Tool::new(
            "multi_input",
            "Task-supporting: asks two questions at once, then answers with both.",
            object(json!({})),
        ),
        Tool::new(
            "test_tool_with_task",
            "Requires a task: asks for `user_name` (InputRequiredResult), then creates a task \
             whose result greets that name.",
            object(json!({})),
        ),
    ]
}

/// Whether `name` is one of the tools `--tasks` adds.
pub fn is_task_tool(name: &str) -> bool {
    tools().iter().any(|tool| tool.name == name)
}

/// Whether this request declared the tasks extension.
fn declared(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|capabilities| capabilities.supports_tasks())
}

fn tasks_required() -> McpError {
    McpError::missing_required_client_capability(
        ClientCapabilities::builder().enable_tasks().build(),
    )
}

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// A call of one of [`tools`].
pub async fn call(
    manager: &TaskManager,
    request: CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, McpError> {
    let arguments = Arguments::new(&request.name, request.arguments.as_ref());
    let as_task = declared(context);
    let spawn = |work: Box<dyn FnOnce(TaskContext) -> TaskFuture>| {
        let options = TaskOptions::new()
            .with_ttl_ms(TTL_MS)
            .with_poll_interval_ms(POLL_INTERVAL_MS);
        CallToolResponse::Task(CreateTaskResult::new(manager.spawn(options, work)))
    };
    match request.name.as_ref() {
        "greet" => {
            let name = arguments.optional_str("name")?.unwrap_or("World");
            Ok(CallToolResponse::Complete(text(format!("Hello, {name}!"))))
        }
        "slow_compute" => {
            let seconds = arguments.optional_u64("seconds")?.unwrap_or(1);
            let label = arguments.optional_str("label")?.unwrap_or("").to_owned();
            let done = move || text(format!("computed {label} after {seconds} s"));
            if !as_task {
                tokio::time::sleep(Duration::from_secs(seconds)).await;
                return Ok(CallToolResponse::Complete(done()));
            }
            Ok(spawn(Box::new(move |task| {
                Box::pin(async move {
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(seconds)) => Ok(done()),
                        () = task.cancelled() => Err(TaskExit::Cancelled),
                    }
                })
            })))
        }
        "failing_job" => {
            if !as_task {
                return Err(tasks_required());
            }
            Ok(spawn(Box::new(|_| {
                Box::pin(async {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok(CallToolResult::error(vec![ContentBlock::text(
                        "the job failed, as failing_job always does",
                    )]))
                })
            })))
        }
        "protocol_error_job" => {
            let failure =
                || McpError::internal_error("protocol_error_job broke, as it always does", None);
            if !as_task {
                return Err(failure());
            }
            Ok(spawn(Box::new(move |_| {
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Err(TaskExit::Error(failure()))
                })
            })))
        }
        "confirm_delete" | "multi_input" if !as_task => Err(tasks_required()),
        "confirm_delete" => {
            let target = arguments
                .optional_str("target")?
                .unwrap_or("the thing")
                .to_owned();
            let question = elicitation(&format!("Delete {target}?"))?;
            Ok(spawn(Box::new(move |task| {
                Box::pin(async move {
                    let answer = task.request_input("confirm", question).await?;
                    Ok(text(format!("delete of {target} answered: {answer}")))
                })
            })))
        }
        "multi_input" => {
            let first = elicitation("First question?")?;
            let second = elicitation("Second question?")?;
            Ok(spawn(Box::new(move |task| {
                Box::pin(async move {
                    let (first, second) = tokio::join!(
                        task.request_input("first", first),
                        task.request_input("second", second)
                    );
                    Ok(text(format!("answered: {} and {}", first?, second?)))
                })
            })))
        }
        "test_tool_with_task" => {
            if !as_task {
                return Err(tasks_required());
            }
            let Some(answer) = request
                .input_responses
                .as_ref()
                .and_then(|responses| responses.get("user_name"))
                .cloned()
            else {
                let question = [("user_name".to_owned(), elicitation("What is your name?")?)];
                return Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                    Some(question.into_iter().collect()),
                    Some("asked-user-name".to_owned()),
                )));
            };
            let name = answer
                .pointer("/content/name")
                .or_else(|| answer.pointer("/content/user_name"))
                .and_then(|name| name.as_str())
                .map_or_else(|| answer.to_string(), str::to_owned);
            Ok(spawn(Box::new(move |_| {
                Box::pin(async move { Ok(text(format!("Hello, {name}!"))) })
            })))
        }
        other => Err(McpError::invalid_params(
            format!("`{other}` is not a tasks tool"),
            None,
        )),
    }
}

fn elicitation(message: &str) -> Result<InputRequest, McpError> {
    let requested_schema = ElicitationSchema::builder()
        .optional_string("name")
        .build()
        .map_err(|error| McpError::internal_error(error, None))?;
    Ok(InputRequest::Elicitation(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message.to_owned(),
            requested_schema,
        },
    )))
}
