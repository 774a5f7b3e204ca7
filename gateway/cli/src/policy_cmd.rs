//! `wardgate policy check` and `wardgate policy simulate`: load modules as the gateway would, run the simulator (on scenarios, a trace, or a replayed decision log: `replay`), print.

mod replay;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value};
use wardgate_policy::{Builtin, Description, RecoveryPolicy, ServerContext, TransportKind};
use wardgate_wasm::{WasmPolicy, WORLD};

use crate::args::{PolicyCommand, ScenarioName, SimulateArgs};
use crate::simulate::{self, BackoffCurve, Column, Script};

/// A module or trace that cannot be used exits like an invalid config.
const UNUSABLE: u8 = 2;

/// The simulated server's name, as policies see it in `ServerContext`.
const SERVER_NAME: &str = "simulated";

pub fn run(command: PolicyCommand) -> anyhow::Result<ExitCode> {
    match command {
        PolicyCommand::Check { module, params } => Ok(check(&module, params.into_iter().collect())),
        PolicyCommand::Simulate(args) => Ok(simulate(args)),
        PolicyCommand::New { name, lang, dir } => crate::policy_new::run(&name, lang, dir),
        // Talks to a running gateway: `main` hands it to `client`.
        PolicyCommand::Reload(_)
        | PolicyCommand::Shadow { .. }
        | PolicyCommand::ShadowReport { .. }
        | PolicyCommand::PromoteShadow { .. }
        | PolicyCommand::Rollback { .. } => {
            anyhow::bail!("this `wardgate policy` command needs a running gateway")
        }
    }
}

fn unusable(error: impl std::fmt::Display) -> ExitCode {
    eprintln!("wardgate: {error}");
    ExitCode::from(UNUSABLE)
}

fn check(path: &Path, params: BTreeMap<String, String>) -> ExitCode {
    let policy = match WasmPolicy::load(path, params) {
        Ok(policy) => policy,
        Err(error) => return unusable(error),
    };
    let Description {
        name,
        version,
        intent,
    } = policy.description();
    let size = std::fs::metadata(path).map_or(0, |metadata| metadata.len());
    println!(
        "policy module {}: ok (compiled, linked, described, self-checked)",
        path.display()
    );
    println!("  name:     {name}");
    println!("  version:  {version}");
    println!("  intent:   {intent}");
    println!("  world:    {WORLD}");
    println!("  size:     {size} bytes ({:.1} KiB)", size as f64 / 1024.0);
    println!("  sha256:   {}…", &policy.module_sha256()[..12]);
    match policy.imports() {
        [] => println!("  imports:  none"),
        [first, rest @ ..] => {
            println!("  imports:  {first}");
            for import in rest {
                println!("            {import}");
            }
        }
    }
    for (key, value) in policy.params() {
        println!("  param:    {key} = {value}");
    }
    ExitCode::SUCCESS
}

/// One script, run by each policy under simulation.
struct Run {
    script: Script,
    columns: Vec<Column>,
}

/// A policy under simulation: a loaded module, or the built-in policy to compare with.
enum Subject {
    // Boxed: a loaded module is large, the built-in policy a few numbers.
    Module(Box<WasmPolicy>),
    Builtin(Builtin),
}

impl Subject {
    fn policy(&self) -> &dyn RecoveryPolicy {
        match self {
            Subject::Module(module) => module.as_ref(),
            Subject::Builtin(builtin) => builtin,
        }
    }

    fn source(&self) -> String {
        match self {
            Subject::Module(module) => {
                format!("{} ({})", module.module_version(), module.path().display())
            }
            Subject::Builtin(builtin) => format!(
                "{} {} (built in)",
                builtin.describe().name,
                builtin.describe().version
            ),
        }
    }

    /// Decisions the module faulted in (the built-in policy answered them), and the last fault.
    fn faults(&self) -> Option<(u64, String)> {
        let Subject::Module(module) = self else {
            return None;
        };
        let stats = module.faults();
        let last = stats
            .last
            .map(|fault| fault.to_string())
            .unwrap_or_default();
        (stats.total > 0).then_some((stats.total, last))
    }
}

fn load(path: &Path) -> Result<Subject, wardgate_wasm::PolicyLoadError> {
    // Policy-wide parameters stay empty: `--param` goes to the server, which both sides see.
    WasmPolicy::load(path, BTreeMap::new()).map(|module| Subject::Module(Box::new(module)))
}

/// Labels that tell the policies apart: their names, or their file names when those clash.
fn labels(subjects: &[Subject], args: &SimulateArgs) -> Vec<String> {
    let names: Vec<String> = subjects
        .iter()
        .map(|subject| subject.policy().describe().name)
        .collect();
    if names.len() < 2 || names[0] != names[1] {
        return names;
    }
    let file = |path: &Path| {
        path.file_name().map_or_else(
            || path.display().to_string(),
            |name| name.to_string_lossy().into_owned(),
        )
    };
    let against = args.against.as_deref().map(file).unwrap_or_default();
    match file(&args.module) {
        module if module != against => vec![module, against],
        _ => vec!["left".into(), "right".into()],
    }
}

fn scripts(args: &SimulateArgs) -> Result<Vec<Script>, simulate::TraceError> {
    if let Some(trace) = &args.trace {
        return Ok(vec![simulate::load_trace(trace)?]);
    }
    let names: &[&str] = match args.scenario {
        ScenarioName::FlappingHttp => &["flapping-http"],
        ScenarioName::CrashLoop => &["crash-loop"],
        ScenarioName::FailedStart => &["failed-start"],
        ScenarioName::AuthFailure => &["auth-failure"],
        ScenarioName::SlowServer => &["slow-server"],
        ScenarioName::FailingTools => &["failing-tools"],
        ScenarioName::All => &simulate::SCENARIOS,
    };
    Ok(names
        .iter()
        .filter_map(|name| simulate::builtin_scenario(name))
        .collect())
}

fn server(transport: TransportKind, params: &BTreeMap<String, String>) -> ServerContext {
    let mut server = ServerContext::new(SERVER_NAME, transport);
    server.params = params.clone();
    server
}

fn simulate(args: SimulateArgs) -> ExitCode {
    if let Some(log) = args.replay.clone() {
        return replay::replay(&args, &log);
    }
    let mut subjects = match load(&args.module) {
        Ok(subject) => vec![subject],
        Err(error) => return unusable(error),
    };
    match args.against.as_deref() {
        Some(path) if path == Path::new("builtin") => {
            subjects.push(Subject::Builtin(Builtin::default()))
        }
        Some(path) => match load(path) {
            Ok(subject) => subjects.push(subject),
            Err(error) => return unusable(error),
        },
        None => {}
    }
    let scripts = match scripts(&args) {
        Ok(scripts) => scripts,
        Err(error) => return unusable(error),
    };
    let labels = labels(&subjects, &args);
    let params: BTreeMap<String, String> = args.params.iter().cloned().collect();
    let runs: Vec<Run> = scripts
        .into_iter()
        .map(|script| {
            let server = server(script.transport, &params);
            let columns = subjects
                .iter()
                .zip(&labels)
                .map(|(subject, label)| Column {
                    label: label.clone(),
                    timeline: simulate::run(subject.policy(), &server, &script, args.seed),
                })
                .collect();
            Run { script, columns }
        })
        .collect();
    let backoff_server = server(TransportKind::StreamableHttp, &params);
    let curves: Vec<(String, BackoffCurve)> = subjects
        .iter()
        .zip(&labels)
        .map(|(subject, label)| {
            let curve = simulate::backoff_curve(
                subject.policy(),
                &backoff_server,
                args.seed,
                simulate::BACKOFF_ATTEMPTS,
            );
            (label.clone(), curve)
        })
        .collect();
    if args.json {
        println!("{:#}", report_json(&subjects, &labels, &runs, &curves));
    } else {
        print!("{}", report_text(&subjects, &labels, &runs, &curves));
    }
    ExitCode::SUCCESS
}

fn report_text(
    subjects: &[Subject],
    labels: &[String],
    runs: &[Run],
    curves: &[(String, BackoffCurve)],
) -> String {
    let mut out = String::new();
    for (subject, label) in subjects.iter().zip(labels) {
        let intent = subject.policy().describe().intent;
        out.push_str(&format!(
            "policy {label}: {}\n  intent: {intent}\n",
            subject.source()
        ));
    }
    for Run { script, columns } in runs {
        out.push('\n');
        out.push_str(&match columns.as_slice() {
            [left, right] => simulate::print_pair(script, left, right),
            [single, ..] => simulate::print_single(script, single),
            [] => String::new(),
        });
    }
    out.push('\n');
    out.push_str(&simulate::backoff_chart(curves));
    for (subject, label) in subjects.iter().zip(labels) {
        if let Some((count, last)) = subject.faults() {
            out.push_str(&format!(
                "\nwarning: {label} faulted in {count} decisions, which the built-in policy answered instead; last: {last}\n"
            ));
        }
    }
    out
}

fn report_json(
    subjects: &[Subject],
    labels: &[String],
    runs: &[Run],
    curves: &[(String, BackoffCurve)],
) -> Value {
    let policies: Vec<Value> = subjects
        .iter()
        .zip(labels)
        .map(|(subject, label)| {
            let Description { name, version, intent } = subject.policy().describe();
            let faults = subject.faults().map_or(0, |(count, _)| count);
            json!({ "label": label, "name": name, "version": version, "intent": intent, "source": subject.source(), "faults": faults })
        })
        .collect();
    let scenarios: Vec<Value> = runs
        .iter()
        .map(|Run { script, columns }| {
            let mut scenario = simulate::script_json(script);
            let timelines: Vec<Value> = columns
                .iter()
                .map(|column| json!({ "policy": column.label, "timeline": simulate::timeline_json(&column.timeline) }))
                .collect();
            scenario["runs"] = Value::Array(timelines);
            if let [left, right] = columns.as_slice() {
                scenario["identical"] = Value::Bool(left.timeline.entries == right.timeline.entries);
            }
            scenario
        })
        .collect();
    let backoff: Vec<Value> = curves
        .iter()
        .map(|(label, curve)| json!({ "policy": label, "delays": simulate::curve_json(curve) }))
        .collect();
    json!({ "policies": policies, "scenarios": scenarios, "backoff": backoff })
}
