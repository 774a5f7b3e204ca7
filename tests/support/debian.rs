//! Programs from Debian's packages that the tests need (Chromium for the status page):
//! installed by the tests themselves on first use, with apt-get, one install at a time.
//!
//! A machine where they cannot be installed fails the test that needs them, saying why; it
//! never passes silently.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The program at `binary`, installing `packages` first when it is missing.
pub fn ensure(binary: &str, packages: &[&str]) -> PathBuf {
    // One install at a time in this process; `flock` serializes other test processes.
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _one = INSTALLING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let path = Path::new(binary);
    if path.exists() {
        return path.to_owned();
    }
    let root = unsafe { libc::geteuid() } == 0;
    let sudo = !root
        && Command::new("sudo")
            .args(["-n", "true"])
            .status()
            .is_ok_and(|status| status.success());
    assert!(
        root || sudo,
        "{binary} is missing and cannot be installed: installing the Debian package(s) {} needs root or password-less sudo; run `apt-get install {}` as root",
        packages.join(" "),
        packages.join(" ")
    );
    let install = format!(
        "apt-get install -y -q --no-install-recommends {packages} || (apt-get update -q && apt-get install -y -q --no-install-recommends {packages})",
        packages = packages.join(" ")
    );
    let mut command = Command::new(if root { "flock" } else { "sudo" });
    if !root {
        command.args(["-n", "flock"]);
    }
    let output = command
        .args(["/tmp/wardgate-apt.lock", "sh", "-c", &install])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "could not run apt-get to install {}: {error}",
                packages.join(" ")
            )
        });
    assert!(
        output.status.success() && path.exists(),
        "installing the Debian package(s) {} failed, so {binary} is missing; these tests need Debian's package archive once:\n{}{}",
        packages.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    path.to_owned()
}
