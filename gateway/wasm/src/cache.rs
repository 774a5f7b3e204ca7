//! A cache of compiled components (`.cwasm`) keyed by content hash, so a restart does not recompile unchanged modules.
//!
//! A `.cwasm` is native code that wasmtime maps and runs without verification, so this
//! cache only ever loads files it wrote itself: they live in a directory owned by this
//! user that nobody else can write, are written under a temporary name and renamed into
//! place, and are keyed by the SHA-256 of the module *and* of the engine's configuration
//! (a different wasmtime version or setting never matches an old file).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

/// Compiled modules kept; older ones are deleted when a new one is written.
const MAX_ENTRIES: usize = 64;

pub(crate) struct ComponentCache {
    dir: PathBuf,
    engine_hash: [u8; 32],
}

/// Feeds `Hash` output into SHA-256, to digest the engine's compatibility hash.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    fn finish(&self) -> u64 {
        0
    }
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

impl ComponentCache {
    /// Opens (creating it if need be) a cache directory this user alone can write, or
    /// explains why not; the caller then compiles without a cache.
    pub(crate) fn open(dir: &Path, engine: &Engine) -> Result<ComponentCache, String> {
        create_private_dir(dir)
            .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
        check_private(dir)?;
        let mut hasher = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(ComponentCache {
            dir: dir.to_path_buf(),
            engine_hash: hasher.0.finalize().into(),
        })
    }

    fn entry(&self, module_sha256: &str) -> PathBuf {
        let mut key = Sha256::new();
        key.update(self.engine_hash);
        key.update(module_sha256.as_bytes());
        self.dir.join(format!("{}.cwasm", hex(&key.finalize())))
    }

    /// The compiled module, if this cache holds a usable copy.
    pub(crate) fn load(&self, engine: &Engine, module_sha256: &str) -> Option<Component> {
        let entry = self.entry(module_sha256);
        if !entry.is_file() {
            return None;
        }
        if let Err(reason) = check_private(&entry) {
            tracing::warn!(file = %entry.display(), "ignoring a cached policy module: {reason}");
            return None;
        }
        // SAFETY: the file was written by `store` below into a directory only this user can
        // write (checked at open and again for the file), under a name derived from the
        // module's hash and the engine's configuration; wasmtime checks the format and the
        // engine compatibility itself.
        match unsafe { Component::deserialize_file(engine, &entry) } {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::debug!(file = %entry.display(), "discarding a stale cached policy module: {error:#}");
                let _ = std::fs::remove_file(&entry);
                None
            }
        }
    }

    /// Keeps `component` for next time. Failing to is not an error: the module still serves.
    pub(crate) fn store(&self, module_sha256: &str, component: &Component) {
        let entry = self.entry(module_sha256);
        let result = component
            .serialize()
            .map_err(|error| format!("{error:#}"))
            .and_then(|bytes| write_private(&entry, &bytes).map_err(|error| error.to_string()));
        match result {
            Ok(()) => self.prune(),
            Err(reason) => {
                tracing::warn!(file = %entry.display(), "cannot cache a compiled policy module: {reason}")
            }
        }
    }

    /// Deletes the oldest entries past `MAX_ENTRIES`.
    fn prune(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut cached: Vec<(std::time::SystemTime, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "cwasm"))
            .filter_map(|entry| Some((entry.metadata().ok()?.modified().ok()?, entry.path())))
            .collect();
        if cached.len() <= MAX_ENTRIES {
            return;
        }
        cached.sort();
        for (_, path) in &cached[..cached.len() - MAX_ENTRIES] {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

/// Owned by this user and writable by nobody else.
#[cfg(unix)]
fn check_private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::symlink_metadata(path)
        .map_err(|error| format!("cannot inspect {}: {error}", path.display()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if metadata.uid() != me {
        return Err(format!(
            "{} is owned by uid {}, not by this user",
            path.display(),
            metadata.uid()
        ));
    }
    if metadata.mode() & 0o022 != 0 {
        return Err(format!("{} is writable by other users", path.display()));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path) -> Result<(), String> {
    Ok(())
}

/// Writes under a temporary name, then renames, so a reader never sees half a file.
fn write_private(entry: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temporary = entry.with_extension(format!("tmp-{}-{write}", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, entry).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}
