//! Builds the guest policies in `policies/` for wasm32-wasip2, so `cargo test` needs no manual step.
//!
//! The guests are a workspace of their own with their own target directory
//! (`<target>/wasm-policies`); this script runs `cargo build --release --target
//! wasm32-wasip2 --locked` there with the host's flags cleared, installs the target with
//! rustup when it is missing, and exposes each module's path as
//! `WARDGATE_POLICY_<NAME>_WASM` to this crate's code, tests and benches.

use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";
const GUESTS: &[&str] = &["default", "patient", "strict", "faulty"];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest_dir.join("../..");
    let policies = root.join("policies");
    println!("cargo:rerun-if-changed={}", root.join("wit").display());
    for file in ["Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", policies.join(file).display());
    }
    for guest in GUESTS {
        println!("cargo:rerun-if-changed={}", policies.join(guest).display());
    }
    println!("cargo:rerun-if-env-changed=WARDGATE_SKIP_GUEST_BUILD");

    let target_dir = guest_target_dir();
    let release_dir = target_dir.join(TARGET).join("release");
    for guest in GUESTS {
        let wasm = release_dir.join(format!("wardgate_policy_{guest}.wasm"));
        println!(
            "cargo:rustc-env=WARDGATE_POLICY_{}_WASM={}",
            guest.to_uppercase(),
            wasm.display()
        );
    }
    // An escape hatch for machines that build the guests some other way (the paths
    // above then have to exist already).
    if std::env::var_os("WARDGATE_SKIP_GUEST_BUILD").is_some() {
        return;
    }

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    ensure_target_installed();
    let mut build = Command::new(&cargo);
    build
        .current_dir(&policies)
        .args(["build", "--release", "--locked", "--target", TARGET])
        .arg("--target-dir")
        .arg(&target_dir);
    clear_host_build_env(&mut build);
    let status = build.status().unwrap_or_else(|error| {
        panic!("cannot run {cargo:?} to build the guest policies: {error}")
    });
    if !status.success() {
        panic!(
            "building the guest policies in {} for {TARGET} failed ({status}); see the cargo output above",
            policies.display()
        );
    }
    for guest in GUESTS {
        let wasm = release_dir.join(format!("wardgate_policy_{guest}.wasm"));
        assert!(wasm.is_file(), "guest build produced no {}", wasm.display());
    }
}

/// `<target>/wasm-policies`, beside the host's profile directories: shared by debug and
/// release host builds, never inside `policies/` (that would retrigger this script).
fn guest_target_dir() -> PathBuf {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    // OUT_DIR is <target>/[<triple>/]<profile>/build/<pkg>-<hash>/out.
    let profile_dir = out_dir
        .ancestors()
        .nth(3)
        .expect("OUT_DIR has the usual depth");
    let mut target_dir = profile_dir.parent().expect("profile dir has a parent");
    // With an explicit `--target`, profiles live under <target>/<triple>/.
    if target_dir.file_name().map(|name| name.to_os_string()) == std::env::var_os("TARGET") {
        target_dir = target_dir.parent().expect("triple dir has a parent");
    }
    target_dir.join("wasm-policies")
}

/// The guests must be built with their own flags: host RUSTFLAGS (say `-C target-cpu=native`)
/// would break a wasm build or change it behind our back.
fn clear_host_build_env(command: &mut Command) {
    for name in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTDOCFLAGS",
        "CARGO_ENCODED_RUSTDOCFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_INCREMENTAL",
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_PRIMARY_PACKAGE",
        "OUT_DIR",
        "TARGET",
        "HOST",
        "PROFILE",
        "OPT_LEVEL",
        "DEBUG",
    ] {
        command.env_remove(name);
    }
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let host_only = [
            "CARGO_PROFILE_",
            "CARGO_TARGET_",
            "CARGO_CFG_",
            "CARGO_FEATURE_",
            "CARGO_PKG_",
            "DEP_",
        ];
        if host_only.iter().any(|prefix| name.starts_with(prefix)) {
            command.env_remove(name.as_ref());
        }
    }
}

/// Installs the wasm32-wasip2 standard library with rustup when this toolchain lacks it.
fn ensure_target_installed() {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()));
    let installed = |sysroot: &Path| {
        sysroot
            .join("lib/rustlib")
            .join(TARGET)
            .join("lib")
            .is_dir()
    };
    if sysroot.as_deref().is_some_and(installed) {
        return;
    }
    println!("cargo:warning=installing the {TARGET} target with rustup (first build only)");
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status();
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => panic!("`rustup target add {TARGET}` failed ({status}); install the target and build again"),
        Err(error) => panic!(
            "the {TARGET} target is missing and rustup could not be run ({error}); install the target for this toolchain and build again"
        ),
    }
}
