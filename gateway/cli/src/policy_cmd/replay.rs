//! `wardgate policy simulate FILE --replay decisions.jsonl [--against OTHER]`: where a module
//! would have decided differently from what a gateway recorded, and what that would have
//! meant (`simulate::replay` does the work; this prints it).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value};
use wardgate_policy::{Builtin, RecoveryPolicy};

use super::{load, unusable, Subject};
use crate::args::SimulateArgs;
use crate::simulate::replay::{self, Comparison, Outcome, Recorded};
use crate::simulate::{self, format_delay, format_time, Script};

/// Differences printed whole; the counts cover them all.
const SHOWN: usize = 20;

/// One server's world, played by both sides.
struct Played {
    script: Script,
    before: Outcome,
    after: Outcome,
}

pub fn replay(args: &SimulateArgs, log: &Path) -> ExitCode {
    let module = match load(&args.module) {
        Ok(module) => module,
        Err(error) => return unusable(error),
    };
    let against = match args.against.as_deref() {
        Some(path) if path == Path::new("builtin") => Some(Subject::Builtin(Builtin::default())),
        Some(path) => match load(path) {
            Ok(subject) => Some(subject),
            Err(error) => return unusable(error),
        },
        None => None,
    };
    let decisions = match replay::load_log(log) {
        Ok(decisions) => decisions,
        Err(error) => return unusable(error),
    };
    let overrides: BTreeMap<String, String> = args.params.iter().cloned().collect();
    let comparison = replay::compare(
        &decisions,
        module.policy(),
        against.as_ref().map(Subject::policy),
        &overrides,
    );
    let played: Vec<Played> = replay::by_server(&decisions)
        .into_iter()
        .map(|(name, decisions)| {
            let script = replay::world(&name, &decisions, log);
            let mut server = decisions[0].server.clone();
            server.params.extend(overrides.clone());
            let run = |policy: &dyn RecoveryPolicy| {
                replay::outcome(&simulate::run(policy, &server, &script, args.seed))
            };
            let before = match &against {
                Some(other) => run(other.policy()),
                None => run(&Recorded::new(&decisions)),
            };
            let after = run(module.policy());
            Played {
                script,
                before,
                after,
            }
        })
        .collect();
    let before_label = match &against {
        Some(other) => other.policy().describe().name,
        None => "recorded".to_owned(),
    };
    let after_label = module.policy().describe().name;
    let labels = if before_label == after_label {
        ("before".to_owned(), "after".to_owned())
    } else {
        (before_label, after_label)
    };
    if args.json {
        println!(
            "{:#}",
            report_json(
                &module,
                against.as_ref(),
                &comparison,
                &played,
                decisions.len()
            )
        );
    } else {
        print!(
            "{}",
            report_text(
                &module,
                against.as_ref(),
                log,
                &labels,
                &comparison,
                &played,
                decisions.len()
            )
        );
    }
    ExitCode::SUCCESS
}

fn totals(comparison: &Comparison) -> (u64, u64) {
    comparison
        .by_question
        .values()
        .fold((0, 0), |(agreed, disagreed), counts| {
            (agreed + counts.agreed, disagreed + counts.disagreed)
        })
}

fn report_text(
    module: &Subject,
    against: Option<&Subject>,
    log: &Path,
    (before, after): &(String, String),
    comparison: &Comparison,
    played: &[Played],
    count: usize,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "replay of {}: {count} recorded decisions of {} servers",
        log.display(),
        played.len()
    );
    let _ = writeln!(out, "policy {after}: {}", module.source());
    match against {
        Some(other) => {
            let _ = writeln!(out, "against {before}: {}", other.source());
        }
        None => {
            let _ = writeln!(out, "against {before}: the verdicts the gateway gave");
        }
    }
    let (agreed, disagreed) = totals(comparison);
    let _ = writeln!(
        out,
        "\ndecision by decision: {agreed} the same, {disagreed} different\n"
    );
    let _ = writeln!(out, "{:<16} {:>8} {:>10}", "question", "same", "different");
    for (question, counts) in &comparison.by_question {
        let _ = writeln!(
            out,
            "{question:<16} {:>8} {:>10}",
            counts.agreed, counts.disagreed
        );
    }
    if !comparison.pairs.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<16} {:<20} {:<28} {:>6}",
            "question", before, after, "count"
        );
        for ((question, from, to), count) in &comparison.pairs {
            let to = if from == to {
                format!("{to} (another delay)")
            } else {
                to.clone()
            };
            let _ = writeln!(out, "{question:<16} {from:<20} {to:<28} {count:>6}");
        }
    }
    if !comparison.differences.is_empty() {
        let _ = writeln!(out, "\nfirst differences:");
        for difference in comparison.differences.iter().take(SHOWN) {
            let decision = &difference.decision;
            let mut inputs = serde_json::to_value(&decision.asked).unwrap_or_default();
            if let Some(object) = inputs.as_object_mut() {
                object.remove("question");
            }
            let _ = writeln!(
                out,
                "  #{} at {} {} {} {}: {before} {}; {after} {}",
                decision.id,
                format_time(decision.at_ms),
                decision.server.name,
                decision.asked.question().wit_name(),
                inputs,
                verdict(&difference.before),
                verdict(&difference.after),
            );
        }
        if comparison.differences.len() > SHOWN {
            let _ = writeln!(
                out,
                "  … and {} more (--json lists them all)",
                comparison.differences.len() - SHOWN
            );
        }
    }
    let _ = writeln!(
        out,
        "\nwhat it would have meant: the recovery machine, on the failures the log saw"
    );
    for Played {
        script,
        before: from,
        after: to,
    } in played
    {
        if script.events.is_empty() {
            let _ = writeln!(out, "\n{}: nothing to play", script.summary);
            continue;
        }
        let _ = writeln!(out, "\n{} ({})", script.summary, script.transport.as_str());
        let _ = writeln!(out, "  {:<28} {:>14} {:>14}", "", before, after);
        let rows: [(&str, String, String, String); 5] = [
            count_row("retries", from.retries, to.retries, "more", "fewer"),
            count_row(
                "calls failed",
                from.calls_failed,
                to.calls_failed,
                "more",
                "fewer",
            ),
            count_row("restarts", from.restarts, to.restarts, "more", "fewer"),
            (
                "reconnect delays (total)",
                format_delay(from.reconnect_wait_ms),
                format_delay(to.reconnect_wait_ms),
                compare_text(
                    from.reconnect_wait_ms,
                    to.reconnect_wait_ms,
                    "longer",
                    "shorter",
                ),
            ),
            (
                "permanently failed at",
                failed_text(from.failed_at_ms),
                failed_text(to.failed_at_ms),
                match (from.failed_at_ms, to.failed_at_ms) {
                    (None, Some(_)) => "earlier (the other never)".to_owned(),
                    (Some(_), None) => "never (the other did)".to_owned(),
                    (Some(a), Some(b)) => compare_text(a, b, "later", "earlier"),
                    (None, None) => String::new(),
                },
            ),
        ];
        for (name, from, to, change) in rows {
            let _ = writeln!(out, "  {name:<28} {from:>14} {to:>14}  {change}");
        }
    }
    out
}

fn count_row(
    name: &'static str,
    from: usize,
    to: usize,
    more: &str,
    fewer: &str,
) -> (&'static str, String, String, String) {
    let change = match to.cmp(&from) {
        std::cmp::Ordering::Greater => format!("{} {more}", to - from),
        std::cmp::Ordering::Less => format!("{} {fewer}", from - to),
        std::cmp::Ordering::Equal => String::new(),
    };
    (name, from.to_string(), to.to_string(), change)
}

fn compare_text(from: u64, to: u64, more: &str, less: &str) -> String {
    match to.cmp(&from) {
        std::cmp::Ordering::Greater => format!("{} {more}", format_delay(to - from)),
        std::cmp::Ordering::Less => format!("{} {less}", format_delay(from - to)),
        std::cmp::Ordering::Equal => String::new(),
    }
}

fn failed_text(at_ms: Option<u64>) -> String {
    at_ms.map_or_else(|| "never".to_owned(), format_time)
}

fn verdict(answer: &wardgate_policy::Answer) -> String {
    match answer.delay_ms() {
        Some(delay) => format!("{} {}", answer.kind(), format_delay(delay)),
        None => answer.kind(),
    }
}

fn outcome_json(outcome: &Outcome) -> Value {
    json!({
        "retries": outcome.retries,
        "calls_failed": outcome.calls_failed,
        "restarts": outcome.restarts,
        "reconnects": outcome.reconnects,
        "reconnect_wait_ms": outcome.reconnect_wait_ms,
        "failed_at_ms": outcome.failed_at_ms,
    })
}

fn report_json(
    module: &Subject,
    against: Option<&Subject>,
    comparison: &Comparison,
    played: &[Played],
    count: usize,
) -> Value {
    let (agreed, disagreed) = totals(comparison);
    let pairs: Vec<Value> = comparison
        .pairs
        .iter()
        .map(|((question, before, after), count)| {
            json!({ "question": question, "before": before, "after": after, "count": count })
        })
        .collect();
    let differences: Vec<Value> = comparison
        .differences
        .iter()
        .map(|difference| {
            json!({
                "decision": difference.decision.id,
                "at_ms": difference.decision.at_ms,
                "server": difference.decision.server.name,
                "asked": difference.decision.asked,
                "before": difference.before,
                "after": difference.after,
            })
        })
        .collect();
    let servers: Vec<Value> = played
        .iter()
        .map(|played| {
            json!({
                "world": simulate::script_json(&played.script),
                "before": outcome_json(&played.before),
                "after": outcome_json(&played.after),
            })
        })
        .collect();
    json!({
        "decisions": count,
        "policy": module.source(),
        "against": against.map_or_else(|| "recorded".to_owned(), Subject::source),
        "agreed": agreed,
        "disagreed": disagreed,
        "by_question": comparison.by_question,
        "pairs": pairs,
        "differences": differences,
        "servers": servers,
    })
}
