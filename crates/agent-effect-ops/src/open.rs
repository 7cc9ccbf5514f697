//! Opening the ledger file without ever creating or silently migrating one.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use effect_core::Clock;
use effect_ledger_sqlite::{SqliteError, SqliteLedger, SqliteOptions};

use crate::error::InputError;

/// Opens the ledger at `path` for reading.
///
/// The file must exist and not be empty: a ledger that is created on the spot
/// would make every operation look unknown. Without `migrate` the file is opened read-only, which
/// proves it is a ledger this version can read, without writing to it. With
/// `migrate` it is opened read-write, which migrates an older schema in place as
/// an agent process would.
pub fn open(path: &Path, migrate: bool, clock: Arc<dyn Clock>) -> anyhow::Result<SqliteLedger> {
    match std::fs::metadata(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(InputError::MissingLedger {
                path: path.to_owned(),
            }
            .into());
        }
        Err(err) => {
            return Err(err).with_context(|| format!("cannot read ledger file {path:?}"));
        }
        // SQLite would turn an empty file into a new database, even with --migrate.
        Ok(metadata) if metadata.is_file() && metadata.len() == 0 => {
            return Err(InputError::EmptyLedger {
                path: path.to_owned(),
            }
            .into());
        }
        Ok(_) => {}
    }
    let options = SqliteOptions::default().clock(clock);
    if migrate {
        return Ok(SqliteLedger::open(path, options)?);
    }
    SqliteLedger::open(path, options.read_only(true)).map_err(|err| match err {
        SqliteError::NeedsMigration { path, found, .. } => {
            anyhow::Error::from(InputError::NeedsMigration { path, found })
        }
        other => anyhow::Error::from(other),
    })
}

/// Reopens a ledger that [`open`] has already checked, for writing. Like any
/// agent process, this applies the store's pending forward-only migrations
/// (indexes) and switches the file to WAL mode.
pub fn open_writable(ledger: &SqliteLedger, clock: Arc<dyn Clock>) -> anyhow::Result<SqliteLedger> {
    Ok(SqliteLedger::open(
        ledger.path(),
        SqliteOptions::default().clock(clock),
    )?)
}
