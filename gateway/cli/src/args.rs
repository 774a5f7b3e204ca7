//! Command-line flags.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// One MCP endpoint in front of many MCP servers, with recovery you can change at run time.
///
/// Without a subcommand, wardgate serves MCP: over stdio (the way Claude Desktop, Cursor and
/// VS Code launch servers), or over Streamable HTTP at /mcp with --listen.
#[derive(Debug, Parser)]
#[command(name = "wardgate", version, about, long_about)]
pub struct Cli {
    /// Config file: wardgate.toml, or a JSON file with "mcpServers" (Claude Desktop, Cursor) or
    /// "servers" (VS Code).
    #[arg(
        long,
        short,
        env = "WARDGATE_CONFIG",
        global = true,
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,

    /// Serve MCP over Streamable HTTP on this address (endpoint /mcp) instead of stdio.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,

    /// Log filter: error, warn, info, debug, trace, or a tracing directive such as
    /// "info,wardgate::upstream::stderr=warn". Logs always go to stderr.
    #[arg(
        long,
        env = "WARDGATE_LOG",
        default_value = "info",
        global = true,
        value_name = "FILTER"
    )]
    pub log_level: String,

    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a config file and print what it would run; exits non-zero on error.
    Check {
        /// The config file to check (or give it with --config).
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}
