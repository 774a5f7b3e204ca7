//! Secrets never reach the log, at any level the operator picks: configured values, and the
//! credentials and query strings of URLs, are masked in every line whatever logged it.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::harness::*;

const SECRET: &str = "sk-SECRET-123";
const TOKEN: &str = "tok-HEADER-456";

/// A port nothing listens on.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Everything the gateway logged at `level` while its upstreams failed to connect, lost
/// their servers, reconnected and were closed.
async fn leak_run(level: &str) -> String {
    let web = FakeHttp::start("http", &["--name", "web"]).await;
    let old = FakeHttp::start("sse", &["--name", "old"]).await;
    let toml = format!(
        "[servers.web]\nurl = \"{}/mcp?api_key=${{WG_LEAK_SECRET}}\"\ntransport = \"streamable-http\"\n\
         headers = {{ Authorization = \"Bearer ${{WG_LEAK_TOKEN}}\" }}\n\n\
         [servers.old]\nurl = \"{}/sse?api_key=${{WG_LEAK_SECRET}}\"\ntransport = \"sse\"\n\n\
         [servers.gone]\nurl = \"http://wardgate:${{WG_LEAK_SECRET}}@127.0.0.1:{}/mcp\"\ntransport = \"streamable-http\"\n\n\
         [servers.local]\ncommand = {:?}\nargs = [\"--name\", \"local\", \"--no-such-flag=${{WG_LEAK_SECRET}}\"]\n\
         env = {{ API_KEY = \"${{WG_LEAK_TOKEN}}\" }}\n\n",
        web.base,
        old.base,
        dead_port(),
        fake(),
    );
    let config = config(&toml);
    let mut gateway = Command::new(wardgate())
        .env("WG_LEAK_SECRET", SECRET)
        .env("WG_LEAK_TOKEN", TOKEN)
        .arg("--config")
        .arg(&config.path)
        .args(["--listen", "127.0.0.1:0", "--log-level", level])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn wardgate");
    let mut stderr = gateway.stderr.take().unwrap();
    let reading = tokio::spawn(async move {
        let mut log = String::new();
        let _ = stderr.read_to_string(&mut log).await;
        log
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Both HTTP servers go away: reconnections fail, sessions cannot be deleted.
    drop(web);
    drop(old);
    tokio::time::sleep(Duration::from_secs(4)).await;
    // SIGTERM: a clean shutdown closes what is left.
    // SAFETY: kill sends a signal to the process this test spawned.
    unsafe { libc::kill(gateway.id().unwrap() as i32, libc::SIGTERM) };
    let _ = tokio::time::timeout(Duration::from_secs(20), gateway.wait()).await;
    let _ = gateway.kill().await;
    tokio::time::timeout(Duration::from_secs(20), reading)
        .await
        .expect("the log ended")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_masked_in_the_log_at_every_level() {
    for level in ["error", "warn", "info", "debug", "trace"] {
        let log = leak_run(level).await;
        for secret in [SECRET, TOKEN, "SECRET-123", "HEADER-456"] {
            if let Some(at) = log.find(secret) {
                let line_start = log[..at].rfind('\n').map_or(0, |at| at + 1);
                let line_end = log[at..].find('\n').map_or(log.len(), |end| at + end);
                panic!(
                    "{secret:?} reached the log at --log-level {level}:\n{}",
                    &log[line_start..line_end]
                );
            }
        }
        // The runs that log the URLs show them masked: the test saw what it guards.
        if level == "debug" || level == "trace" {
            assert!(
                log.contains("?***") || log.contains("://***@"),
                "at {level}, no masked URL was logged; the test did not exercise the mask:\n{}",
                &log[..log.len().min(3000)]
            );
        }
        if level != "error" {
            assert!(
                log.contains("***"),
                "at {level}, nothing masked was logged:\n{}",
                &log[..log.len().min(3000)]
            );
        }
    }
}
