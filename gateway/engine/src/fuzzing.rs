//! Entry points for the fuzz targets in `fuzz/`: each feeds the fuzzer's bytes to one of the
//! engine's parsers of untrusted input, the way the gateway does, without a network (the
//! client-facing targets, `client_message` and `jwt`, are `wardgate_downstream::fuzzing`'s).
//!
//! Not an API (hidden from the docs); only `fuzz/` calls it. It lives in the crate so the
//! targets reach what is private without widening the engine's interface, and so clippy and
//! every build keep it compiling. The async entry points expect a current-thread runtime on
//! a paused clock (the targets build one): no timeout or backoff then costs real time, and
//! a run does not depend on how fast the machine is.

mod messages;

use std::path::Path;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::upstream::sse::events::{event_stream, run_reader, wait_for_endpoint};

pub use messages::{id_of, lines, server_messages};

/// What a `${VAR}` in a fuzzed config expands to: if it ever shows in a description of a
/// transport, that description leaked a variable's value.
const ENV_VALUE: &str = "fuzz-env-value-7d1c";

/// Parses `data` as a TOML config and as a JSON one, as `wardgate check` would, and renders
/// what a valid one shows. Errors are expected; a panic, or a variable's value in a
/// transport's description (which must show `${VAR}` as written), is a bug.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env = |name: &str| (!name.starts_with("UNSET")).then(|| ENV_VALUE.to_owned());
    for path in ["/fuzz/wardgate.toml", "/fuzz/mcp.json"] {
        match Config::parse(Path::new(path), text, &env) {
            Ok(config) => {
                let _ = config.summary();
                if text.contains(ENV_VALUE) {
                    continue;
                }
                for server in config.servers.values() {
                    let shown = format!("{} {:?}", server.transport.describe(), server.transport);
                    assert!(
                        !shown.contains(ENV_VALUE),
                        "server {:?} shows a variable's value: {shown}",
                        server.name
                    );
                }
            }
            Err(error) => {
                let _ = error.to_string();
            }
        }
    }
}

/// Splits `data` into a list of cut points and the bytes they cut: the first byte says how
/// many cuts (up to 15), each taking two bytes (an offset, little-endian). The pieces are
/// what arrives in one read, so parsers meet every way a message can be split.
fn pieces(data: &[u8]) -> Vec<&[u8]> {
    let Some((&count, rest)) = data.split_first() else {
        return Vec::new();
    };
    let count = usize::from(count % 16).min(rest.len() / 2);
    let (offsets, body) = rest.split_at(count * 2);
    let mut cuts: Vec<usize> = offsets
        .chunks_exact(2)
        .map(|pair| usize::from(u16::from_le_bytes([pair[0], pair[1]])) % (body.len() + 1))
        .collect();
    cuts.push(0);
    cuts.push(body.len());
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2)
        .map(|pair| &body[pair[0]..pair[1]])
        .collect()
}

/// Feeds `data`, cut into reads as [`pieces`] says, to the legacy SSE transport's event
/// side: the size limit and the event parser, the wait for the `endpoint` event and its
/// resolution against the stream's URL, then the reader that turns `message` events into
/// JSON-RPC messages.
pub async fn sse(data: &[u8]) {
    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = pieces(data)
        .into_iter()
        .map(|piece| Ok(bytes::Bytes::copy_from_slice(piece)))
        .collect();
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let response = reqwest::Response::from(http::Response::new(body));
    let mut events = event_stream(response);
    let Ok(announced) = wait_for_endpoint(&mut events).await else {
        return;
    };
    let stream_url = reqwest::Url::parse("http://127.0.0.1:9/sse?token=x").expect("a URL");
    if let Ok(endpoint) = crate::upstream::sse::resolve_endpoint(&stream_url, &announced) {
        assert_eq!(
            endpoint.origin(),
            stream_url.origin(),
            "endpoint {announced:?} leaves the stream's origin"
        );
    }
    let (sender, mut messages) = mpsc::channel(8);
    let reader = run_reader(
        events,
        sender,
        CancellationToken::new(),
        "fuzz".to_owned(),
        "fuzz".to_owned(),
        Default::default(),
    );
    let drain = async {
        while let Some(message) = messages.recv().await {
            let _ = serde_json::to_string(&message);
        }
    };
    tokio::join!(reader, drain);
}

/// The committed seeds of fuzz target `target` (`fuzz/corpus/TARGET`), by file name: what
/// the unit tests of every crate's fuzz entry points run, so an entry point keeps working
/// between fuzz runs, and a seed added for a fixed crash stays fixed.
pub fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let directory = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut seeds: Vec<_> = std::fs::read_dir(&directory)
        .unwrap_or_else(|error| panic!("{}: {error}", directory.display()))
        .map(|entry| {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().expect("a file name").to_string_lossy();
            (name.into_owned(), std::fs::read(&path).expect("a seed"))
        })
        .collect();
    seeds.sort();
    seeds
}

#[cfg(test)]
mod tests {
    use super::seeds;

    // Every seed runs through its target's entry point in `cargo test`, so the entry points
    // keep working between fuzz runs, and a seed added for a fixed crash stays fixed.

    #[test]
    fn config_seeds_pass() {
        for (_, seed) in seeds("config") {
            super::config(&seed);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn sse_seeds_pass() {
        for (_, seed) in seeds("sse") {
            super::sse(&seed).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn server_seeds_reach_discovery() {
        for (name, seed) in seeds("server_message") {
            let listed = super::server_messages(&seed).await;
            if name == "discovery.jsonl" {
                assert_eq!(listed, Some(2), "{name}");
            }
        }
    }
}
