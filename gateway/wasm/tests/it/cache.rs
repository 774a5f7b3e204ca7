//! Compiled modules are cached by content hash, so a restarted runtime does not recompile; a cache directory others can write is not trusted.

use std::collections::BTreeMap;
use std::path::Path;

use wardgate_wasm::{bundled, Runtime, RuntimeConfig};

fn cached_files(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|entry| entry.unwrap().path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "cwasm"))
                .collect()
        })
        .unwrap_or_default()
}

fn runtime_with_cache(dir: &Path) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.to_path_buf()),
        ..RuntimeConfig::default()
    })
    .unwrap()
}

#[test]
fn a_restarted_runtime_loads_the_compiled_module_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let first = runtime_with_cache(&cache)
        .load(bundled::STRICT, BTreeMap::new())
        .unwrap();
    let files = cached_files(&cache);
    assert_eq!(files.len(), 1, "{files:?}");
    let written = std::fs::metadata(&files[0]).unwrap().modified().unwrap();

    // A new runtime (a restart) finds it and does not write it again.
    let second = runtime_with_cache(&cache)
        .load(bundled::STRICT, BTreeMap::new())
        .unwrap();
    assert_eq!(first.module_sha256(), second.module_sha256());
    assert_eq!(cached_files(&cache), files);
    assert_eq!(
        std::fs::metadata(&files[0]).unwrap().modified().unwrap(),
        written
    );

    // Another module gets its own entry.
    runtime_with_cache(&cache)
        .load(bundled::PATIENT, BTreeMap::new())
        .unwrap();
    assert_eq!(cached_files(&cache).len(), 2);
}

#[test]
fn a_corrupt_cache_entry_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    runtime_with_cache(dir.path())
        .load(bundled::STRICT, BTreeMap::new())
        .unwrap();
    let entry = cached_files(dir.path()).pop().unwrap();
    std::fs::write(&entry, b"not a compiled module").unwrap();
    let policy = runtime_with_cache(dir.path())
        .load(bundled::STRICT, BTreeMap::new())
        .unwrap();
    assert_eq!(policy.description().name, "strict");
}

#[cfg(unix)]
#[test]
fn a_cache_directory_other_users_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let policy = runtime_with_cache(dir.path())
        .load(bundled::STRICT, BTreeMap::new())
        .unwrap();
    assert_eq!(policy.description().name, "strict");
    assert!(cached_files(dir.path()).is_empty());
}
