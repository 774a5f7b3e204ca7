//! The README's run command as a newcomer meets it, shared by the first-look test and the
//! first-call benchmark: `wardgate --listen 127.0.0.1:0` in an empty directory that is also
//! its home, so no config file is given or found and the built-in demo servers are served.

use std::path::Path;
use std::process::Stdio;

use tokio::process::{Child, Command};

/// The gateway started in `home` (an empty directory), its log (stderr) piped.
pub fn spawn_with_no_config(wardgate: &Path, home: &Path) -> Child {
    Command::new(wardgate)
        .args(["--listen", "127.0.0.1:0"])
        .current_dir(home)
        .env_remove("WARDGATE_CONFIG")
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn wardgate")
}
