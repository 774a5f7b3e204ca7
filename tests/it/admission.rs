//! Connection admission: one address holding more idle connections than the cap cannot
//! keep another address out, and sockets that never make a request are closed.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::ServiceExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty HTTP/2 SETTINGS frame: a complete HTTP/2 connection start, with no stream.
const SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];

/// The second loopback address the other client comes from.
const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

fn address(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches("/mcp")
        .to_owned()
}

/// A self-signed certificate for 127.0.0.1, written into the config's directory.
struct Certificate {
    pem: String,
    cert: String,
    key: String,
}

fn certificate(config: &ConfigFile) -> Certificate {
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let cert = config.dir.path().join("cert.pem");
    let key = config.dir.path().join("key.pem");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    Certificate {
        pem: certified.cert.pem(),
        cert: cert.to_str().unwrap().to_owned(),
        key: key.to_str().unwrap().to_owned(),
    }
}

/// `wardgate --listen 127.0.0.1:0` over TLS with `certificate`, `env` added; its URL.
async fn spawn_tls(
    config: &ConfigFile,
    certificate: &Certificate,
    env: &[(&str, &str)],
) -> (tokio::process::Child, String) {
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        &certificate.cert,
        "--tls-key",
        &certificate.key,
    ];
    spawn_gateway_listening(config, &args, env).await
}

fn tls_connector(pem: &str) -> tokio_rustls::TlsConnector {
    use rustls_pki_types::pem::PemObject;
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// What one socket from 127.0.0.1 does after connecting, and then nothing more.
#[derive(Debug, Clone, Copy)]
enum Idle {
    /// Sends nothing at all.
    Silent,
    /// Sends half the HTTP/2 preface.
    HalfPreface,
    /// Starts HTTP/2 (preface and settings) and opens no stream.
    Http2NoStream,
    /// Finishes a TLS handshake and sends nothing.
    TlsSilent,
}

/// Open `count` sockets of each kind to `address` from 127.0.0.1; they are held until
/// dropped. A socket the gateway refuses or closes is dropped too.
async fn hold(
    address: &str,
    kinds: &[Idle],
    count: usize,
    pem: Option<&str>,
) -> Vec<Box<dyn std::any::Any>> {
    let mut held: Vec<Box<dyn std::any::Any>> = Vec::new();
    for kind in kinds {
        for _ in 0..count {
            let Ok(mut stream) = TcpStream::connect(address).await else {
                continue;
            };
            match kind {
                Idle::Silent => held.push(Box::new(stream)),
                Idle::HalfPreface => {
                    let _ = stream.write_all(&PREFACE[..12]).await;
                    held.push(Box::new(stream));
                }
                Idle::Http2NoStream => {
                    let _ = stream.write_all(PREFACE).await;
                    let _ = stream.write_all(SETTINGS).await;
                    held.push(Box::new(stream));
                }
                Idle::TlsSilent => {
                    let connector = tls_connector(pem.expect("a certificate for TLS"));
                    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
                    let handshake = tokio::time::timeout(
                        Duration::from_secs(5),
                        connector.connect(name, stream),
                    );
                    if let Ok(Ok(tls)) = handshake.await {
                        held.push(Box::new(tls));
                    }
                }
            }
        }
    }
    held
}

/// A whole session from 127.0.0.2: initialize, call, answer.
async fn serves_another_address(url: &str, pem: Option<&str>) {
    let mut http = reqwest::Client::builder()
        .local_address(OTHER)
        .timeout(Duration::from_secs(20));
    if let Some(pem) = pem {
        http = http.tls_certs_only([reqwest::Certificate::from_pem(pem.as_bytes()).unwrap()]);
    }
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        http.build().unwrap(),
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
    );
    let client = tokio::time::timeout(
        Duration::from_secs(20),
        TestClient::default().serve(transport),
    )
    .await
    .expect("a client from another address was answered")
    .expect("a client from another address initialized");
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        client
            .peer()
            .call_tool(call("s__echo", json!({"text": "let in"}))),
    )
    .await
    .expect("its call was answered")
    .expect("its call succeeded");
    assert_eq!(text_of(&result), "let in");
}

/// What a fresh connection from 127.0.0.1 is told at once: the 503 naming its address's share.
async fn refused_for_its_share(address: &str) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut answer))
        .await
        .expect("the refusal came at once")
        .unwrap_or(0);
    String::from_utf8_lossy(&answer[..read]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_from_one_address_do_not_keep_another_out() {
    let config = config(&stdio_server("s", &[]));
    // A cap of 64, and deadlines longer than the test: only the per-address share can let
    // the other client in.
    let env = [
        ("WARDGATE_MAX_CONNECTIONS", "64"),
        ("WARDGATE_HEADER_TIMEOUT_MS", "600000"),
        ("WARDGATE_CONNECTION_IDLE_MS", "600000"),
    ];
    let (_gateway, url) = spawn_gateway_http_with_env(&config, &env).await;
    let address = address(&url);
    let kinds = [Idle::Silent, Idle::HalfPreface, Idle::Http2NoStream];
    let held = hold(&address, &kinds, 30, None).await;
    assert!(
        held.len() >= 64,
        "{} sockets held, more than the cap was meant",
        held.len()
    );
    let refusal = refused_for_its_share(&address).await;
    assert!(refusal.starts_with("HTTP/1.1 503"), "{refusal}");
    assert!(
        refusal.contains("127.0.0.1 has 16 client connections open, its share"),
        "{refusal}"
    );
    serves_another_address(&url, None).await;
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tls_sockets_from_one_address_do_not_keep_another_out() {
    let config = config(&stdio_server("s", &[]));
    let certificate = certificate(&config);
    let (_gateway, url) = spawn_tls(
        &config,
        &certificate,
        &[
            ("WARDGATE_MAX_CONNECTIONS", "64"),
            ("WARDGATE_HEADER_TIMEOUT_MS", "600000"),
            ("WARDGATE_CONNECTION_IDLE_MS", "600000"),
        ],
    )
    .await;
    let address = address(&url);
    let held = hold(
        &address,
        &[Idle::Silent, Idle::TlsSilent],
        40,
        Some(&certificate.pem),
    )
    .await;
    assert!(held.len() >= 16, "{} sockets held", held.len());
    serves_another_address(&url, Some(&certificate.pem)).await;
    drop(held);
}

/// Read until the peer closes; "still open" if it has not after `limit`.
async fn until_closed<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    limit: Duration,
) -> &'static str {
    let mut buffer = vec![0u8; 4096];
    let closed = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    };
    match tokio::time::timeout(limit, closed).await {
        Ok(()) => "closed",
        Err(_) => "still open",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_that_never_make_a_request_are_closed() {
    let config = config(&stdio_server("s", &[]));
    let certificate = certificate(&config);
    let env = [
        ("WARDGATE_HEADER_TIMEOUT_MS", "1000"),
        ("WARDGATE_CONNECTION_IDLE_MS", "1000"),
    ];
    let (_plain, url) = spawn_gateway_http_with_env(&config, &env).await;
    let (_tls, tls_url) = spawn_tls(&config, &certificate, &env).await;
    let tls_address = address(&tls_url);
    let address = address(&url);
    for kind in [Idle::Silent, Idle::HalfPreface, Idle::Http2NoStream] {
        let mut held = hold(&address, &[kind], 1, None).await;
        let stream = held[0].downcast_mut::<TcpStream>().unwrap();
        assert_eq!(
            until_closed(stream, Duration::from_secs(30)).await,
            "closed",
            "{kind:?}"
        );
    }
    let mut held = hold(&tls_address, &[Idle::TlsSilent], 1, Some(&certificate.pem)).await;
    let stream = held[0]
        .downcast_mut::<tokio_rustls::client::TlsStream<TcpStream>>()
        .unwrap();
    assert_eq!(
        until_closed(stream, Duration::from_secs(30)).await,
        "closed"
    );
    // An HTTP/1.1 keep-alive connection, idle after its answer, is closed too.
    let mut keep_alive = TcpStream::connect(&address).await.unwrap();
    keep_alive
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        until_closed(&mut keep_alive, Duration::from_secs(30)).await,
        "closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_half_sent_admin_requests_leaves_mcp_and_restarts_working() {
    let config = config(&stdio_server("s", &[]));
    let gateway = crate::admin::support::start(config, &[], &[]).await;
    let pid = gateway.process.id().unwrap();
    // The file-descriptor limit the review ran with: 1,100 admin connections exhausted it.
    let limit = libc::rlimit {
        rlim_cur: 1024,
        rlim_max: 1024,
    };
    // SAFETY: prlimit sets the limit of the process this test spawned and writes nothing
    // back (the old limit is not asked for).
    let set = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(
        set, 0,
        "could not lower the gateway's file-descriptor limit"
    );
    let mut held = Vec::new();
    for _ in 0..1100 {
        if let Ok(mut stream) = TcpStream::connect(&gateway.address).await {
            let _ = stream
                .write_all(b"GET /servers HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .await;
            held.push(stream);
        }
    }
    // One more from this address (once its accept rate has room again: past it, connections
    // are closed unread) is told at once that its share is taken.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let refusal = refused_for_its_share(&gateway.address).await;
    assert!(
        refusal.starts_with("HTTP/1.1 503") && refusal.contains("admin API connections open"),
        "{refusal}"
    );
    // /mcp serves, and a killed stdio server is restarted.
    let (client, _) = http_client(&gateway.mcp).await;
    let server_pid = |result: rmcp::model::CallToolResult| text_of(&result);
    let first = server_pid(
        client
            .peer()
            .call_tool(call("s__pid", json!({})))
            .await
            .expect("s__pid"),
    );
    // SAFETY: kill sends a signal to the fake server the gateway spawned.
    unsafe { libc::kill(first.parse::<i32>().unwrap(), libc::SIGKILL) };
    let restarted = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Ok(result) = client.peer().call_tool(call("s__pid", json!({}))).await {
                let now = text_of(&result);
                if !result.is_error.unwrap_or(false) && now != first {
                    return now;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the killed server was restarted while the admin API was flooded");
    assert_ne!(restarted, first);
    // The admin API still answers another address.
    let other = reqwest::Client::builder()
        .local_address(OTHER)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let answer = other
        .get(format!("{}/servers", gateway.url))
        .send()
        .await
        .expect("the admin API answered another address");
    assert_eq!(answer.status().as_u16(), 200);
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_address_share_is_a_setting() {
    let config = config(&format!(
        "[gateway.http]\nmax_connections_per_address = 2\n\n{}",
        stdio_server("s", &[])
    ));
    let (_gateway, url) = spawn_gateway_http_with_env(&config, &[]).await;
    let address = address(&url);
    let held = hold(&address, &[Idle::Silent], 2, None).await;
    let refusal = refused_for_its_share(&address).await;
    assert!(
        refusal.contains("127.0.0.1 has 2 client connections open, its share"),
        "{refusal}"
    );
    serves_another_address(&url, None).await;
    drop(held);
    let checked = std::process::Command::new(wardgate())
        .args(["check", config.path.to_str().unwrap()])
        .output()
        .unwrap();
    let summary = String::from_utf8_lossy(&checked.stdout);
    assert!(
        summary.contains("connections: 2 per address at most"),
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_api_beyond_loopback_is_served_over_tls_with_the_listeners_pair() {
    let config = config(&stdio_server("s", &[]));
    let certificate = certificate(&config);
    let mut gateway = tokio::process::Command::new(wardgate())
        .arg("--config")
        .arg(&config.path)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            &certificate.cert,
            "--tls-key",
            &certificate.key,
            "--admin",
            "0.0.0.0:0",
            "--log-level",
            "info",
        ])
        .env("WARDGATE_ADMIN_TOKEN", "admin-token-0123456789")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let admin = url_in_log(&mut gateway, "admin API at", Duration::from_secs(30)).await;
    assert!(admin.starts_with("https://0.0.0.0:"), "{admin}");
    let admin = admin.replace("0.0.0.0", "127.0.0.1");
    let https = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(certificate.pem.as_bytes()).unwrap()])
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let answer = https
        .get(format!("{admin}/servers"))
        .bearer_auth("admin-token-0123456789")
        .send()
        .await
        .expect("the admin API answered over TLS");
    assert_eq!(answer.status().as_u16(), 200);
    // Plain HTTP is not served there: the token never crosses in clear.
    let plain = admin.replacen("https://", "http://", 1);
    let refused = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
        .get(format!("{plain}/servers"))
        .bearer_auth("admin-token-0123456789")
        .send()
        .await;
    assert!(refused.is_err(), "plain HTTP was answered: {refused:?}");
}
