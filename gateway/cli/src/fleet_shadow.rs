//! `wardgate fleet policy shadow-report NAME`: the members' shadow reports on the fleet's
//! shadow of a policy, summed: counts by question and by verdict pair, a line per member,
//! and the first disagreements of each.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use wardgate_fleet::admin::MemberRow;

/// Disagreements shown whole per member.
const EXAMPLES_PER_MEMBER: usize = 5;

const COUNTS: [&str; 4] = ["agreed", "disagreed", "faults", "dropped"];

fn count(value: &Value, key: &str) -> u64 {
    value[key].as_u64().unwrap_or(0)
}

/// The members' reports summed: totals, by question, by verdict pair.
fn summed(reports: &[(String, Value, f64)]) -> Value {
    let mut totals: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by_question: BTreeMap<String, BTreeMap<&str, u64>> = BTreeMap::new();
    let mut pairs: BTreeMap<(String, String, String, bool), u64> = BTreeMap::new();
    for (_, report, _) in reports {
        for key in COUNTS {
            *totals.entry(key).or_default() += count(report, key);
        }
        for (question, counts) in report["by_question"].as_object().into_iter().flatten() {
            let entry = by_question.entry(question.clone()).or_default();
            for key in ["agreed", "disagreed", "faults"] {
                *entry.entry(key).or_default() += count(counts, key);
            }
        }
        for pair in report["pairs"].as_array().into_iter().flatten() {
            let key = (
                pair["question"].as_str().unwrap_or_default().to_owned(),
                pair["live"].as_str().unwrap_or_default().to_owned(),
                pair["shadow"].as_str().unwrap_or_default().to_owned(),
                pair["agreed"].as_bool().unwrap_or(false),
            );
            *pairs.entry(key).or_default() += count(pair, "count");
        }
    }
    let mut pairs: Vec<Value> = pairs
        .into_iter()
        .map(|((question, live, shadow, agreed), count)| {
            json!({ "question": question, "live": live, "shadow": shadow, "agreed": agreed, "count": count })
        })
        .collect();
    pairs.sort_by_key(|pair| std::cmp::Reverse(count(pair, "count")));
    let mut summed = Map::new();
    for (key, value) in totals {
        summed.insert(key.to_owned(), json!(value));
    }
    summed.insert("by_question".to_owned(), json!(by_question));
    summed.insert("pairs".to_owned(), Value::Array(pairs));
    Value::Object(summed)
}

pub fn print(
    name: &str,
    version: i32,
    reports: &[(String, Value, f64)],
    members: &[MemberRow],
    as_json: bool,
) -> anyhow::Result<()> {
    let summed = summed(reports);
    // Live members with no report on this version: not serving the policy from the fleet,
    // or the shadow did not load there (its log says why), or not yet reported.
    let silent: Vec<&str> = members
        .iter()
        .filter(|member| member.live)
        .map(|member| member.name.as_str())
        .filter(|member| !reports.iter().any(|(name, _, _)| name == member))
        .collect();
    if as_json {
        let members: Vec<Value> = reports
            .iter()
            .map(|(member, report, age)| json!({ "member": member, "seconds_ago": age, "report": report }))
            .collect();
        println!(
            "{:#}",
            json!({ "policy": name, "version": version, "summed": summed, "members": members, "silent": silent })
        );
        return Ok(());
    }
    let module = reports
        .first()
        .map(|(_, report, _)| report["module"].as_str().unwrap_or("?").to_owned())
        .unwrap_or_else(|| "?".to_owned());
    println!(
        "policy {name}: the fleet's shadow is version {version} ({module}); {} members reported",
        reports.len()
    );
    println!(
        "summed: {} agreed, {} disagreed, {} faults, {} dropped",
        count(&summed, "agreed"),
        count(&summed, "disagreed"),
        count(&summed, "faults"),
        count(&summed, "dropped")
    );
    println!(
        "\n{:<16} {:>8} {:>10} {:>7}",
        "QUESTION", "AGREED", "DISAGREED", "FAULTS"
    );
    for (question, counts) in summed["by_question"].as_object().into_iter().flatten() {
        println!(
            "{question:<16} {:>8} {:>10} {:>7}",
            count(counts, "agreed"),
            count(counts, "disagreed"),
            count(counts, "faults")
        );
    }
    println!(
        "\n{:<16} {:<22} {:<30} {:>6}",
        "QUESTION", "LIVE", "SHADOW", "COUNT"
    );
    for pair in summed["pairs"].as_array().into_iter().flatten() {
        let live = pair["live"].as_str().unwrap_or_default();
        let shadow = crate::client::shadow_verdict(pair);
        println!(
            "{:<16} {live:<22} {shadow:<30} {:>6}",
            pair["question"].as_str().unwrap_or_default(),
            count(pair, "count")
        );
    }
    println!(
        "\n{:<20} {:>8} {:>10} {:>7} {:>8}  REPORTED",
        "MEMBER", "AGREED", "DISAGREED", "FAULTS", "DROPPED"
    );
    for (member, report, age) in reports {
        println!(
            "{member:<20} {:>8} {:>10} {:>7} {:>8}  {age:.0} s ago",
            count(report, "agreed"),
            count(report, "disagreed"),
            count(report, "faults"),
            count(report, "dropped")
        );
    }
    for member in &silent {
        println!("{member:<20} no report on version {version} (it does not serve {name} from the fleet, its shadow did not load — its log says why — or it has not reported yet)");
    }
    let examples: Vec<(&String, &Value)> = reports
        .iter()
        .flat_map(|(member, report, _)| {
            report["examples"]
                .as_array()
                .into_iter()
                .flatten()
                .take(EXAMPLES_PER_MEMBER)
                .map(move |example| (member, example))
        })
        .collect();
    if !examples.is_empty() {
        println!("\nfirst disagreements:");
        for (member, example) in examples {
            println!(
                "  {member} #{} {} {}: live {}; shadow {}",
                count(example, "decision"),
                example["server"].as_str().unwrap_or_default(),
                example["question"].as_str().unwrap_or_default(),
                example["live"].as_str().unwrap_or_default(),
                example["shadow"].as_str().unwrap_or_default()
            );
        }
    }
    Ok(())
}
