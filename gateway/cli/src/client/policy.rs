//! `wardgate policy shadow NAME FILE`, `policy shadow-report NAME` and `decisions export`:
//! a running gateway's shadow policies and its decision log.

use std::path::Path;

use anyhow::Context;
use serde_json::{json, Value};

use super::show::{print_done, text};
use super::table::{Paint, Table, Tone};
use super::{print_json, AdminClient};
use crate::args::Output;

/// Binds (or with no module, unbinds) policy `policy`'s shadow, through the command queue.
pub async fn shadow(
    client: &AdminClient,
    policy: &str,
    module: Option<&Path>,
    output: Output,
) -> anyhow::Result<()> {
    // The gateway reads the file: give it a path that does not depend on our directory.
    let path = match module {
        Some(module) => Some(
            std::path::absolute(module)
                .with_context(|| format!("cannot resolve {}", module.display()))?
                .display()
                .to_string(),
        ),
        None => None,
    };
    let command = json!({
        "type": "shadow_policy",
        "policy": policy,
        "path": path,
        "priority": "high",
    });
    let record = client.post_json("/commands?wait=true", &command).await?;
    print_done(&record, output)
}

/// `wardgate policy shadow-report NAME`: the counts, the verdict pairs, the first
/// disagreements.
pub async fn report(client: &AdminClient, path: &str, output: Output) -> anyhow::Result<()> {
    let report = client.get(path).await?;
    if output.json {
        return print_json(&report);
    }
    let paint = Paint::detect();
    let count = |value: &Value, key: &str| value[key].as_u64().unwrap_or(0);
    outln!(
        "policy {}: shadow {} ({}), since {}",
        text(&report, "policy"),
        text(&report, "module"),
        text(&report, "path"),
        text(&report, "since")
    );
    let disagreed = count(&report, "disagreed");
    outln!(
        "{} agreed, {} disagreed, {} faults, {} dropped (queue full)",
        count(&report, "agreed"),
        paint.paint(
            if disagreed > 0 {
                Tone::Warn
            } else {
                Tone::Good
            },
            &disagreed.to_string()
        ),
        count(&report, "faults"),
        count(&report, "dropped")
    );
    outln!();
    let mut table = Table::new(&["QUESTION", "AGREED", "DISAGREED", "FAULTS"]);
    if let Some(questions) = report["by_question"].as_object() {
        for (question, counts) in questions {
            table.row(vec![
                (question.clone(), Tone::Plain),
                (count(counts, "agreed").to_string(), Tone::Plain),
                (count(counts, "disagreed").to_string(), Tone::Plain),
                (count(counts, "faults").to_string(), Tone::Plain),
            ]);
        }
    }
    out!("{}", table.render(paint));
    outln!();
    let mut pairs = Table::new(&["QUESTION", "LIVE", "SHADOW", "COUNT"]);
    for pair in report["pairs"].as_array().into_iter().flatten() {
        pairs.row(vec![
            (text(pair, "question"), Tone::Plain),
            (text(pair, "live"), Tone::Plain),
            (shadow_verdict(pair), Tone::Plain),
            (count(pair, "count").to_string(), Tone::Plain),
        ]);
    }
    out!("{}", pairs.render(paint));
    let examples = report["examples"].as_array().cloned().unwrap_or_default();
    if !examples.is_empty() {
        outln!();
        outln!("first disagreements:");
        for example in examples {
            let inputs: Vec<String> = example["inputs"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(key, value)| format!("{key}={value}"))
                .collect();
            outln!(
                "  #{} {} {} [{}]: live {}; shadow {}",
                count(&example, "decision"),
                text(&example, "server"),
                text(&example, "question"),
                inputs.join(" "),
                text(&example, "live"),
                paint.paint(Tone::Warn, &text(&example, "shadow"))
            );
        }
    }
    Ok(())
}

/// A verdict pair's shadow side as the reports print it: marked when the answers were the
/// same, or when they differ only in a delay (one kind, not agreed).
pub fn shadow_verdict(pair: &Value) -> String {
    let shadow = pair["shadow"].as_str().unwrap_or_default();
    match (pair["agreed"].as_bool(), pair["live"] == pair["shadow"]) {
        (Some(true), _) => format!("{shadow} (the same)"),
        (_, true) => format!("{shadow} (another delay)"),
        _ => shadow.to_owned(),
    }
}

/// `wardgate decisions export`: the kept decisions as JSON lines.
pub async fn export(
    client: &AdminClient,
    server: Option<&str>,
    output: Option<&Path>,
) -> anyhow::Result<()> {
    let path = match server {
        Some(server) => format!(
            "/decisions?format=jsonl&server={}",
            super::encode_segment(server)
        ),
        None => "/decisions?format=jsonl".to_owned(),
    };
    let lines = client.get_text(&path).await?;
    match output {
        Some(file) => {
            std::fs::write(file, &lines)
                .with_context(|| format!("cannot write {}", file.display()))?;
            eprintln!(
                "wrote {} decisions to {}",
                lines.lines().count(),
                file.display()
            );
            Ok(())
        }
        None => {
            out!("{lines}");
            Ok(())
        }
    }
}
