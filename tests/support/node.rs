//! Third-party MCP parts from npm (tests/node/package.json): installed once per target
//! directory with the lock file's versions, shared by the integration tests and benchmarks.
//!
//! A machine where they cannot be installed fails the test that needs them, saying why; it
//! never passes silently.

// Included by the integration tests and by benchmarks, each of which uses a part.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `target/node-tools`, with `node_modules` installed from tests/node's lock file.
pub fn node_tools() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("node");
        let dir = target_dir().join("node-tools");
        std::fs::create_dir_all(&dir).expect("create target/node-tools");
        let lock = std::fs::read(source.join("package-lock.json"))
            .expect("read tests/node/package-lock.json");
        let stamp = dir.join("node_modules/.installed-lock.json");
        if std::fs::read(&stamp).ok().as_deref() != Some(lock.as_slice()) {
            for file in ["package.json", "package-lock.json"] {
                std::fs::copy(source.join(file), dir.join(file))
                    .unwrap_or_else(|error| panic!("copy tests/node/{file}: {error}"));
            }
            // Install scripts stay off: none of these needs one to run from the command line.
            let output = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"])
                .current_dir(&dir)
                .output()
                .unwrap_or_else(|error| {
                    panic!("could not run npm to install the MCP Inspector, server-everything, supergateway and oidc-provider ({error}); install Node.js and npm")
                });
            assert!(
                output.status.success(),
                "npm ci in {} failed; these tests need the npm registry once:\n{}",
                dir.display(),
                String::from_utf8_lossy(&output.stderr)
            );
            std::fs::write(&stamp, &lock).expect("write the install stamp");
        }
        dir
    })
}

/// The entry script of an installed package's binary, run with `node`.
pub fn node_script(relative: &str) -> PathBuf {
    let path = node_tools().join("node_modules").join(relative);
    assert!(path.exists(), "{} is missing after npm ci", path.display());
    path
}

/// The MCP Inspector's command line (`inspector --cli ...`).
pub fn inspector() -> PathBuf {
    node_script("@modelcontextprotocol/inspector/clients/launcher/build/index.js")
}

/// `@modelcontextprotocol/server-everything` (`stdio` or `streamableHttp` as its argument).
pub fn server_everything() -> PathBuf {
    node_script("@modelcontextprotocol/server-everything/dist/index.js")
}

/// `supergateway`, a peer gateway (stdio server → Streamable HTTP).
pub fn supergateway() -> PathBuf {
    node_script("supergateway/dist/index.js")
}

/// `tests/node/oidc.mjs` (a real OpenID provider, npm `oidc-provider`), placed beside the
/// installed `node_modules` so its import resolves; run as `node oidc.mjs --port P
/// --resource URL [--ttl S]`.
pub fn oidc_provider() -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("node/oidc.mjs");
    let script = node_tools().join("oidc.mjs");
    std::fs::copy(&source, &script)
        .unwrap_or_else(|error| panic!("copy tests/node/oidc.mjs: {error}"));
    assert!(
        node_tools().join("node_modules/oidc-provider").exists(),
        "oidc-provider is missing after npm ci"
    );
    script
}

/// The cargo target directory the running test or benchmark was built into.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/debug/deps/it-xxxx or target/release/deps/roundtrip-xxxx
    exe.ancestors()
        .find(|dir| dir.file_name().is_some_and(|name| name == "deps"))
        .and_then(|deps| deps.parent())
        .and_then(|profile| profile.parent())
        .map(Path::to_path_buf)
        .expect("the test runs from a cargo target directory")
}
