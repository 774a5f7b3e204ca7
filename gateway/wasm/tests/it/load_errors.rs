//! Modules that cannot serve are rejected at load with an error naming the file and the reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use wardgate_wasm::{PolicyLoadError, WasmPolicy};

use crate::support::runtime;
use wardgate_wasm::bundled;

fn write(dir: &Path, name: &str, contents: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn load(path: &Path) -> Result<WasmPolicy, PolicyLoadError> {
    runtime().load(path, BTreeMap::new())
}

/// Every export of the world, all with the wrong type `func()`.
const ALL_NAMES_WRONG_TYPES: &str = r#"
    (core module $m (func (export "f")))
    (core instance $i (instantiate $m))
    (func $f (canon lift (core func $i "f")))
    (export "describe" (func $f))
    (export "classify" (func $f))
    (export "reconnect-delay" (func $f))
    (export "health" (func $f))
    (export "probe-schedule" (func $f))
    (export "crash" (func $f))
"#;

#[test]
fn a_component_of_another_world_names_the_missing_exports() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "hello.wat",
        br#"(component
            (core module $m (func (export "hello")))
            (core instance $i (instantiate $m))
            (func (export "hello") (canon lift (core func $i "hello")))
        )"#,
    );
    let error = load(&path)
        .err()
        .expect("a module of another world must not load");
    assert!(
        matches!(&error, PolicyLoadError::MissingExport { export, .. }
        if export == "describe`, `classify`, `reconnect-delay`, `health`, `probe-schedule`, `crash")
    );
    let message = error.to_string();
    assert!(
        message.contains("hello.wat") && message.contains("wardgate:policy/recovery-policy@0.1.0"),
        "{message}"
    );
}

#[test]
fn exports_of_the_wrong_type_are_the_wrong_world() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "untyped.wat",
        format!("(component {ALL_NAMES_WRONG_TYPES})").as_bytes(),
    );
    let error = load(&path).err().expect("wrong export types must not load");
    assert!(
        matches!(error, PolicyLoadError::WrongWorld { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("untyped.wat"), "{error}");
}

#[test]
fn an_import_the_gateway_does_not_provide_is_named_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let wat = format!(
        r#"(component
            (import "acme:secrets/vault@1.0.0" (instance (export "get" (func))))
            {ALL_NAMES_WRONG_TYPES}
        )"#
    );
    let path = write(dir.path(), "greedy.wat", wat.as_bytes());
    let error = load(&path).err().expect("an unknown import must not load");
    assert!(
        matches!(&error, PolicyLoadError::MissingImport { import, .. } if import == "acme:secrets/vault@1.0.0"),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("imports `acme:secrets/vault@1.0.0`"),
        "{error}"
    );
}

#[test]
fn a_core_module_garbage_and_a_missing_file_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let core = write(dir.path(), "core.wasm", b"\0asm\x01\0\0\0");
    assert!(matches!(
        load(&core),
        Err(PolicyLoadError::NotAComponent { .. })
    ));
    let garbage = write(dir.path(), "garbage.wasm", b"this is not WebAssembly");
    let error = load(&garbage).err().unwrap();
    assert!(matches!(error, PolicyLoadError::Compile { .. }), "{error}");
    assert!(error.to_string().contains("garbage.wasm"));
    let missing = dir.path().join("missing.wasm");
    let error = load(&missing).err().unwrap();
    assert!(matches!(error, PolicyLoadError::Read { .. }), "{error}");
    assert_eq!(error.path(), Some(missing.as_path()));
}

#[test]
fn the_bundled_policies_import_nothing_but_wasi() {
    for path in [
        bundled::DEFAULT,
        bundled::PATIENT,
        bundled::STRICT,
        bundled::FAULTY,
    ] {
        let policy = load(Path::new(path)).unwrap_or_else(|error| panic!("{error}"));
        let imports = policy.imports();
        assert!(
            imports.iter().all(|name| name.starts_with("wasi:")),
            "{path}: {imports:?}"
        );
    }
}
