//! The entry point of every command (`run`): `serve` starts the console;
//! any other command is checked, opens the ledger and runs through
//! `execute.rs`. Each writes its report to an injected writer, so tests
//! snapshot output without a process.

use std::io::Write;
use std::sync::Arc;

use effect_core::Clock;

use crate::cli::{Cli, Command};
use crate::error::InputError;
use crate::execute::{Checked, execute};
use crate::open::open;

/// Runs one command against the ledger named by `cli.db`, printing to `out`.
///
/// `clock` stamps manual resolutions and measures the age in `stats`; the
/// binary passes [`SystemClock`](effect_core::SystemClock).
///
/// # Errors
///
/// Any failure, classified for the exit code by [`Exit::of`](crate::Exit::of).
pub fn run(cli: &Cli, clock: Arc<dyn Clock>, out: &mut dyn Write) -> anyhow::Result<()> {
    let db = cli.db.as_ref();
    if let Command::Serve(args) = &cli.command {
        let db = db.ok_or(InputError::MissingDb)?;
        return crate::console::serve(db, cli.migrate, args, clock, out);
    }
    // Check input before the ledger is opened: a refused command touches nothing.
    let checked = Checked::of(&cli.command, clock.as_ref())?;
    let db = db.ok_or(InputError::MissingDb)?;
    let opened = open(db, cli.migrate, cli.create, Arc::clone(&clock))?;
    execute(&opened, &cli.command, cli.format, &checked, clock, out)
}
