//! Stdio servers: spawn in their own process group, capture stderr, observe the exit, kill the group.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::watch;
use wardgate_policy::{ExitInfo, FailureKind};

use crate::failure::UpstreamError;
use crate::upstream::ProcessEnd;

mod output;
mod scan;

pub use output::ServerOutput;

/// What to run.
#[derive(Debug, Clone)]
pub struct StdioCommand {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub inherit_env: bool,
    pub cwd: Option<PathBuf>,
}

/// What a server process inherits from the gateway's environment without `inherit_env`:
/// what finding and running programs needs (`npx`, `uvx`, a shell script), the locale, and
/// how to reach the network (proxies, CA bundles). Secrets the gateway was given in its own
/// environment (an admin token, a database URL, other servers' tokens) stay with it.
const INHERITED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
    "TZ",
    "TERM",
    "LANG",
    "LANGUAGE",
    "SYSTEMROOT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "NVM_DIR",
    "VOLTA_HOME",
    "PNPM_HOME",
    "PYENV_ROOT",
    "CARGO_HOME",
    "RUSTUP_HOME",
];

/// Prefixes of inherited variables: the locale, XDG directories, npm's and uv's settings.
const INHERITED_PREFIXES: &[&str] = &["LC_", "XDG_", "npm_config_", "NPM_CONFIG_", "UV_"];

/// The gateway's own settings (`WARDGATE_ADMIN_TOKEN`, ...), never passed on, not even
/// with `inherit_env`.
const GATEWAY_PREFIX: &str = "WARDGATE_";

/// npm's tokens outside its config (`.npmrc` files read them as `${NPM_TOKEN}`).
const NPM_CREDENTIALS: &[&str] = &["NPM_TOKEN", "NODE_AUTH_TOKEN"];

/// Words that make a uv, pip or cargo setting a credential: `UV_PUBLISH_TOKEN`,
/// `UV_INDEX_{NAME}_PASSWORD`, `PIP_CLIENT_CERT`, `CARGO_REGISTRIES_{NAME}_TOKEN`,
/// `CARGO_REGISTRY_CREDENTIAL_PROVIDER`, ...
const CREDENTIAL_WORDS: &[&str] = &["TOKEN", "PASSWORD", "USERNAME", "CREDENTIAL", "CLIENT_CERT"];

/// npm settings (`npm_config_KEY`, in any case) that are credentials besides the private
/// `_KEY`s (`_auth`, `_authToken`, `_password`) and the per-registry `//HOST/:KEY`s.
const NPM_CREDENTIAL_KEYS: &[&str] = &[
    "username", "password", "otp", "cert", "certfile", "key", "keyfile",
];

/// Whether a variable is a credential of npm, uv, pip or cargo (the README lists them), or
/// a setting of theirs whose value is a URL with a user in it (an index or registry such
/// as `https://user:secret@pypi.example/simple`). Without `inherit_env` it is never
/// inherited; a server's `env` may still name it.
fn carries_credentials(name: &str, value: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let credential_name = if let Some(key) = upper.strip_prefix("NPM_CONFIG_") {
        let key = key.to_ascii_lowercase();
        key.starts_with('_')
            || key.starts_with("//")
            || NPM_CREDENTIAL_KEYS.contains(&key.replace('_', "-").as_str())
    } else if ["UV_", "PIP_", "CARGO_"]
        .iter()
        .any(|prefix| upper.starts_with(prefix))
    {
        CREDENTIAL_WORDS.iter().any(|word| upper.contains(word))
    } else {
        return NPM_CREDENTIALS.contains(&upper.as_str());
    };
    credential_name || has_url_user_info(value)
}

/// Whether any URL in `value` (which may hold several, as uv's `UV_INDEX` does) names a
/// user, with or without a password: `scheme://user:password@host/...`.
fn has_url_user_info(value: &str) -> bool {
    value.split("://").skip(1).any(|rest| {
        let authority = rest
            .split(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .next()
            .unwrap_or_default();
        authority.contains('@')
    })
}

/// The environment a server process starts with: the inherited part of `gateway_env`
/// (all of it with `inherit_env`, less the gateway's own settings), then the server's `env`.
pub fn child_env(
    gateway_env: impl Iterator<Item = (String, String)>,
    command: &StdioCommand,
) -> Vec<(String, String)> {
    let inherited = |name: &str, value: &str| {
        !name.starts_with(GATEWAY_PREFIX)
            && (command.inherit_env
                || (INHERITED.contains(&name)
                    || INHERITED_PREFIXES
                        .iter()
                        .any(|prefix| name.starts_with(prefix)))
                    && !carries_credentials(name, value))
    };
    let mut env: Vec<(String, String)> = gateway_env
        .filter(|(name, value)| inherited(name, value))
        .collect();
    env.extend(command.env.iter().cloned());
    env
}

/// A running server process and the group it leads.
///
/// Dropping it kills the whole process group if the process is still running, so a
/// failed start, a lost task or a panic can never leave a child (or an `npx` → `node`
/// grandchild) behind.
#[derive(Debug)]
pub struct StdioProcess {
    server: String,
    pid: u32,
    exit: watch::Receiver<Option<ProcessEnd>>,
    stream_fault: StreamFault,
}

/// The last lines a server wrote to stderr: what it said about why it failed
/// ("BILLING_API_KEY is not set"). Bounded in lines and in characters per line, escaped like
/// any peer-supplied text, with the server's configured `env` values masked.
#[derive(Debug, Default)]
pub struct LastWords {
    lines: VecDeque<String>,
    /// Values never shown: the server's `env` values (tokens, keys) as the gateway set them.
    secrets: Vec<String>,
}

impl LastWords {
    /// How many lines are kept (each cut at `log_text`'s 200 characters).
    pub const LINES: usize = 5;

    fn new(secrets: Vec<String>) -> LastWords {
        LastWords {
            lines: VecDeque::with_capacity(Self::LINES),
            secrets,
        }
    }

    fn push(&mut self, line: &str) {
        let mut text = line.to_owned();
        for secret in &self.secrets {
            text = text.replace(secret.as_str(), "***");
        }
        let text = crate::log_text::Untrusted(&text).to_string();
        if self.lines.len() == Self::LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(text);
    }

    fn lines(&self) -> Vec<String> {
        self.lines.iter().cloned().collect()
    }
}

/// Only values this long are masked: shorter ones ("1", "true") would blot out ordinary words.
const MASKED_MIN_CHARS: usize = 4;

/// Why the gateway stopped reading a server's stdout, if it did.
pub type StreamFault = Arc<OnceLock<String>>;

/// The largest message a stdio server may send: rmcp drops longer lines silently (the
/// waiting request would then hang until its timeout), so the gateway stops there itself.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

const STDERR_LINE_LIMIT: usize = 8 * 1024;

impl StdioProcess {
    /// Spawn `command` with piped stdio in a new process group; return the process and
    /// the pipes rmcp speaks over.
    pub async fn spawn(
        server: &str,
        command: &StdioCommand,
    ) -> Result<(StdioProcess, ServerOutput<ChildStdout>, ChildStdin), UpstreamError> {
        let mut builder = Command::new(&command.command);
        builder
            .args(&command.args)
            .env_clear()
            .envs(child_env(std::env::vars(), command))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A group of its own, so the whole tree can be signalled at once.
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &command.cwd {
            builder.current_dir(cwd);
        }
        let mut child = spawn_tied(builder).await.map_err(|error| {
            let hint = match error.kind() {
                std::io::ErrorKind::NotFound => {
                    "; check that the command exists and is on PATH (or give an absolute path)"
                }
                std::io::ErrorKind::PermissionDenied => "; check the file is executable",
                _ => "",
            };
            UpstreamError::new(
                server,
                FailureKind::ConnectRefused,
                format!("could not start `{}`: {error}{hint}", command.command),
            )
        })?;
        let pid = child.id().unwrap_or_default();
        let stdout = child.stdout.take().expect("stdout is piped");
        let stdin = child.stdin.take().expect("stdin is piped");
        let stderr = child.stderr.take().expect("stderr is piped");

        let secrets = command
            .env
            .iter()
            .map(|(_, value)| value.clone())
            .filter(|value| value.chars().count() >= MASKED_MIN_CHARS)
            .collect();
        let last_words = Arc::new(Mutex::new(LastWords::new(secrets)));
        let server_name = server.to_owned();
        let heard = last_words.clone();
        let stderr_reader = tokio::spawn(async move {
            let mut reader = BufReader::new(stderr);
            let mut line = Vec::new();
            loop {
                line.clear();
                match (&mut reader)
                    .take(STDERR_LINE_LIMIT as u64)
                    .read_until(b'\n', &mut line)
                    .await
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let text = String::from_utf8_lossy(&line);
                        let text = text.trim_end();
                        if !text.is_empty() {
                            crate::lock::lock(&heard).push(text);
                            tracing::info!(target: "wardgate::upstream::stderr", server = %server_name, "{text}");
                        }
                    }
                }
            }
        });

        let (exit_sender, exit) = watch::channel(None);
        let server_name = server.to_owned();
        tokio::spawn(async move {
            let status = child.wait().await;
            let exit = match status {
                Ok(status) => {
                    use std::os::unix::process::ExitStatusExt;
                    ExitInfo {
                        code: status.code(),
                        signal: status.signal(),
                    }
                }
                Err(error) => {
                    tracing::warn!(server = %server_name, "could not wait for the server process: {error}");
                    ExitInfo {
                        code: None,
                        signal: None,
                    }
                }
            };
            // The leader is gone; anything it left in its group goes with it.
            kill_group(pid, libc::SIGKILL);
            // Its last words come with its exit: stderr closes with the group, and a moment
            // is enough to read what is still in the pipe.
            let _ = tokio::time::timeout(Duration::from_millis(500), stderr_reader).await;
            tracing::debug!(server = %server_name, pid, "server process {exit}");
            let last_words = crate::lock::lock(&last_words).lines();
            let _ = exit_sender.send(Some(ProcessEnd { exit, last_words }));
        });

        let stream_fault = StreamFault::default();
        let stdout = ServerOutput::new(stdout, server, MAX_MESSAGE_BYTES, stream_fault.clone());
        Ok((
            StdioProcess {
                server: server.to_owned(),
                pid,
                exit,
                stream_fault,
            },
            stdout,
            stdin,
        ))
    }

    pub fn stream_fault(&self) -> StreamFault {
        self.stream_fault.clone()
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// How the process ended, if it has.
    pub fn end(&self) -> Option<ProcessEnd> {
        self.exit.borrow().clone()
    }

    /// A receiver that changes once, when the process exits.
    pub fn exit_watch(&self) -> watch::Receiver<Option<ProcessEnd>> {
        self.exit.clone()
    }

    /// Wait for the process to exit.
    pub async fn exited(&self) -> ProcessEnd {
        crate::upstream::exited(self).await
    }

    /// The polite shutdown: the caller has already closed stdin; wait, SIGTERM the group,
    /// wait, SIGKILL the group.
    pub async fn shutdown(&self, grace: Duration) -> ExitInfo {
        if let Ok(end) = tokio::time::timeout(grace, self.exited()).await {
            return end.exit;
        }
        tracing::debug!(server = %self.server, pid = self.pid, "no exit after stdin closed; sending SIGTERM");
        kill_group(self.pid, libc::SIGTERM);
        if let Ok(end) = tokio::time::timeout(grace, self.exited()).await {
            return end.exit;
        }
        tracing::warn!(server = %self.server, pid = self.pid, "no exit after SIGTERM; sending SIGKILL");
        kill_group(self.pid, libc::SIGKILL);
        self.exited().await.exit
    }

    /// Kill the group now.
    pub fn kill(&self) {
        kill_group(self.pid, libc::SIGKILL);
    }
}

impl Drop for StdioProcess {
    fn drop(&mut self) {
        if self.exit.borrow().is_none() {
            kill_group(self.pid, libc::SIGKILL);
        }
    }
}

/// A job for the thread servers are forked from.
type SpawnJob = (
    Command,
    tokio::runtime::Handle,
    tokio::sync::oneshot::Sender<std::io::Result<tokio::process::Child>>,
);

/// Spawn `command` tied to the gateway's life: on Linux the child gets SIGKILL when the
/// gateway dies in any way, even by SIGKILL or the OOM killer, which leave no chance to
/// kill the group. (A grandchild is not tied; it sees its stdin close, which ends an MCP
/// server that is not stuck.)
///
/// The kernel sends the parent-death signal when the *thread* that forked the child ends,
/// not the process, and tokio's threads come and go; so every server is forked from one
/// thread that lives as long as the gateway.
async fn spawn_tied(command: Command) -> std::io::Result<tokio::process::Child> {
    static SPAWNER: OnceLock<Option<std::sync::mpsc::Sender<SpawnJob>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, queue) = std::sync::mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("wardgate-spawner".into())
            .spawn(move || {
                for (mut command, runtime, answer) in queue {
                    let _runtime = runtime.enter();
                    tie_to_this_thread(&mut command);
                    let _ = answer.send(command.spawn());
                }
            })
            .map_err(|error| {
                tracing::warn!("cannot start the thread server processes are spawned from ({error}); a gateway killed by SIGKILL may leave its servers running");
            })
            .ok()
            .map(|_| jobs)
    });
    let Some(jobs) = spawner else {
        let mut command = command;
        return command.spawn();
    };
    let (answer, spawned) = tokio::sync::oneshot::channel();
    jobs.send((command, tokio::runtime::Handle::current(), answer))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    spawned
        .await
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// Have the child killed when the calling thread (the spawner) ends.
#[cfg(target_os = "linux")]
fn tie_to_this_thread(command: &mut Command) {
    let gateway = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and calls only prctl and
    // getppid, which are async-signal-safe; it allocates nothing (the error is a raw OS
    // error).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // The gateway died between fork and prctl: the signal will never come.
            if libc::getppid() as u32 != gateway {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn tie_to_this_thread(_command: &mut Command) {}

fn kill_group(pid: u32, signal: i32) {
    if pid == 0 {
        return;
    }
    // SAFETY: killpg only sends a signal; the group id is the leader's pid because the
    // child was spawned with process_group(0).
    unsafe {
        libc::killpg(pid as libc::pid_t, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(inherit_env: bool, env: &[(&str, &str)]) -> StdioCommand {
        StdioCommand {
            command: "server".into(),
            args: Vec::new(),
            env: env
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
            inherit_env,
            cwd: None,
        }
    }

    fn names(env: &[(String, String)]) -> Vec<&str> {
        env.iter().map(|(name, _)| name.as_str()).collect()
    }

    const PACKAGE_MANAGER_CREDENTIALS: &[(&str, &str)] = &[
        ("npm_config__authToken", "npm-secret"),
        ("NPM_CONFIG__AUTH", "dXNlcjpwYXNz"),
        ("npm_config__password", "cGFzcw=="),
        ("npm_config_//registry.example/:_authToken", "npm-secret"),
        ("npm_config_username", "me"),
        ("npm_config_keyfile", "/home/me/client.key"),
        ("npm_config_registry", "https://me:secret@registry.example/"),
        ("NPM_TOKEN", "npm-secret"),
        ("NODE_AUTH_TOKEN", "npm-secret"),
        ("UV_PUBLISH_TOKEN", "pypi-secret"),
        ("UV_PUBLISH_PASSWORD", "secret"),
        ("UV_INDEX_PRIVATE_USERNAME", "me"),
        ("UV_INDEX_PRIVATE_PASSWORD", "secret"),
        ("UV_GITHUB_TOKEN", "ghp-secret"),
        ("UV_INDEX", "private=https://me:secret@pypi.example/simple"),
        ("UV_DEFAULT_INDEX", "https://token@pypi.example/simple"),
        ("PIP_INDEX_URL", "https://me:secret@pypi.example/simple"),
        ("PIP_CLIENT_CERT", "/home/me/client.pem"),
        ("CARGO_REGISTRY_TOKEN", "cargo-secret"),
        ("CARGO_REGISTRIES_PRIVATE_TOKEN", "cargo-secret"),
        (
            "CARGO_REGISTRIES_PRIVATE_CREDENTIAL_PROVIDER",
            "cargo:token",
        ),
    ];

    #[test]
    fn package_manager_credentials_are_not_inherited_but_their_settings_are() {
        let settings = [
            ("npm_config_registry", "https://registry.example/"),
            ("npm_config_cache", "/tmp/npm"),
            ("UV_INDEX", "private=https://pypi.example/simple"),
            ("UV_CACHE_DIR", "/tmp/uv"),
            ("CARGO_HOME", "/home/me/.cargo"),
        ];
        let gateway_env = || {
            PACKAGE_MANAGER_CREDENTIALS
                .iter()
                .chain(&settings)
                .map(|(name, value)| (name.to_string(), value.to_string()))
        };
        let minimal = child_env(gateway_env(), &command(false, &[]));
        let expected: Vec<&str> = settings.iter().map(|(name, _)| *name).collect();
        assert_eq!(names(&minimal), expected);

        let everything = child_env(gateway_env(), &command(true, &[]));
        assert_eq!(
            everything.len(),
            PACKAGE_MANAGER_CREDENTIALS.len() + settings.len()
        );

        let named = child_env(
            gateway_env(),
            &command(false, &[("UV_PUBLISH_TOKEN", "pypi-secret")]),
        );
        assert!(named.contains(&("UV_PUBLISH_TOKEN".into(), "pypi-secret".into())));
    }
}
