//! `wardgate events [--follow]`: the gateway's recent events, then (with --follow) new ones
//! as they happen, read from the admin API's Server-Sent Events stream.

use futures::StreamExt;
use serde_json::Value;

use super::show::{fields, text};
use super::table::{status_tone, Paint, Tone};
use super::AdminClient;
use crate::args::Output;

pub async fn print(client: &AdminClient, follow: bool, output: Output) -> anyhow::Result<()> {
    let path = if follow {
        "/events"
    } else {
        "/events?follow=false"
    };
    let response = client.stream(path).await?;
    let paint = Paint::detect();
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    loop {
        let chunk = tokio::select! {
            chunk = body.next() => chunk,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let Some(chunk) = chunk else {
            break;
        };
        let chunk = chunk.map_err(|error| {
            anyhow::anyhow!("the event stream from {} broke off: {error}", client.base)
        })?;
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            if let Some(event) = data_of(&block) {
                if output.json {
                    outln!("{event}");
                } else {
                    outln!("{}", line(&event, paint));
                }
            }
        }
    }
    if follow {
        anyhow::bail!(
            "the gateway at {} closed the event stream (did it stop?)",
            client.base
        );
    }
    Ok(())
}

/// The JSON in an SSE block's `data:` lines; comments and empty blocks have none.
fn data_of(block: &str) -> Option<Value> {
    let data: Vec<&str> = block
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| data.strip_prefix(' ').unwrap_or(data))
        .collect();
    if data.is_empty() {
        return None;
    }
    serde_json::from_str(&data.join("\n")).ok()
}

/// `05:12:03.120  status_changed      github  connecting → online`.
fn line(event: &Value, paint: Paint) -> String {
    let at = text(event, "at");
    let time = at.split('T').nth(1).unwrap_or(&at).trim_end_matches('Z');
    let kind = text(event, "event");
    let server = event.get("server").and_then(Value::as_str).unwrap_or("");
    let what = match kind.as_str() {
        "status_changed" => {
            let to = text(event, "to");
            format!(
                "{} → {}{}",
                text(event, "from"),
                paint.paint(status_tone(&to, false), &to),
                match event.get("reason").and_then(Value::as_str) {
                    Some(reason) if !reason.is_empty() => format!(" ({reason})"),
                    _ => String::new(),
                }
            )
        }
        "reconnecting" => format!(
            "{}attempt {}, next try in {} ms{}",
            match event.get("status").and_then(Value::as_str) {
                Some("error") => "error, ",
                _ => "",
            },
            text(event, "attempt"),
            text(event, "next_delay_ms"),
            match event.get("reason").and_then(Value::as_str) {
                Some(reason) if !reason.is_empty() => format!(" (the last failed: {reason})"),
                _ => String::new(),
            }
        ),
        "reconnected" => match event.get("attempts").and_then(Value::as_u64) {
            Some(0) | None => "back online at the first try".to_owned(),
            Some(1) => "back online after 1 reconnection attempt".to_owned(),
            Some(attempts) => format!("back online after {attempts} reconnection attempts"),
        },
        _ => fields(event, &["id", "at", "event", "server"]),
    };
    let warning = matches!(
        kind.as_str(),
        "health_degraded" | "permanently_failed" | "policy_rejected" | "policy_faulted"
    );
    let kind = paint.paint(
        if warning { Tone::Warn } else { Tone::Plain },
        &format!("{kind:<18}"),
    );
    format!("{time}  {kind}  {server:<12}  {what}")
        .trim_end()
        .to_owned()
}
