//! The status page at `/`: HTML, CSS and JavaScript modules embedded in the binary (nothing
//! loads from elsewhere), sent gzip-compressed with strong ETags, and `GET /gateway`, the
//! gateway's own health as the page shows it.

use std::io::Write;
use std::sync::LazyLock;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::StatusCode;
use sha2::{Digest, Sha256};

use super::reply::{self, Response};
use super::Admin;

const INDEX: &str = include_str!("../../assets/status/index.html");
const STYLE: &str = include_str!("../../assets/status/app.css");
const ICON: &str = include_str!("../../assets/status/favicon.svg");
/// The script's entry module. No build step bundles the modules it imports (below): the
/// browser loads each from `/ui/NAME.js` itself.
const SCRIPT: &str = include_str!("../../assets/status/app.js");
const ACTIONS_MODULE: &str = include_str!("../../assets/status/actions.js");
const DOM_MODULE: &str = include_str!("../../assets/status/dom.js");
const FEED_MODULE: &str = include_str!("../../assets/status/feed.js");
const FORMAT_MODULE: &str = include_str!("../../assets/status/format.js");
const HEALTH_MODULE: &str = include_str!("../../assets/status/health.js");
const PANELS_MODULE: &str = include_str!("../../assets/status/panels.js");
const ROWS_MODULE: &str = include_str!("../../assets/status/rows.js");
const STATE_MODULE: &str = include_str!("../../assets/status/state.js");
const TIMELINE_MODULE: &str = include_str!("../../assets/status/timeline.js");
const TOKEN_MODULE: &str = include_str!("../../assets/status/token.js");
const TRAFFIC_MODULE: &str = include_str!("../../assets/status/traffic.js");

/// The content type of the script's entry module and of every module it imports.
const JAVASCRIPT: &str = "text/javascript; charset=utf-8";

/// Only this origin's own files run, nothing may frame the page (its buttons restart
/// servers), and no form or link leaves it.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// One file of the page, as sent: plain, and gzip-compressed unless that is no smaller.
pub struct Asset {
    content_type: &'static str,
    plain: Encoded,
    gzip: Option<Encoded>,
}

/// One encoding of a file, with its strong validator: a hash of exactly these bytes, so the
/// plain and the compressed file never share an ETag.
struct Encoded {
    body: Bytes,
    etag: HeaderValue,
}

impl Encoded {
    fn new(body: Vec<u8>) -> Encoded {
        let digest = Sha256::digest(&body);
        let hex: String = digest[..16]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        Encoded {
            etag: HeaderValue::from_str(&format!("\"{hex}\""))
                .expect("hex digits are a header value"),
            body: Bytes::from(body),
        }
    }
}

impl Asset {
    fn new(content_type: &'static str, text: &'static str) -> Asset {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let compressed = encoder
            .write_all(text.as_bytes())
            .and_then(|()| encoder.finish())
            .ok()
            .filter(|compressed| compressed.len() < text.len());
        Asset {
            content_type,
            plain: Encoded::new(text.as_bytes().to_vec()),
            gzip: compressed.map(Encoded::new),
        }
    }
}

/// Compressed once, on the first request for any of them (the binary's files never change
/// while it runs).
static ASSETS: LazyLock<[Asset; 15]> = LazyLock::new(|| {
    [
        Asset::new("text/html; charset=utf-8", INDEX),
        Asset::new(JAVASCRIPT, SCRIPT),
        Asset::new("text/css; charset=utf-8", STYLE),
        Asset::new("image/svg+xml", ICON),
        Asset::new(JAVASCRIPT, ACTIONS_MODULE),
        Asset::new(JAVASCRIPT, DOM_MODULE),
        Asset::new(JAVASCRIPT, FEED_MODULE),
        Asset::new(JAVASCRIPT, FORMAT_MODULE),
        Asset::new(JAVASCRIPT, HEALTH_MODULE),
        Asset::new(JAVASCRIPT, PANELS_MODULE),
        Asset::new(JAVASCRIPT, ROWS_MODULE),
        Asset::new(JAVASCRIPT, STATE_MODULE),
        Asset::new(JAVASCRIPT, TIMELINE_MODULE),
        Asset::new(JAVASCRIPT, TOKEN_MODULE),
        Asset::new(JAVASCRIPT, TRAFFIC_MODULE),
    ]
});

/// The page's files by path; none of them holds data, so they are served without the token
/// (the page asks for it, and sends it with every request for data).
pub fn asset(path: &str) -> Option<&'static Asset> {
    let index = match path {
        "" | "/" | "/index.html" => 0,
        "/ui/app.js" => 1,
        "/ui/app.css" => 2,
        "/ui/favicon.svg" => 3,
        "/ui/actions.js" => 4,
        "/ui/dom.js" => 5,
        "/ui/feed.js" => 6,
        "/ui/format.js" => 7,
        "/ui/health.js" => 8,
        "/ui/panels.js" => 9,
        "/ui/rows.js" => 10,
        "/ui/state.js" => 11,
        "/ui/timeline.js" => 12,
        "/ui/token.js" => 13,
        "/ui/traffic.js" => 14,
        _ => return None,
    };
    Some(&ASSETS[index])
}

/// The file in the encoding the request accepts, or `304 Not Modified` when the request's
/// `If-None-Match` names the ETag of what would be sent.
pub fn serve(asset: &Asset, request: &HeaderMap) -> Response {
    let (encoded, gzip) = match &asset.gzip {
        Some(compressed) if accepts_gzip(request) => (compressed, true),
        _ => (&asset.plain, false),
    };
    let mut response = if matches_none_of(request, &encoded.etag) {
        let mut response = reply::bytes(StatusCode::OK, asset.content_type, encoded.body.clone());
        if gzip {
            response
                .headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        response
    } else {
        let mut response = reply::bytes(StatusCode::NOT_MODIFIED, asset.content_type, Bytes::new());
        response.headers_mut().remove(header::CONTENT_TYPE);
        response
    };
    let headers = response.headers_mut();
    headers.insert(header::ETAG, encoded.etag.clone());
    for (name, value) in [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        // The files change with the binary: a browser asks again every time, and the
        // ETag makes the answer a 304 until the gateway is upgraded.
        ("cache-control", "no-cache"),
        ("vary", "accept-encoding"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Whether `Accept-Encoding` allows gzip: named (or `x-gzip`), else `*`, with a q above 0.
fn accepts_gzip(request: &HeaderMap) -> bool {
    let mut named = None;
    let mut any = None;
    for value in request.get_all(header::ACCEPT_ENCODING) {
        for item in value.to_str().unwrap_or("").split(',') {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let weight = parts
                .filter_map(|parameter| parameter.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            match coding.as_str() {
                "gzip" | "x-gzip" => named = Some(weight),
                "*" => any = Some(weight),
                _ => {}
            }
        }
    }
    named.or(any).is_some_and(|weight| weight > 0.0)
}

/// False when `If-None-Match` is `*` or names `etag` (weakly compared, as RFC 9110 asks for
/// this header); true otherwise, and when there is none.
fn matches_none_of(request: &HeaderMap, etag: &HeaderValue) -> bool {
    let etag = etag.to_str().unwrap_or("");
    !request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("").split(','))
        .map(|tag| tag.trim())
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

/// When the gateway started, for `/gateway`.
pub struct Started {
    pub at: SystemTime,
    pub instant: Instant,
}

impl Started {
    pub fn now() -> Started {
        Started {
            at: SystemTime::now(),
            instant: Instant::now(),
        }
    }
}

/// `GET /gateway`: version, uptime, readiness and how many servers are online.
pub fn gateway(admin: &Admin) -> Response {
    let servers = admin.gateway.servers();
    let online = servers
        .iter()
        .filter(|server| server.status == wardgate_engine::status::StatusName::Online)
        .count();
    let reasons = admin.policies.not_ready();
    reply::ok(&serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "started_at": humantime::format_rfc3339_millis(admin.started.at).to_string(),
        "uptime_ms": u64::try_from(admin.started.instant.elapsed().as_millis()).unwrap_or(u64::MAX),
        "ready": reasons.is_empty(),
        "reasons": reasons,
        "servers": servers.len(),
        "online": online,
        "config": admin.gateway.config().source.display().to_string(),
        "admin_token": admin.token_required,
        // `[gateway.telemetry] trace_url`: where a decision's trace is shown.
        "trace_url": admin.gateway.config().gateway.telemetry.as_ref().and_then(|telemetry| telemetry.trace_url.clone()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| (name.clone(), HeaderValue::from_static(value)))
            .collect()
    }

    #[test]
    fn gzip_is_sent_only_where_accept_encoding_allows_it() {
        let accepts = |value| accepts_gzip(&headers(&[(header::ACCEPT_ENCODING, value)]));
        assert!(accepts("gzip, deflate, br, zstd"));
        assert!(accepts("br;q=1.0, GZIP;q=0.5"));
        assert!(accepts("*"));
        assert!(!accepts("gzip;q=0"));
        assert!(!accepts("*;q=0.5, gzip;q=0.000"));
        assert!(!accepts("identity"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn if_none_match_names_the_etag_weakly_or_as_a_star() {
        let etag = HeaderValue::from_static("\"abc\"");
        let fresh = |value| matches_none_of(&headers(&[(header::IF_NONE_MATCH, value)]), &etag);
        assert!(!fresh("\"abc\""));
        assert!(!fresh("\"x\", W/\"abc\""));
        assert!(!fresh("*"));
        assert!(fresh("\"abcd\""));
        assert!(matches_none_of(&HeaderMap::new(), &etag));
    }

    #[test]
    fn every_file_is_compressed_and_its_two_encodings_have_different_etags() {
        for path in [
            "/",
            "/ui/app.js",
            "/ui/app.css",
            "/ui/actions.js",
            "/ui/dom.js",
            "/ui/feed.js",
            "/ui/format.js",
            "/ui/health.js",
            "/ui/panels.js",
            "/ui/rows.js",
            "/ui/state.js",
            "/ui/timeline.js",
            "/ui/token.js",
            "/ui/traffic.js",
        ] {
            let asset = asset(path).unwrap();
            let gzip = asset.gzip.as_ref().expect("text compresses");
            assert!(gzip.body.len() < asset.plain.body.len());
            assert_ne!(gzip.etag, asset.plain.etag);
            let mut plain = Vec::new();
            std::io::Read::read_to_end(
                &mut flate2::read::GzDecoder::new(&gzip.body[..]),
                &mut plain,
            )
            .unwrap();
            assert_eq!(plain, asset.plain.body);
        }
    }
}
