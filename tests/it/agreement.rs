//! One recovery machine, driven twice. `wardgate policy simulate` plays a scenario and keeps
//! the journal of every input its recovery machine was fed; that same trace of inputs is
//! then made to happen to the gateway's real supervisor (paused time, an in-memory server
//! scripted to connect, fail, answer or hang its probes, and die exactly as the journal
//! says), and the supervisor's own journal must match record for record: the same input at
//! the same millisecond, the same status after it, the same policy verdicts and delays.
//! Every built-in scenario, for the builtin policy and each bundled policy module.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{
    ErrorCode, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::time::Instant;
use wardgate_engine::config::{Config, TransportConfig};
use wardgate_engine::failure::UpstreamError;
use wardgate_engine::slot::SlotEvent;
use wardgate_engine::supervisor::server_seed;
use wardgate_engine::upstream::memory::{self, MemoryProcess};
use wardgate_engine::upstream::{Connection, Connector, Links};
use wardgate_engine::Gateway;
use wardgate_policy::{Builtin, RecoveryPolicy, ServerContext};
use wardgate_recovery::simulate::{builtin_scenario, run_journaled, SCENARIOS};
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
    current: Mutex<Option<MemoryProcess>>,
}

impl Script {
    fn from_journal(journal: &[Record]) -> Arc<Script> {
        let script = Script::default();
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

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tool = Tool::new("t", "a tool", Arc::new(Default::default()));
        Ok(ListToolsResult::with_all_items(vec![tool]))
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
            let (connection, process) = memory::connect(handler, links, self.stdio).await?;
            *self.script.current.lock().unwrap() = Some(process);
            Ok(connection)
        })
    }
}

/// Inputs the world causes from outside (the rest the supervisor makes itself: its
/// timers, its connection attempts, its probes).
fn caused_from_outside(input: &Input) -> bool {
    matches!(
        input,
        Input::Lost { .. }
            | Input::Exited { .. }
            | Input::WakeUp
            | Input::Operator(_)
            | Input::Served { .. }
    )
}

/// Make `record`'s input happen to the gateway's server now.
async fn cause(gateway: &Gateway, script: &Script, record: &Record) {
    let slot = gateway.slot(SERVER).expect("the server's slot");
    match &record.input {
        Input::Lost { failure, status } => {
            let generation = slot.live().expect("a live connection to lose").generation;
            slot.send(SlotEvent::CallFailed {
                generation,
                error: UpstreamError::new(SERVER, failure.kind.clone(), failure.message.clone()),
                status: *status,
                reply: None,
            });
        }
        Input::Exited { exit, .. } => {
            let process = script.current.lock().unwrap().clone();
            process.expect("a process to end").end(*exit);
        }
        Input::WakeUp => slot.wake(),
        Input::Served {
            succeeded,
            latency_ms,
        } => {
            let generation = slot.live().expect("a live connection").generation;
            slot.send(SlotEvent::CallOutcome {
                generation,
                succeeded: *succeeded,
                latency_ms: *latency_ms,
                error: None,
            });
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
    let (_, expected) = run_journaled(&*policy, &server, &script, server_seed(SEED, SERVER));
    assert!(expected.len() > 3, "{scenario}: a journal with a story");

    let scripted = Script::from_journal(&expected);
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
    let mut journaled = slot.watch_journal();
    for (index, want) in expected.iter().enumerate() {
        let at = t0 + Duration::from_millis(want.at_ms);
        if caused_from_outside(&want.input) {
            tokio::time::sleep_until(at).await;
            cause(&gateway, &scripted, want).await;
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
    gateway.shutdown().await;
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
