//! `effect-bench`: the benchmark workloads of docs/benchmarks.md.
//!
//! It prints one JSON object per workload on stdout (JSON Lines): W0, W0n and
//! W0r measure bare SQLite (the same library the ledger links, with nothing
//! of the ledger around it), W1 to W7 measure the executor and the ledger,
//! W8 maintenance (stats, the queue listing, prune beside a writer) on a
//! large ledger, W9 the operator console's pages (agent-effect-ops serve) on
//! a large ledger.
//! A workload whose correctness condition fails prints `"ok":false` and no
//! figure. `--check` adds one line comparing the figures with the targets of
//! docs/benchmarks.md#targets.
//!
//! ```text
//! cargo run --release -p effect-bench -- [--quick] [--workload W4] [--db PATH|sqlite|postgres://…] [--runs N] [--check] [--otel]
//! ```
//!
//! W4 runs in a child process of its own (so its peak RSS is its own), and W7
//! in four; both re-execute this binary with the hidden `worker` subcommand.
//!
//! It depends on every crate it measures (effect-core, effect-exec, both
//! stores, agent-effect-ops's console) and on rusqlite for the bare limits;
//! nothing depends on it.
//!
//! # Feature flags
//!
//! - `postgres` (default): `--db postgres://…`.

// Measuring real elapsed time is what a benchmark is for.
#![allow(clippy::disallowed_methods)]

mod check;
mod console;
mod effects;
mod limits;
mod maintenance;
mod otel;
mod report;
mod rng;
mod scan;
mod store;
mod worker;
mod workload;

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

use crate::report::Line;
use crate::store::{Store, Tuning};
use crate::workload::Workload;

/// Runs the benchmark workloads and prints one JSON line per workload.
#[derive(Debug, Parser)]
#[command(name = "effect-bench", version, about)]
struct Cli {
    /// Small sizes, for a correctness run in seconds (figures are meaningless).
    #[arg(long)]
    quick: bool,
    /// Only these workloads (repeat or separate with commas): W0, W0n, W0r, W1 … W9, W1d, W1i, W4d.
    #[arg(long = "workload", value_delimiter = ',')]
    workloads: Vec<Workload>,
    /// The ledger store, as every binary names one: a directory path (a
    /// fresh SQLite file per workload, in a temporary directory made there;
    /// `sqlite` is the system's temporary directory) or a `postgres://…` URL
    /// (a fresh schema per workload, dropped afterwards). `--store` is the
    /// earlier name of the flag.
    #[arg(
        long = "db",
        alias = "store",
        value_name = "PATH|sqlite|URL",
        default_value = "sqlite"
    )]
    store: String,
    /// Runs every workload this many times and reports the medians.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Adds a line comparing the figures with the targets.
    #[arg(long)]
    check: bool,
    /// SQLite: one transaction per transition (to measure what group commit is worth).
    #[arg(long)]
    no_group_commit: bool,
    /// SQLite: no in-memory copy of confirmed records (to measure what it is worth).
    #[arg(long)]
    no_confirmed_cache: bool,
    /// Records every execution with effect-otel's observer, spans and
    /// metrics discarded by the exporters (to measure what it costs; the
    /// child processes of W4 and W7 record with it too).
    #[arg(long)]
    otel: bool,
    /// W8: the number of operations the ledger is filled with (default
    /// 1,000,000; 3,000 with --quick).
    #[arg(long, value_name = "N")]
    maintenance_size: Option<u64>,
    /// W8: fill the ledger and time the reads only (`stats`, the queue
    /// listings), without the writer and the prunes: for the largest
    /// ledgers.
    #[arg(long)]
    maintenance_reads_only: bool,
    /// W8: how many effects time the writer alone (default 2,000; 20 with
    /// --quick). More make its p99 cover as long a stretch of the server's
    /// background work as the prune beside it does.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    maintenance_writer_effects: Option<u64>,
    /// W8: prune only the oldest N confirmed operations alone and the next
    /// N beside the writer (at most half of --maintenance-size) instead of
    /// the older half alone and the rest beside it: on the largest ledgers
    /// a run then takes minutes instead of an hour, the ledger as large.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    maintenance_prune: Option<u64>,
    /// W9: the number of operations the console's ledger is filled with
    /// (default 1,000,000; 2,000 with --quick).
    #[arg(long, value_name = "N")]
    console_size: Option<u64>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One process of W4 or W7 (started by the benchmark itself).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

/// The sizes of one run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizes {
    pub(crate) w0: u64,
    pub(crate) w0n: u64,
    pub(crate) w0r: u64,
    pub(crate) fresh: u64,
    pub(crate) concurrent: u64,
    pub(crate) threads: usize,
    pub(crate) contention_ids: u64,
    pub(crate) scan_large: u64,
    pub(crate) scan_small: u64,
    pub(crate) processes: usize,
    pub(crate) multi_ids: u64,
    pub(crate) maintenance: u64,
    pub(crate) writer_effects: u64,
    /// W8: operations pruned alone, and as many beside the writer (`None`:
    /// the older half, then the rest).
    pub(crate) maintenance_prune: Option<u64>,
    pub(crate) console: u64,
}

impl Sizes {
    const FULL: Sizes = Sizes {
        w0: 2000,
        w0n: 20_000,
        w0r: 20_000,
        fresh: 2000,
        concurrent: 4000,
        threads: 16,
        contention_ids: 200,
        scan_large: 100_000,
        scan_small: 1000,
        processes: 4,
        multi_ids: 500,
        maintenance: 1_000_000,
        writer_effects: 2_000,
        maintenance_prune: None,
        console: 1_000_000,
    };

    const QUICK: Sizes = Sizes {
        w0: 40,
        w0n: 200,
        w0r: 200,
        fresh: 20,
        concurrent: 64,
        threads: 16,
        contention_ids: 20,
        scan_large: 2000,
        scan_small: 200,
        processes: 4,
        multi_ids: 20,
        maintenance: 3000,
        writer_effects: 20,
        maintenance_prune: None,
        console: 2000,
    };
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("effect-bench: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Some(Command::Worker(args)) = cli.command {
        let _otel = if otel::wanted_by_parent() {
            Some(otel::install()?)
        } else {
            None
        };
        worker::run(&args)?;
        return Ok(ExitCode::SUCCESS);
    }
    let _otel = if cli.otel {
        Some(otel::install()?)
    } else {
        None
    };
    let tuning = Tuning {
        group_commit: !cli.no_group_commit,
        confirmed_cache: !cli.no_confirmed_cache,
    };
    let store = Store::parse(&cli.store, tuning)?;
    let mut sizes = if cli.quick { Sizes::QUICK } else { Sizes::FULL };
    if let Some(n) = cli.maintenance_writer_effects {
        sizes.writer_effects = n;
    }
    if let Some(prune) = cli.maintenance_prune {
        let size = cli.maintenance_size.unwrap_or(sizes.maintenance);
        if prune > size / 2 {
            bail!(
                "--maintenance-prune {prune} is more than half of the ledger's {size} operations \
                 (W8 prunes that many alone, then as many beside the writer): \
                 pass at most {} or a larger --maintenance-size",
                size / 2
            );
        }
        sizes.maintenance_prune = Some(prune);
    }
    let mut selected = if cli.workloads.is_empty() {
        Workload::ALL.to_vec()
    } else {
        cli.workloads.clone()
    };
    selected.sort();
    selected.dedup();
    if store.is_postgres() {
        let skipped: Vec<&str> = selected
            .iter()
            .filter(|w| !w.runs_on_postgres())
            .map(|w| w.id())
            .collect();
        if !skipped.is_empty() {
            eprintln!(
                "effect-bench: {} run on sqlite only; skipped for a postgres store",
                skipped.join(", ")
            );
        }
        selected.retain(|w| w.runs_on_postgres());
    }
    if selected.is_empty() {
        bail!("no workload to run");
    }

    let mut runs: Vec<Vec<Line>> = Vec::new();
    for run in 0..cli.runs {
        let lines = run_once(
            &store,
            &sizes,
            &selected,
            cli.maintenance_size,
            cli.maintenance_reads_only,
            cli.console_size,
        );
        if cli.runs > 1 {
            for line in &lines {
                eprintln!("run {}: {}", run + 1, line.to_json());
            }
        }
        runs.push(lines);
    }
    let lines = report::medians(&runs);
    let mut out = std::io::stdout().lock();
    for line in &lines {
        writeln!(out, "{}", line.to_json()).context("writing to stdout")?;
    }
    if cli.check {
        writeln!(out, "{}", check::summary(&lines, &runs, &store)).context("writing to stdout")?;
    }
    out.flush().context("writing to stdout")?;
    Ok(if lines.iter().all(|l| l.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Runs the selected workloads once, in order.
fn run_once(
    store: &Store,
    sizes: &Sizes,
    selected: &[Workload],
    maintenance_size: Option<u64>,
    maintenance_reads_only: bool,
    console_size: Option<u64>,
) -> Vec<Line> {
    let wants = |w: Workload| selected.contains(&w);
    let mut lines = Vec::new();
    for &workload in selected {
        match workload {
            Workload::W0 => lines.push(limits::commit_limit(store, sizes.w0)),
            Workload::W0n => {
                lines.push(limits::commits(workload, sizes.w0n, limits::Sync::Normal));
            }
            Workload::W0r => lines.push(limits::reads(sizes.w0r)),
            // W3 replays W1's operations on W1's ledger, so they run together.
            Workload::W1 => lines.extend(effects::fresh_and_replay(
                store,
                sizes.fresh,
                effects::Synchronous::Full,
                wants(Workload::W1),
                wants(Workload::W3),
            )),
            Workload::W3 if !wants(Workload::W1) => lines.extend(effects::fresh_and_replay(
                store,
                sizes.fresh,
                effects::Synchronous::Full,
                false,
                true,
            )),
            Workload::W3 => {}
            Workload::W2 => lines.extend(effects::fresh_and_replay(
                store,
                sizes.fresh,
                effects::Synchronous::Normal,
                true,
                false,
            )),
            Workload::W1d => lines.push(effects::fresh_deferred(store, sizes.fresh)),
            Workload::W1i => lines.push(effects::fresh_intent(store, sizes.fresh)),
            Workload::W4 => lines.push(worker::concurrent_in_child(
                store,
                sizes.concurrent,
                sizes.threads,
            )),
            Workload::W4d => lines.push(worker::concurrent_deferred_in_child(
                store,
                sizes.concurrent,
                sizes.threads,
            )),
            Workload::W5 => lines.push(effects::contention(
                store,
                sizes.contention_ids,
                sizes.threads,
            )),
            Workload::W6 => lines.push(scan::scan(sizes.scan_large, sizes.scan_small)),
            Workload::W7 => lines.push(worker::multi_process(
                store,
                sizes.multi_ids,
                sizes.processes,
            )),
            Workload::W8 => lines.push(maintenance::maintenance(
                store,
                maintenance_size.unwrap_or(sizes.maintenance),
                sizes.writer_effects,
                sizes.maintenance_prune,
                maintenance_reads_only,
            )),
            Workload::W9 => lines.push(console::console(console_size.unwrap_or(sizes.console))),
        }
    }
    lines.sort_by_key(|line| line.workload);
    lines
}
