//! One recovery machine and one call machine, each driven twice. `wardgate policy simulate`
//! plays a scenario and keeps two journals: every input its recovery machine was fed, and
//! every step its calls' machines took. The same scenario is then made to happen to the
//! gateway (paused time, an in-memory server scripted to connect, fail, answer or hang its
//! probes, and die exactly as the journal says), and its tool calls are made for real, by
//! an MCP client through the gateway's router, at the scenario's times, each attempt
//! delivered, lost (a timeout) or failed on the way (refused, HTTP 401) as the simulated
//! world met it. The gateway's journals must match the simulator's record for record: the
//! same input or call step at the same millisecond, the same status after it, the same
//! policy verdicts and delays. Every built-in scenario, for the builtin policy and each
//! bundled policy module.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest, ErrorCode,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::ServiceExt;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::time::Instant;
use wardgate_downstream::SessionHandler;
use wardgate_engine::commands::{CommandError, CommandQueue, CommandTarget, QueueSettings};
use wardgate_engine::config::{Config, TransportConfig};
use wardgate_engine::failure::UpstreamError;
use wardgate_engine::supervisor::server_seed;
use wardgate_engine::upstream::memory::{self, Delivery, MemoryProcess};
use wardgate_engine::upstream::{Connection, Connector, Links};
use wardgate_engine::Gateway;
use wardgate_policy::{Builtin, RecoveryPolicy, ServerContext};
use wardgate_recovery::call::{CallNext, CallRecord};
use wardgate_recovery::simulate::{
    builtin_scenario, describe_failure, run_journaled, CallHints, WorldEvent, SCENARIOS,
};
use wardgate_recovery::{Failure, Input, OperatorAction, Record};

const SEED: u64 = 42;
const SERVER: &str = "s";

/// How the scripted server answers one health probe.
#[derive(Debug, Clone, Copy)]
enum ProbeAnswer {
    Ok,
    Fail,
    Hang,
}

/// What the journal says will happen, in order; the scripted parts take from it.
#[derive(Default)]
struct Script {
    connects: Mutex<VecDeque<Result<(), Failure>>>,
    probes: Mutex<VecDeque<ProbeAnswer>>,
    /// How each tool call's attempt is delivered, in the order they are sent.
    calls: Mutex<VecDeque<Delivery>>,
    current: Mutex<Option<MemoryProcess>>,
}

impl Script {
    fn from_journals(journal: &[Record], calls: &[CallRecord]) -> Arc<Script> {
        let script = Script::default();
        // An attempt went out (`Send`); how it came back is the next step of its call.
        for (index, sent) in calls.iter().enumerate() {
            if sent.next != CallNext::Send {
                continue;
            }
            let answer = calls[index + 1..]
                .iter()
                .find(|record| record.call == sent.call)
                .expect("every attempt sent comes back");
            let delivery = match &answer.failure {
                None => Delivery::Deliver,
                Some(wardgate_policy::FailureKind::TimedOut) => Delivery::Lose,
                Some(kind) => Delivery::Fail {
                    kind: kind.clone(),
                    message: describe_failure(kind),
                },
            };
            script.calls.lock().unwrap().push_back(delivery);
        }
        for record in journal {
            match &record.input {
                Input::Ready => script.connects.lock().unwrap().push_back(Ok(())),
                Input::ConnectFailed(failure) => script
                    .connects
                    .lock()
                    .unwrap()
                    .push_back(Err(failure.clone())),
                Input::Probed {
                    succeeded,
                    latency_ms,
                } => script
                    .probes
                    .lock()
                    .unwrap()
                    .push_back(match (succeeded, latency_ms) {
                        (true, _) => ProbeAnswer::Ok,
                        (false, 0) => ProbeAnswer::Fail,
                        (false, _) => ProbeAnswer::Hang,
                    }),
                _ => {}
            }
        }
        Arc::new(script)
    }
}

/// A small MCP server with one tool whose probes answer as scripted.
struct ScriptedServer {
    script: Arc<Script>,
}

impl ServerHandler for ScriptedServer {
    async fn ping(&self, _context: RequestContext<RoleServer>) -> Result<(), McpError> {
        let answer = self.script.probes.lock().unwrap().pop_front();
        match answer.unwrap_or(ProbeAnswer::Ok) {
            ProbeAnswer::Ok => Ok(()),
            ProbeAnswer::Fail => Err(McpError::new(ErrorCode::INTERNAL_ERROR, "down", None)),
            ProbeAnswer::Hang => std::future::pending().await,
        }
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        Ok(CallToolResult::success(vec![]).into())
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        // One tool for each pair of hints a scenario's call may have (`tool_for`).
        let tools = [(false, false), (true, false), (false, true), (true, true)]
            .into_iter()
            .map(|(idempotent, read_only)| {
                let hints = CallHints {
                    idempotent,
                    read_only,
                };
                Tool::new(tool_for(hints), "a tool", Arc::new(Default::default())).annotate(
                    ToolAnnotations::new()
                        .idempotent(idempotent)
                        .read_only(read_only),
                )
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }
}

struct ScriptedConnector {
    script: Arc<Script>,
    stdio: bool,
}

impl Connector for ScriptedConnector {
    fn connect<'a>(
        &'a self,
        _transport: &'a TransportConfig,
        links: Arc<Links>,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<Connection, UpstreamError>> {
        Box::pin(async move {
            let outcome = self.script.connects.lock().unwrap().pop_front();
            if let Some(Err(failure)) = outcome {
                return Err(UpstreamError::new(
                    &links.server,
                    failure.kind,
                    failure.message,
                ));
            }
            let handler = ScriptedServer {
                script: self.script.clone(),
            };
            let script = self.script.clone();
            let deliveries = Arc::new(move |request: &ClientRequest| match request {
                ClientRequest::CallToolRequest(_) => {
                    let next = script.calls.lock().unwrap().pop_front();
                    next.expect("a call the simulator did not make")
                }
                _ => Delivery::Deliver,
            });
            let (connection, process) =
                memory::connect_scripted(handler, links, self.stdio, deliveries).await?;
            *self.script.current.lock().unwrap() = Some(process);
            Ok(connection)
        })
    }
}

/// Inputs the world causes from outside (the rest the supervisor makes itself, with its
/// timers, its connection attempts and its probes, or the calls make: a wake-up, news of a
/// connection's health, its loss).
fn caused_from_outside(input: &Input) -> bool {
    matches!(input, Input::Exited { .. } | Input::Operator(_))
}

/// Make `record`'s input happen to the gateway's server now.
async fn cause(gateway: &Gateway, script: &Script, record: &Record) {
    match &record.input {
        Input::Exited { exit, .. } => {
            let process = script.current.lock().unwrap().clone();
            process.expect("a process to end").end(*exit);
        }
        Input::Operator(OperatorAction::Reconnect) => {
            gateway.reconnect(SERVER).await.expect("reconnect");
        }
        other => panic!("not caused from outside: {other:?}"),
    }
}

/// Replay `expected` (the simulator's journal) through the gateway's supervisor and compare.
async fn replay(policy: Arc<dyn RecoveryPolicy>, scenario: &str, label: &str) {
    let script = builtin_scenario(scenario).expect("a built-in scenario");
    let stdio = script.transport == wardgate_policy::TransportKind::Stdio;
    let server = ServerContext::new(SERVER, script.transport);
    let (_, journals) = run_journaled(&*policy, &server, &script, server_seed(SEED, SERVER));
    let expected = journals.machine;
    assert!(expected.len() > 3, "{scenario}: a journal with a story");

    let scripted = Script::from_journals(&expected, &journals.calls);
    // The scenario's tool calls, by the time they arrive.
    let mut arrivals: VecDeque<(u64, CallHints)> = script
        .events
        .iter()
        .filter_map(|happening| match &happening.event {
            WorldEvent::Call { hints, .. } => Some((happening.at_ms, *hints)),
            _ => None,
        })
        .collect();
    assert_eq!(
        arrivals.is_empty(),
        journals.calls.is_empty(),
        "{scenario}: a scenario with calls has a call journal"
    );
    let text = if stdio {
        format!("[servers.{SERVER}]\ncommand = \"scripted\"\n")
    } else {
        format!("[servers.{SERVER}]\nurl = \"http://127.0.0.1:9/mcp\"\n")
    };
    let config =
        Config::parse(std::path::Path::new("agreement.toml"), &text, &|_| None).expect("config");
    let connector = Arc::new(ScriptedConnector {
        script: scripted.clone(),
        stdio,
    });
    let t0 = Instant::now();
    let gateway = Gateway::start_seeded(&config, move |_| policy.clone(), connector, SEED);
    let slot = gateway.slot(SERVER).expect("the server's slot");
    let client = client_of(&gateway).await;
    let mut calls = tokio::task::JoinSet::new();
    // Each call is made at its time. At one millisecond the world changes first (an
    // operator's action, a process's exit), then the calls arrive, as in the simulator.
    let mut make_calls = |until_ms: u64, inclusive: bool| {
        while let Some(&(at_ms, hints)) = arrivals.front() {
            if at_ms > until_ms || (at_ms == until_ms && !inclusive) {
                break;
            }
            arrivals.pop_front();
            let client = client.clone();
            calls.spawn(async move {
                tokio::time::sleep_until(t0 + Duration::from_millis(at_ms)).await;
                // The answer may be an error: the journals say whether it should be.
                let _ = client
                    .call_tool(CallToolRequestParams::new(format!(
                        "{SERVER}__{}",
                        tool_for(hints)
                    )))
                    .await;
            });
        }
    };
    let mut journaled = slot.watch_journal();
    for (index, want) in expected.iter().enumerate() {
        let at = t0 + Duration::from_millis(want.at_ms);
        if caused_from_outside(&want.input) {
            make_calls(want.at_ms, false);
            tokio::time::sleep_until(at).await;
            cause(&gateway, &scripted, want).await;
        } else {
            make_calls(want.at_ms, true);
        }
        let arrived = tokio::time::timeout_at(
            at + Duration::from_secs(60),
            journaled.wait_for(|count| *count > index as u64),
        )
        .await
        .map(|_| ());
        let journal = slot.journal();
        let count = *journaled.borrow() as usize;
        assert!(
            arrived.is_ok(),
            "{label}/{scenario}: the supervisor never made record #{index}: {want:?}\n\
             its last records: {:#?}",
            &journal[journal.len().saturating_sub(3)..]
        );
        let got = &journal[journal.len() - (count - index)];
        assert_eq!(
            got, want,
            "{label}/{scenario}: record #{index} differs (left: the gateway's supervisor, right: the simulator)"
        );
    }
    make_calls(u64::MAX, true);
    while calls.join_next().await.is_some() {}
    // The calls' journals: the gateway's router keeps the last JOURNAL_RECORDS steps.
    let made = slot.call_journal();
    let wanted = &journals.calls[journals.calls.len().saturating_sub(made.len())..];
    assert_eq!(
        made.len(),
        journals
            .calls
            .len()
            .min(wardgate_engine::slot::JOURNAL_RECORDS),
        "{label}/{scenario}: the router journaled {} call steps; the simulator {}",
        made.len(),
        journals.calls.len()
    );
    for (made, wanted) in made.iter().zip(wanted) {
        assert_eq!(
            made, wanted,
            "{label}/{scenario}: a call's step differs (left: the gateway's router, right: the simulator)"
        );
    }
    assert!(
        scripted.calls.lock().unwrap().is_empty(),
        "{label}/{scenario}: the gateway made fewer attempts than the simulator"
    );
    gateway.shutdown().await;
}

/// The scripted server's tool whose annotations give a call these hints.
fn tool_for(hints: CallHints) -> &'static str {
    match (hints.idempotent, hints.read_only) {
        (false, false) => "t",
        (true, false) => "idempotent",
        (false, true) => "read_only",
        (true, true) => "idempotent_read_only",
    }
}

/// An MCP client session on the gateway, over an in-memory pipe.
async fn client_of(
    gateway: &Arc<Gateway>,
) -> Arc<rmcp::service::RunningService<rmcp::RoleClient, ()>> {
    let commands = CommandQueue::start(Arc::new(NoCommands), QueueSettings::default());
    let (client_side, gateway_side) = tokio::io::duplex(1 << 20);
    let handler = SessionHandler::new(gateway.clone(), commands);
    tokio::spawn(async move {
        if let Ok(running) = handler.serve(tokio::io::split(gateway_side)).await {
            let _ = running.waiting().await;
        }
    });
    let client = ().serve(tokio::io::split(client_side)).await.expect("a client session");
    Arc::new(client)
}

/// The operator command queue's target for the client session: the test makes no commands.
struct NoCommands;

impl CommandTarget for NoCommands {
    fn execute<'a>(
        &'a self,
        _command: &'a wardgate_engine::commands::Command,
    ) -> BoxFuture<'a, Result<serde_json::Value, CommandError>> {
        Box::pin(async { Ok(serde_json::Value::Null) })
    }
}

fn policies() -> Vec<(&'static str, Arc<dyn RecoveryPolicy>)> {
    let runtime = wardgate_wasm::Runtime::shared().expect("the policy runtime");
    let mut policies: Vec<(&'static str, Arc<dyn RecoveryPolicy>)> =
        vec![("builtin", Arc::new(Builtin::default()))];
    for (label, path) in [
        ("default.wasm", wardgate_wasm::bundled::DEFAULT),
        ("patient.wasm", wardgate_wasm::bundled::PATIENT),
        ("strict.wasm", wardgate_wasm::bundled::STRICT),
    ] {
        let module = runtime
            .load(path, Default::default())
            .unwrap_or_else(|error| panic!("{label}: {error}"));
        policies.push((label, Arc::new(module)));
    }
    policies
}

#[tokio::test(start_paused = true)]
async fn the_gateways_supervisor_and_the_simulator_agree_on_every_scenario_and_policy() {
    for (label, policy) in policies() {
        for scenario in SCENARIOS {
            replay(policy.clone(), scenario, label).await;
        }
    }
}
