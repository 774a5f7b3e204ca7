//! What each of the fake's tools does when called.

// rmcp deprecates sampling, roots and logging for protocol 2026-07-28; the fake
// speaks up to 2025-11-25, where they are current, and tests need them.
#![allow(deprecated)]

use std::{convert::Infallible, future::Future, time::Duration};

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
        CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
        ElicitationSchema, InputRequest, InputRequiredResult, LoggingLevel,
        LoggingMessageNotificationParam, ProgressNotificationParam,
        ResourceUpdatedNotificationParam, SamplingMessage, SamplingMessageContentBlock,
    },
    service::RequestContext,
    ErrorData as McpError, RoleServer,
};
use serde_json::json;

use crate::{
    arguments::Arguments,
    catalog,
    state::{Deep, Shared, DEEP_RETURNED_MAX},
};

/// `big` refuses more than this, so a typo cannot exhaust memory.
const BIG_MAX_BYTES: usize = 256 * 1024 * 1024;
/// `sample` asks the client for at most this many tokens.
const SAMPLE_MAX_TOKENS: u32 = 256;

/// Runs `work` unless the request is cancelled first; a cancellation is counted and reported.
pub async fn until_cancelled<T>(
    shared: &Shared,
    context: &RequestContext<RoleServer>,
    work: impl Future<Output = T>,
) -> Result<T, McpError> {
    tokio::select! {
        output = work => Ok(output),
        () = context.ct.cancelled() => {
            shared.record_cancelled();
            shared.say("cancelled request");
            // rmcp drops the answer to a cancelled request; this error is never sent.
            Err(McpError::internal_error("request cancelled", None))
        }
    }
}

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn error_text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// Runs one `tools/call` after the scripted faults have let it through.
pub async fn call(
    shared: &Shared,
    request: CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    let name = request.name.as_ref();
    if let Some(fixture) = &shared.fixture_tools {
        return match fixture.iter().any(|tool| tool.name == name) {
            true => Ok(text(format!(
                "{name} called with {}",
                serde_json::Value::Object(request.arguments.clone().unwrap_or_default())
            ))),
            false => Err(McpError::invalid_params(
                format!("unknown tool `{name}`"),
                None,
            )),
        };
    }
    let arguments = Arguments::new(name, request.arguments.as_ref());
    match name {
        "echo" => Ok(text(arguments.required_str("text")?)),
        "add" => add(&arguments),
        "fail" => Ok(error_text(arguments.required_str("message")?)),
        "slow" => slow(shared, &arguments, context).await,
        "cancelled_count" => Ok(text(shared.cancelled_count().to_string())),
        "sample" => sample(shared, arguments.required_str("prompt")?, context).await,
        "elicit" => elicit(shared, arguments.required_str("message")?, context).await,
        "roots" => roots(shared, context).await,
        "pid" => Ok(text(std::process::id().to_string())),
        "lists" => Ok(text(
            serde_json::json!({
                "received": shared.lists_received.load(std::sync::atomic::Ordering::SeqCst),
                "waiting": shared.lists_waiting.load(std::sync::atomic::Ordering::SeqCst),
            })
            .to_string(),
        )),
        "meta" => {
            // What it received in `_meta`, and over HTTP the trace context of the POST.
            let mut seen = serde_json::to_value(&context.meta).unwrap_or_default();
            let header = context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|parts| parts.headers.get("traceparent"))
                .and_then(|value| value.to_str().ok());
            if let (Some(header), Some(seen)) = (header, seen.as_object_mut()) {
                seen.insert("http_traceparent".into(), header.into());
            }
            if let Some(seen) = seen.as_object_mut() {
                seen.insert(
                    "request_id".into(),
                    serde_json::to_value(&context.id).unwrap_or_default(),
                );
            }
            Ok(text(seen.to_string()))
        }
        "add_tool" => add_tool(shared, arguments.required_str("name")?, context).await,
        "log" => log(shared, &arguments, context).await,
        "crash" => {
            let code = arguments.optional_i32("code")?.unwrap_or(3);
            shared.say(format!("crashing with code {code} (tool crash)"));
            std::process::exit(code)
        }
        "hang" => {
            let never = std::future::pending::<Infallible>();
            let Err(cancelled) = until_cancelled(shared, context, never).await;
            Err(cancelled)
        }
        "big" => {
            let bytes = usize::try_from(arguments.required_u64("bytes")?)
                .ok()
                .filter(|bytes| *bytes <= BIG_MAX_BYTES)
                .ok_or_else(|| {
                    arguments.invalid("bytes", &format!("must be at most {BIG_MAX_BYTES}"))
                })?;
            Ok(text("x".repeat(bytes)))
        }
        "touch" => touch(shared, arguments.required_str("uri")?).await,
        "deep" => match shared.deep_answer {
            Some(Deep::Written) => deep(shared, &arguments, context).await,
            Some(Deep::Returned) => deep_returned(&arguments),
            None => Err(McpError::invalid_params(
                format!("unknown tool {name:?}"),
                None,
            )),
        },
        "flaky" => flaky(shared, &arguments),
        _ if catalog::is_echo_like(shared, name) => {
            Ok(text(arguments.optional_str("text")?.unwrap_or(name)))
        }
        _ => Err(McpError::invalid_params(
            format!("unknown tool `{name}`"),
            None,
        )),
    }
}

/// Fails the first `fails` calls with one `key` with JSON-RPC error `code`: what a policy
/// that retries (or not) by error code is tested against.
fn flaky(shared: &Shared, arguments: &Arguments<'_>) -> Result<CallToolResult, McpError> {
    let key = arguments.required_str("key")?;
    let fails = arguments.required_u64("fails")?;
    let code = arguments
        .optional_i32("code")?
        .ok_or_else(|| arguments.invalid("code", "is required (an integer)"))?;
    let call = shared.count_flaky_call(key);
    if call <= fails {
        Err(McpError::new(
            rmcp::model::ErrorCode(code),
            format!("flaky {key}: failure {call} of {fails}"),
            None,
        ))
    } else {
        Ok(text(format!("flaky {key}: ok after {fails} failures")))
    }
}

fn add(arguments: &Arguments<'_>) -> Result<CallToolResult, McpError> {
    let a = arguments.required_number("a")?;
    let b = arguments.required_number("b")?;
    // Integers stay integers ("3", not "3.0"), so tests can compare texts.
    let sum = match (a.as_i64(), b.as_i64()) {
        (Some(a), Some(b)) if a.checked_add(b).is_some() => json!(a + b),
        _ => match a.as_f64().zip(b.as_f64()).map(|(a, b)| a + b) {
            Some(sum) if sum.is_finite() => json!(sum),
            _ => return Err(arguments.invalid("b", "makes a sum that is not a finite number")),
        },
    };
    let mut result = text(sum.to_string());
    result.structured_content = Some(json!({ "sum": sum }));
    Ok(result)
}

async fn slow(
    shared: &Shared,
    arguments: &Arguments<'_>,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    let total = Duration::from_millis(arguments.required_u64("ms")?);
    let steps = arguments.optional_u64("steps")?.unwrap_or(5);
    let progress_token = context.meta.get_progress_token();
    let (Some(token), Ok(steps @ 1..)) = (progress_token, u32::try_from(steps)) else {
        until_cancelled(shared, context, tokio::time::sleep(total)).await?;
        return Ok(text("done"));
    };
    let step = total / steps;
    for done in 1..=steps {
        until_cancelled(shared, context, tokio::time::sleep(step)).await?;
        let progress = ProgressNotificationParam::new(token.clone(), f64::from(done))
            .with_total(f64::from(steps));
        if let Err(error) = context.peer.notify_progress(progress).await {
            shared.say(format!("could not send progress: {error}"));
        }
    }
    Ok(text("done"))
}

async fn sample(
    shared: &Shared,
    prompt: &str,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    let request = CreateMessageRequestParams::new(
        vec![SamplingMessage::user_text(prompt)],
        SAMPLE_MAX_TOKENS,
    );
    match until_cancelled(shared, context, context.peer.create_message(request)).await? {
        Ok(answer) => Ok(text(sampled_text(&answer))),
        Err(error) => Ok(error_text(format!("sampling failed: {error}"))),
    }
}

/// The request state `sample` hands out with its question and expects back.
const SAMPLE_STATE: &str = "sample-round-1";

/// `sample` on a 2026-07-28 server, which may send the client no requests: it answers the
/// call with its question (an `InputRequiredResult`), and the call that comes back with the
/// answer and the same request state gets the sampled text.
///
/// As a 2026-07-28 server must, it asks only a client whose capabilities (in the request's
/// `_meta`) include sampling, and refuses any other with -32021 naming what is missing.
pub fn sample_by_input(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, McpError> {
    let declared = context.meta.client_capabilities().unwrap_or_default();
    if declared.sampling.is_none() {
        let mut required = rmcp::model::ClientCapabilities::default();
        required.sampling = Some(Default::default());
        return Err(McpError::missing_required_client_capability(required));
    }
    let arguments = Arguments::new("sample", request.arguments.as_ref());
    let prompt = arguments.required_str("prompt")?;
    let Some(answer) = request
        .input_responses
        .as_ref()
        .and_then(|responses| responses.get("sample"))
    else {
        let question = CreateMessageRequest::new(CreateMessageRequestParams::new(
            vec![SamplingMessage::user_text(prompt)],
            SAMPLE_MAX_TOKENS,
        ));
        let questions = [("sample".to_owned(), InputRequest::CreateMessage(question))];
        return Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
            Some(questions.into_iter().collect()),
            Some(SAMPLE_STATE.to_owned()),
        )));
    };
    if request.request_state.as_deref() != Some(SAMPLE_STATE) {
        return Ok(CallToolResponse::Complete(error_text(format!(
            "the answer came back with request state {:?}, not the {SAMPLE_STATE:?} handed out",
            request.request_state
        ))));
    }
    let answer: CreateMessageResult = serde_json::from_value(answer.clone()).map_err(|error| {
        arguments.invalid(
            "inputResponses.sample",
            &format!("is not a sampling result: {error}"),
        )
    })?;
    Ok(CallToolResponse::Complete(text(sampled_text(&answer))))
}

/// The text blocks of a sampling answer, one per line.
fn sampled_text(answer: &CreateMessageResult) -> String {
    let texts: Vec<&str> = answer
        .message
        .content
        .iter()
        .filter_map(|block| match block {
            SamplingMessageContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n")
}

async fn elicit(
    shared: &Shared,
    message: &str,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    let requested_schema = ElicitationSchema::builder()
        .optional_string("answer")
        .build()
        .map_err(|error| McpError::internal_error(error, None))?;
    let request = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message.to_owned(),
        requested_schema,
    };
    match until_cancelled(shared, context, context.peer.create_elicitation(request)).await? {
        Ok(answer) => {
            let answer = json!({"action": answer.action, "content": answer.content});
            Ok(text(answer.to_string()))
        }
        Err(error) => Ok(error_text(format!("elicitation failed: {error}"))),
    }
}

async fn roots(
    shared: &Shared,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    match until_cancelled(shared, context, context.peer.list_roots()).await? {
        Ok(answer) => Ok(text(json!(answer.roots).to_string())),
        Err(error) => Ok(error_text(format!("roots/list failed: {error}"))),
    }
}

/// Writes the answer to this request straight to stdout (the stdio transport's only
/// writer while the call runs), its result nested `depth` levels deep, then waits until
/// cancelled: a client that cannot read the answer must not be told anything else.
async fn deep(
    shared: &Shared,
    arguments: &Arguments<'_>,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    use std::io::Write;
    let depth = usize::try_from(arguments.optional_u64("depth")?.unwrap_or(100_000))
        .unwrap_or(usize::MAX)
        .min(10_000_000);
    let id = serde_json::to_string(&context.id).unwrap_or_default();
    let answer = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"deep"}}],"structuredContent":{{"deep":{}{}}}}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let written = {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{answer}").and_then(|()| stdout.flush())
    };
    if let Err(error) = written {
        shared.say(format!("could not write the deep answer: {error}"));
    }
    let never = std::future::pending::<Infallible>();
    let Err(cancelled) = until_cancelled(shared, context, never).await;
    Err(cancelled)
}

/// A result whose structured content nests `depth` levels deep (1,000 unless asked), as an
/// ordinary answer that rmcp serializes.
fn deep_returned(arguments: &Arguments<'_>) -> Result<CallToolResult, McpError> {
    let depth = usize::try_from(arguments.optional_u64("depth")?.unwrap_or(1_000))
        .unwrap_or(usize::MAX)
        .min(DEEP_RETURNED_MAX);
    let mut deep = json!([]);
    for _ in 0..depth.saturating_sub(3) {
        deep = json!([deep]);
    }
    let mut result = text("deep".to_owned());
    result.structured_content = Some(json!({ "deep": deep }));
    Ok(result)
}

async fn add_tool(
    shared: &Shared,
    name: &str,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    let taken = catalog::list(shared).iter().any(|tool| tool.name == name);
    if name.is_empty() || taken || !shared.add_dynamic_tool(name) {
        return Ok(error_text(format!(
            "cannot add tool `{name}`: empty or already taken"
        )));
    }
    if shared.faults.silent_list_changes {
        return Ok(text("ok"));
    }
    if let Err(error) = context.peer.notify_tool_list_changed().await {
        shared.say(format!("could not send tools/list_changed: {error}"));
    }
    Ok(text("ok"))
}

async fn log(
    shared: &Shared,
    arguments: &Arguments<'_>,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    let message = arguments.required_str("message")?;
    let level = match arguments.optional_str("level")? {
        None => LoggingLevel::Info,
        Some(level) => serde_json::from_value(json!(level))
            .map_err(|_| arguments.invalid("level", "must be a logging level such as `info`"))?,
    };
    // `repeat`: the same message that many times (a flood, for the slow-reader test).
    let repeat = arguments.optional_u64("repeat")?.unwrap_or(1);
    for _ in 0..repeat {
        let notification = LoggingMessageNotificationParam::new(level, json!(message))
            .with_logger(shared.server_name.clone());
        if let Err(error) = context.peer.notify_logging_message(notification).await {
            shared.say(format!("could not send a logging message: {error}"));
            break;
        }
    }
    Ok(text("ok"))
}

async fn touch(shared: &Shared, uri: &str) -> Result<CallToolResult, McpError> {
    for (session, peer) in shared.subscribers(uri) {
        let update = ResourceUpdatedNotificationParam::new(uri);
        if peer.notify_resource_updated(update).await.is_err() {
            shared.drop_subscriber(session);
        }
    }
    // 2026-07-28 clients hear it on a listen stream that asked for this resource.
    for sink in shared.listeners() {
        let update = rmcp::model::ResourceUpdatedNotification::new(
            ResourceUpdatedNotificationParam::new(uri),
        );
        let _ = sink
            .send(rmcp::model::ServerNotification::ResourceUpdatedNotification(update))
            .await;
    }
    Ok(text("ok"))
}
