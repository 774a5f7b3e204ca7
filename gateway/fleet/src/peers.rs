//! Where the other members are, for the client sessions they hold: the HTTP layer hands a
//! request for another member's session to that member (`downstream::http::Peers`).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wardgate_engine::downstream::http::Peers;

use crate::member::Member;

/// How long a member's whereabouts are trusted before the database is asked again.
const FRESH: Duration = Duration::from_secs(5);
/// Members remembered at most (the names come from session ids clients send).
const REMEMBERED: usize = 1024;

/// A member's base URL, or why it cannot be reached; and when that was learnt.
type Whereabouts = (Result<String, String>, Instant);

/// The fleet's members, as the database lists them, remembered for a few seconds.
pub struct SessionPeers {
    member: Arc<Member>,
    known: Mutex<HashMap<String, Whereabouts>>,
}

impl SessionPeers {
    pub fn new(member: Arc<Member>) -> Arc<SessionPeers> {
        Arc::new(SessionPeers {
            member,
            known: Mutex::default(),
        })
    }

    async fn look_up(&self, name: &str) -> anyhow::Result<Result<String, String>> {
        let gone_ms = self.member.options.gone_after.as_millis() as i64;
        let client = self.member.fleet.client().await?;
        let row = client
            .query_opt(
                "SELECT address, stopped_at IS NOT NULL,
                        heartbeat_at < now() - $2::bigint * interval '1 millisecond'
                   FROM wardgate_members WHERE name = $1",
                &[&name, &gone_ms],
            )
            .await?;
        let Some(row) = row else {
            return Ok(Err("no member of that name is in the fleet".into()));
        };
        let address: Option<String> = row.get(0);
        let stopped: bool = row.get(1);
        let gone: bool = row.get(2);
        Ok(if stopped {
            Err("that member has stopped".into())
        } else if gone {
            Err(format!(
                "that member has not heartbeated for over {} s",
                self.member.options.gone_after.as_secs()
            ))
        } else {
            match address {
                None => Err("that member registered no address (set [fleet] advertise on it)".into()),
                Some(address) if unreachable_host(&address) => Err(format!(
                    "that member registered {address}, which other members cannot reach (set [fleet] advertise on it)"
                )),
                Some(address) => Ok(address),
            }
        })
    }
}

/// A wildcard listen address: no other machine can reach a member by it.
fn unreachable_host(address: &str) -> bool {
    let host = address
        .split("://")
        .nth(1)
        .unwrap_or(address)
        .rsplit_once(':')
        .map_or(address, |(host, _)| host);
    matches!(host, "0.0.0.0" | "[::]")
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
            let remembered = wardgate_engine::lock::lock(&self.known).get(name).cloned();
            if let Some((found, at)) = &remembered {
                if at.elapsed() < FRESH {
                    return found.clone();
                }
            }
            let looked_up = tokio::time::timeout(Duration::from_secs(2), self.look_up(name)).await;
            match looked_up {
                Ok(Ok(found)) => {
                    let mut known = wardgate_engine::lock::lock(&self.known);
                    if known.len() >= REMEMBERED {
                        known.clear();
                    }
                    known.insert(name.to_owned(), (found.clone(), Instant::now()));
                    found
                }
                // The database is away: where the member was last seen is the best guess.
                _ => match remembered {
                    Some((found, _)) => found,
                    None => Err(
                        "the fleet database, which says where members are, is unreachable".into(),
                    ),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn wildcard_addresses_are_not_reachable() {
        assert!(super::unreachable_host("http://0.0.0.0:8080"));
        assert!(super::unreachable_host("http://[::]:8080"));
        assert!(!super::unreachable_host("http://10.0.0.5:8080"));
        assert!(!super::unreachable_host("https://gw.example:443"));
    }
}
