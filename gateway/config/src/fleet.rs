//! `[fleet]`: membership of a fleet of gateways that share one PostgreSQL database.
//!
//! Without the table the gateway is on its own and needs no database. With it, the servers
//! and policy modules come from the database as well as from this file (see the
//! `wardgate-fleet` crate); the file keeps the member's own settings.

use super::env::{expand, ExpandError};
use super::error::ConfigError;
use super::fields::{Fields, Located, StringList};
use super::Secret;

/// A validated `[fleet]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSettings {
    /// `postgres://` or `postgresql://`, `${VAR}`-expanded; may hold a password, so secret.
    pub database_url: Secret,
    /// This member's name, unique in the fleet: commands name it, and status rows carry it.
    /// `None`: the host name.
    pub member: Option<String>,
    /// Named subsets this member belongs to (a canary rollout can target one).
    pub groups: Vec<String>,
    /// Where clients and other members reach this member's `/mcp` (`http://host:port`);
    /// `None`: derived from `--listen`.
    pub advertise: Option<String>,
}

#[derive(Debug, Default)]
pub(crate) struct RawFleet {
    pub at: Option<Located<()>>,
    pub database_url: Option<Located<String>>,
    pub member: Option<Located<String>>,
    pub groups: Option<StringList>,
    pub advertise: Option<Located<String>>,
}

pub(crate) fn read(mut fields: Fields<'_>) -> Result<RawFleet, ConfigError> {
    let fleet = RawFleet {
        at: Some(fields.located(())),
        database_url: fields.string("database_url")?,
        member: fields.string("member")?,
        groups: fields.string_list("groups")?,
        advertise: fields.string("advertise")?,
    };
    fields.finish()?;
    Ok(fleet)
}

pub(crate) fn validate(
    raw: RawFleet,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<FleetSettings>, ConfigError> {
    let Some(at) = raw.at else {
        return Ok(None);
    };
    let Some(url) = raw.database_url else {
        return Err(at.error(
            "[fleet] has no database_url",
            "add database_url = \"postgres://USER@HOST/DB\" (a password belongs in ${PGPASSWORD}-style variables, not the file), or remove [fleet] to run on your own",
        ));
    };
    let expanded = expand(&url.value, env).map_err(|error| match error {
        ExpandError::Missing { name } => url.error(
            format!("the variable {name} is not set"),
            format!("export {name}=... before starting the gateway"),
        ),
        _ => url.error(
            "the value has a malformed ${...} reference",
            "write ${NAME} for a variable, or $${ for a literal ${",
        ),
    })?;
    if !(expanded.value.starts_with("postgres://") || expanded.value.starts_with("postgresql://")) {
        return Err(url.error(
            "database_url is not a PostgreSQL URL",
            "write postgres://USER:PASSWORD@HOST:PORT/DATABASE",
        ));
    }
    let name_ok = |name: &str| {
        !name.is_empty()
            && name.len() <= 63
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    if let Some(member) = &raw.member {
        if !name_ok(&member.value) || member.value == "*" {
            return Err(member.error(
                format!("{:?} cannot name a fleet member", member.value),
                "use up to 63 letters, digits, '-', '_' or '.'",
            ));
        }
    }
    let mut groups = Vec::new();
    for group in raw.groups.iter().flat_map(|groups| &groups.value) {
        if !name_ok(&group.value) {
            return Err(group.error(
                format!("{:?} cannot name a group", group.value),
                "use up to 63 letters, digits, '-', '_' or '.'",
            ));
        }
        groups.push(group.value.clone());
    }
    if let Some(advertise) = &raw.advertise {
        if !(advertise.value.starts_with("http://") || advertise.value.starts_with("https://")) {
            return Err(advertise.error(
                "advertise is not an http(s) URL",
                "write the address other members and clients reach, such as http://10.0.0.5:8080",
            ));
        }
    }
    Ok(Some(FleetSettings {
        database_url: Secret::new(expanded.value),
        member: raw.member.map(|member| member.value),
        groups,
        advertise: raw
            .advertise
            .map(|advertise| advertise.value.trim_end_matches('/').to_owned()),
    }))
}

impl FleetSettings {
    /// The database URL as it may be shown: any password replaced by `***`, query dropped
    /// (`password=` may hide there too).
    pub fn shown_url(&self) -> String {
        redact_url(self.database_url.expose())
    }
}

/// `postgres://user:pw@host/db?x` → `postgres://user:***@host/db`.
pub fn redact_url(url: &str) -> String {
    let url = url.split('?').next().unwrap_or(url);
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<unparsable URL>".to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            let hidden = if userinfo.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}")
        }
        None => format!("{scheme}://{rest}"),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn a_shown_database_url_has_no_password() {
        assert_eq!(
            redact_url("postgres://wg:s3cret@db:5432/fleet?password=x"),
            "postgres://wg:***@db:5432/fleet"
        );
        assert_eq!(redact_url("postgres://db/fleet"), "postgres://db/fleet");
        assert_eq!(redact_url("postgres://wg@db/f"), "postgres://wg@db/f");
    }
}
