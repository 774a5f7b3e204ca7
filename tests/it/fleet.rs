//! A fleet: three gateways sharing one real PostgreSQL (Debian's, run as a non-root user,
//! a throwaway cluster per test). Servers and modules come from the database, commands
//! are claimed from it, status comes back to it, and the database may go away.
//!
//! Why this file is long: the fleet tests share one real PostgreSQL and the helpers that
//! start members on it; each test is one behaviour.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::admin::support::AdminGateway;
use crate::harness::*;
use crate::postgres::Postgres;

const SETTLE: Duration = Duration::from_secs(30);

/// A running member, and everything it logged.
struct Member {
    admin: AdminGateway,
    /// `http://127.0.0.1:PORT/mcp`.
    mcp: String,
    log: Arc<Mutex<Vec<String>>>,
    state: tempfile::TempDir,
}

async fn database() -> Arc<Postgres> {
    Arc::new(
        tokio::task::spawn_blocking(Postgres::start)
            .await
            .expect("PostgreSQL started"),
    )
}

/// Start member `name` (in `groups`) of the fleet in `db`, keeping its state in `state`.
async fn member(db: &Postgres, name: &str, groups: &[&str], state: tempfile::TempDir) -> Member {
    member_at(&db.url(), name, groups, state).await
}

/// Start member `name` of the fleet whose database is at `url`.
async fn member_at(url: &str, name: &str, groups: &[&str], state: tempfile::TempDir) -> Member {
    member_with(url, name, groups, state, "").await
}

/// Start member `name` with `gateway` added to its `[gateway]` table.
async fn member_with(
    url: &str,
    name: &str,
    groups: &[&str],
    state: tempfile::TempDir,
    gateway: &str,
) -> Member {
    member_with_env(url, name, groups, state, gateway, &[]).await
}

/// Start member `name` with `gateway` added to its `[gateway]` table and `env` set.
async fn member_with_env(
    url: &str,
    name: &str,
    groups: &[&str],
    state: tempfile::TempDir,
    gateway: &str,
    env: &[(&str, &str)],
) -> Member {
    let config = config(&format!(
        "[gateway]\nstartup_wait = \"5s\"\n{gateway}\n[fleet]\ndatabase_url = \"${{WG_TEST_FLEET_DB}}\"\nmember = \"{name}\"\ngroups = {groups:?}\n"
    ));
    let mut process = Command::new(wardgate())
        .arg("--config")
        .arg(&config.path)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--log-level",
            "info",
        ])
        .env("WG_TEST_FLEET_DB", url)
        .env("WARDGATE_STATE_DIR", state.path())
        .env("WARDGATE_FLEET_HEARTBEAT_MS", "300")
        .env("WARDGATE_FLEET_GONE_MS", "3000")
        .env("WARDGATE_FLEET_LEASE_MS", "1500")
        .env("WARDGATE_COMMAND_RETRY_BASE_MS", "100")
        .envs(env.iter().copied())
        .env_remove("WARDGATE_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn wardgate");
    let log = Arc::new(Mutex::new(Vec::new()));
    let (found, mut address) = tokio::sync::mpsc::channel::<String>(1);
    let (found_mcp, mut mcp) = tokio::sync::mpsc::channel::<String>(1);
    let mut lines = BufReader::new(process.stderr.take().unwrap()).lines();
    let keep = log.clone();
    let label = name.to_owned();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("[{label}] {line}");
            if let Some(index) = line.find("admin API at http://") {
                let url = line[index + "admin API at ".len()..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                let _ = found.try_send(url);
            }
            if line.contains("Streamable HTTP") {
                if let Some(index) = line.find("http://") {
                    let _ = found_mcp.try_send(
                        line[index..]
                            .split_whitespace()
                            .next()
                            .unwrap_or("")
                            .to_owned(),
                    );
                }
            }
            keep.lock().unwrap().push(line);
        }
    });
    let url = tokio::time::timeout(SETTLE, address.recv())
        .await
        .expect("the member's admin API came up")
        .expect("the member logged its admin address");
    let mcp = tokio::time::timeout(SETTLE, mcp.recv())
        .await
        .expect("the member's /mcp came up")
        .expect("the member logged its /mcp address");
    Member {
        admin: AdminGateway {
            process,
            address: url.trim_start_matches("http://").to_owned(),
            url,
            token: None,
            mcp: mcp.clone(),
            http: reqwest::Client::new(),
            config,
        },
        mcp,
        log,
        state,
    }
}

/// `wardgate fleet ARGS` against `db`: success, stdout, stderr.
async fn fleet(db: &Postgres, args: &[&str]) -> (bool, String, String) {
    fleet_at(&db.url(), args).await
}

/// `wardgate fleet ARGS` against the database at `url`.
async fn fleet_at(url: &str, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(wardgate())
        .arg("fleet")
        .args(args)
        .env("WARDGATE_FLEET_DATABASE_URL", url)
        .env("WARDGATE_FLEET_GONE_MS", "3000")
        .output()
        .await
        .expect("run wardgate fleet");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    eprintln!("$ wardgate fleet {}\n{stdout}{stderr}", args.join(" "));
    (output.status.success(), stdout, stderr)
}

/// Publish `module` to the fleet as the policy `recovery` and serve the fake server `name`
/// under it, with `extra` arguments.
async fn serve_under_recovery(db: &Postgres, module: &Path, name: &str, extra: &[&str]) {
    let (ok, out, err) = fleet(
        db,
        &["policy", "publish", "recovery", module.to_str().unwrap()],
    )
    .await;
    assert!(ok, "{out}{err}");
    let args: Vec<&str> = ["--name", name].iter().chain(extra).copied().collect();
    let spec = format!(
        "command = {:?}\nargs = {args:?}\npolicy = \"recovery\"\n",
        fake()
    );
    let (ok, _, err) = fleet(db, &["servers", "set", name, "--spec", &spec]).await;
    assert!(ok, "{err}");
}

async fn fleet_json(db: &Postgres, args: &[&str]) -> Value {
    let (ok, stdout, stderr) = fleet(db, args).await;
    assert!(ok, "wardgate fleet {args:?} failed: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|error| panic!("{error}: {stdout}"))
}

/// Poll `check` on `fleet status --json` until it holds.
async fn until_status(db: &Postgres, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let status = fleet_json(db, &["status", "--json"]).await;
        if check(&status) {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never: {what}\n{status:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Poll the member's `/servers` until `name` is there and `status` (a fleet server may not
/// have arrived yet).
async fn until_server(admin: &AdminGateway, name: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let (_, servers) = admin.get("/servers").await;
        if let Some(server) = servers["servers"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["name"] == name))
        {
            if server["status"] == status {
                return server.clone();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} never {status}: {servers}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A fleet `health_check` of alpha on `member` completes.
async fn health_check_completes(db: &Postgres, member: &str) {
    let rows = fleet_json(
        db,
        &[
            "command",
            "health_check",
            "alpha",
            "--member",
            member,
            "--wait",
            "--json",
        ],
    )
    .await;
    assert_eq!(rows[0]["state"], "completed", "{rows}");
}

/// POST an action to a member's admin API: it completes, its answer names its row in the
/// fleet's table, and that row (same correlation id, this member) ends completed.
async fn fleet_row_of_admin_command(db: &Postgres, admin: &AdminGateway, path: &str, member: &str) {
    let (status, record) = admin.post(path, None).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["fleet"]["member"], member, "{record}");
    let row_id = record["fleet"]["command"].as_i64().expect("a fleet row id");
    let correlation = record["correlation_id"].as_str().unwrap();
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let rows = fleet_json(db, &["commands", "--correlation", correlation, "--json"]).await;
        let rows = rows.as_array().unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0]["id"].as_i64(), Some(row_id), "{rows:?}");
        assert_eq!(rows[0]["member"], member, "{rows:?}");
        if rows[0]["state"] == "completed" {
            assert_eq!(rows[0]["attempts"], 1, "{rows:?}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fleet row of {path} never completed: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn status_of<'a>(status: &'a Value, member: &str, server: &str) -> Option<&'a Value> {
    status["servers"]
        .as_array()?
        .iter()
        .find(|row| row["member"] == member && row["server"] == server)
}

fn pid(server: &Value) -> u64 {
    server["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no pid: {server}"))
}

fn fake_args(name: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "set".to_owned(),
        name.to_owned(),
        "--command".to_owned(),
        fake().to_owned(),
    ];
    for arg in ["--name", name].iter().chain(extra) {
        args.push("--arg".to_owned());
        args.push(arg.to_string());
    }
    args
}

async fn set_fake(db: &Postgres, name: &str, extra: &[&str]) {
    let args = fake_args(name, extra);
    let mut all = vec!["servers"];
    all.extend(args.iter().map(String::as_str));
    let (ok, _, stderr) = fleet(db, &all).await;
    assert!(ok, "{stderr}");
}

#[tokio::test]
async fn three_members_share_servers_commands_and_status_and_outlive_the_database() {
    let db = database().await;
    set_fake(&db, "alpha", &[]).await;
    // m1 offers the MCP admin tools, which submit through the fleet's table too.
    let mut members = vec![
        member_with(
            &db.url(),
            "m1",
            &[],
            tempfile::tempdir().unwrap(),
            "expose_admin_tools = true\n",
        )
        .await,
    ];
    for name in ["m2", "m3"] {
        members.push(member(&db, name, &[], tempfile::tempdir().unwrap()).await);
    }
    // Every member serves the fleet's server, and reports it with its tools.
    let mut alpha_pids = Vec::new();
    for member in &members {
        alpha_pids.push(pid(&member
            .admin
            .wait_status("alpha", "online", SETTLE)
            .await));
    }
    let status = until_status(&db, "alpha online with tools on 3 members", |status| {
        ["m1", "m2", "m3"].iter().all(|m| {
            status_of(status, m, "alpha")
                .is_some_and(|row| row["status"] == "online" && row["tools"].as_i64() > Some(0))
        })
    })
    .await;
    assert_eq!(
        status["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["state"] == "live")
            .count(),
        3,
        "{status:#}"
    );
    let (ok, text, _) = fleet(&db, &["status"]).await;
    assert!(
        ok && text.contains("alpha") && text.contains("m3") && text.contains("online"),
        "{text}"
    );

    // A server added in the database reaches every member; alpha is not disturbed.
    set_fake(&db, "beta", &[]).await;
    for (member, alpha_pid) in members.iter().zip(&alpha_pids) {
        until_server(&member.admin, "beta", "online").await;
        assert_eq!(
            pid(&member.admin.server("alpha").await),
            *alpha_pid,
            "configure restarted an untouched server"
        );
    }

    // A fleet-wide command: one row and lifecycle per member.
    let rows = fleet_json(&db, &["command", "restart", "alpha", "--wait", "--json"]).await;
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(
        rows.iter().all(|row| row["state"] == "completed"),
        "{rows:?}"
    );
    assert_eq!(
        rows.iter()
            .map(|row| row["correlation_id"].to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        1
    );
    for (member, old) in members.iter().zip(&alpha_pids) {
        assert_ne!(
            pid(&member.admin.wait_status("alpha", "online", SETTLE).await),
            *old
        );
    }

    // A bad row fails that command with a clear error and changes nothing.
    db.psql(
        "INSERT INTO wardgate_commands (correlation_id, member, command, priority, expires_at)
         VALUES ('bad-type', 'm1', '{\"type\": \"explode\"}', 0, now() + interval '5 minutes')",
    );
    db.psql("INSERT INTO wardgate_servers (name, spec) VALUES ('gamma', 'command = 5')");
    let (_, _, _) = fleet(&db, &["command", "configure", "--member", "m2", "--wait"]).await;
    let bad = fleet_json(&db, &["commands", "--correlation", "bad-type", "--json"]).await;
    assert_eq!(bad[0]["state"], "failed", "{bad}");
    assert!(
        bad[0]["error"].as_str().unwrap().contains("explode")
            && bad[0]["error"]
                .as_str()
                .unwrap()
                .contains("nothing was changed"),
        "{bad}"
    );
    let configure = fleet_json(&db, &["commands", "--json"]).await;
    let failed = configure
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["member"] == "m2" && row["command"]["type"] == "configure")
        .cloned()
        .unwrap();
    assert_eq!(failed["state"], "failed", "{failed}");
    assert!(
        failed["error"].as_str().unwrap().contains("gamma"),
        "{failed}"
    );
    let (_, servers) = members[1].admin.get("/servers").await;
    assert_eq!(
        servers["servers"].as_array().unwrap().len(),
        2,
        "a bad config changed m2: {servers}"
    );
    db.psql("DELETE FROM wardgate_servers WHERE name = 'gamma'");

    // A row no member takes in time expires; a row whose lease ran out with its retries
    // spent fails, saying so. (The members' reapers do both.)
    db.psql(
        "INSERT INTO wardgate_commands (correlation_id, member, command, priority, expires_at)
         VALUES ('unclaimed', 'nobody', '{\"type\": \"configure\"}', 2, now() + interval '1 second');
         INSERT INTO wardgate_commands (correlation_id, member, command, priority, expires_at,
                                        state, attempts, claimed_by, lease_until)
         VALUES ('spent', 'nobody', '{\"type\": \"configure\"}', 2, now() + interval '5 minutes',
                 'executing', 4, 'nobody-1', now() - interval '1 second')",
    );
    for (correlation, state, said) in [
        ("unclaimed", "expired", "not started before it expired"),
        ("spent", "failed", "no retries are left"),
    ] {
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            let rows = fleet_json(&db, &["commands", "--correlation", correlation, "--json"]).await;
            if rows[0]["state"] == state {
                assert!(
                    rows[0]["error"].as_str().is_some_and(|e| e.contains(said)),
                    "{rows}"
                );
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{correlation} never {state}: {rows}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // A member's own admin API (and so its CLI) submits through the fleet's table.
    fleet_row_of_admin_command(&db, &members[0].admin, "/servers/alpha/health-check", "m1").await;
    // So do its MCP admin tools.
    {
        use rmcp::ServiceExt;
        let transport =
            rmcp::transport::StreamableHttpClientTransport::from_uri(members[0].mcp.clone());
        let client = TestClient::default()
            .serve(transport)
            .await
            .expect("an MCP client connects to m1");
        let result = client
            .call_tool(call(
                "wardgate__reconnect_server",
                serde_json::json!({"server": "alpha"}),
            ))
            .await
            .expect("the reconnect tool answers");
        assert_ne!(result.is_error, Some(true), "{result:?}");
        let rows = fleet_json(&db, &["commands", "--json"]).await;
        assert!(
            rows.as_array()
                .unwrap()
                .iter()
                .any(|row| row["member"] == "m1"
                    && row["correlation_id"]
                        .as_str()
                        .is_some_and(|c| c.starts_with("mcp-session-"))
                    && row["command"]["type"] == "reconnect"),
            "the MCP admin tool's reconnect has no row in the fleet's table: {rows}"
        );
        let _ = client.cancel().await;
    }

    // The database goes away: members keep serving, local commands keep working, and say
    // they ran outside the fleet's table.
    db.stop();
    let (status, record) = members[1]
        .admin
        .post(
            "/commands",
            Some(serde_json::json!({"type": "restart", "server": "beta"})),
        )
        .await;
    assert_eq!(status, 202, "{record}");
    assert_eq!(record["fleet"]["queue"], "local", "{record}");
    let why = record["fleet"]["why"].as_str().unwrap();
    assert!(
        why.contains("fleet database") && !why.contains(db.password()),
        "{why}"
    );
    let done = members[1]
        .admin
        .finished(record["id"].as_str().unwrap())
        .await;
    assert_eq!(done["state"], "completed", "{done}");
    // Something happens on m3 while the database is away.
    let beta = members[2].admin.server("beta").await;
    unsafe { libc::kill(pid(&beta) as i32, libc::SIGKILL) };
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let now = members[2].admin.server("beta").await;
        if now["status"] == "online" && now["pid"] != beta["pid"] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "beta never came back on m3: {now}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let away = db.clone();
    tokio::task::spawn_blocking(move || away.start_again())
        .await
        .unwrap();
    // Back: m3 reports what happened while it was away.
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let crashes = db.psql(
            "SELECT count(*) FROM wardgate_events WHERE member = 'm3' AND event->>'server' = 'beta' AND event->>'event' = 'status_changed' AND event->>'to' = 'restarting'",
        );
        if crashes.trim() != "0" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "m3 never reported beta's crash after the database came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    until_status(&db, "m3's beta online again with a new pid", |status| {
        status_of(status, "m3", "beta").is_some_and(|row| row["status"] == "online")
    })
    .await;
    // m2's command that ran while the database was away is in the fleet's table now.
    let correlation = record["correlation_id"].as_str().unwrap();
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let rows = fleet_json(&db, &["commands", "--correlation", correlation, "--json"]).await;
        if let Some(row) = rows.as_array().and_then(|rows| rows.first()) {
            assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
            assert_eq!(row["member"], "m2", "{row}");
            assert_eq!(row["state"], "completed", "{row}");
            assert!(
                row["result"]["fleet_note"]
                    .as_str()
                    .is_some_and(|note| note.contains("local queue only")),
                "{row}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "m2's local command never reached the fleet's table"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And it takes commands again.
    health_check_completes(&db, "m3").await;
    // And its admin API submits through the fleet's table again.
    fleet_row_of_admin_command(&db, &members[1].admin, "/servers/beta/health-check", "m2").await;

    // The database password never reached a log.
    for member in &members {
        let log = member.log.lock().unwrap();
        assert!(
            !log.iter().any(|line| line.contains(db.password())),
            "a member logged the database password"
        );
        assert!(
            log.iter().any(|line| line.contains("joining the fleet")),
            "no join line"
        );
    }
}

#[tokio::test]
async fn the_fleet_database_is_reached_over_tls_with_libpq_sslmodes() {
    let db = database().await;
    // A CA of the test's own, and a database certificate it signed for another host name
    // than the 127.0.0.1 the members dial: verify-ca passes, verify-full must not.
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let server_key = rcgen::KeyPair::generate().unwrap();
    let server = rcgen::CertificateParams::new(vec!["fleet-db.test".to_owned()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    db.require_tls(&server.pem(), &server_key.serialize_pem());
    let files = tempfile::tempdir().unwrap();
    let ca_file = files.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let with = |query: &str| format!("{}?{query}", db.url());
    let root = format!("sslrootcert={}", ca_file.display());

    // Each sslmode as libpq means it.
    let (ok, _, stderr) = fleet_at(&with("sslmode=disable"), &["status"]).await;
    assert!(!ok && stderr.contains("no encryption"), "{stderr}");
    let (ok, _, stderr) = fleet_at(&with("sslmode=require"), &["status"]).await;
    assert!(
        ok,
        "require encrypts without checking the certificate: {stderr}"
    );
    let (ok, _, stderr) = fleet_at(&with("sslmode=verify-full"), &["status"]).await;
    assert!(
        !ok && stderr.contains("certificate") && stderr.contains("sslrootcert=PATH"),
        "an unknown CA must fail, naming the fix: {stderr}"
    );
    let (ok, _, stderr) =
        fleet_at(&with(&format!("sslmode=verify-full&{root}")), &["status"]).await;
    assert!(
        !ok && stderr.contains("certificate") && stderr.contains("sslmode=verify-ca"),
        "verify-full must compare the host name: {stderr}"
    );
    let (ok, _, stderr) = fleet_at(&with("sslmode=verify-everything"), &["status"]).await;
    assert!(!ok && stderr.contains("verify-full"), "{stderr}");
    assert!(!stderr.contains(db.password()), "{stderr}");

    // A member on verify-ca: joins, serves, and takes commands (its LISTEN connection is
    // encrypted too: the server accepts nothing else).
    set_fake(&db, "alpha", &[]).await;
    let url = with(&format!("sslmode=verify-ca&{root}"));
    let m1 = member_at(&url, "m1", &[], tempfile::tempdir().unwrap()).await;
    m1.admin.wait_status("alpha", "online", SETTLE).await;
    health_check_completes(&db, "m1").await;
    let encrypted = db.psql(
        "SELECT string_agg(DISTINCT application_name || ':' || ssl, ',' ORDER BY application_name || ':' || ssl)
           FROM pg_stat_ssl JOIN pg_stat_activity USING (pid)
          WHERE application_name LIKE 'wardgate%' AND usename = 'wardgate'",
    );
    assert!(
        encrypted.contains("wardgate:true")
            && encrypted.contains("wardgate-listen:true")
            && !encrypted.contains("false"),
        "{encrypted}"
    );

    // A server from the fleet that signs in with OAuth: the command the member prints names
    // its own config, and `wardgate auth` on that config finds the server in the fleet's
    // part the member applied.
    let spec = "url = \"http://127.0.0.1:9/mcp\"\noauth = {}\n";
    let (ok, _, stderr) = fleet_at(&url, &["servers", "set", "signed", "--spec", spec]).await;
    assert!(ok, "{stderr}");
    let deadline = tokio::time::Instant::now() + SETTLE;
    let command = loop {
        let (_, servers) = m1.admin.get("/servers").await;
        let signed = servers["servers"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["name"] == "signed"));
        if let Some(command) = signed.and_then(|s| s["sign_in"]["command"].as_str()) {
            break command.to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "m1 never showed how to sign in to `signed`: {servers}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        command.ends_with("auth login signed")
            && command.contains(&m1.admin.config.path.display().to_string()),
        "{command}"
    );
    let output = Command::new(wardgate())
        .arg("--config")
        .arg(&m1.admin.config.path)
        .args(["auth", "status", "--json"])
        .env("WARDGATE_STATE_DIR", m1.state.path())
        .env("WG_TEST_FLEET_DB", &url)
        .env_remove("WARDGATE_FLEET_DATABASE_URL")
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status: Value = serde_json::from_str(&said).unwrap();
    assert_eq!(status["servers"][0]["server"], "signed", "{status}");
    assert_eq!(status["servers"][0]["signed_in"], false, "{status}");
    assert_eq!(status["servers"][0]["login"], command.as_str(), "{status}");
}

#[tokio::test]
async fn a_member_killed_mid_command_has_it_retried_and_the_row_says_so() {
    let db = database().await;
    set_fake(&db, "slow", &["--start-delay-ms", "4000"]).await;
    let mut m1 = member(&db, "m1", &[], tempfile::tempdir().unwrap()).await;
    let _m2 = member(&db, "m2", &[], tempfile::tempdir().unwrap()).await;
    m1.admin.wait_status("slow", "online", SETTLE).await;

    let (ok, _, stderr) = fleet(&db, &["command", "restart", "slow", "--member", "m1"]).await;
    assert!(ok, "{stderr}");
    let deadline = tokio::time::Instant::now() + SETTLE;
    while db.psql("SELECT state FROM wardgate_commands WHERE command->>'type' = 'restart'")
        != "executing"
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the restart never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    m1.admin.process.kill().await.unwrap();
    // The lease runs out; m2 puts the row back, saying why.
    let deadline = tokio::time::Instant::now() + SETTLE;
    let error = loop {
        let row = db.psql("SELECT state || '|' || coalesce(error, '') FROM wardgate_commands WHERE command->>'type' = 'restart'");
        if row.starts_with("pending|") {
            break row;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the row was never retried: {row}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        error.contains("attempt 1 on member m1 stopped reporting")
            && error.contains("may have run"),
        "{error}"
    );

    // m1 is gone: `fleet status` says what it reported last, not that it still holds.
    let status = until_status(&db, "m1 gone", |status| {
        status["members"]
            .as_array()
            .and_then(|all| all.iter().find(|m| m["name"] == "m1"))
            .is_some_and(|m1| m1["state"] == "gone")
    })
    .await;
    let m1_row = status["members"]
        .as_array()
        .and_then(|all| all.iter().find(|m| m["name"] == "m1"))
        .unwrap();
    assert_eq!(m1_row["live"], false, "{status:#}");
    let slow_on_m1 = status_of(&status, "m1", "slow").expect("m1's last report of slow");
    assert_eq!(slow_on_m1["status"], "unknown", "{status:#}");
    assert!(
        slow_on_m1["last_status"]
            .as_str()
            .is_some_and(|last| last != "unknown"),
        "the last report is kept: {status:#}"
    );
    let slow_on_m2 = status_of(&status, "m2", "slow").expect("m2's slow");
    assert!(
        slow_on_m2["last_status"].is_null() && slow_on_m2["status"] != "unknown",
        "a live member's status is current: {status:#}"
    );
    let (ok, text, stderr) = fleet(&db, &["status"]).await;
    assert!(ok && text.contains("(gone: last)"), "{text}{stderr}");
    // A command for it is queued, with a warning that says what becomes of it; a name that
    // is nobody's is refused.
    let (ok, _, stderr) = fleet(&db, &["command", "health_check", "slow", "--member", "m1"]).await;
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("warning: member m1 is gone (last heartbeat ")
            && stderr.contains(
                "is queued for it and runs when it is back, or expires if it is not back within 5m"
            ),
        "{stderr}"
    );
    assert_eq!(
        db.psql("SELECT state FROM wardgate_commands WHERE command->>'type' = 'health_check'"),
        "pending"
    );
    let (ok, _, stderr) = fleet(
        &db,
        &["command", "health_check", "slow", "--member", "nobody"],
    )
    .await;
    assert!(
        !ok && stderr.contains("no fleet member or group is named \"nobody\"; nothing was sent"),
        "{stderr}"
    );

    // m1 comes back (same name, same state) and finishes it.
    let m1 = member(&db, "m1", &[], tempfile::tempdir().unwrap()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let row = loop {
        let row = db.psql("SELECT state || '|' || attempts || '|' || coalesce(error, '') FROM wardgate_commands WHERE command->>'type' = 'restart'");
        if row.starts_with("completed|") || row.starts_with("failed|") {
            break row;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the retried restart never finished: {row}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(row.starts_with("completed|2|"), "{row}");
    assert!(
        row.contains("stopped reporting"),
        "the finished row forgot the interrupted attempt: {row}"
    );
    // The command queued while it was gone ran when it came back.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let state =
            db.psql("SELECT state FROM wardgate_commands WHERE command->>'type' = 'health_check'");
        if matches!(state.as_str(), "completed" | "failed") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the health check queued for the gone m1 never ran: {state}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    m1.admin.wait_status("slow", "online", SETTLE).await;
}

#[tokio::test]
async fn a_policy_rolls_out_to_a_canary_then_the_fleet_and_rolls_back() {
    let db = database().await;
    let default = module("default");
    let patient = module("patient");
    serve_under_recovery(&db, &default, "alpha", &[]).await;
    let members = vec![
        member(&db, "m1", &["canary"], tempfile::tempdir().unwrap()).await,
        member(&db, "m2", &[], tempfile::tempdir().unwrap()).await,
        member(&db, "m3", &[], tempfile::tempdir().unwrap()).await,
    ];
    let sha = |path: &Path| {
        use sha2::Digest;
        sha2::Sha256::digest(std::fs::read(path).unwrap())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let (default_sha, patient_sha) = (sha(&default), sha(&patient));
    async fn deciding(member: &Member) -> Option<String> {
        let (_, policies) = member.admin.get("/policies").await;
        policies["policies"]
            .as_array()?
            .iter()
            .find(|p| p["name"] == "recovery")
            .and_then(|p| p["sha256"].as_str().map(str::to_owned))
    }
    async fn until_deciding(member: &Member, sha: &str) {
        let deadline = tokio::time::Instant::now() + SETTLE;
        while deciding(member).await.as_deref() != Some(sha) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never decided with {sha}: {:?}",
                deciding(member).await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for member in &members {
        member.admin.wait_status("alpha", "online", SETTLE).await;
        until_deciding(member, &default_sha).await;
    }

    // v2 to the canary group only.
    let (ok, out, err) = fleet(
        &db,
        &[
            "policy",
            "publish",
            "recovery",
            patient.to_str().unwrap(),
            "--canary",
            "canary",
        ],
    )
    .await;
    assert!(ok && out.contains("v2 on m1: loaded"), "{out}{err}");
    until_deciding(&members[0], &patient_sha).await;
    assert_eq!(
        deciding(&members[1]).await.as_deref(),
        Some(default_sha.as_str())
    );
    assert_eq!(
        deciding(&members[2]).await.as_deref(),
        Some(default_sha.as_str())
    );
    // Then the fleet.
    let (ok, out, err) = fleet(&db, &["policy", "promote", "recovery"]).await;
    assert!(ok, "{out}{err}");
    for member in &members {
        until_deciding(member, &patient_sha).await;
    }

    // A module a canary rejects never reaches the others.
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad.path(), b"\0asm not really").unwrap();
    let (ok, out, _) = fleet(
        &db,
        &[
            "policy",
            "publish",
            "recovery",
            bad.path().to_str().unwrap(),
            "--canary",
            "m2",
            "--no-local-check",
        ],
    )
    .await;
    assert!(!ok && out.contains("v3 on m2: rejected"), "{out}");
    assert_eq!(
        deciding(&members[1]).await.as_deref(),
        Some(patient_sha.as_str()),
        "m2 kept its module"
    );
    let (ok, _, err) = fleet(&db, &["policy", "promote", "recovery"]).await;
    assert!(!ok && err.contains("rejected by member m2"), "{err}");
    assert_eq!(
        deciding(&members[2]).await.as_deref(),
        Some(patient_sha.as_str())
    );
    let status = fleet_json(&db, &["policy", "status", "recovery", "--json"]).await;
    assert!(
        status["reports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["member"] == "m2" && r["version"] == 3 && r["outcome"] == "rejected"),
        "{status}"
    );

    // Rollback: first the canary, then the fleet to the version before.
    let (ok, out, err) = fleet(&db, &["policy", "rollback", "recovery"]).await;
    assert!(ok, "{out}{err}");
    let (ok, out, err) = fleet(&db, &["policy", "rollback", "recovery"]).await;
    assert!(ok && out.contains("version 1"), "{out}{err}");
    for member in &members {
        until_deciding(member, &default_sha).await;
    }
    // Each member's line is this rollback's: v1 again, after their configure finished.
    for name in ["m1", "m2", "m3"] {
        assert!(out.contains(&format!("v1 on {name}: loaded")), "{out}");
    }

    // A new fleet-wide version, with a policy-wide param that reaches every member.
    let (ok, out, err) = fleet(
        &db,
        &[
            "policy",
            "publish",
            "recovery",
            patient.to_str().unwrap(),
            "--param",
            "max_attempts=7",
        ],
    )
    .await;
    assert!(ok && out.contains("v4 on m3: loaded"), "{out}{err}");
    for member in &members {
        until_deciding(member, &patient_sha).await;
    }
    for (member, name) in members.iter().zip(["m1", "m2", "m3"]) {
        let applied = std::fs::read_to_string(
            member
                .state
                .path()
                .join("fleet")
                .join(name)
                .join("fleet-config.toml"),
        )
        .unwrap();
        let applied: toml::Table = toml::from_str(&applied).unwrap();
        assert_eq!(
            applied["policies"]["recovery"]["params"]["max_attempts"].as_str(),
            Some("7"),
            "{applied}"
        );
    }
    // Rolling it back goes to the version the fleet ran before it (1), never to v3, which
    // only a canary ran, and rejected.
    let (ok, out, err) = fleet(&db, &["policy", "rollback", "recovery"]).await;
    assert!(ok && out.contains("version 1"), "{out}{err}");
    for member in &members {
        until_deciding(member, &default_sha).await;
    }
    let status = fleet_json(&db, &["policy", "status", "recovery", "--json"]).await;
    assert!(
        !status["reports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["version"] == 3 && r["member"] != "m2"),
        "v3 reached a member other than its canary: {status}"
    );
    let (ok, _, err) = fleet(&db, &["policy", "rollback", "recovery"]).await;
    assert!(
        !ok && err.contains("nothing to roll back to"),
        "a second rollback has no version before 1 to go to: {err}"
    );
}

/// A TCP proxy on 127.0.0.1 that sends each new connection to the next of `backends` in
/// turn, as a round-robin load balancer does; counts the connections each one got.
/// [`round_robin`] over the members' MCP addresses.
async fn round_robin_over(
    members: &[Member],
) -> (String, Arc<Vec<std::sync::atomic::AtomicUsize>>) {
    let backends = members
        .iter()
        .map(|m| {
            m.mcp
                .trim_start_matches("http://")
                .trim_end_matches("/mcp")
                .to_owned()
        })
        .collect();
    round_robin(backends).await
}

async fn round_robin(backends: Vec<String>) -> (String, Arc<Vec<std::sync::atomic::AtomicUsize>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let counts: Arc<Vec<std::sync::atomic::AtomicUsize>> = Arc::new(
        backends
            .iter()
            .map(|_| std::sync::atomic::AtomicUsize::new(0))
            .collect(),
    );
    let served = counts.clone();
    tokio::spawn(async move {
        let mut next = 0;
        while let Ok((mut inbound, _)) = listener.accept().await {
            let index = next % backends.len();
            next += 1;
            served[index].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let backend = backends[index].clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&backend).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (format!("http://{address}/mcp"), counts)
}

/// Two members behind a round-robin proxy. A 2026-07-28 client carries no session, so
/// whichever member a request lands on answers it. A handshake-era session lives on the
/// member that opened it, and its id names that member: another member hands the request
/// to it, so the client needs no sticky routing. A session of a member that is gone is
/// answered 404, which the protocol tells a client to take as "start a new session".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_behind_a_round_robin_proxy_keep_working_across_members() {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let db = database().await;
    set_fake(&db, "alpha", &[]).await;
    let members = [
        member(&db, "m1", &[], tempfile::tempdir().unwrap()).await,
        member(&db, "m2", &[], tempfile::tempdir().unwrap()).await,
    ];
    let (url, counts) = round_robin_over(&members).await;

    // A new connection per request, so the proxy spreads them (no readiness wait).
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        http.clone(),
        StreamableHttpClientTransportConfig::with_uri(url.clone()),
    );
    let client = TestClient::default()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("a 2026-07-28 client connects through the proxy");
    list_at_once(&client, &["alpha__echo"]).await;
    for round in 0..6 {
        let result = client
            .call_tool(call(
                "alpha__echo",
                serde_json::json!({"text": format!("round {round}")}),
            ))
            .await
            .unwrap_or_else(|error| panic!("call {round} through the proxy failed: {error}"));
        assert!(
            text_of(&result).contains(&format!("round {round}")),
            "{result:?}"
        );
    }
    let spread: Vec<usize> = counts
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::SeqCst))
        .collect();
    assert!(
        spread.iter().all(|&n| n >= 3),
        "both members should have answered: {spread:?}"
    );

    let _ = client.cancel().await;

    // A handshake-era client: its session lives on the member that opened it, and the
    // proxy spreads its requests over both; the other member hands them to the owner.
    let before: Vec<usize> = counts
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::SeqCst))
        .collect();
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        http.clone(),
        StreamableHttpClientTransportConfig::with_uri(url.clone()),
    );
    let legacy = TestClient::default()
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await
        .expect("a handshake-era client connects through the proxy");
    list_at_once(&legacy, &["alpha__echo"]).await;
    for round in 0..6 {
        let result = legacy
            .call_tool(call(
                "alpha__echo",
                serde_json::json!({"text": format!("legacy {round}")}),
            ))
            .await
            .unwrap_or_else(|error| {
                panic!("legacy call {round} through the proxy failed: {error}")
            });
        assert!(
            text_of(&result).contains(&format!("legacy {round}")),
            "{result:?}"
        );
    }
    let spread: Vec<usize> = counts
        .iter()
        .zip(&before)
        .map(|(c, before)| c.load(std::sync::atomic::Ordering::SeqCst) - before)
        .collect();
    assert!(
        spread.iter().all(|&n| n >= 3),
        "the legacy session's requests should have landed on both members: {spread:?}"
    );
    let _ = legacy.cancel().await;

    // A session of a member the fleet does not know: 404 (start a new session), saying why.
    let stray = http
        .post(&members[1].mcp)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", "6e6f626f6479.0123")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(stray.status(), 404);
    let said: serde_json::Value = stray.json().await.unwrap();
    let said = said["error"].as_str().unwrap_or_default();
    assert!(
        said.contains("\"nobody\"") && said.contains("no member of that name"),
        "{said}"
    );
}

/// `wardgate fleet import` takes a whole config file: its module (with its params) goes to
/// the fleet and each member reports on it, its servers follow with the file's default
/// policy bound, and `${VAR}`s stay for members to expand (the importer need not have
/// them). `servers list` and `remove` work on the result; the fleet shows a member that
/// stopped and one whose heartbeats stopped for what they are.
#[tokio::test]
async fn a_config_file_is_imported_whole_and_members_that_leave_are_shown() {
    assert!(
        std::env::var("WG_TEST_FLEET_DB").is_err(),
        "the importer must not have the members' variable"
    );
    let db = database().await;
    let members = [
        member(&db, "m1", &[], tempfile::tempdir().unwrap()).await,
        member(&db, "m2", &[], tempfile::tempdir().unwrap()).await,
    ];
    let file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::fs::write(
        file.path(),
        format!(
            "[gateway]\npolicy = \"recovery\"\n\n\
             [policies.recovery]\npath = {:?}\nparams = {{ max_attempts = \"3\" }}\n\n\
             [servers.alpha]\ncommand = {:?}\nargs = [\"--name\", \"alpha\"]\n\
             env = {{ ONLY_MEMBERS_KNOW = \"${{WG_TEST_FLEET_DB}}\" }}\n",
            module("default"),
            fake()
        ),
    )
    .unwrap();
    // Every status a member writes, in order (to see `syncing_tools`, which lasts only
    // while the tool snapshot is written).
    db.psql(
        "CREATE TABLE status_seen (id bigserial, member text, server text, status text);
         CREATE FUNCTION note_status() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO status_seen (member, server, status) VALUES (NEW.member, NEW.server, NEW.status);
             RETURN NULL;
         END $$;
         CREATE TRIGGER note_status AFTER INSERT OR UPDATE ON wardgate_server_status
             FOR EACH ROW EXECUTE FUNCTION note_status();",
    );
    let (ok, out, err) = fleet(&db, &["import", file.path().to_str().unwrap()]).await;
    assert!(
        ok && out.contains("imported 1 server(s) (alpha)")
            && out.contains("recovery v1 on m1: loaded")
            && out.contains("recovery v1 on m2: loaded"),
        "{out}{err}"
    );
    for member in &members {
        let alpha = until_server(&member.admin, "alpha", "online").await;
        assert_eq!(alpha["policy"], "recovery", "{alpha}");
    }
    // The seed's sequence: the tools are synced (`syncing_tools`) before the server shows
    // online in the fleet.
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let seen = db.psql(
            "SELECT string_agg(status, ',' ORDER BY id) FROM status_seen WHERE member = 'm1' AND server = 'alpha'",
        );
        if seen.contains("syncing_tools,online") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "m1 never wrote syncing_tools then online for alpha: {seen}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // One notification, four rows for m1: claimed by priority, then by age (inserted in
    // the opposite order).
    db.psql(
        "INSERT INTO wardgate_commands (correlation_id, member, command, priority, expires_at) VALUES
             ('order-low', 'm1', '{\"type\": \"health_check\", \"server\": \"alpha\"}', 3, now() + interval '5 minutes'),
             ('order-normal-1', 'm1', '{\"type\": \"health_check\", \"server\": \"alpha\"}', 2, now() + interval '5 minutes'),
             ('order-normal-2', 'm1', '{\"type\": \"health_check\", \"server\": \"alpha\"}', 2, now() + interval '5 minutes'),
             ('order-immediate', 'm1', '{\"type\": \"health_check\", \"server\": \"alpha\"}', 0, now() + interval '5 minutes')",
    );
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let left = db.psql(
            "SELECT count(*) FROM wardgate_commands WHERE correlation_id LIKE 'order-%' AND acknowledged_at IS NULL",
        );
        if left.trim() == "0" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "m1 never claimed the ordered rows"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        db.psql(
            "SELECT string_agg(correlation_id, ',' ORDER BY acknowledged_at, id) FROM wardgate_commands WHERE correlation_id LIKE 'order-%'"
        )
        .trim(),
        "order-immediate,order-normal-1,order-normal-2,order-low"
    );

    let listed = fleet_json(&db, &["servers", "list", "--json"]).await;
    let spec = listed["alpha"].as_str().unwrap_or_default();
    assert!(
        spec.contains("policy = \"recovery\"") && spec.contains("${WG_TEST_FLEET_DB}"),
        "the spec keeps its variable and gains the default policy: {listed}"
    );
    let applied =
        std::fs::read_to_string(members[0].state.path().join("fleet/m1/fleet-config.toml"))
            .unwrap();
    let applied: toml::Table = toml::from_str(&applied).unwrap();
    assert_eq!(
        applied["policies"]["recovery"]["params"]["max_attempts"].as_str(),
        Some("3"),
        "{applied}"
    );

    // Removed from the fleet: gone from every member.
    let (ok, out, err) = fleet(&db, &["servers", "remove", "alpha"]).await;
    assert!(ok, "{out}{err}");
    for member in &members {
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            let (_, servers) = member.admin.get("/servers").await;
            if !servers["servers"]
                .as_array()
                .is_some_and(|all| all.iter().any(|s| s["name"] == "alpha"))
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "alpha stayed: {servers}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // m1 stops cleanly; m2 is killed and its heartbeats stop.
    let [mut m1, mut m2] = members;
    let m1_pid = m1.admin.process.id().unwrap() as i32;
    // SAFETY: a signal to a child of this test.
    unsafe { libc::kill(m1_pid, libc::SIGTERM) };
    let _ = tokio::time::timeout(SETTLE, m1.admin.process.wait()).await;
    m2.admin.process.kill().await.unwrap();
    until_status(&db, "m1 stopped and m2 gone", |status| {
        let state = |name: &str| {
            status["members"]
                .as_array()
                .and_then(|all| all.iter().find(|m| m["name"] == name))
                .map(|m| m["state"].clone())
        };
        state("m1") == Some("stopped".into()) && state("m2") == Some("gone".into())
    })
    .await;
}

/// POST `body` to `/mcp` at `url` as `session` with `token`: the status and the body.
async fn post_mcp(
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: &str,
) -> (u16, Option<String>, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .timeout(Duration::from_secs(30))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(body.to_owned());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = request.send().await.expect("an answer");
    let status = response.status().as_u16();
    let id = response
        .headers()
        .get("mcp-session-id")
        .map(|value| value.to_str().unwrap().to_owned());
    (status, id, response.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_admit_clients_differently_do_not_hand_each_other_sessions() {
    const TOKEN: &str = "agent-token-0123456789";
    // SAFETY: a variable no other test reads, set before the members that read it start.
    unsafe { std::env::set_var("WG_TEST_FLEET_AGENT_TOKEN", TOKEN) };
    let db = database().await;
    set_fake(&db, "notes", &[]).await;
    set_fake(&db, "math", &[]).await;
    // One member admits only the agent, to `notes`; the other admits anyone, to all. The
    // grant names a server only the fleet's database has: the member's file alone cannot
    // know it, and the member starts all the same.
    let guarded = member_with(
        &db.url(),
        "guarded",
        &[],
        tempfile::tempdir().unwrap(),
        "[gateway.auth.clients.agent]\ntoken = \"${WG_TEST_FLEET_AGENT_TOKEN}\"\nallow = [\"notes\"]\n",
    )
    .await;
    let open = member(&db, "open", &[], tempfile::tempdir().unwrap()).await;
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let (status, session, _) = post_mcp(&open.mcp, None, None, initialize).await;
    assert_eq!(status, 200);
    let session = session.expect("a session on the open member");
    post_mcp(
        &open.mcp,
        None,
        Some(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    // Through the guarded member, the agent asks for `math` on the open member's session.
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"math__add","arguments":{"a":1,"b":2}}}"#;
    let (status, _, body) = post_mcp(&guarded.mcp, Some(TOKEN), Some(&session), call).await;
    assert_eq!(
        status, 404,
        "a member with other auth settings was handed the request: {body}"
    );
    assert!(
        body.contains("other [gateway.auth] or [gateway.http] settings"),
        "{body}"
    );
    assert!(
        guarded
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|line| line.contains("not handing a session's request")
                && line.contains("digests differ")),
        "the guarded member's log does not say why"
    );
    // `fleet status` shows the mismatch, and --json the digests.
    let (_, out, _) = fleet(&db, &["status"]).await;
    assert!(out.contains("access settings differ"), "{out}");
    let status = fleet_json(&db, &["status", "--json"]).await;
    let digest = |name: &str| {
        status["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|member| member["name"] == name)
            .map(|member| member["access_digest"].clone())
            .unwrap()
    };
    assert!(digest("guarded").is_string());
    assert_ne!(digest("guarded"), digest("open"));
}

/// A member that hears no notifications (LISTEN off) still runs every command of every
/// priority, found by its polls alone (each priority on its own interval, which the unit
/// tests of `Polls` check on the seeds' numbers); rows inserted together are claimed
/// immediate first, low last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_notifications_the_polls_find_every_priority_in_order() {
    let db = database().await;
    set_fake(&db, "alpha", &[]).await;
    let quiet = member_with_env(
        &db.url(),
        "quiet",
        &[],
        tempfile::tempdir().unwrap(),
        "",
        &[
            ("WARDGATE_FLEET_NO_LISTEN", "1"),
            // Immediate, high, normal, low: the seeds' 2, 10, 30 and 60 s, scaled down.
            ("WARDGATE_FLEET_POLL_MS", "200,400,800,1600"),
        ],
    )
    .await;
    quiet.admin.wait_status("alpha", "online", SETTLE).await;
    db.psql(
        "INSERT INTO wardgate_commands (correlation_id, member, command, priority, expires_at) VALUES
             ('poll-low', 'quiet', '{\"type\": \"health_check\", \"server\": \"alpha\"}', 3, now() + interval '5 minutes'),
             ('poll-normal', 'quiet', '{\"type\": \"health_check\", \"server\": \"alpha\"}', 2, now() + interval '5 minutes'),
             ('poll-high', 'quiet', '{\"type\": \"health_check\", \"server\": \"alpha\"}', 1, now() + interval '5 minutes'),
             ('poll-immediate', 'quiet', '{\"type\": \"health_check\", \"server\": \"alpha\"}', 0, now() + interval '5 minutes')",
    );
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let left = db.psql(
            "SELECT count(*) FROM wardgate_commands WHERE correlation_id LIKE 'poll-%' AND state <> 'completed'",
        );
        if left.trim() == "0" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the polls never ran every row: {}",
            db.psql("SELECT correlation_id, state FROM wardgate_commands WHERE correlation_id LIKE 'poll-%'")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        db.psql(
            "SELECT string_agg(correlation_id, ',' ORDER BY acknowledged_at, id) FROM wardgate_commands WHERE correlation_id LIKE 'poll-%'"
        )
        .trim(),
        "poll-immediate,poll-high,poll-normal,poll-low"
    );
    drop(quiet);
}

/// A per-client server in a fleet: a handshake-era session's instance lives on the member
/// that owns the session, and a request the proxy sends to the other member is handed to
/// the owner, so every call of the session reaches the one process.
#[tokio::test]
async fn a_sessions_instance_lives_on_the_member_that_owns_the_session() {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let db = database().await;
    let file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::fs::write(
        file.path(),
        format!(
            "[servers.alpha]\ncommand = {:?}\nargs = [\"--name\", \"alpha\"]\ninstances = \"per-client\"\n",
            fake()
        ),
    )
    .unwrap();
    let (ok, out, err) = fleet(&db, &["import", file.path().to_str().unwrap()]).await;
    assert!(ok, "{out}{err}");
    let members = [
        member(&db, "m1", &[], tempfile::tempdir().unwrap()).await,
        member(&db, "m2", &[], tempfile::tempdir().unwrap()).await,
    ];
    let (url, counts) = round_robin_over(&members).await;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(url),
    );
    let client = TestClient::default()
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await
        .expect("a handshake-era client connects through the proxy");
    let mut pids = std::collections::BTreeSet::new();
    for _ in 0..6 {
        let result = client
            .call_tool(call("alpha__pid", serde_json::json!({})))
            .await
            .expect("the call answers");
        pids.insert(text_of(&result));
    }
    let spread: Vec<usize> = counts
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::SeqCst))
        .collect();
    assert!(
        spread.iter().all(|&n| n >= 3),
        "the session's requests should have landed on both members: {spread:?}"
    );
    assert_eq!(pids.len(), 1, "one session, one instance: {pids:?}");
    let mut where_ = Vec::new();
    for member in &members {
        let (_, detail) = member.admin.get("/servers/alpha").await;
        let instances = detail["instances"].as_array().cloned().unwrap_or_default();
        where_.push(instances.len());
        if let Some(instance) = instances.first() {
            assert_eq!(
                instance["pid"].as_u64().map(|pid| pid.to_string()).as_ref(),
                pids.first(),
                "{instance}"
            );
        }
    }
    assert_eq!(
        where_.iter().sum::<usize>(),
        1,
        "the instance lives on one member: {where_:?}"
    );
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_published_to_the_fleet_runs_on_every_member_and_its_reports_are_summed() {
    let db = database().await;
    let default = module("default");
    let strict = module("strict");
    // A server that exits at every start: the default restarts it twice, then gives up.
    serve_under_recovery(&db, &default, "crashy", &["--exit-on-start", "3"]).await;
    let members = vec![
        member(&db, "m1", &[], tempfile::tempdir().unwrap()).await,
        member(&db, "m2", &[], tempfile::tempdir().unwrap()).await,
    ];
    for member in &members {
        member
            .admin
            .wait_status("crashy", "permanently_failed", SETTLE)
            .await;
    }

    let (ok, out, err) = fleet(
        &db,
        &[
            "policy",
            "publish",
            "recovery",
            strict.to_str().unwrap(),
            "--shadow",
        ],
    )
    .await;
    assert!(
        ok && out.contains("as the fleet's shadow of recovery"),
        "{out}{err}"
    );
    async fn shadowed(member: &Member) -> bool {
        let (_, policies) = member.admin.get("/policies").await;
        policies["policies"].as_array().is_some_and(|list| {
            list.iter().any(|p| {
                p["name"] == "recovery"
                    && p["shadow"]["module"]
                        .as_str()
                        .is_some_and(|module| module.starts_with("strict "))
            })
        })
    }
    for member in &members {
        let deadline = tokio::time::Instant::now() + SETTLE;
        while !shadowed(member).await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the shadow never bound"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The crash loop again, now with the shadow asked beside the live module.
        let (status, body) = member.admin.post("/servers/crashy/reconnect", None).await;
        assert!(status == 200 || status == 409, "{body}");
    }
    for member in &members {
        member
            .admin
            .wait_status("crashy", "permanently_failed", SETTLE)
            .await;
    }
    // Each member files its report; the fleet's is their sum.
    let deadline = tokio::time::Instant::now() + SETTLE;
    let report = loop {
        let report = fleet_json(&db, &["policy", "shadow-report", "recovery", "--json"]).await;
        let pairs = report["summed"]["pairs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let crashes: u64 = pairs
            .iter()
            .filter(|p| {
                p["question"] == "crash" && p["live"] == "restart" && p["shadow"] == "give up"
            })
            .filter_map(|p| p["count"].as_u64())
            .sum();
        if report["members"].as_array().map(Vec::len) == Some(2) && crashes == 4 {
            break report;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the members' reports never summed to 2 disagreements each: {report}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(report["summed"]["faults"], 0, "{report}");
    assert!(report["silent"].as_array().unwrap().is_empty(), "{report}");
    let (ok, out, err) = fleet(&db, &["policy", "shadow-report", "recovery"]).await;
    assert!(ok && out.contains("2 members reported"), "{out}{err}");
    assert!(out.contains("first disagreements:"), "{out}");

    // Promoted: the shadow decides on every member, and shadows no more.
    let (ok, out, err) = fleet(&db, &["policy", "promote", "recovery"]).await;
    assert!(ok, "{out}{err}");
    for member in &members {
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            let (_, policies) = member.admin.get("/policies").await;
            let recovery = policies["policies"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == "recovery")
                .cloned()
                .unwrap();
            if recovery["module"] == "strict" && recovery["shadow"].is_null() {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{recovery}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let (ok, _, err) = fleet(&db, &["policy", "shadow-report", "recovery"]).await;
    assert!(!ok && err.contains("has no shadow"), "{err}");
}
