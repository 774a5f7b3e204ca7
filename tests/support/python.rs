//! The official MCP Python SDK (tests/python/requirements.txt), installed on first use into
//! a virtualenv under the target directory, shared by the integration tests and benchmarks.
//!
//! A machine where it cannot be installed fails the test that needs it, saying why; it
//! never passes silently.

// Included by the integration tests and by benchmarks, each of which uses a part.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The virtualenv's interpreter, with the SDK installed (again only when the requirements
/// changed).
pub fn python_sdk() -> &'static PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let requirements = script("requirements.txt");
        let venv = target_dir().join("python-sdk-venv");
        let python = venv.join("bin/python");
        let stamp = venv.join("installed.txt");
        let wanted = std::fs::read_to_string(&requirements).expect("read requirements");
        if std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
            let status = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .expect("python3 -m venv");
            assert!(
                status.success(),
                "could not create a virtualenv with python3 -m venv"
            );
            let status = Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "-r",
                ])
                .arg(&requirements)
                .status()
                .expect("pip install");
            assert!(
                status.success(),
                "pip install -r tests/python/requirements.txt failed: these tests need PyPI once"
            );
            std::fs::write(&stamp, wanted).unwrap();
        }
        python
    })
}

/// `tests/python/NAME`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(name)
}

fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/debug/deps/it-xxxx or target/release/deps/instances-xxxx
    exe.ancestors()
        .find(|dir| dir.file_name().is_some_and(|name| name == "deps"))
        .and_then(|deps| deps.parent())
        .and_then(|profile| profile.parent())
        .map(Path::to_path_buf)
        .expect("the test runs from a cargo target directory")
}
