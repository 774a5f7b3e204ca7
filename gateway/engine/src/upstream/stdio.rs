//! Stdio servers: spawn in their own process group, capture stderr, observe the exit, kill the group.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::watch;
use wardgate_policy::{ExitInfo, FailureKind};

use crate::failure::UpstreamError;

/// What to run.
#[derive(Debug, Clone)]
pub struct StdioCommand {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
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
    exit: watch::Receiver<Option<ExitInfo>>,
}

const STDERR_LINE_LIMIT: usize = 8 * 1024;

impl StdioProcess {
    /// Spawn `command` with piped stdio in a new process group; return the process and
    /// the pipes rmcp speaks over.
    pub fn spawn(
        server: &str,
        command: &StdioCommand,
    ) -> Result<(StdioProcess, ChildStdout, ChildStdin), UpstreamError> {
        let mut builder = Command::new(&command.command);
        builder
            .args(&command.args)
            .envs(command.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A group of its own, so the whole tree can be signalled at once.
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &command.cwd {
            builder.current_dir(cwd);
        }
        let mut child = builder.spawn().map_err(|error| {
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

        let server_name = server.to_owned();
        tokio::spawn(async move {
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
            tracing::debug!(server = %server_name, pid, "server process {exit}");
            let _ = exit_sender.send(Some(exit));
        });

        Ok((
            StdioProcess {
                server: server.to_owned(),
                pid,
                exit,
            },
            stdout,
            stdin,
        ))
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// How the process ended, if it has.
    pub fn exit_info(&self) -> Option<ExitInfo> {
        *self.exit.borrow()
    }

    /// A receiver that changes once, when the process exits.
    pub fn exit_watch(&self) -> watch::Receiver<Option<ExitInfo>> {
        self.exit.clone()
    }

    /// Wait for the process to exit.
    pub async fn exited(&self) -> ExitInfo {
        let mut exit = self.exit.clone();
        let info = match exit.wait_for(Option::is_some).await {
            Ok(exit) => exit.expect("waited for Some"),
            Err(_) => ExitInfo {
                code: None,
                signal: None,
            },
        };
        info
    }

    /// The polite shutdown: the caller has already closed stdin; wait, SIGTERM the group,
    /// wait, SIGKILL the group.
    pub async fn shutdown(&self, grace: Duration) -> ExitInfo {
        if let Ok(exit) = tokio::time::timeout(grace, self.exited()).await {
            return exit;
        }
        tracing::debug!(server = %self.server, pid = self.pid, "no exit after stdin closed; sending SIGTERM");
        kill_group(self.pid, libc::SIGTERM);
        if let Ok(exit) = tokio::time::timeout(grace, self.exited()).await {
            return exit;
        }
        tracing::warn!(server = %self.server, pid = self.pid, "no exit after SIGTERM; sending SIGKILL");
        kill_group(self.pid, libc::SIGKILL);
        self.exited().await
    }

    /// Kill the group now.
    pub fn kill(&self) {
        kill_group(self.pid, libc::SIGKILL);
    }
}

impl Drop for StdioProcess {
    fn drop(&mut self) {
        if self.exit_info().is_none() {
            kill_group(self.pid, libc::SIGKILL);
        }
    }
}

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
