//! A throwaway PostgreSQL cluster of one test's own, which the test may stop,
//! crash and start again without touching the shared server of
//! `EFFECT_TEST_POSTGRES_URL`.
//!
//! The cluster is made with `initdb` in a temporary directory under `/tmp`
//! and listens on a free loopback port only, with trust authentication, like
//! the one `xtask/ci/provision.sh` starts. The binaries are found as `xtask/ci/provision.sh` finds them:
//! `initdb` and `pg_ctl` on the `PATH`, or Debian's newest
//! `/usr/lib/postgresql/*/bin`. Without them the test says it skipped, unless
//! `EFFECT_REQUIRE_POSTGRES=1` makes that a failure. `initdb` and the server
//! refuse to run as root: as root, they run as the `postgres` user (which
//! `xtask/ci/provision.sh` creates), through `runuser`.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use effect_test_support::servers::REQUIRE_POSTGRES_VAR;

type Error = Box<dyn std::error::Error>;

/// How `pg_ctl stop` ends the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// `-m fast`: sessions are terminated (`57P01`), the server shuts down
    /// cleanly.
    Fast,
    /// `-m immediate`: every server process quits at once, as in a crash;
    /// the next start replays the write-ahead log.
    Immediate,
}

impl Stop {
    fn mode(self) -> &'static str {
        match self {
            Stop::Fast => "fast",
            Stop::Immediate => "immediate",
        }
    }
}

/// A running cluster; stopped (immediately) and removed on drop.
#[derive(Debug)]
pub struct Cluster {
    /// `postgres://postgres@127.0.0.1:<port>/postgres?sslmode=disable`.
    pub url: String,
    bin: PathBuf,
    /// The user the server runs as, when this process is root.
    os_user: Option<String>,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Makes and starts a cluster for `test`; `None` (having said so) when
    /// the binaries are missing and the test may skip.
    pub fn start(test: &str) -> Result<Option<Cluster>, Error> {
        let Some(bin) = find_bin() else {
            return skip(test, "initdb and pg_ctl are not installed");
        };
        let os_user = if is_root()? {
            let Some(uid) = uid_of("postgres")? else {
                return skip(
                    test,
                    "running as root, and there is no postgres user to run the server as",
                );
            };
            Some((uid, "postgres".to_owned()))
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("effect-pg-cluster-")
            .tempdir_in("/tmp")?;
        if let Some((uid, _)) = &os_user {
            std::os::unix::fs::chown(dir.path(), Some(*uid), None)?;
        }
        let port = free_port()?;
        let cluster = Cluster {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable"),
            bin,
            os_user: os_user.map(|(_, name)| name),
            dir,
        };
        let data = cluster.data();
        cluster.run(
            "initdb",
            &[
                "-D",
                path_str(&data)?,
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
            ],
        )?;
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))?;
        writeln!(
            conf,
            "listen_addresses = '127.0.0.1'\n\
             port = {port}\n\
             unix_socket_directories = '{}'\n\
             max_connections = 100\n\
             # Only the server process is crashed here, never the machine: the\n\
             # operating system keeps what the server wrote, synced or not.\n\
             fsync = off\n\
             full_page_writes = off",
            path_str(cluster.dir.path())?
        )?;
        cluster.start_again()?;
        Ok(Some(cluster))
    }

    /// Stops the server with `mode` and waits until it is down.
    pub fn stop(&self, mode: Stop) -> Result<(), Error> {
        let data = self.data();
        self.run(
            "pg_ctl",
            &["-D", path_str(&data)?, "-m", mode.mode(), "-w", "stop"],
        )
    }

    /// Starts the (stopped) server and waits until it accepts connections.
    pub fn start_again(&self) -> Result<(), Error> {
        let data = self.data();
        let log = self.dir.path().join("server.log");
        self.run(
            "pg_ctl",
            &[
                "-D",
                path_str(&data)?,
                "-l",
                path_str(&log)?,
                "-w",
                "-t",
                "120",
                "start",
            ],
        )
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Runs one of the cluster's binaries (as the server's user), failing
    /// with its output.
    fn run(&self, program: &str, args: &[&str]) -> Result<(), Error> {
        let program = self.bin.join(program);
        let mut command = match &self.os_user {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(&program);
                command
            }
            None => Command::new(&program),
        };
        // The server's user may not reach this process's directory.
        let output = command
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()?;
        if output.status.success() {
            return Ok(());
        }
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        Err(format!(
            "{} {args:?} failed ({}):\n{}{}\n--- server log\n{log}",
            program.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        )
        .into())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Leave no server behind; the directory goes with `dir`.
        if let Err(err) = self.stop(Stop::Immediate) {
            let _ = writeln!(std::io::stderr(), "stopping the test cluster: {err}");
        }
    }
}

/// Skips `test`, or fails it when the PostgreSQL tests are required.
fn skip(test: &str, why: &str) -> Result<Option<Cluster>, Error> {
    if std::env::var(REQUIRE_POSTGRES_VAR).as_deref() == Ok("1") {
        return Err(
            format!("{test}: {why}, but {REQUIRE_POSTGRES_VAR}=1 requires it to run").into(),
        );
    }
    let message = format!(
        "\nskipped: {test}: {why} (it starts a PostgreSQL cluster of its own; install Debian's \
         postgresql package to run it)\n"
    );
    let _ = std::io::stderr().write_all(message.as_bytes());
    Ok(None)
}

/// The directory holding `initdb` and `pg_ctl`.
fn find_bin() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH")
        && let Some(dir) = std::env::split_paths(&path).find(|dir| has_both(dir))
    {
        return Some(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_both(dir))
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir)
}

fn is_root() -> Result<bool, Error> {
    let output = Command::new("id").arg("-u").output()?;
    Ok(String::from_utf8_lossy(&output.stdout).trim() == "0")
}

fn uid_of(user: &str) -> Result<Option<u32>, Error> {
    let output = Command::new("id").args(["-u", user]).output()?;
    if !output.status.success() {
        return Ok(None);
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().parse().ok())
}

/// A loopback port nothing listens on now.
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn path_str(path: &Path) -> Result<&str, Error> {
    path.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", path.display()).into())
}
