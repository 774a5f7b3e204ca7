//! The admin HTTP API of a running gateway: servers, policies, health, metrics, errors and
//! authentication (events and commands in `admin/`).
//!
//! Why this file is long: one test per admin API behaviour against a running gateway,
//! sharing its setup helpers.

mod commands;
mod events;
pub mod support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::Value;

use crate::harness::*;
use support::start;

const SETTLE: Duration = Duration::from_secs(20);

/// `alpha`: a healthy stdio fake with two extra tools; `broken`: exits at every start.
fn two_servers() -> ConfigFile {
    config(&format!(
        "{}{}",
        stdio_server("alpha", &["--tools-count", "2"]),
        stdio_server("broken", &["--exit-on-start", "7"])
    ))
}

#[tokio::test]
async fn servers_lists_every_server_with_status_process_and_counters() {
    let admin = start(two_servers(), &[], &[]).await;
    let alpha = admin.wait_status("alpha", "online", SETTLE).await;
    assert_eq!(alpha["transport"], "stdio");
    assert_eq!(alpha["degraded"], false);
    assert_eq!(alpha["policy"], "builtin");
    assert!(alpha["generation"].as_u64().is_some(), "{alpha}");
    assert!(alpha["uptime_ms"].as_u64().is_some(), "{alpha}");
    let pid = alpha["pid"].as_u64().expect("a stdio server has a pid") as u32;
    assert!(alive(pid), "pid {pid} of alpha is not alive");
    assert!(alpha["tools"].as_u64().unwrap() >= 2, "{alpha}");
    for field in [
        "reason",
        "consecutive_failures",
        "reconnect_attempt",
        "next_retry_in_ms",
        "crashes_in_window",
        "last_error",
        "prompts",
        "resources",
    ] {
        assert!(alpha.get(field).is_some(), "no {field} in {alpha}");
    }

    let broken = admin
        .wait_status("broken", "permanently_failed", SETTLE)
        .await;
    assert!(broken["reason"].as_str().unwrap().contains("7"), "{broken}");
    assert!(
        broken["crashes_in_window"].as_u64().unwrap() >= 1,
        "{broken}"
    );
    assert!(broken["pid"].is_null(), "{broken}");
    // When each status began: alpha's when it came online, broken's when it gave up, which
    // was after alpha's first attempt and not in the future.
    let since = |server: &serde_json::Value| {
        let text = server["status_since"].as_str().unwrap_or_default();
        humantime::parse_rfc3339(text).unwrap_or_else(|_| panic!("status_since: {server}"))
    };
    assert!(since(&broken) <= std::time::SystemTime::now(), "{broken}");
    assert!(since(&alpha) <= std::time::SystemTime::now(), "{alpha}");
}

#[tokio::test]
async fn server_detail_adds_tools_and_an_unknown_server_is_404_naming_the_known_ones() {
    let admin = start(two_servers(), &[], &[]).await;
    admin.wait_status("alpha", "online", SETTLE).await;
    let (status, alpha) = admin.get("/servers/alpha").await;
    assert_eq!(status, 200, "{alpha}");
    let tools = alpha["tools"].as_array().expect("a tool list");
    assert!(
        tools
            .iter()
            .any(|tool| tool["name"] == "alpha__tool_0" && tool["original_name"] == "tool_0"),
        "{alpha}"
    );
    assert_eq!(alpha["status"], "online");

    let (status, body) = admin.get("/servers/nope").await;
    assert_eq!(status, 404);
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("\"nope\"") && message.contains("alpha"),
        "{message}"
    );
}

#[tokio::test]
async fn unknown_paths_are_404_and_wrong_methods_405_with_json_errors() {
    let admin = start(two_servers(), &[], &[]).await;
    let (status, body) = admin.get("/nowhere").await;
    assert_eq!(status, 404);
    assert!(
        body["error"].as_str().unwrap().contains("/servers"),
        "{body}"
    );

    let (status, body) = admin.post("/servers", None).await;
    assert_eq!(status, 405);
    assert!(body["error"].as_str().unwrap().contains("GET"), "{body}");

    let (status, body) = admin.get("/servers/alpha/reconnect").await;
    assert_eq!(status, 405, "{body}");

    let (status, body) = admin.post("/servers/alpha/explode", None).await;
    assert_eq!(status, 404);
    assert!(
        body["error"].as_str().unwrap().contains("reconnect"),
        "{body}"
    );

    let (status, body) = admin
        .post("/commands", Some(serde_json::json!({"type": "dance"})))
        .await;
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("reconnect"),
        "{body}"
    );
}

#[tokio::test]
async fn healthz_is_always_ok_and_readyz_names_a_policy_that_did_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let good = module("default");
    let missing = dir.path().join("missing.wasm");
    let text = format!(
        "[gateway]\npolicy = \"good\"\n\n[policies.good]\npath = {:?}\n\n[policies.gone]\npath = {:?}\n\n{}[servers.beta]\ncommand = {:?}\nargs = [\"--name\", \"beta\"]\npolicy = \"gone\"\n\n",
        good,
        missing,
        stdio_server("alpha", &[]),
        fake()
    );
    let admin = start(config(&text), &[], &[]).await;
    let (status, body) = admin.get("/healthz").await;
    assert_eq!(status, 200, "{body}");

    let (status, body) = admin.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false);
    let reasons = body["reasons"].to_string();
    assert!(
        reasons.contains("gone") && !reasons.contains("\\\"good\\\""),
        "{reasons}"
    );

    admin.wait_status("alpha", "online", SETTLE).await;
    admin.wait_decisions("good", SETTLE).await;
    assert_eq!(admin.server("beta").await["policy"], "gone");
    let (status, body) = admin.get("/policies").await;
    assert_eq!(status, 200);
    let policies = body["policies"].as_array().unwrap();
    let find = |name: &str| -> Value {
        policies
            .iter()
            .find(|policy| policy["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no policy {name} in {body}"))
    };
    let good_policy = find("good");
    assert_eq!(good_policy["loaded"], true);
    assert_eq!(good_policy["module"], "default");
    assert!(good_policy["version"].as_str().is_some());
    assert_eq!(good_policy["sha256"].as_str().unwrap().len(), 64);
    assert!(good_policy["loaded_at"].as_str().is_some());
    // Counted (not asserted zero: on a loaded machine even a sound module can miss its
    // 10 ms deadline).
    assert!(good_policy["faults"]["total"].is_u64(), "{good_policy}");
    assert!(
        good_policy["decisions"]["probe_schedule"].as_u64().unwrap() >= 1,
        "alpha's supervisor asked its policy when to probe: {good_policy}"
    );
    let gone = find("gone");
    assert_eq!(gone["loaded"], false);
    assert!(
        gone["last_rejection"]["reason"].as_str().is_some(),
        "{gone}"
    );
    assert_eq!(find("builtin")["loaded"], true);
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text_with_server_and_policy_series() {
    let text = format!(
        "[gateway]\npolicy = \"good\"\n\n[policies.good]\npath = {:?}\n\n{}",
        module("default"),
        stdio_server("alpha", &["--tools-count", "2"])
    );
    let admin = start(config(&text), &[], &[]).await;
    admin.wait_status("alpha", "online", SETTLE).await;
    admin.wait_decisions("good", SETTLE).await;
    let response = admin
        .request(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let body = response.text().await.unwrap();
    let lines = body.lines().map(|line| Ok(line.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid Prometheus text");
    let value = |name: &str, labels: &[(&str, &str)]| -> Option<f64> {
        scrape
            .samples
            .iter()
            .find(|sample| {
                sample.metric == name
                    && labels
                        .iter()
                        .all(|(key, value)| sample.labels.get(key) == Some(*value))
            })
            .map(|sample| match sample.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            })
    };
    assert_eq!(
        value(
            "wardgate_server_status",
            &[("server", "alpha"), ("status", "online")]
        ),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        value(
            "wardgate_server_status",
            &[("server", "alpha"), ("status", "offline")]
        ),
        Some(0.0)
    );
    assert!(value("wardgate_server_tools", &[("server", "alpha")]).unwrap() >= 2.0);
    let decisions = value("wardgate_policy_decisions_total", &[("policy", "good")])
        .expect("policy decisions by module");
    assert!(decisions >= 1.0, "{body}");
}

#[tokio::test]
async fn a_non_loopback_admin_address_without_a_token_refuses_to_start() {
    let config = two_servers();
    let output = tokio::process::Command::new(wardgate())
        .arg("--config")
        .arg(&config.path)
        .args(["--listen", "127.0.0.1:0", "--admin", "0.0.0.0:0"])
        .env_remove("WARDGATE_ADMIN_TOKEN")
        .env_remove("WARDGATE_ADMIN")
        .stdin(std::process::Stdio::null())
        .output();
    let output = tokio::time::timeout(Duration::from_secs(20), output)
        .await
        .expect("refused in time")
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("without a token") && stderr.contains("WARDGATE_ADMIN_TOKEN"),
        "{stderr}"
    );
    assert!(!stderr.contains("pid="), "no server may start: {stderr}");
}

#[tokio::test]
async fn a_token_is_required_on_every_request_when_configured() {
    let admin = start(
        two_servers(),
        &["--admin", "0.0.0.0:0", "--admin-token", "s3cret-token"],
        &[],
    )
    .await;
    let url = |path: &str| format!("{}{path}", admin.url);
    for path in ["/servers", "/metrics", "/nowhere", "/policies"] {
        let response = admin.http.get(url(path)).send().await.unwrap();
        assert_eq!(response.status(), 401, "{path} without a token");
        let body: Value = response.json().await.unwrap();
        assert!(body["error"].as_str().unwrap().contains("Bearer"), "{body}");

        let (status, body) =
            support::send(admin.http.get(url(path)).bearer_auth("s3cret-tokeN")).await;
        assert_eq!(status, 401, "{path} with a wrong token: {body}");
        assert!(body["error"].as_str().unwrap().contains("wrong"), "{body}");
    }
    let (status, _) = admin.get("/servers").await;
    assert_eq!(status, 200);
    // The scheme is case-insensitive (RFC 9110), as clients spell it either way.
    let lowercase = admin
        .http
        .get(url("/servers"))
        .header("authorization", "bearer s3cret-token");
    assert_eq!(support::send(lowercase).await.0, 200);
    let (status, _) = support::send(
        admin
            .http
            .post(url("/servers/alpha/disable"))
            .bearer_auth("wrong"),
    )
    .await;
    assert_eq!(status, 401);
    assert_ne!(admin.server("alpha").await["status"], "disabled");
    // Liveness and readiness probes need no token and learn nothing else.
    for path in ["/healthz", "/readyz"] {
        let (status, body) = support::send(admin.http.get(url(path))).await;
        assert_eq!(status, 200, "{path} without a token: {body}");
        assert!(body.get("reasons").is_none(), "{body}");
    }
    let (status, _) = support::send(admin.http.post(url("/healthz"))).await;
    assert_eq!(status, 401, "only reading a probe goes without the token");
}

#[tokio::test]
async fn a_token_file_keeps_the_token_out_of_the_process_list() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("admin-token");
    std::fs::write(&file, "from-a-file\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let path = file.to_str().unwrap();
    let admin = start(two_servers(), &["--admin-token-file", path], &[]).await;
    let pid = admin.process.id().unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains("from-a-file"),
        "the token shows in the process list"
    );
    let url = format!("{}/servers", admin.url);
    assert_eq!(support::send(admin.http.get(&url)).await.0, 401);
    let (status, body) = support::send(admin.http.get(&url).bearer_auth("from-a-file")).await;
    assert_eq!(status, 200, "{body}");
    // The operator CLI reads the same file.
    let servers_with_the_file = || {
        tokio::process::Command::new(wardgate())
            .args(["servers", "--admin", &admin.address])
            .args(["--admin-token-file", path])
            .env_remove("WARDGATE_ADMIN_TOKEN")
            .output()
    };
    let output = servers_with_the_file().await.unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // An empty file is an error naming the file, not a gateway without a token.
    std::fs::write(&file, "\n").unwrap();
    let output = servers_with_the_file().await.unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is empty") && stderr.contains(path),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_loopback_admin_still_enforces_a_given_token_and_refuses_web_pages() {
    let admin = start(two_servers(), &[], &[("WARDGATE_ADMIN_TOKEN", "from-env")]).await;
    let response = admin.get_anonymously("/servers").await;
    assert_eq!(response.status(), 401);
    let (status, _) = admin.get("/servers").await;
    assert_eq!(status, 200);
    let (status, body) = support::send(
        admin
            .request(reqwest::Method::POST, "/servers/alpha/disable")
            .header("origin", "http://evil.example"),
    )
    .await;
    assert_eq!(status, 403, "{body}");
}

#[tokio::test]
async fn policy_faults_are_counted_by_module_in_policies_and_metrics() {
    let text = format!(
        "[policies.faulty]\npath = {:?}\n\n{}policy = \"faulty\"\nparams = {{ fault = \"trap\" }}\n\n",
        module("faulty"),
        stdio_server("alpha", &[]).trim_end().to_owned() + "\n"
    );
    let admin = start(config(&text), &[], &[]).await;
    let alpha = admin.wait_status("alpha", "online", SETTLE).await;
    // A crash asks the module; it traps, and the builtin restarts the server.
    unsafe { libc::kill(alpha["pid"].as_u64().unwrap() as i32, libc::SIGKILL) };
    let deadline = tokio::time::Instant::now() + SETTLE;
    let faulty = loop {
        let (_, body) = admin.get("/policies").await;
        let faulty = body["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|policy| policy["name"] == "faulty")
            .cloned()
            .unwrap();
        if faulty["faults"]["traps"].as_u64().unwrap_or(0) >= 1 {
            break faulty;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no trap counted: {faulty}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        faulty["loaded"], true,
        "a faulting module stays loaded: {faulty}"
    );
    assert!(
        faulty["faults"]["last"].as_str().unwrap().contains("trap"),
        "{faulty}"
    );

    let body = admin
        .request(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let traps = scrape
        .samples
        .iter()
        .find(|sample| {
            sample.metric == "wardgate_policy_faults_total"
                && sample.labels.get("policy") == Some("faulty")
                && sample.labels.get("kind") == Some("trap")
        })
        .unwrap_or_else(|| panic!("no trap series:\n{body}"));
    assert!(
        matches!(traps.value, prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) if v >= 1.0),
        "{body}"
    );

    // The decision log says which decision the module failed and that the builtin answered.
    // (The trap counted above may be the start's `probe-schedule`: wait for the crash's.)
    let crash = loop {
        let (status, body) = admin.get("/decisions?server=alpha").await;
        assert_eq!(status, 200, "{body}");
        let crash = body["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|decision| decision["decision"] == "crash")
            .cloned();
        if let Some(crash) = crash {
            break crash;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no crash decision: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(crash["answered_by"], "fallback", "{crash}");
    assert_eq!(crash["policy"], "faulty", "{crash}");
    assert!(
        crash["module"].as_str().unwrap().starts_with("faulty "),
        "{crash}"
    );
    assert!(crash["fault"].as_str().unwrap().contains("trap"), "{crash}");
    assert_eq!(crash["inputs"]["exit"], "killed by signal 9", "{crash}");
    assert_eq!(
        crash["inputs"]["status"], "online",
        "asked while it was online: {crash}"
    );
    assert!(
        crash["summary"].as_str().unwrap().starts_with("restart in"),
        "{crash}"
    );
    // As a stream, the same records, under their kind.
    let stream = admin
        .request(reqwest::Method::GET, "/decisions/stream?follow=false")
        .send()
        .await
        .unwrap();
    assert_eq!(
        stream.headers()["content-type"],
        "text/event-stream",
        "{:?}",
        stream.headers()
    );
    let text = stream.text().await.unwrap();
    assert!(
        text.contains("event: decision\ndata: {") && text.contains("\"answered_by\":\"fallback\""),
        "{text}"
    );
}

#[tokio::test]
async fn the_status_page_loads_without_the_token_and_only_its_own_origin_may_script_the_api() {
    let token = "page-origin-token-0123456789";
    let admin = start(two_servers(), &[], &[("WARDGATE_ADMIN_TOKEN", token)]).await;
    // The page and its files hold no data: no token needed, strict headers.
    for (path, kind) in [
        ("/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
        ("/ui/favicon.svg", "image/svg+xml"),
    ] {
        let response = admin.get_anonymously(path).await;
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers();
        assert!(
            headers["content-type"].to_str().unwrap().starts_with(kind),
            "{path}: {headers:?}"
        );
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(
            policy.contains("default-src 'self'") && policy.contains("frame-ancestors 'none'"),
            "{policy}"
        );
        assert_eq!(headers["x-frame-options"], "DENY");
    }
    let page = admin.get_anonymously("/").await.text().await.unwrap();
    assert!(
        page.contains("/ui/app.js") && !page.contains("http://") && !page.contains("https://"),
        "nothing loads from elsewhere:\n{page}"
    );
    // Its data needs the token.
    let response = admin.get_anonymously("/gateway").await;
    assert_eq!(response.status(), 401);
    let (status, health) = admin.get("/gateway").await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(
        (health["servers"].as_u64(), health["admin_token"].as_bool()),
        (Some(2), Some(true)),
        "{health}"
    );
    assert!(!health.to_string().contains(token), "{health}");

    // A script of the page itself may act; another page, or another port, may not.
    let own = format!("http://{}", admin.address);
    let port = admin
        .address
        .rsplit(':')
        .next()
        .unwrap()
        .parse::<u16>()
        .unwrap();
    for (origin, expected) in [
        (own.clone(), 200),
        ("http://evil.example".to_owned(), 403),
        (format!("http://127.0.0.1:{}", port.wrapping_add(1)), 403),
        // Through a reverse proxy that ends TLS: the same page.
        (format!("https://{}", admin.address), 200),
        (format!("http://{}.evil.example", admin.address), 403),
        ("null".to_owned(), 403),
    ] {
        let (status, body) = support::send(
            admin
                .request(reqwest::Method::POST, "/servers/alpha/health-check")
                .header("origin", &origin),
        )
        .await;
        assert_eq!(status, expected, "{origin}: {body}");
    }
}

#[tokio::test]
async fn without_a_token_a_rebound_dns_name_cannot_read_the_page_or_the_api() {
    let admin = start(two_servers(), &[], &[]).await;
    let port = admin.address.rsplit(':').next().unwrap();
    // A page at http://evil.example:PORT whose name now points here: same origin as far as
    // the browser knows, but the Host is not this gateway's.
    for path in ["/", "/servers"] {
        let (status, body) = support::send(
            admin
                .request(reqwest::Method::GET, path)
                .header("host", format!("evil.example:{port}"))
                .header("origin", format!("http://evil.example:{port}")),
        )
        .await;
        assert_eq!(status, 403, "{path}: {body}");
    }
    let (status, body) = support::send(
        admin
            .request(reqwest::Method::POST, "/servers/alpha/restart")
            .header("origin", format!("http://{}", admin.address)),
    )
    .await;
    assert_eq!(status, 200, "the page's own origin acts: {body}");
}

#[tokio::test]
async fn in_stdio_mode_the_admin_api_leaves_stdout_to_the_protocol() {
    use rmcp::ServiceExt;
    use tokio::io::{AsyncBufReadExt, BufReader};
    let config = config(&stdio_server("alpha", &[]));
    let mut process = tokio::process::Command::new(wardgate())
        .arg("--config")
        .arg(&config.path)
        .args(["--admin", "127.0.0.1:0"])
        .env_remove("WARDGATE_ADMIN_TOKEN")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(process.stderr.take().unwrap()).lines();
    let url = tokio::time::timeout(SETTLE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(index) = line.find("admin API at ") {
                return line[index + "admin API at ".len()..]
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .to_owned();
            }
        }
        panic!("no admin API");
    })
    .await
    .unwrap();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let (stdout, stdin) = (
        process.stdout.take().unwrap(),
        process.stdin.take().unwrap(),
    );
    let client = TestClient::default().serve((stdout, stdin)).await.unwrap();
    let http = reqwest::Client::new();
    for path in [
        "/servers",
        "/policies",
        "/metrics",
        "/nowhere",
        "/events?follow=false",
    ] {
        let response = http.get(format!("{url}{path}")).send().await.unwrap();
        let _ = response.text().await.unwrap();
    }
    let names = list_at_once(&client, &["alpha__echo"]).await;
    assert!(names.contains(&"alpha__echo".to_owned()), "{names:?}");
    let result = client
        .peer()
        .call_tool(call(
            "alpha__echo",
            serde_json::json!({"text": "still clean"}),
        ))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "still clean");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_added_by_a_config_edit_is_reported_by_policies() {
    let file = config(&stdio_server("alpha", &[]));
    let path = file.path.clone();
    let admin = start(file, &[], &[]).await;
    admin.wait_status("alpha", "online", SETTLE).await;
    let edited = format!(
        "[policies.patient]\npath = {:?}\n\n{}\npolicy = \"patient\"\n",
        module("patient"),
        stdio_server("alpha", &[]).trim_end()
    );
    std::fs::write(&path, edited).unwrap();
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let (_, body) = admin.get("/policies").await;
        let patient = body["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|policy| policy["name"] == "patient")
            .cloned();
        if let Some(patient) = patient.filter(|policy| policy["loaded"] == true) {
            assert_eq!(patient["module"], "patient", "{patient}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the added policy never showed in /policies: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = admin.get("/readyz").await;
    assert_eq!(status, 200, "{body}");
    // The module loads before the server is restarted with it (the old connection closes
    // politely first): the server shows its new policy once it was applied.
    loop {
        let alpha = admin.server("alpha").await;
        if alpha["policy"] == "patient" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "alpha never bound to patient: {alpha}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
