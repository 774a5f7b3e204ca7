//! Third-party parts from npm (tests/node/package.json, and tests/conformance/package.json
//! for the conformance suite): installed once per target directory with the lock file's
//! versions, shared by the integration tests and benchmarks.
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
        npm_ci(
            "node",
            "node-tools",
            "the MCP Inspector, server-everything, supergateway and oidc-provider",
        )
    })
}

/// `target/NAME` with `node_modules` installed by `npm ci` from `tests/SOURCE`'s
/// package.json and lock file, again only when the lock file changed. `what` names the
/// parts for the message that fails the test when npm cannot be run.
pub fn npm_ci(source: &str, name: &str, what: &str) -> PathBuf {
    let source_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(source);
    let dir = target_dir().join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|error| panic!("create target/{name}: {error}"));
    let lock = std::fs::read(source_dir.join("package-lock.json"))
        .unwrap_or_else(|error| panic!("read tests/{source}/package-lock.json: {error}"));
    let stamp = dir.join("node_modules/.installed-lock.json");
    if std::fs::read(&stamp).ok().as_deref() != Some(lock.as_slice()) {
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(source_dir.join(file), dir.join(file))
                .unwrap_or_else(|error| panic!("copy tests/{source}/{file}: {error}"));
        }
        // Install scripts stay off: none of these needs one to run from the command line.
        let output = Command::new("npm")
            .args([
                "ci",
                "--no-audit",
                "--no-fund",
                "--ignore-scripts",
                "--loglevel=error",
            ])
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|error| {
                panic!("could not run npm to install {what} ({error}); install Node.js and npm")
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
/// --resource URL [--ttl S] [--claimed-expires-in S]`.
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

/// Start the OpenID provider on 127.0.0.1:`port` (0: any) issuing access tokens for
/// `resource` that live `ttl_seconds`: the running process (its stdin is held open;
/// closing it stops the provider) and its issuer URL.
pub async fn start_oidc_provider(
    port: u16,
    resource: &str,
    ttl_seconds: u64,
) -> (tokio::process::Child, String) {
    start_oidc_provider_with(port, resource, ttl_seconds, &[]).await
}

/// [`start_oidc_provider`] with more of `oidc.mjs`'s options, such as
/// `["--claimed-expires-in", "3600"]`.
pub async fn start_oidc_provider_with(
    port: u16,
    resource: &str,
    ttl_seconds: u64,
    options: &[&str],
) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let mut process = tokio::process::Command::new("node")
        .arg(oidc_provider())
        .args(["--port", &port.to_string(), "--resource", resource])
        .args(["--ttl", &ttl_seconds.to_string()])
        .args(options)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs oidc-provider");
    let stdout = process.stdout.take().expect("piped stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    // Generous: the provider makes an RSA key before it listens, which can take long on
    // two busy cores while other tests run (a guard against a hang, not a measurement).
    let line = tokio::time::timeout(std::time::Duration::from_secs(120), lines.next_line())
        .await
        .expect("the OpenID provider started in time")
        .expect("read the provider's stdout")
        .expect("the provider printed its issuer");
    let issuer = line
        .strip_prefix("issuer ")
        .expect("an `issuer URL` line")
        .to_owned();
    (process, issuer)
}

/// An access token from the provider at `issuer`, by the client credentials grant.
pub async fn oidc_token(issuer: &str, client: &str, secret: &str, scope: &str) -> String {
    let answer: serde_json::Value = reqwest::Client::new()
        .post(format!("{issuer}/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "grant_type=client_credentials&client_id={client}&client_secret={secret}&scope={}",
            scope.replace(':', "%3A")
        ))
        .send()
        .await
        .expect("the provider answered")
        .json()
        .await
        .expect("a JSON answer");
    answer["access_token"]
        .as_str()
        .unwrap_or_else(|| panic!("no token: {answer}"))
        .to_owned()
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
