//! Everything a phase of `effect-multihost run` drives: the hosts, the two
//! servers, the fault proxy and the worker process of each worker host.

use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail};
use effect_ledger_postgres::{PostgresLedger, PostgresOptions, SslMode};

use crate::cluster::{PORT, Postgres, Server};
use crate::process;
use crate::proxy::FaultProxy;
use crate::topology::{Host, Network};
use crate::worker::wall_ms;

/// Everything a phase drives.
pub(crate) struct World<'a> {
    pub(crate) network: &'a Network,
    pub(crate) postgres: &'a Postgres,
    /// `db[0]` is the primary, `db[1]` the standby.
    pub(crate) db: &'a mut [Server; 2],
    pub(crate) proxy: &'a FaultProxy,
    pub(crate) proxy_host: &'a Host,
    pub(crate) workers: &'a [Host],
    pub(crate) dir: PathBuf,
    pub(crate) schema: String,
    pub(crate) stable: SocketAddr,
    pub(crate) seed: u64,
    pub(crate) threads: usize,
    pub(crate) epoch_ms: u64,
    /// The worker process of each worker host.
    pub(crate) running: Vec<Option<Child>>,
}

impl World<'_> {
    pub(crate) fn stop_file(&self) -> PathBuf {
        self.dir.join("stop")
    }

    pub(crate) fn provider_file(&self) -> PathBuf {
        self.dir.join("provider.jsonl")
    }

    pub(crate) fn clock_file(&self, host: &Host) -> PathBuf {
        self.dir.join(format!("clock-{}", host.name))
    }

    /// The ledger's URL for a worker on `host`, which names itself to the server.
    fn url(&self, host: &Host) -> String {
        format!(
            "postgres://postgres@{}/postgres?sslmode=disable&application_name={}",
            self.stable, host.name
        )
    }

    fn worker_command(&self, host: &Host, seed: u64) -> anyhow::Result<Command> {
        let exe = std::env::current_exe().context("finding this binary")?;
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &host.ns])
            .arg(exe)
            .arg("worker")
            .args(["--url", &self.url(host), "--schema", &self.schema])
            .arg("--provider")
            .arg(self.provider_file())
            .arg("--dir")
            .arg(&self.dir)
            .args(["--name", &host.name])
            .args(["--seed", &seed.to_string()])
            .args(["--threads", &self.threads.to_string()])
            .arg("--stop-file")
            .arg(self.stop_file())
            .arg("--clock-file")
            .arg(self.clock_file(host))
            .args(["--epoch-ms", &self.epoch_ms.to_string()]);
        Ok(command)
    }

    /// Starts worker host `index`'s process (again, after a kill).
    pub(crate) fn spawn_worker(&mut self, index: usize) -> anyhow::Result<()> {
        let host = &self.workers[index];
        let seed = self
            .seed
            .wrapping_mul(7919)
            .wrapping_add(index as u64)
            .wrapping_add(wall_ms());
        let log = self.dir.join(format!("worker-{}.log", host.name));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let child = self
            .worker_command(host, seed)?
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting a worker")?;
        self.running[index] = Some(child);
        Ok(())
    }

    /// kill -9 of worker host `index`'s process.
    pub(crate) fn kill_worker(&mut self, index: usize) -> anyhow::Result<()> {
        if let Some(mut child) = self.running[index].take() {
            process::kill9(i32::try_from(child.id())?);
            child.wait()?;
        }
        Ok(())
    }

    /// Runs recovery from the first worker host until nothing is unsettled.
    pub(crate) fn settle(&self) -> anyhow::Result<()> {
        let host = &self.workers[0];
        let output = self
            .worker_command(host, self.seed)?
            .arg("--settle")
            .args(["--provider-faults", "0"])
            .stdin(Stdio::null())
            .output()
            .context("running the settling worker")?;
        if !output.status.success() {
            bail!(
                "recovery did not settle every operation: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }

    /// The ledger on the current primary, over its Unix socket.
    pub(crate) fn checker_ledger(&self) -> anyhow::Result<PostgresLedger> {
        let url = format!(
            "host={} port={PORT} user=postgres dbname=postgres",
            self.db[0].dir.display()
        );
        let options = PostgresOptions::default()
            .schema(self.schema.clone())
            .migrate(false)
            .ssl_mode(SslMode::Disable);
        PostgresLedger::connect(&url, options).context("opening the ledger to check it")
    }

    /// The stable address's proxy now points at `db[0]`.
    pub(crate) fn point_proxy_at_primary(&self) {
        self.proxy.switch(SocketAddr::V4(SocketAddrV4::new(
            self.db[0].host.addr,
            PORT,
        )));
    }

    pub(crate) fn phase_dir(&self) -> &Path {
        &self.dir
    }
}
