//! `effect-multihost run`: builds the hosts, runs each replication mode as a
//! phase of workers under seeded faults, stops the faults, lets recovery
//! settle every operation, and checks the history.

use std::collections::BTreeMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;
use serde_json::json;

use crate::checker::{self, Findings};
use crate::cluster::{PORT, Postgres, Replication, Server};
use crate::faults::{FaultKind, Faults};
use crate::history;
use crate::process;
use crate::provider;
use crate::proxy::FaultProxy;
use crate::topology::{Host, Network};
use crate::wait::{now, until};
use crate::worker::wall_ms;
use crate::world::World;

/// Arguments of `effect-multihost run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// How long the faults run, over all phases (`90s`, `30m`, `1h`).
    #[arg(long, value_parser = parse_duration, default_value = "2m")]
    duration: Duration,
    /// The seed of every fault time, fault choice and worker's picks.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The replication modes to run, one phase each.
    #[arg(long, value_delimiter = ',', default_value = "async,sync")]
    modes: Vec<Replication>,
    /// Worker hosts (1 to 3).
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Caller threads per worker process.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Where to keep the servers, histories and the report (default: a new
    /// directory under /tmp).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Fail unless each phase ran at least this many calls.
    #[arg(long, default_value_t = 1)]
    min_calls: u64,
}

/// What a run writes to `report.json`.
#[derive(Debug, Serialize)]
struct Report {
    seed: u64,
    duration_s: u64,
    phases: Vec<Phase>,
}

#[derive(Debug, Serialize)]
struct Phase {
    mode: Replication,
    faults: BTreeMap<String, u64>,
    proxy_connections: u64,
    /// Connections the workers tried while the address pointed back at an
    /// old primary, and the ledger events it accepted (must be none).
    stale_primary_connections: u64,
    stale_primary_writes: u64,
    findings: Findings,
}

/// The addresses of the hosts.
const PROXY: (&str, u8) = ("proxy", 2);
const DB: [(&str, u8); 2] = [("db1", 11), ("db2", 12)];
const WORKERS: [(&str, u8); 3] = [("w1", 21), ("w2", 22), ("w3", 23)];

/// `effect-multihost run`.
pub(crate) fn run(args: &RunArgs) -> anyhow::Result<()> {
    if !rustix::process::geteuid().is_root() {
        bail!("effect-multihost run needs root (network namespaces, iptables)");
    }
    if args.workers == 0 || args.workers > WORKERS.len() || args.modes.is_empty() {
        bail!("between 1 and 3 workers, and at least one mode");
    }
    let out = match &args.out {
        Some(out) => out.clone(),
        None => PathBuf::from(format!("/tmp/effect-multihost-{}", std::process::id())),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut hosts = vec![PROXY, DB[0], DB[1]];
    hosts.extend_from_slice(&WORKERS[..args.workers]);
    let network = Network::create(&hosts)?;
    let postgres = Postgres::new(&out)?;
    let mut db = [
        Server {
            host: network.host("db1")?.clone(),
            dir: out.join("db1"),
        },
        Server {
            host: network.host("db2")?.clone(),
            dir: out.join("db2"),
        },
    ];
    let result = (|| {
        postgres.init_primary(&db[0])?;
        postgres.rebuild_standby(&db[1], &db[0])?;
        postgres.wait_streaming(&db[0])?;
        let proxy_host = network.host("proxy")?.clone();
        let stable = SocketAddr::V4(SocketAddrV4::new(proxy_host.addr, PORT));
        let proxy = FaultProxy::start(
            &proxy_host.ns,
            stable,
            SocketAddr::V4(SocketAddrV4::new(db[0].host.addr, PORT)),
            args.seed,
        )?;
        let workers: Vec<Host> = WORKERS[..args.workers]
            .iter()
            .map(|(name, _)| network.host(name).cloned())
            .collect::<anyhow::Result<_>>()?;
        let per_phase = args.duration / u32::try_from(args.modes.len())?;
        let mut phases = Vec::new();
        for (index, &mode) in args.modes.iter().enumerate() {
            let mut world = World {
                network: &network,
                postgres: &postgres,
                db: &mut db,
                proxy: &proxy,
                proxy_host: &proxy_host,
                workers: &workers,
                dir: out.join(mode.as_str()),
                schema: format!("ledger_{}", mode.as_str()),
                stable,
                seed: args.seed.wrapping_add(index as u64 * 1_000_003),
                threads: args.threads,
                epoch_ms: wall_ms(),
                running: Vec::new(),
            };
            let phase = world.phase(mode, per_phase)?;
            print_phase(&phase);
            phases.push(phase);
        }
        Ok::<_, anyhow::Error>(phases)
    })();
    for server in &db {
        postgres.stop(server);
    }
    drop(network);
    let phases = result?;
    let report = Report {
        seed: args.seed,
        duration_s: args.duration.as_secs(),
        phases,
    };
    let path = out.join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("report: {}", path.display());
    judge(&report, args.min_calls)
}

/// Fails the run on a violation the mode must not have, or on a phase that
/// could have passed without exercising anything.
fn judge(report: &Report, min_calls: u64) -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for phase in &report.phases {
        let mode = phase.mode.as_str();
        let v = &phase.findings.violations;
        let forbidden = match phase.mode {
            Replication::Sync => v.total(),
            Replication::Async => v.always(),
        };
        if forbidden > 0 {
            problems.push(format!("{mode}: {forbidden} violations ({v:?})"));
        }
        if phase.stale_primary_writes > 0 {
            problems.push(format!(
                "{mode}: the old primary accepted {} ledger events after the failover",
                phase.stale_primary_writes
            ));
        }
        if phase.faults.contains_key("failover") && phase.stale_primary_connections == 0 {
            problems.push(format!(
                "{mode}: no worker tried the old primary while the address pointed at it"
            ));
        }
        for kind in FaultKind::ALL {
            if phase.faults.get(kind.as_str()).copied().unwrap_or(0) == 0 {
                problems.push(format!("{mode}: no {} fault was injected", kind.as_str()));
            }
        }
        if phase.findings.calls < min_calls {
            problems.push(format!(
                "{mode}: only {} calls (at least {min_calls} expected)",
                phase.findings.calls
            ));
        }
        if phase.findings.ok == 0 || phase.findings.committed == 0 {
            problems.push(format!("{mode}: nothing was confirmed"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        bail!("{}", problems.join("; "))
    }
}

fn print_phase(phase: &Phase) {
    let f = &phase.findings;
    println!(
        "{}",
        json!({
            "mode": phase.mode,
            "faults": phase.faults,
            "stale_primary_connections": phase.stale_primary_connections,
            "stale_primary_writes": phase.stale_primary_writes,
            "calls": f.calls, "ok": f.ok, "fail": f.fail, "info": f.info, "unfinished": f.unfinished,
            "operations": f.operations, "committed": f.committed,
            "second_dispatches": f.second_dispatches,
            "lost_confirmation_operations": f.lost_confirmation_operations,
            "regressions_seen_by_workers": f.regressions_seen_by_workers,
            "refused_by_budget": f.refused_by_budget,
            "quarantined_with_effect": f.quarantined_with_effect,
            "violations": f.violations,
        })
    );
    for (what, examples) in &f.examples {
        for example in examples {
            println!("  {what}: {example}");
        }
    }
}

impl World<'_> {
    fn phase(&mut self, mode: Replication, length: Duration) -> anyhow::Result<Phase> {
        std::fs::create_dir_all(&self.dir)?;
        self.postgres.set_mode(mode, &[&self.db[0], &self.db[1]])?;
        self.postgres.wait_streaming(&self.db[0])?;
        let connections_before = self.proxy.connections();
        self.running = (0..self.workers.len()).map(|_| None).collect();
        for index in 0..self.workers.len() {
            self.spawn_worker(index)?;
        }
        let mut faults = Faults::new(self.seed);
        let start = now();
        faults.run(self, start, length)?;
        // Faults stop: every link heals, every clock is right again.
        self.network.heal_all()?;
        self.proxy.set_delay(0);
        self.proxy.set_loss(0);
        for host in self.workers {
            std::fs::write(self.clock_file(host), "0")?;
        }
        std::fs::write(self.stop_file(), "stop")?;
        for index in 0..self.workers.len() {
            if let Some(mut child) = self.running[index].take() {
                let pid = i32::try_from(child.id())?;
                if until(Duration::from_secs(90), "a worker to stop", || {
                    Ok(child.try_wait()?.is_some())
                })
                .is_err()
                {
                    process::kill9(pid);
                    let _ = child.wait();
                }
            }
        }
        self.settle()?;
        let ledger = self.checker_ledger()?;
        let events = history::read_dir(&self.dir)?;
        let deliveries = provider::read_all(&self.provider_file())?;
        let findings = checker::check(&events, &deliveries, &ledger)?;
        Ok(Phase {
            mode,
            faults: faults.counts(),
            stale_primary_connections: faults.stale_connections,
            stale_primary_writes: faults.stale_writes,
            proxy_connections: self.proxy.connections() - connections_before,
            findings,
        })
    }
}

/// `90s`, `2m`, `30m`, `1h`, or plain seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, ""), |at| text.split_at(at));
    let number: u64 = number
        .parse()
        .map_err(|_| format!("not a duration: {text:?}"))?;
    let seconds = match unit {
        "" | "s" => number,
        "m" => number * 60,
        "h" => number * 3600,
        _ => return Err(format!("unknown unit in {text:?} (s, m or h)")),
    };
    Ok(Duration::from_secs(seconds))
}
