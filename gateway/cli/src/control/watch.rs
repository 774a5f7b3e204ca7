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
