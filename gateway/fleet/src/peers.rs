//! Where the other members are, for the client sessions they hold: the HTTP layer hands a
//! request for another member's session to that member (`downstream::http::Peers`).
//!
//! The names come from session ids, which clients send: an unknown name must cost no
//! database query. The whole member list is read at most once a second (one read at a
//! time), and every lookup is answered from that snapshot.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wardgate_downstream::http::Peers;

use crate::error::Result;
use crate::member::Member;

/// The member list is read again at most this often.
const REFRESH: Duration = Duration::from_secs(1);

/// Each member's base URL, or why it cannot be reached; and when the list was read.
#[derive(Default)]
struct Snapshot {
    members: HashMap<String, Result<String, String>>,
    read_at: Option<Instant>,
    /// The last read failed (the members are those of an earlier one).
    failed: bool,
}

/// The fleet's members, as the database lists them.
pub struct SessionPeers {
    member: Arc<Member>,
    snapshot: tokio::sync::Mutex<Snapshot>,
}

impl SessionPeers {
    pub fn new(member: Arc<Member>) -> Arc<SessionPeers> {
        Arc::new(SessionPeers {
            member,
            snapshot: tokio::sync::Mutex::default(),
        })
    }

    async fn read(&self) -> Result<HashMap<String, Result<String, String>>> {
        let gone_ms = self.member.options.gone_after.as_millis() as i64;
        let client = self.member.fleet.client().await?;
        let rows = client
            .query(
                "SELECT name, address, machine, stopped_at IS NOT NULL,
                        heartbeat_at < now() - $1::bigint * interval '1 millisecond',
                        access_digest
                   FROM wardgate_members",
                &[&gone_ms],
            )
            .await?;
        let here = crate::member::machine_id();
        Ok(rows
            .into_iter()
            .map(|row| {
                let name: String = row.get(0);
                let address: Option<String> = row.get(1);
                let machine: Option<String> = row.get(2);
                let stopped: bool = row.get(3);
                let gone: bool = row.get(4);
                let digest: Option<String> = row.get(5);
                let found = if stopped {
                    Err("that member has stopped".to_owned())
                } else if gone {
                    Err(format!(
                        "that member has not heartbeated for over {} s",
                        self.member.options.gone_after.as_secs()
                    ))
                } else if digest != self.member.options.access_digest {
                    // Each member admits clients by its own settings: one that admits
                    // differently must not be handed a request this one admitted.
                    Err("that member applies other [gateway.auth] or [gateway.http] settings (their digests differ, see wardgate fleet status); give every member the same".to_owned())
                } else {
                    reachable(address, machine.as_deref() == Some(here.as_str()))
                };
                (name, found)
            })
            .collect())
    }
}

/// `address` as a base URL other members can use, or why not: a wildcard is nobody's, and
/// a loopback address is only its own machine's.
fn reachable(address: Option<String>, same_machine: bool) -> Result<String, String> {
    let Some(address) = address else {
        return Err("that member registered no address (set [fleet] advertise on it)".into());
    };
    let host = address
        .split("://")
        .nth(1)
        .unwrap_or(&address)
        .rsplit_once(':')
        .map_or(address.as_str(), |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) if ip.is_unspecified() => Err(format!(
            "that member registered {address}, which other members cannot reach (set [fleet] advertise on it)"
        )),
        Ok(ip) if ip.is_loopback() && !same_machine => Err(format!(
            "that member registered {address}, which only its own machine reaches (set [fleet] advertise on it)"
        )),
        _ => Ok(address),
    }
}

impl Peers for SessionPeers {
    fn name(&self) -> &str {
        self.member.name()
    }

    fn locate<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>> {
        Box::pin(async move {
            // One read at a time, at most one a second; the others use what it found.
            let mut snapshot = self.snapshot.lock().await;
            if snapshot.read_at.is_none_or(|at| at.elapsed() >= REFRESH) {
                match tokio::time::timeout(Duration::from_secs(2), self.read()).await {
                    Ok(Ok(members)) => {
                        snapshot.members = members;
                        snapshot.failed = false;
                    }
                    // The database is away: where members were last seen is the best guess.
                    _ => snapshot.failed = true,
                }
                snapshot.read_at = Some(Instant::now());
            }
            match snapshot.members.get(name) {
                Some(found) => found.clone(),
                None if snapshot.failed => {
                    Err("the fleet database, which says where members are, is unreachable".into())
                }
                None => Err("no member of that name is in the fleet".into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::reachable;

    #[test]
    fn wildcards_are_nobodys_and_loopback_is_its_own_machines() {
        let at = |address: &str, same| reachable(Some(address.to_owned()), same);
        assert!(at("http://0.0.0.0:8080", true).is_err());
        assert!(at("http://[::]:8080", true).is_err());
        assert!(at("http://127.0.0.1:8080", false).is_err());
        assert!(at("http://[::1]:8080", false).is_err());
        assert!(at("http://127.0.0.1:8080", true).is_ok());
        assert!(at("http://10.0.0.5:8080", false).is_ok());
        assert!(at("https://gw.example:443", false).is_ok());
        assert!(reachable(None, true).is_err());
    }
}
