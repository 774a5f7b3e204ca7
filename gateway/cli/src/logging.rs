//! Logging to stderr only: stdout belongs to the MCP protocol in stdio mode.

use tracing_subscriber::EnvFilter;

/// The gateway's own crates (targets `wardgate*`) at info, every dependency at warn: rmcp,
/// hyper and reqwest log each connection, peer info and notification at info, which floods
/// a newcomer's terminal and can carry tool data. rmcp's transport worker is off: when a
/// connection fails it logs the `reqwest` error whole, request URL included, and a URL may
/// hold a `${VAR}` secret; the gateway reports the same failure itself, URL withheld.
pub const DEFAULT_FILTER: &str = "warn,wardgate=info,rmcp::transport::worker=off";

/// Standard error, with every line masked (`wardgate_config::secrets`): secrets and URL
/// credentials and queries never reach the log, whatever logs them, at any level. The
/// formatter writes each event whole, in one call.
struct Masked;

impl std::io::Write for Masked {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let masked = wardgate_config::secrets::mask(&text);
        std::io::stderr().write_all(masked.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// How log lines are written: text for people, JSON for collectors (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

pub fn init(filter: &str, format: LogFormat) -> Result<(), String> {
    let filter = EnvFilter::try_new(filter).map_err(|error| {
        format!(
            "invalid --log-level {filter:?}: {error}; try info, debug or \"info,wardgate=debug\""
        )
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| Masked)
        .with_ansi(false);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(|error| format!("could not set up logging: {error}"))
}
