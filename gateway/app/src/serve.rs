//! Composition of a serving gateway: the policy registry, the engine, the command queue, the
//! admin API and the downstream transport, until a signal or the client ends it.

use crate::AppError;
use std::sync::Arc;

use crate::error::Context;
use wardgate_config::Config;
use wardgate_downstream as downstream;
use wardgate_engine::commands::{Command, CommandRequest, Priority};
use wardgate_engine::Gateway;

use crate::admin::{self, AdminListener};
use crate::policies::Policies;

/// `--admin` and `--admin-token`: where to serve the admin API, and the token it requires.
pub struct AdminOptions {
    pub address: String,
    pub token: Option<String>,
}

/// What the process that runs the gateway asks of it while it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Re-read the config file and reload the policy modules (SIGHUP).
    Reload,
    /// Shut down, saying why (`SIGTERM`, `SIGINT`, ...).
    Stop(&'static str),
}

/// Serve until the client ends the session (stdio), the listener fails, or `signals` says
/// stop. A closed `signals` only means no more signals will come.
pub async fn serve(
    config: Config,
    listen: Option<String>,
    tls: Option<downstream::http::tls::Acceptor>,
    admin: Option<AdminOptions>,
    fleet_url: Option<String>,
    allow_anonymous: bool,
    mut signals: tokio::sync::mpsc::Receiver<Signal>,
) -> Result<std::process::ExitCode, AppError> {
    let started = admin::Started::now();
    // Bind before starting servers so a taken port fails fast and leaves nothing behind.
    let listener = match &listen {
        Some(address) => Some(
            tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("could not listen on {address}; pick a free address with --listen HOST:PORT"))?,
        ),
        None => None,
    };
    if let Some(listener) = &listener {
        check_exposure(listener, &config, tls.is_some(), allow_anonymous)?;
    }
    let admin_listener = match admin {
        Some(options) => {
            Some(AdminListener::bind(&options.address, options.token, tls.clone()).await?)
        }
        None => None,
    };
    let admin_address = admin_listener
        .as_ref()
        .and_then(|listener| listener.address());
    let (config, member, updates) = crate::membership::join(
        config,
        fleet_url,
        listener.as_ref(),
        tls.is_some(),
        admin_address,
    )
    .await?;
    tracing::info!(servers = config.servers.len(), config = %config.source.display(), "starting wardgate {}", env!("CARGO_PKG_VERSION"));

    let policies = Policies::load(&config).await?;
    let binding = policies.binding();
    let gateway = Gateway::start_with_policies(&config, |server| {
        binding.policy_for(server, &config.gateway)
    });
    // Subscribed at once, so a late admin client still sees the servers start.
    let events = admin_listener
        .as_ref()
        .map(|_| admin::record_events(&gateway));
    policies.attach(&gateway);

    // Operator commands (admin API, MCP admin tools, config file watcher, SIGHUP) go through
    // one queue.
    let (queue, _config_watcher) = crate::control::start_control(
        gateway.clone(),
        config.source.clone(),
        policies.clone(),
        queue_settings(),
        member.clone(),
    );
    if let Some(member) = &member {
        // Operator commands (the admin API and the MCP admin tools) go through the fleet's
        // table.
        let front_member = member.clone();
        queue.set_front(Arc::new(move |request, queue| {
            front_member.clone().submit_here(request, queue)
        }));
        // The modules the first config brought: report whether each loaded.
        crate::control::report_policies(member.as_ref(), &policies, &updates).await;
        tokio::spawn(report_shadows(
            member.clone(),
            policies.clone(),
            gateway.shutdown_token(),
        ));
        member
            .clone()
            .run(gateway.clone(), queue.clone(), gateway.shutdown_token());
    }

    if let (Some(listener), Some(events)) = (admin_listener, events) {
        let admin = Arc::new(admin::Admin {
            gateway: gateway.clone(),
            policies: policies.clone(),
            events,
            queue: queue.clone(),
            started,
            token_required: listener.has_token(),
        });
        tokio::spawn(listener.serve(admin, gateway.shutdown_token()));
    }

    let limits = http_limits(&config.gateway.http);
    let peers = member.clone().map(|member| member.session_peers());
    let serving = {
        let gateway = gateway.clone();
        let queue = queue.clone();
        async move {
            match listener {
                Some(listener) => {
                    downstream::http::serve(gateway, queue, listener, limits, tls, peers)
                        .await
                        .map_err(|e| e.to_string())
                }
                None => downstream::serve_stdio(gateway, queue).await,
            }
        }
    };
    tokio::pin!(serving);
    let outcome = loop {
        let next_signal = async {
            match signals.recv().await {
                Some(signal) => signal,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = &mut serving => break result,
            signal = next_signal => match signal {
                Signal::Reload => {
                    tracing::info!("SIGHUP: re-reading the config file and reloading policy modules");
                    // Through the queue, in this order: the config first (a changed file
                    // applies its difference, as the file watcher would), then every module
                    // in use, the ones that reload added included.
                    queue.submit(CommandRequest::new(Command::Configure, Priority::High));
                    queue.submit(CommandRequest::new(Command::ReloadPolicies, Priority::High));
                }
                Signal::Stop(name) => {
                    tracing::info!("received {name}; shutting down");
                    break Ok(());
                }
            },
        }
    };
    if let Some(member) = &member {
        member.leave().await;
    }
    gateway.shutdown().await;
    tracing::info!("all servers stopped");
    match outcome {
        Ok(()) => Ok(std::process::ExitCode::SUCCESS),
        Err(error) => Err(AppError::new(error)),
    }
}

/// The documented client connection limits, except where a test shrinks them:
/// `WARDGATE_SESSION_IDLE_MS`, `WARDGATE_MAX_CONNECTIONS`, `WARDGATE_CONNECTION_IDLE_MS`,
/// `WARDGATE_HEADER_TIMEOUT_MS`,
/// `WARDGATE_BODY_TIMEOUT_MS`, `WARDGATE_BODY_BUDGET_BYTES`. Test knobs, not operator settings.
fn http_limits(settings: &wardgate_config::HttpSettings) -> downstream::http::HttpLimits {
    let number = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse::<u64>().ok())
    };
    let millis = |name: &str| number(name).map(std::time::Duration::from_millis);
    let mut limits = downstream::http::HttpLimits::from_settings(settings);
    if let Some(idle) = millis("WARDGATE_SESSION_IDLE_MS") {
        limits.session_idle = idle;
    }
    if let Some(max) = number("WARDGATE_MAX_CONNECTIONS") {
        limits.max_connections = max as usize;
    }
    if let Some(idle) = millis("WARDGATE_CONNECTION_IDLE_MS") {
        limits.connection_idle = idle;
    }
    if let Some(timeout) = millis("WARDGATE_HEADER_TIMEOUT_MS") {
        limits.header_read_timeout = timeout;
    }
    if let Some(timeout) = millis("WARDGATE_BODY_TIMEOUT_MS") {
        limits.body_read_timeout = timeout;
    }
    if let Some(bytes) = number("WARDGATE_BODY_BUDGET_BYTES") {
        limits.body_budget_bytes = bytes as usize;
    }
    limits
}

/// A listener other machines can reach: without authentication it is refused unless the
/// operator said it is meant (`--allow-anonymous`, `[gateway.http] allow_anonymous`), and
/// what it exposes is said.
fn check_exposure(
    listener: &tokio::net::TcpListener,
    config: &Config,
    tls: bool,
    allow_anonymous: bool,
) -> Result<(), AppError> {
    let Ok(local) = listener.local_addr() else {
        return Ok(());
    };
    if local.ip().is_loopback() {
        return Ok(());
    }
    if !config.gateway.auth.required() {
        if !(allow_anonymous || config.gateway.http.allow_anonymous) {
            return Err(AppError::new(format!(
                "refusing to serve MCP on {local} without authentication: anyone who can reach this address could use every server; add clients ([gateway.auth.clients.NAME] with a token) or OAuth ([gateway.auth.oauth]) to the config, or, if anonymous access from other machines is meant, pass --allow-anonymous (or set allow_anonymous = true under [gateway.http])"
            )));
        }
        tracing::warn!(
            "listening on {local} without authentication, as allowed: anyone who can reach this address can use every server; add [gateway.auth] (see wardgate check)"
        );
    } else if !tls {
        tracing::warn!(
            "listening on {local} without TLS: bearer tokens cross the network in clear; use --tls-cert and --tls-key, or a TLS-terminating proxy in front"
        );
    }
    Ok(())
}

/// The queue's documented timings, except where a test shortens them: `WARDGATE_COMMAND_TTL_MS`
/// (how long a command may wait to start) and `WARDGATE_COMMAND_RETRY_BASE_MS` (the first
/// retry's delay). Test knobs, not operator settings.
fn queue_settings() -> wardgate_engine::commands::QueueSettings {
    let millis = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse::<u64>().ok())
            .map(std::time::Duration::from_millis)
    };
    let mut settings = wardgate_engine::commands::QueueSettings::default();
    if let Some(ttl) = millis("WARDGATE_COMMAND_TTL_MS") {
        settings.ttl = ttl;
    }
    if let Some(base) = millis("WARDGATE_COMMAND_RETRY_BASE_MS") {
        settings.retry_base = base;
    }
    settings
}

/// How often a fleet member files its shadow reports (`wardgate fleet policy shadow-report`).
const SHADOW_REPORTS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Files this member's shadow reports with the fleet until `stop`, and once more then.
async fn report_shadows(
    member: Arc<dyn crate::fleet_port::FleetPort>,
    policies: Arc<Policies>,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let stopping = tokio::select! {
            () = stop.cancelled() => true,
            () = tokio::time::sleep(SHADOW_REPORTS_EVERY) => false,
        };
        let reports: Vec<(String, String, serde_json::Value)> = policies
            .shadows()
            .all()
            .into_iter()
            .map(|shadow| {
                let report = shadow.report();
                let sha256 = report.sha256.clone();
                let value = serde_json::to_value(&report).unwrap_or_default();
                (shadow.policy().to_owned(), sha256, value)
            })
            .collect();
        if !reports.is_empty() {
            member.report_shadows(reports).await;
        }
        if stopping {
            return;
        }
    }
}
