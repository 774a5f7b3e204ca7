//! Hot reload: watch each policy module's directory and reload a module once its file settles.
//!
//! The directory is watched rather than the file, so editors and deploy scripts that write a
//! temporary file and rename it over the module are seen; events are debounced, and a file
//! whose size or mtime is still changing (a copy in progress) is waited for.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::time::Instant;

use crate::managed::ManagedPolicy;

/// Watches policy files until dropped.
pub struct PolicyWatcher {
    _watcher: RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PolicyWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long a file must be quiet before it is reloaded.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(200);

/// A missing or growing file is looked at again this many times before a reload is tried anyway.
const MAX_WAITS: u32 = 25;

/// Reload every policy now (at start, and on SIGHUP), off the async threads.
pub async fn reload_all(policies: &[Arc<ManagedPolicy>]) {
    for policy in policies {
        let policy = policy.clone();
        // Errors are reported through the policy's event sink.
        let _ = tokio::task::spawn_blocking(move || policy.reload()).await;
    }
}

/// Start watching; must be called inside a tokio runtime.
pub fn watch(
    policies: Vec<Arc<ManagedPolicy>>,
    debounce: Duration,
) -> notify::Result<PolicyWatcher> {
    let (sender, mut changes) = tokio::sync::mpsc::unbounded_channel::<PathBuf>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let event = event.ok();
        // Only changes count: reading a module (our own reload does) raises access events,
        // and reacting to those would reload forever.
        if let Some(event) = event.filter(|event| {
            matches!(
                event.kind,
                notify::EventKind::Create(_)
                    | notify::EventKind::Modify(_)
                    | notify::EventKind::Remove(_)
            )
        }) {
            for path in event.paths {
                let _ = sender.send(path);
            }
        }
    })?;
    let directories: BTreeSet<PathBuf> = policies
        .iter()
        .map(|policy| directory_of(policy.path()))
        .collect();
    for directory in &directories {
        watcher.watch(directory, RecursiveMode::NonRecursive)?;
    }
    let task = tokio::spawn(async move {
        // Policy index → (when to look again, how often it has been waited for).
        let mut pending: HashMap<usize, (Instant, u32)> = HashMap::new();
        loop {
            let next = pending.values().map(|(at, _)| *at).min();
            tokio::select! {
                changed = changes.recv() => {
                    let Some(path) = changed else { return };
                    for (index, policy) in policies.iter().enumerate() {
                        if same_file(&path, policy.path()) {
                            pending.insert(index, (Instant::now() + debounce, 0));
                        }
                    }
                }
                _ = sleep_until_or_forever(next) => {
                    let now = Instant::now();
                    let due: Vec<(usize, u32)> =
                        pending.iter().filter(|(_, (at, _))| *at <= now).map(|(index, (_, waits))| (*index, *waits)).collect();
                    for (index, waits) in due {
                        pending.remove(&index);
                        let policy = policies[index].clone();
                        if waits < MAX_WAITS && !settled(policy.path()).await {
                            pending.insert(index, (Instant::now() + debounce, waits + 1));
                            continue;
                        }
                        let _ = tokio::task::spawn_blocking(move || policy.reload()).await;
                    }
                }
            }
        }
    });
    Ok(PolicyWatcher {
        _watcher: watcher,
        task,
    })
}

async fn sleep_until_or_forever(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    }
}

fn same_file(changed: &Path, module: &Path) -> bool {
    changed == module
        || (changed.file_name() == module.file_name()
            && directory_of(changed) == directory_of(module))
}

/// The file exists and its size and mtime hold still for a moment.
async fn settled(path: &Path) -> bool {
    let look = |path: &Path| {
        std::fs::metadata(path)
            .ok()
            .map(|meta| (meta.len(), meta.modified().ok()))
    };
    let Some(first) = look(path) else {
        return false;
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    look(path) == Some(first) && first.0 > 0
}
