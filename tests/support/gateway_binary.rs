//! The `wardgate` binary a benchmark measures, built with the profile the benchmark itself
//! was built with: `cargo bench` → release (the `bench` profile is `release` unchanged, so
//! this is the binary users install, and the artifacts are shared); `cargo bench --profile
//! profiling` → the same code with symbols, for perf and flame graphs; `cargo test` → debug.
//! `WARDGATE_BENCH_GATEWAY=/path/to/wardgate` measures that binary instead (before/after).

use std::path::PathBuf;

pub fn gateway_binary() -> PathBuf {
    // Another build to measure (an earlier commit's, for a before/after comparison).
    if let Ok(path) = std::env::var("WARDGATE_BENCH_GATEWAY") {
        return PathBuf::from(path);
    }
    let dir = PathBuf::from(env!("CARGO_BIN_EXE_wardgate-fake"))
        .parent()
        .expect("the binaries' directory")
        .to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = std::process::Command::new(cargo);
    build.args(["build", "--quiet", "-p", "wardgate", "--bin", "wardgate"]);
    match dir.file_name().and_then(|name| name.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            build.arg("--release");
        }
        Some(profile) => {
            build.args(["--profile", profile]);
        }
    }
    let status = build.status().expect("run cargo build");
    assert!(status.success(), "cargo build -p wardgate failed");
    dir.join("wardgate")
}
