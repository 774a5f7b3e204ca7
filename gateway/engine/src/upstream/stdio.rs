//! Stdio servers: spawn in their own process group, capture stderr, observe the exit, kill the group.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{ChildStdout, Command};
use tokio::sync::watch;
use wardgate_policy::{ExitInfo, FailureKind};

use crate::failure::UpstreamError;
use crate::upstream::ProcessEnd;

mod environment;
mod output;

pub use environment::child_env;
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
        tool_tasks: std::sync::Arc<super::tool_tasks::ToolTasks>,
    ) -> Result<
        (
            StdioProcess,
            ServerOutput<ChildStdout>,
            crate::line_pipe::PipeWriter,
        ),
        UpstreamError,
    > {
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
        // Shared by rmcp's transport and the calls that write their own requests.
        let stdin = stdin
            .into_owned_fd()
            .and_then(crate::line_pipe::LinePipe::new)
            .map(crate::line_pipe::PipeWriter::new)
            .map_err(|error| {
                UpstreamError::new(
                    server,
                    FailureKind::ConnectRefused,
                    format!("could not use the stdin of `{}`: {error}", command.command),
                )
            })?;
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
        let stdout = ServerOutput::new(
            stdout,
            server,
            MAX_MESSAGE_BYTES,
            stream_fault.clone(),
            tool_tasks,
        );
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

    /// The polite shutdown: the caller has already closed stdin; wait `grace`, SIGTERM the
    /// group, wait `kill_grace`, SIGKILL the group.
    pub async fn shutdown(&self, grace: Duration, kill_grace: Duration) -> ExitInfo {
        if let Ok(end) = tokio::time::timeout(grace, self.exited()).await {
            return end.exit;
        }
        tracing::debug!(server = %self.server, pid = self.pid, "no exit after stdin closed; sending SIGTERM");
        kill_group(self.pid, libc::SIGTERM);
        if let Ok(end) = tokio::time::timeout(kill_grace, self.exited()).await {
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
