//! The faults, at seeded random times: one at a time, each held for a seeded
//! while and then healed. Each phase first injects every kind once, in a
//! seeded order, then draws kinds at random until its time is up.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use std::net::{SocketAddr, SocketAddrV4};

use crate::cluster::{PORT, Server};
use crate::topology::Direction;
use crate::wait::{now, until};
use crate::worker::wall_ms;
use crate::world::World;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FaultKind {
    /// A worker host cut off from the database, both ways.
    Partition,
    /// A worker host's requests reach the database; the answers do not.
    PartitionOneWay,
    /// Every chunk between workers and database held for tens of ms.
    Delay,
    /// Chunks held for a retransmission timeout, as lost segments are.
    Loss,
    /// Every connection to the database closed at once.
    Reset,
    /// A worker host's clock minutes off.
    ClockOffset,
    /// kill -9 of a worker process, restarted after a while.
    KillWorker,
    /// kill -9 of the primary server, restarted after a while.
    ServerCrash,
    /// The primary killed or partitioned, the standby promoted, the stable
    /// address moved, the old primary rebuilt as the new standby.
    Failover,
}

impl FaultKind {
    pub(crate) const ALL: [FaultKind; 9] = [
        FaultKind::Partition,
        FaultKind::PartitionOneWay,
        FaultKind::Delay,
        FaultKind::Loss,
        FaultKind::Reset,
        FaultKind::ClockOffset,
        FaultKind::KillWorker,
        FaultKind::ServerCrash,
        FaultKind::Failover,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FaultKind::Partition => "partition",
            FaultKind::PartitionOneWay => "partition_one_way",
            FaultKind::Delay => "delay",
            FaultKind::Loss => "loss",
            FaultKind::Reset => "reset",
            FaultKind::ClockOffset => "clock_offset",
            FaultKind::KillWorker => "kill_worker",
            FaultKind::ServerCrash => "server_crash",
            FaultKind::Failover => "failover",
        }
    }

    /// How often a random draw picks this kind, relative to the others.
    fn weight(self) -> u32 {
        match self {
            FaultKind::Partition | FaultKind::PartitionOneWay => 3,
            FaultKind::ServerCrash | FaultKind::Failover => 1,
            _ => 2,
        }
    }
}

/// The schedule and what it injected.
#[derive(Debug)]
pub(crate) struct Faults {
    rng: fastrand::Rng,
    counts: BTreeMap<String, u64>,
    failovers: u64,
    /// After a partition failover, the address moves back to the old
    /// primary for a while (still running, not fenced): connections the
    /// workers tried there, and ledger events it accepted.
    pub(crate) stale_connections: u64,
    pub(crate) stale_writes: u64,
}

impl Faults {
    pub(crate) fn new(seed: u64) -> Faults {
        Faults {
            rng: fastrand::Rng::with_seed(seed),
            counts: BTreeMap::new(),
            failovers: 0,
            stale_connections: 0,
            stale_writes: 0,
        }
    }

    /// How many faults of each kind were injected.
    pub(crate) fn counts(&self) -> BTreeMap<String, u64> {
        self.counts.clone()
    }

    /// Injects faults until every kind ran once and `length` has passed.
    pub(crate) fn run(
        &mut self,
        world: &mut World<'_>,
        start: Instant,
        length: Duration,
    ) -> anyhow::Result<()> {
        let mut first = FaultKind::ALL.to_vec();
        self.rng.shuffle(&mut first);
        let mut first = first.into_iter();
        loop {
            let kind = match first.next() {
                Some(kind) => kind,
                None if start.elapsed() >= length => return Ok(()),
                None => self.draw(),
            };
            std::thread::sleep(self.millis(500, 2000));
            let detail = self
                .inject(world, kind)
                .with_context(|| format!("injecting a {} fault", kind.as_str()))?;
            *self.counts.entry(kind.as_str().to_owned()).or_default() += 1;
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(world.phase_dir().join("faults.jsonl"))?;
            writeln!(
                log,
                "{}",
                json!({"at_ms": wall_ms(), "kind": kind.as_str(), "detail": detail})
            )?;
        }
    }

    fn draw(&mut self) -> FaultKind {
        let total: u32 = FaultKind::ALL.iter().map(|k| k.weight()).sum();
        let mut pick = self.rng.u32(0..total);
        for kind in FaultKind::ALL {
            if pick < kind.weight() {
                return kind;
            }
            pick -= kind.weight();
        }
        FaultKind::Partition
    }

    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(self.rng.u64(low..high))
    }

    /// Injects one fault, holds it, heals it; says what it did.
    fn inject(&mut self, world: &mut World<'_>, kind: FaultKind) -> anyhow::Result<String> {
        let hold = self.millis(1000, 4000);
        let worker = self.rng.usize(0..world.workers.len());
        let host = world.workers[worker].clone();
        let detail = match kind {
            FaultKind::Partition | FaultKind::PartitionOneWay => {
                let direction = if kind == FaultKind::Partition {
                    Direction::Both
                } else {
                    Direction::Inbound
                };
                world
                    .network
                    .partition(&host, world.proxy_host.addr, direction)?;
                std::thread::sleep(hold);
                world.network.heal(&host)?;
                format!("{} for {hold:?}", host.name)
            }
            FaultKind::Delay => {
                let ms = self.rng.u64(20..150);
                world.proxy.set_delay(ms);
                std::thread::sleep(hold);
                world.proxy.set_delay(0);
                format!("{ms} ms for {hold:?}")
            }
            FaultKind::Loss => {
                let permille = self.rng.u64(50..250);
                world.proxy.set_loss(permille);
                std::thread::sleep(hold);
                world.proxy.set_loss(0);
                format!("{permille}/1000 chunks for {hold:?}")
            }
            FaultKind::Reset => format!("{} connections", world.proxy.reset_all()),
            FaultKind::ClockOffset => {
                let minutes = self.rng.i64(1..15);
                let offset = if self.rng.bool() { minutes } else { -minutes } * 60_000;
                let file = world.clock_file(&host);
                std::fs::write(&file, offset.to_string())?;
                std::thread::sleep(hold * 2);
                std::fs::write(&file, "0")?;
                format!("{} by {offset} ms for {:?}", host.name, hold * 2)
            }
            FaultKind::KillWorker => {
                world.kill_worker(worker)?;
                std::thread::sleep(hold / 2);
                world.spawn_worker(worker)?;
                format!("{} down for {:?}", host.name, hold / 2)
            }
            FaultKind::ServerCrash => {
                world.postgres.kill9(&world.db[0])?;
                std::thread::sleep(hold / 2);
                world.postgres.start(&world.db[0])?;
                format!("{} down for {:?}", world.db[0].host.name, hold / 2)
            }
            FaultKind::Failover => self.failover(world)?,
        };
        Ok(detail)
    }

    /// Fails over to the standby: alternately by a partition that first
    /// cuts the primary from its standby (while workers still commit on it)
    /// and then from everyone, and by a crash of the primary.
    fn failover(&mut self, world: &mut World<'_>) -> anyhow::Result<String> {
        let started = now();
        let by_partition = self.failovers.is_multiple_of(2);
        self.failovers += 1;
        let (old, new) = (world.db[0].clone(), world.db[1].clone());
        if by_partition {
            world
                .network
                .partition(&old.host, new.host.addr, Direction::Both)?;
            std::thread::sleep(self.millis(1000, 2500));
            world
                .network
                .partition(&old.host, world.proxy_host.addr, Direction::Both)?;
        } else {
            world.postgres.kill9(&old)?;
        }
        world.postgres.promote(&new)?;
        world.db.swap(0, 1);
        world.point_proxy_at_primary();
        let switched = started.elapsed();
        let mut flap = String::new();
        if by_partition {
            flap = self.flap(world, &old)?;
        }
        // The old primary comes back as the new standby, from a fresh copy.
        world.postgres.kill9(&old)?;
        world.network.heal(&old.host)?;
        world.postgres.rebuild_standby(&world.db[1], &world.db[0])?;
        world.postgres.wait_streaming(&world.db[0])?;
        Ok(format!(
            "{} -> {} by {}, address moved after {switched:?}, standby back after {:?}{flap}",
            old.host.name,
            new.host.name,
            if by_partition { "partition" } else { "crash" },
            started.elapsed()
        ))
    }

    /// Moves the address back to the old primary, unfenced, for a while,
    /// once the workers have connected to the promoted server: their ledgers
    /// have seen its later timeline and must refuse the old one.
    fn flap(&mut self, world: &mut World<'_>, old: &Server) -> anyhow::Result<String> {
        // Every worker process connected to the promoted server first (a
        // process that never did cannot know of it); each names itself.
        let names: Vec<String> = world.workers.iter().map(|h| h.name.clone()).collect();
        until(
            Duration::from_secs(60),
            "every worker to connect to the promoted server",
            || {
                let row = world.db[0].client()?.query_one(
                    "SELECT count(DISTINCT application_name) FROM pg_stat_activity \
                     WHERE application_name = ANY($1)",
                    &[&names],
                )?;
                Ok(row.get::<_, i64>(0) == names.len() as i64)
            },
        )?;
        // The old primary's sessions from before the failover end first:
        // a statement sent before the partition may otherwise commit there
        // once its lock is released, which no check on a new connection sees.
        old.client()?.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
            &[],
        )?;
        let events = |server: &Server| -> anyhow::Result<i64> {
            let query = format!("SELECT count(*) FROM \"{}\".effect_events", world.schema);
            Ok(server.client()?.query_one(query.as_str(), &[])?.get(0))
        };
        let before = events(old)?;
        let connections = world.proxy.connections();
        world.network.heal(&old.host)?;
        world
            .proxy
            .switch(SocketAddr::V4(SocketAddrV4::new(old.host.addr, PORT)));
        let hold = self.millis(1500, 3000);
        std::thread::sleep(hold);
        world.point_proxy_at_primary();
        let tried = world.proxy.connections() - connections;
        let accepted = u64::try_from(events(old)? - before).unwrap_or(0);
        self.stale_connections += tried;
        self.stale_writes += accepted;
        Ok(format!(
            "; address back on the old primary for {hold:?}: {tried} connections, {accepted} events written there"
        ))
    }
}
