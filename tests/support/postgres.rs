//! A real PostgreSQL server for the tests: Debian's packages (installed on first use), one
//! throwaway cluster per [`Postgres`], in its own temporary directory and on its own port,
//! stopped and removed when dropped. No mock: the tests see what a deployment would.
//!
//! PostgreSQL refuses to run as root, so when the tests run as root the server's programs
//! (`initdb`, `pg_ctl`, `postgres`) run as the `postgres` system user that the Debian package
//! creates, through `runuser`; otherwise they run as the current user. Clients connect over
//! TCP on 127.0.0.1 with a password (SCRAM), as they would in production; there is no Unix
//! socket.
//!
//! The server runs with `fsync=off` (and `initdb --no-sync`): the data is thrown away after
//! the test, so surviving a power cut buys nothing and syncing costs seconds per test. A fast
//! shutdown still writes everything out, so [`Postgres::stop`] then [`Postgres::start_again`]
//! keeps the data, as a restart in production does.
//!
//! The server programs are always run by full path under `/usr/lib/postgresql/<major>/bin`:
//! a `pg_ctl` on `PATH` may be something else.

#![allow(dead_code)]

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

/// Who runs the server when the tests run as root (created by Debian's package).
const SERVER_USER: &str = "postgres";

/// One running cluster with the role and database `wardgate`.
pub struct Postgres {
    bin: PathBuf,
    /// The server's programs run through `runuser -u postgres` (the tests run as root).
    as_server_user: bool,
    password: String,
    port: u16,
    data: PathBuf,
    log: PathBuf,
    /// Last, so the directory goes only after `Drop` stopped the server.
    dir: TempDir,
}

impl Postgres {
    /// A new cluster, accepting connections, with an empty database `wardgate` owned by the
    /// superuser `wardgate`.
    pub fn start() -> Postgres {
        let bin = server_bin();
        let as_server_user = unsafe { libc::geteuid() } == 0;
        let dir = tempfile::Builder::new()
            .prefix("wardgate-pg-")
            .tempdir_in("/tmp")
            .expect("create a temporary directory under /tmp");
        // The server user must reach `data` and `log` inside it; the cluster itself is private.
        set_mode(dir.path(), 0o755);
        let (data, log, pwfile) = (
            dir.path().join("data"),
            dir.path().join("log"),
            dir.path().join("password"),
        );
        let password = random_password();
        fs::create_dir(&data).expect("create the cluster's data directory");
        set_mode(&data, 0o700);
        fs::write(&log, "").expect("create the server log");
        fs::write(&pwfile, format!("{password}\n")).expect("write initdb's password file");
        set_mode(&pwfile, 0o600);
        if as_server_user {
            let (uid, gid) = (server_user_id("-u"), server_user_id("-g"));
            for path in [&data, &log, &pwfile] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap_or_else(|error| {
                    panic!("chown {} to {SERVER_USER}: {error}", path.display())
                });
            }
        }
        let mut postgres = Postgres {
            bin,
            as_server_user,
            password,
            port: free_port(),
            data,
            log,
            dir,
        };
        let output = postgres
            .server_command("initdb")
            .arg("-D")
            .arg(&postgres.data)
            .args(["-U", "wardgate", "--auth=scram-sha-256"])
            .arg(format!("--pwfile={}", pwfile.display()))
            // The C locale exists everywhere, whatever LANG the tests run with.
            .args(["-E", "UTF8", "--locale=C", "--no-sync"])
            .output()
            .expect("run initdb");
        let _ = fs::remove_file(&pwfile);
        assert!(output.status.success(), "initdb failed:\n{}", both(&output));
        // A free port can be taken by another test between choosing and binding it: try anew.
        let mut attempts = 1;
        while let Err(error) = postgres.try_start() {
            let taken = postgres.server_log().contains("could not bind");
            assert!(taken && attempts < 3, "{error}");
            attempts += 1;
            postgres.port = free_port();
        }
        postgres.psql_in("postgres", "CREATE DATABASE wardgate");
        postgres
    }

    /// `postgres://wardgate:PASSWORD@127.0.0.1:PORT/wardgate`.
    pub fn url(&self) -> String {
        format!(
            "postgres://wardgate:{}@127.0.0.1:{}/wardgate",
            self.password, self.port
        )
    }

    /// The password of the role `wardgate` (hex, so it needs no escaping in a URL).
    pub fn password(&self) -> &str {
        &self.password
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Serve TLS with `cert` and `key` (PEM) and refuse every connection without it, then
    /// reload. Clients that do not encrypt get "no pg_hba.conf entry ... no encryption".
    pub fn require_tls(&self, cert: &str, key: &str) {
        let (cert_path, key_path) = (self.data.join("server.crt"), self.data.join("server.key"));
        fs::write(&cert_path, cert).expect("write the server certificate");
        fs::write(&key_path, key).expect("write the server key");
        set_mode(&key_path, 0o600);
        if self.as_server_user {
            let (uid, gid) = (server_user_id("-u"), server_user_id("-g"));
            for path in [&cert_path, &key_path] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown the TLS files");
            }
        }
        // Overwritten in place, so it keeps its owner.
        fs::write(
            self.data.join("pg_hba.conf"),
            "hostssl all all 127.0.0.1/32 scram-sha-256\n",
        )
        .expect("write pg_hba.conf");
        self.psql("ALTER SYSTEM SET ssl = on");
        self.psql("SELECT pg_reload_conf()");
        // The reload is asynchronous: wait until the server says it serves TLS.
        for _ in 0..100 {
            if self.psql("SHOW ssl") == "on" {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("PostgreSQL never turned TLS on:\n{}", self.server_log());
    }

    /// Stops the server (fast shutdown: open connections are closed, the data is kept) and
    /// returns once it is gone.
    pub fn stop(&self) {
        let output = self.pg_ctl_stop("fast");
        assert!(
            output.status.success(),
            "pg_ctl stop failed:\n{}\nserver log:\n{}",
            both(&output),
            self.server_log()
        );
    }

    /// Starts the stopped server again, on the same data and port, and returns once it
    /// accepts connections.
    pub fn start_again(&self) {
        self.try_start().unwrap_or_else(|error| panic!("{error}"));
    }

    /// Runs `sql` in the database `wardgate` as `wardgate`; its rows, unaligned (`psql -tA`),
    /// one per line, without command tags or the trailing newline.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_in("wardgate", sql)
    }

    fn psql_in(&self, database: &str, sql: &str) -> String {
        let psql = Some(self.bin.join("psql"))
            .filter(|psql| psql.exists())
            .unwrap_or_else(|| PathBuf::from("/usr/bin/psql"));
        let port = self.port.to_string();
        let output = Command::new(&psql)
            .args(["-X", "-q", "-tA", "-h", "127.0.0.1", "-p", &port])
            .args(["-U", "wardgate", "-d", database, "-c", sql])
            .env("PGPASSWORD", &self.password)
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .unwrap_or_else(|error| panic!("run {}: {error}", psql.display()));
        assert!(
            output.status.success(),
            "psql failed on `{sql}`:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .trim_end_matches('\n')
            .to_owned()
    }

    fn try_start(&self) -> Result<(), String> {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories='' -c fsync=off -c max_connections=200",
            self.port
        );
        let output = self
            .server_command("pg_ctl")
            .args(["start", "-w", "-t", "60", "-D"])
            .arg(&self.data)
            .arg("-l")
            .arg(&self.log)
            .arg("-o")
            .arg(options)
            .output()
            .expect("run pg_ctl start");
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "PostgreSQL did not start on port {}:\n{}\nserver log {}:\n{}",
                self.port,
                both(&output),
                self.log.display(),
                self.server_log()
            ))
        }
    }

    fn pg_ctl_stop(&self, mode: &str) -> Output {
        self.server_command("pg_ctl")
            .args(["stop", "-w", "-m", mode, "-D"])
            .arg(&self.data)
            .output()
            .expect("run pg_ctl stop")
    }

    /// A server program, run as the server user when the tests run as root.
    fn server_command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut command = if self.as_server_user {
            let mut command = Command::new("runuser");
            command.args(["-u", SERVER_USER, "--"]).arg(path);
            command
        } else {
            Command::new(path)
        };
        // The server user may not be allowed into the tests' working directory.
        command.current_dir(self.dir.path());
        command
    }

    fn server_log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_else(|error| format!("(unreadable: {error})"))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Immediate: nothing to keep. Fails harmlessly when already stopped; `dir` goes next.
        if self.data.join("postmaster.pid").exists() {
            let _ = self.pg_ctl_stop("immediate");
        }
    }
}

/// `/usr/lib/postgresql/<newest major>/bin`, installing Debian's `postgresql` first if need be.
fn server_bin() -> PathBuf {
    if let Some(bin) = newest_server_bin() {
        return bin;
    }
    // Comes with every server version (and only with a server), whatever the major.
    crate::debian::ensure("/usr/bin/pg_ctlcluster", &["postgresql"]);
    newest_server_bin().unwrap_or_else(|| {
        panic!("PostgreSQL's server programs are missing (no /usr/lib/postgresql/<major>/bin/initdb); run `apt-get install postgresql` as root")
    })
}

fn newest_server_bin() -> Option<PathBuf> {
    fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let major: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((major, bin))
        })
        .max_by_key(|(major, _)| *major)
        .map(|(_, bin)| bin)
}

/// The uid (`-u`) or gid (`-g`) of the server user.
fn server_user_id(which: &str) -> u32 {
    let output = Command::new("id")
        .args([which, SERVER_USER])
        .output()
        .expect("run id");
    assert!(
        output.status.success(),
        "PostgreSQL refuses to run as root and the system user {SERVER_USER} is missing (Debian's postgresql package creates it); run `apt-get install postgresql` as root, or run the tests as another user:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let id = String::from_utf8_lossy(&output.stdout);
    id.trim()
        .parse()
        .unwrap_or_else(|_| panic!("`id {which} {SERVER_USER}` printed {id:?}"))
}

/// 24 hex digits from the kernel's random source.
fn random_password() -> String {
    let mut bytes = [0u8; 12];
    fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .expect("read /dev/urandom");
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener
        .local_addr()
        .expect("the listener's address")
        .port()
}

fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|error| panic!("chmod {mode:o} {}: {error}", path.display()));
}

fn both(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
