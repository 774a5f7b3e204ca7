//! Tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663) relayed between clients
//! and servers: for each task id the gateway listed, whose server's task it is, under which
//! id the server knows it, which client may see it, and on which connection it runs.
//!
//! - **Names.** A task of a prefixed server is listed as `PREFIX{separator}ID`, like its
//!   tools; an unprefixed server's keeps its own id (or, taken by another server's, gets
//!   its server's name as prefix).
//! - **Isolation.** All clients share one connection to a server, so the server cannot
//!   tell them apart: a task is found here only by the client that created it (its
//!   [`Owner`]); any other gets "unknown task", as if it did not exist.
//! - **Truth after recovery.** A stdio server's tasks die with its process. A task created
//!   on a process that has since exited answers `failed`, naming the server and why, at
//!   once ([`Tasks::lose`]); a server that no longer knows a task says so the same way.
//! - **Bounded.** Entries last as long as their task may (its `ttlMs`, at most
//!   [`MAX_RETENTION`]; unlimited means [`MAX_RETENTION`]), and at most [`MAX_TASKS`] are
//!   kept: past that, the one closest to expiry goes first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::Task;
use tokio::time::Instant;
use wardgate_policy::lock::lock;

use crate::sessions::SessionId;

/// How long the gateway keeps a task's entry at most, whatever its `ttlMs`.
pub const MAX_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
/// How many tasks the gateway keeps entries for at most.
pub const MAX_TASKS: usize = 10_000;

/// Who may see a task: the client that created it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Owner {
    /// An authenticated client, by its identity key (`token:NAME`, `oauth:[…]`).
    Client(Arc<str>),
    /// A handshake-era session of an anonymous client.
    Session(SessionId),
    /// Sessionless requests of anonymous clients, who cannot be told apart.
    Anyone,
}

/// One task the gateway listed.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The server whose task it is.
    pub server: String,
    /// The id the server knows it by.
    pub id: String,
    owner: Owner,
    /// The connection it was created on, and whether that was a process of ours (stdio),
    /// whose tasks end with it.
    pub generation: u64,
    pub process: bool,
    /// When the task was created, as the server said.
    created_at: String,
    created: Instant,
    expires: Instant,
    /// Set once the task is known lost: why, and when that was found.
    lost: Option<(String, String)>,
}

impl Entry {
    /// Why the task is lost and when that was found, once it is.
    pub fn lost(&self) -> Option<(&str, &str)> {
        self.lost
            .as_ref()
            .map(|(why, at)| (why.as_str(), at.as_str()))
    }

    /// When the task was created, as its server said.
    pub fn created_at(&self) -> &str {
        &self.created_at
    }
}

/// Where a task is listed: its server, the server's prefix (empty: unprefixed) and the
/// separator, and the client it is for. Shared by the tasks servers create and the ones
/// the gateway runs (`runs`).
#[derive(Debug, Clone)]
pub struct Listing<'a> {
    pub server: &'a str,
    pub prefix: &'a str,
    pub separator: &'a str,
    pub owner: Owner,
}

impl Listing<'_> {
    /// The id `id` is listed under: after its server's prefix, like its tools.
    pub fn listed(&self, id: &str) -> String {
        if self.prefix.is_empty() {
            id.to_owned()
        } else {
            format!("{}{}{id}", self.prefix, self.separator)
        }
    }
}

/// Where a new task comes from.
#[derive(Debug, Clone)]
pub struct Origin<'a> {
    pub listing: Listing<'a>,
    /// The connection it was created on, and whether that was a process of ours.
    pub generation: u64,
    pub process: bool,
}

/// The gateway's tasks, by listed id.
#[derive(Debug, Default)]
pub struct Tasks {
    entries: Mutex<HashMap<String, Entry>>,
}

/// Now as RFC 3339, as tasks carry their times.
pub(crate) fn timestamp() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

fn retention(ttl_ms: Option<u64>) -> Duration {
    ttl_ms.map_or(MAX_RETENTION, |ms| {
        Duration::from_millis(ms).min(MAX_RETENTION)
    })
}

impl Tasks {
    /// Record a task a server just created (its `CreateTaskResult`'s task); returns the id
    /// to list it under.
    pub fn created(&self, origin: Origin, task: &Task) -> String {
        let Origin {
            listing,
            generation,
            process,
        } = origin;
        let mut listed = listing.listed(&task.task_id);
        let Listing {
            server,
            separator,
            owner,
            ..
        } = listing;
        let now = Instant::now();
        let mut entries = lock(&self.entries);
        if entries.len() >= MAX_TASKS {
            entries.retain(|_, entry| entry.expires > now);
        }
        if entries.len() >= MAX_TASKS {
            if let Some(first) = entries
                .iter()
                .min_by_key(|(_, entry)| entry.expires)
                .map(|(listed, _)| listed.clone())
            {
                entries.remove(&first);
            }
        }
        let mine = |entry: &Entry| entry.server == server && entry.id == task.task_id;
        if entries.get(&listed).is_some_and(|entry| !mine(entry)) {
            listed = format!("{server}{separator}{}", task.task_id);
            let base = listed.clone();
            let mut n = 2;
            while entries.get(&listed).is_some_and(|entry| !mine(entry)) {
                listed = format!("{base}{separator}{n}");
                n += 1;
            }
        }
        entries.insert(
            listed.clone(),
            Entry {
                server: server.to_owned(),
                id: task.task_id.clone(),
                owner,
                generation,
                process,
                created_at: task.created_at.clone(),
                created: now,
                expires: now + retention(task.ttl_ms),
                lost: None,
            },
        );
        listed
    }

    /// Whether `server` (a per-client instance's `SERVER#N`) has a task whose result may
    /// still be asked for: an instance is kept while it has.
    pub fn any_on(&self, server: &str) -> bool {
        let now = Instant::now();
        lock(&self.entries)
            .values()
            .any(|entry| entry.server == server && entry.lost.is_none() && entry.expires > now)
    }

    /// The task listed as `listed`, if `owner` created it and it has not expired.
    pub fn find(&self, listed: &str, owner: &Owner) -> Option<Entry> {
        let now = Instant::now();
        let entries = lock(&self.entries);
        entries
            .get(listed)
            .filter(|entry| &entry.owner == owner && entry.expires > now)
            .cloned()
    }

    /// The server said `task` is still there, with its current `ttlMs`.
    pub fn seen(&self, listed: &str, ttl_ms: Option<u64>) {
        let mut entries = lock(&self.entries);
        if let Some(entry) = entries.get_mut(listed) {
            entry.expires = entry.created + retention(ttl_ms);
        }
    }

    /// The task listed as `listed` is lost (`why`): from now on it reads as failed.
    pub fn lose(&self, listed: &str, why: String) -> Option<Entry> {
        let mut entries = lock(&self.entries);
        let entry = entries.get_mut(listed)?;
        if entry.lost.is_none() {
            entry.lost = Some((why, timestamp()));
        }
        Some(entry.clone())
    }

    /// How many tasks have entries (expired ones included until the table is full).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.entries).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::TaskStatus;

    fn origin<'a>(server: &'a str, prefix: &'a str, owner: Owner) -> Origin<'a> {
        Origin {
            listing: Listing {
                server,
                prefix,
                separator: "__",
                owner,
            },
            generation: 1,
            process: true,
        }
    }

    fn task(id: &str) -> Task {
        Task::new(
            id,
            TaskStatus::Working,
            "2026-11-26T00:00:00Z",
            "2026-11-26T00:00:00Z",
        )
    }

    #[tokio::test]
    async fn a_task_is_listed_under_its_server_s_prefix_and_found_only_by_its_owner() {
        let tasks = Tasks::default();
        let alice = Owner::Client(Arc::from("token:alice"));
        let listed = tasks.created(origin("a", "a", alice.clone()), &task("t1"));
        assert_eq!(listed, "a__t1");
        assert_eq!(
            tasks.find("a__t1", &alice).map(|entry| entry.id),
            Some("t1".into())
        );
        assert!(tasks
            .find("a__t1", &Owner::Client(Arc::from("token:bob")))
            .is_none());
        assert!(tasks.find("a__t1", &Owner::Anyone).is_none());
        assert!(tasks.find("t1", &alice).is_none());
    }

    #[tokio::test]
    async fn unprefixed_servers_keep_their_ids_until_two_collide() {
        let tasks = Tasks::default();
        let first = tasks.created(origin("a", "", Owner::Anyone), &task("t1"));
        let second = tasks.created(origin("b", "", Owner::Anyone), &task("t1"));
        assert_eq!((first.as_str(), second.as_str()), ("t1", "b__t1"));
        assert_eq!(tasks.find("b__t1", &Owner::Anyone).unwrap().server, "b");
    }

    #[tokio::test]
    async fn a_lost_task_stays_lost_with_its_first_reason() {
        let tasks = Tasks::default();
        let listed = tasks.created(origin("a", "a", Owner::Anyone), &task("t1"));
        tasks.lose(&listed, "gone".into());
        let entry = tasks.lose(&listed, "again".into()).unwrap();
        assert_eq!(entry.lost().map(|(why, _)| why), Some("gone"));
        assert_eq!(entry.created_at(), "2026-11-26T00:00:00Z");
    }

    #[tokio::test(start_paused = true)]
    async fn entries_expire_with_their_ttl_and_their_number_is_bounded() {
        let tasks = Tasks::default();
        let mut short = task("short");
        short.ttl_ms = Some(1_000);
        tasks.created(origin("a", "a", Owner::Anyone), &short);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(tasks.find("a__short", &Owner::Anyone).is_none());
        for n in 0..MAX_TASKS + 5 {
            tasks.created(origin("a", "a", Owner::Anyone), &task(&format!("t{n}")));
        }
        assert_eq!(tasks.len(), MAX_TASKS);
    }
}
