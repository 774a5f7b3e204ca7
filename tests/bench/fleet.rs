//! Benchmark: a fleet on a real PostgreSQL (Debian's, a throwaway cluster).
//!
//! 1. Command latency: the time from a command row's insert to `executing` on its member
//!    (the database's own clock: `started_at - created_at`), for `immediate` commands, with
//!    LISTEN/NOTIFY and with polling only (`WARDGATE_FLEET_NO_LISTEN`: the seeds' 2 s poll).
//!    Target: within 50 ms with NOTIFY.
//! 2. Database load of status sync as members × servers grows (3 × 0, 3 × 10 and 3 × 100):
//!    the rows written to the status-sync tables (status, tools, events; from
//!    `pg_stat_user_tables`, so the benchmark's own reads do not count) while every server
//!    comes up (until none is written for 12 s), and once the fleet is idle, over 61 s (two
//!    of sync's 30 s passes), the rows and transactions per second. 3 × 0 is the baseline: heartbeats, command polls and
//!    lease reaping with nothing to sync. Transactions are the whole database's, read
//!    while the benchmark itself asks nothing.
//!
//! Run: `cargo bench -p wardgate-tests --bench fleet`.

#[path = "../support/debian.rs"]
mod debian;
#[path = "../support/gateway_binary.rs"]
mod gateway_binary;
#[path = "../support/postgres.rs"]
mod postgres;

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use postgres::Postgres;

fn fake() -> String {
    env!("CARGO_BIN_EXE_wardgate-fake").to_owned()
}

/// Start member `name`; `extra` environment on top of the fleet's.
fn member(db: &Postgres, name: &str, state: &std::path::Path, extra: &[(&str, &str)]) -> Child {
    let dir = state.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("wardgate.toml");
    std::fs::write(
        &config,
        format!("[gateway]\nstartup_wait = \"0s\"\n\n[fleet]\ndatabase_url = \"${{WG_BENCH_DB}}\"\nmember = \"{name}\"\n"),
    )
    .unwrap();
    Command::new(gateway_binary::gateway_binary())
        .arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0", "--log-level", "error"])
        .env("WG_BENCH_DB", db.url())
        .env("WARDGATE_STATE_DIR", &dir)
        .envs(extra.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn wardgate")
}

fn wait_until(db: &Postgres, sql: &str, want: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while db.psql(sql) != want {
        assert!(
            Instant::now() < deadline,
            "never {want:?}: {sql} = {}",
            db.psql(sql)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn set_servers(db: &Postgres, count: usize) {
    db.psql("DELETE FROM wardgate_servers");
    if count == 0 {
        return;
    }
    let values: Vec<String> = (0..count)
        .map(|i| {
            format!(
                "('s{i}', 'command = {:?}\nargs = [\"--name\", \"s{i}\"]\n')",
                fake()
            )
        })
        .collect();
    db.psql(&format!(
        "INSERT INTO wardgate_servers (name, spec) VALUES {}",
        values.join(",")
    ));
}

/// Milliseconds from insert to executing, for `samples` immediate commands in turn.
fn command_latency(db: &Postgres, member: &str, samples: usize) -> Vec<f64> {
    let mut latencies = Vec::new();
    for i in 0..samples {
        // Unique across calls: a warm-up and a measured run must not share ids.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let seq = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let correlation = format!("bench-{member}-{seq}-{}", std::process::id());
        db.psql(&format!(
            "INSERT INTO wardgate_commands (correlation_id, member, command, priority, expires_at)
             VALUES ('{correlation}', '{member}', '{{\"type\": \"health_check\", \"server\": \"s0\"}}', 0, now() + interval '5 minutes')"
        ));
        wait_until(
            db,
            &format!("SELECT state IN ('completed', 'failed') FROM wardgate_commands WHERE correlation_id = '{correlation}'"),
            "t",
            Duration::from_secs(30),
        );
        let ms: f64 = db
            .psql(&format!(
                "SELECT extract(epoch FROM started_at - created_at) * 1000 FROM wardgate_commands WHERE correlation_id = '{correlation}'"
            ))
            .parse()
            .unwrap();
        latencies.push(ms);
        // Not in step with the poll.
        std::thread::sleep(Duration::from_millis(37 * (i as u64 % 7)));
    }
    latencies
}

fn quantiles(mut values: Vec<f64>) -> String {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    format!(
        "p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms (n={})",
        at(0.5),
        at(0.9),
        at(1.0),
        values.len()
    )
}

/// The tables status sync writes.
const SYNC_TABLES: &str = "('wardgate_server_status', 'wardgate_tools', 'wardgate_events')";

/// (transactions of the database, rows written to status-sync tables, rows written to the
/// others) so far.
fn load(db: &Postgres) -> (i64, i64, i64) {
    let row = db.psql(&format!(
        "SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'wardgate'),
                coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del) FILTER (WHERE relname IN {SYNC_TABLES}), 0),
                coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del) FILTER (WHERE relname NOT IN {SYNC_TABLES}), 0)
           FROM pg_stat_user_tables"
    ));
    let mut parts = row.split('|').map(|part| part.parse::<i64>().unwrap());
    (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let db = Postgres::start();
    let state = tempfile::tempdir().unwrap();
    // The schema, and one server to health-check.
    let status = std::process::Command::new(gateway_binary::gateway_binary())
        .args(["fleet", "status"])
        .env("WARDGATE_FLEET_DATABASE_URL", db.url())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    set_servers(&db, 1);

    println!("fleet benchmark: one PostgreSQL, members on 127.0.0.1, 2 noisy cores");
    for (label, extra, samples) in [
        ("LISTEN/NOTIFY", vec![], 40),
        (
            "polling only (2 s)",
            vec![("WARDGATE_FLEET_NO_LISTEN", "1")],
            12,
        ),
    ] {
        let _m = member(&db, "latency", state.path(), &extra);
        wait_until(&db, "SELECT count(*) FROM wardgate_server_status WHERE member = 'latency' AND status = 'online'", "1", Duration::from_secs(30));
        // Warm up (first claim, connections).
        command_latency(&db, "latency", 3);
        let latencies = command_latency(&db, "latency", samples);
        println!(
            "insert → executing, immediate, {label}: {}",
            quantiles(latencies)
        );
        drop(_m);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    db.psql("DELETE FROM wardgate_server_status; DELETE FROM wardgate_tools; DELETE FROM wardgate_members");

    const IDLE: u64 = 61;
    let mut baseline = 0.0;
    for servers in [0usize, 10, 100] {
        set_servers(&db, servers);
        let before = load(&db);
        let started = Instant::now();
        let members: Vec<Child> = (0..3)
            .map(|i| member(&db, &format!("load{servers}-{i}"), state.path(), &[]))
            .collect();
        wait_until(
            &db,
            &format!("SELECT count(*) FROM wardgate_members WHERE name LIKE 'load{servers}-%'"),
            "3",
            Duration::from_secs(60),
        );
        wait_until(
            &db,
            &format!("SELECT count(*) FROM wardgate_server_status WHERE member LIKE 'load{servers}-%' AND status = 'online'"),
            &(3 * servers).to_string(),
            Duration::from_secs(180),
        );
        let online = started.elapsed();
        // Settled: no status-sync row written for 12 s (an idle connection's statistics
        // reach pg_stat_* within 10 s), within 2 minutes.
        let mut settled = load(&db);
        let mut quiet_since = Instant::now();
        while quiet_since.elapsed() < Duration::from_secs(12)
            && started.elapsed() < Duration::from_secs(120)
        {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = load(&db);
            if now.1 != settled.1 {
                quiet_since = Instant::now();
            }
            settled = now;
        }
        tokio::time::sleep(Duration::from_secs(IDLE)).await;
        let idle = load(&db);
        let per_second = |delta: i64| delta as f64 / IDLE as f64;
        let transactions = per_second(idle.0 - settled.0);
        if servers == 0 {
            baseline = transactions;
            println!(
                "status sync, 3 members × 0 servers (baseline): idle {transactions:.1} transactions/s, {:.2} rows/s to other tables (heartbeats, reaping)",
                per_second(idle.2 - settled.2),
            );
        } else {
            let rows = settled.1 - before.1;
            println!(
                "status sync, 3 members × {servers} servers: all online in {:.1} s; start-up {rows} status-sync rows ({:.1} per server); idle {:.2} status-sync rows/s, {transactions:.1} transactions/s ({:+.1} over the baseline)",
                online.as_secs_f64(),
                rows as f64 / (3 * servers) as f64,
                per_second(idle.1 - settled.1),
                transactions - baseline,
            );
        }
        drop(members);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
