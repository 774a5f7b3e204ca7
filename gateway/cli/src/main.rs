//! The `wardgate` binary: its arguments, `main`, the CLI client and the subcommands. A
//! serving gateway is the application library's (`wardgate_app::serve`).

mod args;
mod auth_cmd;
mod client;
mod demo;
#[cfg(feature = "fleet")]
mod fleet_cmd;
#[cfg(feature = "fleet")]
mod fleet_shadow;
mod logging;
mod policy_cmd;
mod policy_new;
mod signals;
mod simulate;
mod telemetry;

use anyhow::Context;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use std::process::ExitCode;
use wardgate_app::serve;
use wardgate_config::Config;

use args::{Cli, Command};

fn main() -> ExitCode {
    // Configs name this binary as `${WARDGATE_EXE}` (the quickstart's demo servers), set
    // here before any thread starts.
    if let Ok(exe) = std::env::current_exe() {
        std::env::set_var("WARDGATE_EXE", exe);
    }
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    // A serving gateway's config is read first: its `[gateway.telemetry]` is part of how
    // the log is set up.
    let serving = match &cli.command {
        None => match load_config(cli.config.clone()) {
            Ok(loaded) => Some(loaded),
            Err(error) => {
                eprintln!("{error}");
                return ExitCode::from(2);
            }
        },
        Some(_) => None,
    };
    let telemetry = serving
        .as_ref()
        .and_then(|(config, _)| config.gateway.telemetry.as_ref());
    let exporters = match logging::init(&cli.log_level, cli.log_format, telemetry) {
        Ok(exporters) => exporters,
        Err(error) => {
            eprintln!("wardgate: {error}");
            return ExitCode::from(2);
        }
    };
    let serving = serving.map(|(config, note)| {
        if let Some(note) = note {
            tracing::info!("{note}");
        }
        config
    });
    if matches.value_source("admin_token") == Some(ValueSource::CommandLine) {
        tracing::warn!(
            "--admin-token shows the admin token in the process list to every user of this machine; give it with --admin-token-file FILE (mode 0600) or WARDGATE_ADMIN_TOKEN instead"
        );
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
    let result = runtime.block_on(run(cli, serving));
    // Give detached tasks (log forwarding, stderr readers) no chance to hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    // What telemetry still holds goes out now (blocking, outside the runtime).
    if let Some(exporters) = exporters {
        exporters.shutdown();
    }
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("wardgate: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `cli`'s command; `serving`: the config of a serving gateway (no command), read by
/// `main` before the log was set up.
async fn run(cli: Cli, serving: Option<Config>) -> anyhow::Result<ExitCode> {
    let admin_token = admin_token(cli.admin_token.clone(), cli.admin_token_file.as_deref())?;
    if let Some(token) = &admin_token {
        wardgate_config::secrets::remember(token);
    }
    match cli.command {
        Some(Command::DemoServer { name }) => {
            demo::serve(&name).await?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Check { file }) => {
            // Every error in the file, then every program that would not start.
            let checked = load_config(file.or(cli.config)).and_then(|(config, note)| {
                if let Some(note) = note {
                    tracing::info!("{note}");
                }
                config.check_programs().map(|()| config)
            });
            match checked {
                Ok(config) => {
                    println!("{}", config.summary());
                    Ok(ExitCode::SUCCESS)
                }
                Err(error) => {
                    let count = error.all().len();
                    eprintln!("{error}");
                    if count > 1 {
                        eprintln!("{count} errors");
                    }
                    Ok(ExitCode::from(2))
                }
            }
        }
        Some(Command::Policy(command)) if command.needs_gateway() => {
            client::policy(&command, cli.admin.as_deref(), admin_token.as_deref()).await
        }
        Some(Command::Policy(command)) => policy_cmd::run(command),
        Some(Command::Auth(command)) => {
            let path = cli.config.clone().context(
                "no config file given; pass --config FILE (the one the gateway runs with)",
            )?;
            auth_cmd::run(command, &path, cli.fleet_database_url.clone()).await
        }
        #[cfg(feature = "fleet")]
        Some(Command::Fleet(command)) => {
            let url =
                fleet_cmd::database_url(cli.fleet_database_url.clone(), cli.config.as_deref())?;
            fleet_cmd::run(command, &url).await
        }
        #[cfg(not(feature = "fleet"))]
        Some(Command::Fleet(_)) => anyhow::bail!(wardgate_app::fleet_port::ABSENT),
        Some(Command::Operator(command)) => {
            client::run(&command, cli.admin.as_deref(), admin_token.as_deref()).await
        }
        None => {
            let config = serving.context("a serving gateway's config is read by main")?;
            let admin = cli.admin.map(|address| serve::AdminOptions {
                address,
                token: admin_token,
            });
            let tls = match (&cli.tls_cert, &cli.tls_key) {
                (Some(cert), Some(key)) => Some(
                    wardgate_downstream::http::tls::load(cert, key).map_err(anyhow::Error::msg)?,
                ),
                _ => None,
            };
            Ok(serve::serve(
                config,
                cli.listen,
                tls,
                admin,
                cli.fleet_database_url,
                cli.allow_anonymous,
                signals::forward(),
            )
            .await?)
        }
    }
}

/// The config file given, else the first found of `./wardgate.toml` and the user's
/// `wardgate/wardgate.toml`, else the built-in demo servers, with a note that says so and
/// how to serve your own (for the log, which may not be set up yet).
fn load_config(
    given: Option<std::path::PathBuf>,
) -> Result<(Config, Option<String>), wardgate_config::ConfigError> {
    if let Some(path) = given.or_else(found_config) {
        return Ok((Config::load(&path)?, None));
    }
    let note = format!(
        "no config file (looked for ./wardgate.toml and {}): using the built-in demo servers {}; to serve your own, write ./wardgate.toml (see examples/quickstart.toml) or pass --config FILE",
        user_config()
            .map(|path| path.display().to_string())
            .unwrap_or_else(|| "~/.config/wardgate/wardgate.toml".into()),
        demo::NAMES.join(" and "),
    );
    Ok((demo::config()?, Some(note)))
}

/// `./wardgate.toml`, else the user's `wardgate/wardgate.toml`, whichever exists.
fn found_config() -> Option<std::path::PathBuf> {
    let here = std::path::PathBuf::from("wardgate.toml");
    if here.is_file() {
        return Some(here);
    }
    user_config().filter(|path| path.is_file())
}

/// `$XDG_CONFIG_HOME/wardgate/wardgate.toml`, or `~/.config/wardgate/wardgate.toml`.
fn user_config() -> Option<std::path::PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|dir| !dir.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".config"))
        })?;
    Some(base.join("wardgate").join("wardgate.toml"))
}

/// The admin token from `--admin-token` (or `WARDGATE_ADMIN_TOKEN`) or from the file named
/// by `--admin-token-file` (or `WARDGATE_ADMIN_TOKEN_FILE`); errors never show the token.
fn admin_token(
    given: Option<String>,
    file: Option<&std::path::Path>,
) -> anyhow::Result<Option<String>> {
    let Some(file) = file else {
        return Ok(given);
    };
    anyhow::ensure!(
        given.is_none(),
        "the admin token is given twice; use --admin-token (or WARDGATE_ADMIN_TOKEN) or --admin-token-file (or WARDGATE_ADMIN_TOKEN_FILE), not both"
    );
    let token = wardgate_config::read_token_file(file)
        .map_err(|error| anyhow::anyhow!("admin token: {error}; {}", error.fix()))?;
    Ok(Some(token))
}
