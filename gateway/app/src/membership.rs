//! Whether this gateway is a fleet member, decided at start: with the `fleet` feature, by
//! joining the fleet `[fleet]` or `--fleet-database-url` names (`fleet_member`); without
//! it, by refusing those settings (`fleet_port::ABSENT`).

use wardgate_config::Config;

use crate::fleet_port::Joined;
#[cfg(not(feature = "fleet"))]
use crate::fleet_port::ABSENT;
use crate::AppError;

/// `config` as this gateway serves it: unchanged without a fleet; with one (`[fleet]` or
/// `--fleet-database-url`), composed with the fleet's servers and modules.
pub async fn join(
    config: Config,
    flag_url: Option<String>,
    listener: Option<&tokio::net::TcpListener>,
    tls: bool,
    admin: Option<String>,
) -> Result<Joined, AppError> {
    #[cfg(feature = "fleet")]
    return crate::fleet_member::join(config, flag_url, listener, tls, admin).await;
    #[cfg(not(feature = "fleet"))]
    {
        let _ = (listener, tls, admin);
        Ok((with_cached_fleet(config, flag_url)?, None, Vec::new()))
    }
}

/// `config` with the fleet's servers as this machine's member last applied them, from its
/// cache (what `wardgate auth` needs to sign in to a server that comes from the fleet).
/// Unchanged without a fleet.
pub fn with_cached_fleet(config: Config, flag_url: Option<String>) -> Result<Config, AppError> {
    #[cfg(feature = "fleet")]
    return crate::fleet_member::with_cached_fleet(config, flag_url);
    #[cfg(not(feature = "fleet"))]
    {
        if config.fleet.is_some() || flag_url.is_some() {
            return Err(AppError::new(ABSENT));
        }
        Ok(config)
    }
}
