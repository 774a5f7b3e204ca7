//! The config file watcher: an edit to the file submits `configure` at priority high.
//!
//! The directory is watched rather than the file, so editors that write a temporary file and
//! rename it over the config are seen; a burst of events becomes one command after 200 ms of
//! quiet. Only create, modify and remove count: the gateway's own reads raise access events.

use std::path::{Path, PathBuf};
use std::sync::Weak;
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use wardgate_engine::commands::{Command, CommandQueue, CommandRequest, Priority};

/// How long the file must be quiet before it is read.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// Watches the config file until dropped.
pub struct ConfigWatcher {
    _watcher: RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ConfigWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(super) fn watch(path: &Path, queue: Weak<CommandQueue>) -> notify::Result<ConfigWatcher> {
    let (sender, mut changes) = tokio::sync::mpsc::unbounded_channel::<()>();
    let target = path.to_owned();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        let changed = matches!(
            event.kind,
            notify::EventKind::Create(_)
                | notify::EventKind::Modify(_)
                | notify::EventKind::Remove(_)
        );
        if changed && event.paths.iter().any(|path| same_file(path, &target)) {
            let _ = sender.send(());
        }
    })?;
    watcher.watch(&directory_of(path), RecursiveMode::NonRecursive)?;
    let task = tokio::spawn(async move {
        while changes.recv().await.is_some() {
            // Debounce: wait until no event has come for DEBOUNCE.
            loop {
                match tokio::time::timeout(DEBOUNCE, changes.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            let Some(queue) = queue.upgrade() else { return };
            let record = queue.submit(CommandRequest {
                command: Command::Configure,
                priority: Priority::High,
                correlation_id: Some("config-watcher".to_owned()),
            });
            tracing::info!(command = %record.id, "the config file changed; applying it");
        }
    });
    Ok(ConfigWatcher {
        _watcher: watcher,
        task,
    })
}

/// Watches the OAuth token directory: a new sign-in (`wardgate auth login NAME` wrote
/// `NAME.json`) reconnects server NAME when it is not online — the way out of
/// `requires_reauth` without a restart or a `reconnect`. The directory is made (0700) if
/// it is missing, so a first sign-in is seen too.
pub(super) fn watch_sign_ins(
    dir: &Path,
    queue: Weak<CommandQueue>,
    gateway: Weak<wardgate_engine::Gateway>,
) -> notify::Result<ConfigWatcher> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let (sender, mut changes) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if !matches!(
            event.kind,
            notify::EventKind::Create(_) | notify::EventKind::Modify(_)
        ) {
            return;
        }
        for path in &event.paths {
            if path.extension().is_some_and(|ext| ext == "json") {
                if let Some(server) = path.file_stem() {
                    let _ = sender.send(server.to_string_lossy().into_owned());
                }
            }
        }
    })?;
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    let task = tokio::spawn(async move {
        while let Some(first) = changes.recv().await {
            let mut servers = std::collections::BTreeSet::from([first]);
            loop {
                match tokio::time::timeout(DEBOUNCE, changes.recv()).await {
                    Ok(Some(server)) => {
                        servers.insert(server);
                    }
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            let (Some(queue), Some(gateway)) = (queue.upgrade(), gateway.upgrade()) else {
                return;
            };
            for server in servers {
                // The gateway's own refreshes rewrite the file of an online server too.
                let waiting = gateway.server(&server).is_some_and(|detail| {
                    detail.info.status != wardgate_engine::status::StatusName::Online
                });
                if !waiting {
                    continue;
                }
                let record = queue.submit(CommandRequest {
                    command: Command::Reconnect {
                        server: server.clone(),
                    },
                    priority: Priority::High,
                    correlation_id: Some("sign-in".to_owned()),
                });
                tracing::info!(command = %record.id, "server \"{server}\" was signed in; reconnecting it");
            }
        }
    });
    Ok(ConfigWatcher {
        _watcher: watcher,
        task,
    })
}

fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    }
}

fn same_file(changed: &Path, config: &Path) -> bool {
    changed == config
        || (changed.file_name() == config.file_name()
            && directory_of(changed) == directory_of(config))
}
