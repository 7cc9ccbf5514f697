//! Opening a SQLite file: made a ledger only when the options allow it,
//! migrated only when it already is one.

use std::path::Path;
use std::sync::Arc;

use effect_ledger_sqlite::{SqliteError, SqliteLedger};

use super::{Ledger, NotALedger, OpenError, OpenOptions};

/// Opens the file at `path` as `options` say (see [`OpenOptions::create`]).
pub(super) fn open(path: &Path, options: OpenOptions) -> Result<Ledger, OpenError> {
    let location = format!("{path:?}");
    let (may_create, strict) = options.creation();
    if let Some(reason) = absent(path) {
        if !may_create {
            return Err(OpenError::NotALedger {
                location,
                reason,
                source: None,
            });
        }
        // A new ledger, at the current schema version.
        let made = SqliteLedger::open(path, options.sqlite.clone().read_only(false).migrate(true))
            .map_err(|err| classified(&location, err))?;
        if !options.read_only {
            return Ok(Ledger::Sqlite(Arc::new(made)));
        }
        drop(made);
    } else if strict && options.migrate && !options.read_only {
        // A migration runs only on a ledger: a read-only look first, so a
        // database without the ledger's tables is refused, not made one.
        match SqliteLedger::open(path, options.sqlite.clone().read_only(true)) {
            Ok(_) | Err(SqliteError::NeedsMigration { .. }) => {}
            Err(err) => return Err(classified(&location, err)),
        }
    }
    SqliteLedger::open(path, options.sqlite)
        .map(|ledger| Ledger::Sqlite(Arc::new(ledger)))
        .map_err(|err| classified(&location, err))
}

/// A missing or empty file, which SQLite would make a new database of (even
/// read-only, with a migration allowed).
fn absent(path: &Path) -> Option<NotALedger> {
    match std::fs::metadata(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Some(NotALedger::Missing),
        Ok(metadata) if metadata.is_file() && metadata.len() == 0 => Some(NotALedger::EmptyFile),
        // Anything else (a device, a file this user cannot stat) is SQLite's to refuse.
        _ => None,
    }
}

/// The store's refusals a caller acts on, as the facade's own variants.
fn classified(location: &str, err: SqliteError) -> OpenError {
    let location = location.to_owned();
    let not_a_ledger = |reason, err: SqliteError| OpenError::NotALedger {
        location: location.clone(),
        reason,
        source: Some(err.into()),
    };
    match err {
        SqliteError::NotADatabase { .. } => not_a_ledger(NotALedger::NotADatabase, err),
        SqliteError::NotALedger { .. } => not_a_ledger(NotALedger::NoLedgerTables, err),
        SqliteError::IncompatibleSchema { .. } => not_a_ledger(NotALedger::ForeignTables, err),
        SqliteError::NeedsMigration { found, .. } => OpenError::NeedsMigration { location, found },
        SqliteError::Busy { .. } => OpenError::Busy {
            location,
            source: err.into(),
        },
        SqliteError::ReadOnly { .. } => OpenError::ReadOnly {
            location,
            source: err.into(),
        },
        other => OpenError::Sqlite(other),
    }
}
