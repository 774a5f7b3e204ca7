//! Entry points for the fuzz targets in `fuzz/`: each feeds the fuzzer's bytes to one of the
//! engine's parsers of untrusted input, the way the gateway does, without a network.
//!
//! Not an API (hidden from the docs); only `fuzz/` calls it. It lives in the crate so the
//! targets reach what is private without widening the engine's interface, and so clippy and
//! every build keep it compiling. The async entry points expect a current-thread runtime on
//! a paused clock (the targets build one): no timeout or backoff then costs real time, and
//! a run does not depend on how fast the machine is.

mod messages;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, OAuthSettings};
use crate::downstream::http::jwt::JwtVerifier;
use crate::upstream::sse::events::{event_stream, run_reader, wait_for_endpoint};

pub use messages::{client_messages, server_messages};

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
    );
    let drain = async {
        while let Some(message) = messages.recv().await {
            let _ = serde_json::to_string(&message);
        }
    };
    tokio::join!(reader, drain);
}

/// The test issuer's Ed25519 key (PKCS#8), made for the fuzz target and trusted nowhere.
const TEST_KEY: &[u8] = &[
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
    0x91, 0xa9, 0x26, 0x5a, 0x7f, 0x6a, 0xe9, 0x55, 0xdd, 0x78, 0xb5, 0x64, 0xdd, 0x20, 0x92, 0xf9,
    0x85, 0x23, 0xaa, 0xa6, 0xf3, 0xfd, 0x68, 0x85, 0x3a, 0x8e, 0x5d, 0xbc, 0x74, 0x8c, 0x31, 0x4a,
];

/// The test issuer's published keys: [`TEST_KEY`]'s public half.
const TEST_JWKS: &str = r#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"fuzz","alg":"EdDSA","use":"sig","x":"hl6YBc__GoM6sCebn3o-HPSZtMCDJLVl7Elr_LIUCWk"}]}"#;

fn test_issuer() -> OAuthSettings {
    OAuthSettings {
        issuer: "https://issuer.invalid/".to_owned(),
        resource: "https://gateway.invalid/mcp".to_owned(),
        // Never fetched: the clock is paused, so the keys never age, and a token naming
        // an unknown key sees the last (successful) fetch's outcome. Were it fetched, the
        // discard port on loopback refuses at once.
        jwks_url: Some("http://127.0.0.1:9/jwks".to_owned()),
        client_claim: "client_id".to_owned(),
        grant: crate::config::Grant::All,
        scopes: BTreeMap::new(),
        tool_discovery: None,
    }
}

/// Checks OAuth access tokens as `/mcp` does. The first byte picks what the rest is: a token
/// (any text) checked against the test issuer's keys; the claims of a token the test issuer
/// signs, so the checks after the signature's see any claims; or a JWKS document, against
/// which a well-formed token is checked. Run every input on the same runtime: the verifier
/// of the test issuer's keys is made once (making one costs more than many checks) and its
/// keys must not age, which they do not on a paused clock that never has to wait.
pub async fn jwt(data: &[u8]) {
    static TEST_ISSUER: std::sync::OnceLock<JwtVerifier> = std::sync::OnceLock::new();
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (jwks, token) = match mode % 3 {
        0 => (TEST_JWKS.as_bytes(), text.to_owned()),
        1 => {
            let Ok(claims) = serde_json::from_str::<Value>(text) else {
                return;
            };
            let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
            header.kid = Some("fuzz".to_owned());
            let key = jsonwebtoken::EncodingKey::from_ed_der(TEST_KEY);
            let token = jsonwebtoken::encode(&header, &claims, &key).expect("the test key signs");
            (TEST_JWKS.as_bytes(), token)
        }
        _ => {
            let claims = serde_json::json!({
                "iss": "https://issuer.invalid/",
                "aud": "https://gateway.invalid/mcp",
                "exp": 4_102_444_800_u64,
                "client_id": "fuzz",
                "scope": "mcp:read",
            });
            let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
            header.kid = Some("fuzz".to_owned());
            let key = jsonwebtoken::EncodingKey::from_ed_der(TEST_KEY);
            let token = jsonwebtoken::encode(&header, &claims, &key).expect("the test key signs");
            (rest, token)
        }
    };
    let fresh;
    let verifier = if jwks == TEST_JWKS.as_bytes() {
        TEST_ISSUER.get_or_init(|| {
            JwtVerifier::with_keys(test_issuer(), jwks).expect("the test issuer's keys")
        })
    } else {
        let Ok(verifier) = JwtVerifier::with_keys(test_issuer(), jwks) else {
            return;
        };
        fresh = verifier;
        &fresh
    };
    if let Ok(claims) = verifier.verify(&token).await {
        // The cache of verified tokens answers the second time.
        let again = verifier.verify(&token).await.expect("verified once");
        assert_eq!(claims.holder, again.holder);
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    /// The seeds of `target` in `fuzz/corpus`, by file name.
    fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
        let directory = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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

    // Every seed runs through its target's entry point in `cargo test`, so the entry points
    // keep working between fuzz runs, and a seed added for a fixed crash stays fixed.

    #[test]
    fn config_seeds_pass() {
        for (_, seed) in seeds("config") {
            super::config(&seed);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn sse_and_jwt_seeds_pass() {
        for (_, seed) in seeds("sse") {
            super::sse(&seed).await;
        }
        for (_, seed) in seeds("jwt") {
            super::jwt(&seed).await;
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

    #[tokio::test(start_paused = true)]
    async fn client_seeds_are_answered() {
        for (name, seed) in seeds("client_message") {
            let answered = super::client_messages(&seed).await;
            if name == "calls.jsonl" {
                assert_eq!(answered, 4, "{name}");
            }
        }
    }
}
