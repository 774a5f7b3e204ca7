//! `wardgate check`'s look for every stdio server's program, as the gateway would start it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::error::{ConfigError, Errors};
use super::{Config, TransportConfig};

impl Config {
    /// Every enabled stdio server whose program is not there to start: not found on the
    /// PATH it would be started with (the server's own `env` PATH, else the gateway's), or
    /// not executable. Not part of loading: a server whose program is missing fails alone
    /// when it starts; `check` says so ahead of time.
    pub fn check_programs(&self) -> Result<(), ConfigError> {
        let mut errors = Errors::default();
        for server in self.servers.values().filter(|server| server.enabled) {
            let TransportConfig::Stdio {
                command, env, cwd, ..
            } = &server.transport
            else {
                continue;
            };
            let path = env
                .get("PATH")
                .map(|path| path.expose().to_owned())
                .or_else(|| std::env::var("PATH").ok())
                .unwrap_or_default();
            let key = format!("servers.{}.command", server.name);
            errors.take(
                find_program(command, &path, cwd.as_deref())
                    .map(|_| ())
                    .map_err(|problem| {
                        let (message, fix) = match problem {
                            Problem::NotFound => (
                                format!("`{command}` was not found on PATH ({path})"),
                                "install it, put its directory on PATH, or give its absolute path",
                            ),
                            Problem::Missing(at) => (
                                format!("`{command}` does not exist (looked at {})", at.display()),
                                "fix the path, or give the program's name to look it up on PATH",
                            ),
                            Problem::NotExecutable(at) => (
                                format!("`{}` is not an executable file", at.display()),
                                "make it executable (chmod +x), or name the program that runs it",
                            ),
                        };
                        ConfigError::at(key, None, message, fix)
                    }),
            );
        }
        errors.finish().map_err(|error| error.in_file(&self.source))
    }
}

enum Problem {
    NotFound,
    Missing(PathBuf),
    NotExecutable(PathBuf),
}

/// Where `command` is: a path (with a `/`) as given, relative to `cwd`; a bare name, the
/// first executable file of that name in `path`'s directories.
fn find_program(command: &str, path: &str, cwd: Option<&Path>) -> Result<PathBuf, Problem> {
    if command.contains('/') {
        let at = match cwd {
            Some(cwd) if Path::new(command).is_relative() => cwd.join(command),
            _ => PathBuf::from(command),
        };
        return match std::fs::metadata(&at) {
            Err(_) => Err(Problem::Missing(at)),
            Ok(metadata) if is_executable(&metadata) => Ok(at),
            Ok(_) => Err(Problem::NotExecutable(at)),
        };
    }
    std::env::split_paths(path)
        .map(|dir| dir.join(command))
        .find(|candidate| std::fs::metadata(candidate).is_ok_and(|m| is_executable(&m)))
        .ok_or(Problem::NotFound)
}

fn is_executable(metadata: &std::fs::Metadata) -> bool {
    metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
}
