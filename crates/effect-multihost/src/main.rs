//! `effect-multihost`: the PostgreSQL ledger on several hosts, tested the
//! way Jepsen tests databases.
//!
//! `effect-multihost run` (as root) makes hosts of network namespaces joined
//! by veth pairs to a bridge: a PostgreSQL primary, a streaming standby, a
//! fault proxy holding the database's stable address, and two or three
//! worker hosts, each running this binary's `worker` subcommand (caller
//! threads and a `RecoveryWorker` on a `PostgresLedger`, against a fake
//! payment provider in a shared file). It injects partitions, delay, loss,
//! connection resets, clock offsets, kill -9 of workers and of the server,
//! and failovers at seeded times, records every call as a history, lets
//! recovery settle every operation once the faults stop, and checks the
//! history: at most one committed effect per operation, every confirmation
//! still confirmed with its output, nothing left unsettled, no budget
//! exceeded. `cargo xtask multihost` runs it; docs/production.md holds the
//! numbers.
//!
//! It depends on the library crates it tests (effect-core, effect-exec,
//! effect-ledger-postgres) and on no other workspace crate; nothing depends
//! on it.

mod checker;
mod cluster;
mod faults;
mod harness;
mod history;
mod process;
mod provider;
mod proxy;
mod topology;
mod wait;
mod worker;
mod world;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "effect-multihost",
    about = "Several hosts, real network faults and a failover, against the PostgreSQL ledger"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the hosts, the faults and the checker (needs root).
    Run(harness::RunArgs),
    /// One worker host's process (started by `run`).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Run(args) => harness::run(args),
        Command::Worker(args) => worker::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("effect-multihost: {err:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    #[test]
    fn cli_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
