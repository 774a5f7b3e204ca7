//! The `wardgate` binary: flags, logging and composition; all logic lives in the libraries.

mod args;
mod logging;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use wardgate_engine::config::Config;
use wardgate_engine::{downstream, Gateway};
use wardgate_policy::Builtin;

use args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(error) = logging::init(&cli.log_level, cli.log_format) {
        eprintln!("wardgate: {error}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("wardgate: could not start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(cli));
    // Give detached tasks (log forwarding, stderr readers) no chance to hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("wardgate: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Some(Command::Check { file }) => {
            let path = file
                .or(cli.config)
                .context("no config file given; pass --config FILE")?;
            match Config::load(&path) {
                Ok(config) => {
                    println!("{}", config.summary());
                    Ok(ExitCode::SUCCESS)
                }
                Err(error) => {
                    eprintln!("{error}");
                    Ok(ExitCode::from(2))
                }
            }
        }
        None => {
            let path = cli
                .config
                .context("no config file given; pass --config FILE (see wardgate --help)")?;
            let config = match Config::load(&path) {
                Ok(config) => config,
                Err(error) => {
                    eprintln!("{error}");
                    return Ok(ExitCode::from(2));
                }
            };
            serve(config, cli.listen).await
        }
    }
}

async fn serve(config: Config, listen: Option<String>) -> anyhow::Result<ExitCode> {
    // Bind before starting servers so a taken port fails fast and leaves nothing behind.
    let listener = match &listen {
        Some(address) => Some(
            tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("could not listen on {address}; pick a free address with --listen HOST:PORT"))?,
        ),
        None => None,
    };
    tracing::info!(servers = config.servers.len(), config = %config.source.display(), "starting wardgate {}", env!("CARGO_PKG_VERSION"));
    let gateway = Gateway::start(&config, Arc::new(Builtin::default()));
    let serving = {
        let gateway = gateway.clone();
        async move {
            match listener {
                Some(listener) => downstream::http::serve(gateway, listener)
                    .await
                    .map_err(|e| e.to_string()),
                None => downstream::serve_stdio(gateway).await,
            }
        }
    };
    let outcome = tokio::select! {
        result = serving => result,
        signal = shutdown_signal() => {
            tracing::info!("received {signal}; shutting down");
            Ok(())
        }
    };
    gateway.shutdown().await;
    tracing::info!("all servers stopped");
    match outcome {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(error) => anyhow::bail!(error),
    }
}

async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = match signal(SignalKind::terminate()) {
        Ok(stream) => stream,
        Err(_) => return std::future::pending().await,
    };
    let mut hangup = signal(SignalKind::hangup()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
        _ = async { match hangup.as_mut() { Some(h) => { h.recv().await; } None => std::future::pending().await } } => "SIGHUP",
    }
}
