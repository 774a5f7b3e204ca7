//! Timelines as text (one policy, or two side by side), the backoff curve as an ASCII chart, and both as JSON.

use std::fmt::Write;

use serde_json::{json, Value};

use super::{format_delay, format_time, BackoffCurve, Entry, Script, Timeline};

/// One policy's run of a script, under the label the output uses for it.
pub struct Column {
    pub label: String,
    pub timeline: Timeline,
}

/// The chart's total width: it must fit an 80-column terminal.
const CHART_WIDTH: usize = 80;
const CHART_HEIGHT: usize = 12;
/// Bar characters, one per series.
const BARS: [char; 2] = ['#', '='];

fn width_of(texts: impl Iterator<Item = usize>, floor: usize, cap: usize) -> usize {
    texts.max().unwrap_or(0).clamp(floor, cap)
}

fn header(script: &Script) -> String {
    format!(
        "scenario {} ({}): {}\n\n",
        script.name,
        script.transport.as_str(),
        script.summary
    )
}

fn truncation_note(label: &str, timeline: &Timeline) -> String {
    match timeline.truncated {
        true => format!(
            "note: {label}'s run stopped at the simulator's step limit (a policy that retries without delay, or a very long trace)\n"
        ),
        false => String::new(),
    }
}

/// The timeline of one policy: time, event, decision, status.
pub fn print_single(script: &Script, column: &Column) -> String {
    let entries = &column.timeline.entries;
    let event_width = width_of(
        entries.iter().map(|entry| entry.event.chars().count()),
        5,
        60,
    );
    let decision_width = width_of(
        entries.iter().map(|entry| entry.decision.chars().count()),
        8,
        46,
    );
    let mut out = header(script);
    let _ = writeln!(
        out,
        "{:>11}  {:<event_width$}  {:<decision_width$}  status",
        "time", "event", "decision"
    );
    for entry in entries {
        let decision = if entry.decision.is_empty() {
            "·"
        } else {
            &entry.decision
        };
        let _ = writeln!(
            out,
            "{:>11}  {:<event_width$}  {:<decision_width$}  {}",
            format_time(entry.at_ms),
            entry.event,
            decision,
            entry.status
        );
    }
    out.push_str(&truncation_note(&column.label, &column.timeline));
    out
}

fn cell(entry: Option<&Entry>) -> String {
    match entry {
        None => String::new(),
        Some(entry) if entry.decision.is_empty() => format!("[{}]", entry.status),
        Some(entry) => format!("{} [{}]", entry.decision, entry.status),
    }
}

/// Rows of two timelines, paired where both saw the same event at the same time.
fn merge<'a>(
    left: &'a [Entry],
    right: &'a [Entry],
) -> Vec<(u64, &'a str, Option<&'a Entry>, Option<&'a Entry>)> {
    let (mut i, mut j, mut rows) = (0, 0, Vec::new());
    loop {
        match (left.get(i), right.get(j)) {
            (Some(a), Some(b)) if a.at_ms == b.at_ms && a.event == b.event => {
                rows.push((a.at_ms, a.event.as_str(), Some(a), Some(b)));
                (i, j) = (i + 1, j + 1);
            }
            (Some(a), Some(b)) if a.at_ms <= b.at_ms => {
                rows.push((a.at_ms, a.event.as_str(), Some(a), None));
                i += 1;
            }
            (Some(a), None) => {
                rows.push((a.at_ms, a.event.as_str(), Some(a), None));
                i += 1;
            }
            (_, Some(b)) => {
                rows.push((b.at_ms, b.event.as_str(), None, Some(b)));
                j += 1;
            }
            (None, None) => return rows,
        }
    }
}

/// Whether two runs decided alike, and where they first part.
pub fn comparison(left: &Column, right: &Column) -> String {
    let (a, b) = (&left.timeline.entries, &right.timeline.entries);
    match a.iter().zip(b.iter()).position(|(x, y)| x != y) {
        None if a.len() == b.len() => format!(
            "identical decisions: {} and {} agree at all {} steps",
            left.label,
            right.label,
            a.len()
        ),
        position => {
            let index = position.unwrap_or(a.len().min(b.len()));
            let first = a.get(index).or(b.get(index)).map_or(0, |entry| entry.at_ms);
            let rows = merge(a, b);
            let differing = rows.iter().filter(|row| cell(row.2) != cell(row.3)).count();
            format!(
                "decisions differ at {differing} of {} steps, first at {}:\n  {}: {}\n  {}: {}",
                rows.len(),
                format_time(first),
                left.label,
                a.get(index).map_or_else(|| "(nothing)".into(), describe),
                right.label,
                b.get(index).map_or_else(|| "(nothing)".into(), describe),
            )
        }
    }
}

fn describe(entry: &Entry) -> String {
    let decision = if entry.decision.is_empty() {
        "no decision"
    } else {
        &entry.decision
    };
    format!(
        "{} at {} → {decision} [{}]",
        entry.event,
        format_time(entry.at_ms),
        entry.status
    )
}

/// Two timelines side by side: one column of events, one of decisions per policy.
pub fn print_pair(script: &Script, left: &Column, right: &Column) -> String {
    let rows = merge(&left.timeline.entries, &right.timeline.entries);
    let event_width = width_of(rows.iter().map(|row| row.1.chars().count()), 5, 60);
    let cells: Vec<(String, String)> = rows.iter().map(|row| (cell(row.2), cell(row.3))).collect();
    let left_width = width_of(
        cells.iter().map(|(a, _)| a.chars().count()),
        left.label.len(),
        50,
    );
    let mut out = header(script);
    let _ = writeln!(
        out,
        "{:>11}  {:<event_width$} | {:<left_width$} | {}",
        "time", "event", left.label, right.label
    );
    for (row, (a, b)) in rows.iter().zip(&cells) {
        let _ = writeln!(
            out,
            "{:>11}  {:<event_width$} | {:<left_width$} | {}",
            format_time(row.0),
            row.1,
            a,
            b
        );
    }
    out.push_str(&truncation_note(&left.label, &left.timeline));
    out.push_str(&truncation_note(&right.label, &right.timeline));
    let _ = writeln!(out, "{}", comparison(left, right));
    out
}

/// The reconnect backoff of one or two policies as a bar chart 80 columns wide: attempt
/// on x, delay on y (linear), `X` where a policy stops reconnecting.
pub fn backoff_chart(series: &[(String, BackoffCurve)]) -> String {
    let series = &series[..series.len().min(BARS.len())];
    let attempts = series
        .iter()
        .map(|(_, curve)| curve.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let max_delay = series
        .iter()
        .flat_map(|(_, curve)| curve.iter().filter_map(|(_, delay)| *delay))
        .max()
        .unwrap_or(0)
        .max(1);
    let labels = [format_delay(max_delay), format_delay(max_delay / 2)];
    let label_width = labels
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max("attempt".len())
        + 2;
    let column_width = ((CHART_WIDTH - label_width - 2) / attempts).max(2);
    let bar_width = ((column_width - 1) / series.len().max(1)).max(1);
    // Bar heights in rows; a non-zero delay always shows at least one row.
    let height = |delay: u64| {
        ((delay as u128 * CHART_HEIGHT as u128 + max_delay as u128 / 2) / max_delay as u128)
            .max(u128::from(delay > 0)) as usize
    };
    let mut out =
        String::from("reconnect backoff: delay before each attempt (jitter seeded by attempt)\n");
    for row in (1..=CHART_HEIGHT).rev() {
        let label = match row {
            CHART_HEIGHT => labels[0].as_str(),
            _ if row == CHART_HEIGHT / 2 => labels[1].as_str(),
            _ => "",
        };
        let _ = write!(out, "{label:>w$} |", w = label_width - 2);
        for attempt in 0..attempts {
            for (index, (_, curve)) in series.iter().enumerate() {
                let mark = match curve.get(attempt) {
                    Some((_, Some(delay))) if height(*delay) >= row => BARS[index],
                    Some((_, None)) if row == 1 => 'X',
                    _ => ' ',
                };
                out.extend(std::iter::repeat_n(mark, bar_width));
            }
            out.extend(std::iter::repeat_n(
                ' ',
                column_width - bar_width * series.len(),
            ));
        }
        out = out.trim_end().to_string() + "\n";
    }
    let _ = writeln!(
        out,
        "{:>w$} +{}",
        "0",
        "-".repeat(column_width * attempts),
        w = label_width - 2
    );
    let _ = write!(out, "{:>w$}  ", "attempt", w = label_width - 2);
    for attempt in 1..=attempts {
        let _ = write!(out, "{:<column_width$}", attempt);
    }
    out = out.trim_end().to_string() + "\n";
    for (index, (label, curve)) in series.iter().enumerate() {
        let values: Vec<String> = curve
            .iter()
            .map(|(attempt, delay)| match delay {
                Some(delay) => format!("#{attempt} {}", format_delay(*delay)),
                None => format!("#{attempt} stop"),
            })
            .collect();
        out.push_str(&wrap(
            &format!("{} {label}: {}", BARS[index], values.join(", ")),
            CHART_WIDTH,
        ));
    }
    out
}

/// Breaks `text` into lines of at most `width` characters at spaces, indenting the rest.
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            out.push_str(line.trim_end());
            out.push('\n');
            line = String::from("   ");
        } else if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// A timeline as JSON: one object per entry.
pub fn timeline_json(timeline: &Timeline) -> Value {
    let entries: Vec<Value> = timeline
        .entries
        .iter()
        .map(|entry| {
            json!({
                "at_ms": entry.at_ms,
                "time": format_time(entry.at_ms),
                "event": entry.event,
                "decision": (!entry.decision.is_empty()).then_some(&entry.decision),
                "delay_ms": entry.delay_ms,
                "asked": entry.asked.iter().map(|question| question.name()).collect::<Vec<_>>(),
                "status": entry.status,
            })
        })
        .collect();
    json!({ "truncated": timeline.truncated, "entries": entries })
}

/// A backoff curve as JSON: `{"attempt": 1, "delay_ms": 1000}`, or `"stop": true`.
pub fn curve_json(curve: &[(u32, Option<u64>)]) -> Value {
    curve
        .iter()
        .map(|(attempt, delay)| match delay {
            Some(delay_ms) => json!({ "attempt": attempt, "delay_ms": delay_ms }),
            None => json!({ "attempt": attempt, "stop": true }),
        })
        .collect()
}

/// What a script is, as JSON.
pub fn script_json(script: &Script) -> Value {
    json!({
        "name": script.name,
        "summary": script.summary,
        "transport": script.transport.as_str(),
        "end_ms": script.end_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_fits_eighty_columns_and_marks_a_stop() {
        let chart = backoff_chart(&[
            (
                "a".into(),
                (1..=12).map(|n| (n, Some(1_000u64 << n.min(8)))).collect(),
            ),
            (
                "b".into(),
                vec![(1, Some(1_000)), (2, Some(2_000)), (3, None)],
            ),
        ]);
        assert!(
            chart
                .lines()
                .all(|line| line.chars().count() <= CHART_WIDTH),
            "{chart}"
        );
        assert!(chart.contains('X') && chart.contains("#3 stop"), "{chart}");
    }
}
