//! The PostgreSQL servers: a primary and a streaming-replication standby,
//! each in its host's namespace, run as the `postgres` user. Crash, restart,
//! promotion and the rebuild of a failed primary as the new standby.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::process::{alive, children_of, kill9};
use crate::topology::Host;
use crate::wait::until;

/// The port every server listens on, in its own namespace.
pub(crate) const PORT: u16 = 5432;

/// How commits wait for the standby.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Replication {
    /// `synchronous_standby_names = ''`: a commit is answered once the
    /// primary has it; the standby follows.
    Async,
    /// `synchronous_standby_names = '*'`, `synchronous_commit = remote_apply`
    /// (the ledger's own transactions run with `on`): a commit is answered
    /// once the standby has flushed it.
    Sync,
}

impl Replication {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Replication::Async => "async",
            Replication::Sync => "sync",
        }
    }
}

/// One server: its host, its data directory and its socket directory.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    pub(crate) host: Host,
    pub(crate) dir: PathBuf,
}

impl Server {
    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// A connection over the server's Unix socket, from this process.
    pub(crate) fn client(&self) -> anyhow::Result<postgres::Client> {
        let config = format!(
            "host={} port={PORT} user=postgres dbname=postgres connect_timeout=5",
            self.dir.display()
        );
        postgres::Client::connect(&config, postgres::NoTls)
            .with_context(|| format!("connecting to {} over its socket", self.host.name))
    }

    /// The postmaster's process id, from `postmaster.pid`.
    fn postmaster(&self) -> Option<i32> {
        std::fs::read_to_string(self.data().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }
}

/// Where the binaries are and how the servers are configured.
#[derive(Debug)]
pub(crate) struct Postgres {
    bin: PathBuf,
    /// Included by every server's postgresql.conf: the replication mode.
    mode_conf: PathBuf,
}

impl Postgres {
    /// Finds initdb and pg_ctl (on PATH or Debian's versioned directory) and
    /// makes `root` the `postgres` user's.
    pub(crate) fn new(root: &Path) -> anyhow::Result<Postgres> {
        let bin = find_bin().context("initdb and pg_ctl not found (install postgresql)")?;
        let mode_conf = root.join("mode.conf");
        std::fs::write(&mode_conf, "synchronous_standby_names = ''\n")?;
        run("chown", &["-R", "postgres", &root.display().to_string()])?;
        Ok(Postgres { bin, mode_conf })
    }

    /// Creates and starts the primary.
    pub(crate) fn init_primary(&self, server: &Server) -> anyhow::Result<()> {
        std::fs::create_dir_all(&server.dir)?;
        run("chown", &["postgres", &server.dir.display().to_string()])?;
        let data = server.data().display().to_string();
        self.as_postgres(
            None,
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
            ],
        )?;
        let conf = format!(
            "listen_addresses = '*'
port = {PORT}
unix_socket_directories = '{socket}'
max_connections = 120
wal_level = replica
max_wal_senders = 8
wal_keep_size = '1GB'
hot_standby = on
wal_sender_timeout = '5s'
wal_receiver_timeout = '5s'
wal_retrieve_retry_interval = '500ms'
# A process crash keeps the operating system's page cache; only a machine
# crash needs fsync, and this harness kills processes, not machines.
fsync = off
full_page_writes = off
include_if_exists = '{mode}'
",
            socket = server.dir.display(),
            mode = self.mode_conf.display()
        );
        append(&server.data().join("postgresql.conf"), &conf)?;
        append(
            &server.data().join("pg_hba.conf"),
            "host all all 10.77.0.0/24 trust\nhost replication all 10.77.0.0/24 trust\n",
        )?;
        self.start(server)
    }

    /// Replaces `standby`'s data with a base backup of `primary` and starts
    /// it streaming from there.
    pub(crate) fn rebuild_standby(&self, standby: &Server, primary: &Server) -> anyhow::Result<()> {
        let data = standby.data();
        if data.exists() {
            std::fs::remove_dir_all(&data)
                .with_context(|| format!("removing {}", data.display()))?;
        }
        std::fs::create_dir_all(&standby.dir)?;
        run("chown", &["postgres", &standby.dir.display().to_string()])?;
        let from = primary.host.addr.to_string();
        let port = PORT.to_string();
        let data = data.display().to_string();
        self.as_postgres(
            Some(&standby.host.ns),
            "pg_basebackup",
            &[
                "-h",
                &from,
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                &data,
                "-X",
                "stream",
                "-R",
                "--checkpoint=fast",
            ],
        )?;
        append(
            &standby.data().join("postgresql.auto.conf"),
            &format!(
                "primary_conninfo = 'host={from} port={PORT} user=postgres application_name=standby'\n"
            ),
        )?;
        // The base backup copied the primary's socket directory.
        append(
            &standby.data().join("postgresql.conf"),
            &format!("unix_socket_directories = '{}'\n", standby.dir.display()),
        )?;
        self.start(standby)
    }

    /// Starts `server` in its namespace and waits until it accepts connections.
    pub(crate) fn start(&self, server: &Server) -> anyhow::Result<()> {
        let data = server.data().display().to_string();
        let log = server.log().display().to_string();
        self.as_postgres(
            Some(&server.host.ns),
            "pg_ctl",
            &["-D", &data, "-l", &log, "-w", "-t", "120", "start"],
        )
        .with_context(|| format!("starting the server on {}", server.host.name))
    }

    /// kill -9 of the postmaster and of every process it started.
    pub(crate) fn kill9(&self, server: &Server) -> anyhow::Result<()> {
        let Some(pid) = server.postmaster() else {
            return Ok(());
        };
        let children = children_of(pid);
        kill9(pid);
        for child in &children {
            kill9(*child);
        }
        // The server starts again only once every process of the old one
        // (which held its shared memory) is gone.
        until(
            Duration::from_secs(60),
            "the killed server's processes to exit",
            || Ok(!alive(pid) && children.iter().all(|c| !alive(*c))),
        )
    }

    /// Promotes a standby and waits until it accepts writes.
    pub(crate) fn promote(&self, server: &Server) -> anyhow::Result<()> {
        let data = server.data().display().to_string();
        self.as_postgres(None, "pg_ctl", &["-D", &data, "-w", "-t", "60", "promote"])?;
        until(
            Duration::from_secs(60),
            "the promoted server to leave recovery",
            || {
                Ok(server
                    .client()
                    .and_then(|mut c| Ok(c.query_one("SELECT pg_is_in_recovery()", &[])?))
                    .is_ok_and(|row| !row.get::<_, bool>(0)))
            },
        )
    }

    /// Waits until `primary` has a standby streaming from it.
    pub(crate) fn wait_streaming(&self, primary: &Server) -> anyhow::Result<()> {
        until(Duration::from_secs(120), "the standby to stream", || {
            Ok(primary
                .client()
                .and_then(|mut c| {
                    Ok(c.query_one(
                        "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
                        &[],
                    )?)
                })
                .is_ok_and(|row| row.get::<_, i64>(0) > 0))
        })
    }

    /// Sets the replication mode of every server (the file each includes)
    /// and reloads those running.
    pub(crate) fn set_mode(&self, mode: Replication, servers: &[&Server]) -> anyhow::Result<()> {
        let conf = match mode {
            Replication::Async => "synchronous_standby_names = ''\nsynchronous_commit = on\n",
            Replication::Sync => {
                "synchronous_standby_names = '*'\nsynchronous_commit = remote_apply\n"
            }
        };
        std::fs::write(&self.mode_conf, conf)?;
        for server in servers {
            if server.postmaster().is_some_and(alive) {
                let data = server.data().display().to_string();
                self.as_postgres(None, "pg_ctl", &["-D", &data, "reload"])?;
            }
        }
        Ok(())
    }

    /// Stops `server` at once (what a harness does when it is done).
    pub(crate) fn stop(&self, server: &Server) {
        let data = server.data().display().to_string();
        let _ = self.as_postgres(None, "pg_ctl", &["-D", &data, "-m", "immediate", "stop"]);
    }

    /// Runs a PostgreSQL program as the `postgres` user, in `ns` if given.
    fn as_postgres(&self, ns: Option<&str>, program: &str, args: &[&str]) -> anyhow::Result<()> {
        let program = self.bin.join(program).display().to_string();
        let mut all: Vec<&str> = Vec::new();
        if let Some(ns) = ns {
            all.extend(["netns", "exec", ns]);
        }
        all.extend(["runuser", "-u", "postgres", "--", &program]);
        all.extend_from_slice(args);
        if ns.is_some() {
            run("ip", &all)
        } else {
            run(all[0], &all[1..])
        }
    }
}

fn find_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| Some(entry.ok()?.path().join("bin")))
        .filter(|dir| dir.join("pg_ctl").exists() && dir.join("initdb").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn append(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

pub(crate) fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let output = Command::new(program)
        .args(args)
        .current_dir("/tmp")
        .output()
        .with_context(|| format!("running {program}"))?;
    if !output.status.success() {
        bail!(
            "{program} {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout).trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}
