//! Opening the ledger without ever creating or silently migrating one.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use effect_core::{Clock, EffectLedger};
use effect_ledger_sqlite::{SqliteError, SqliteLedger, SqliteOptions};
use production_agent_systems::open::{
    Ledger, LedgerUrl, OpenError as OpenFailed, OpenOptions, open_url,
};

use crate::error::{InputError, OpenError};

/// An opened ledger: read-only where the store allows it.
pub struct Opened {
    ledger: Ledger,
    /// Whether `--migrate` was given: the only way a file is migrated.
    migrate: bool,
}

impl Opened {
    /// The ledger, for reading.
    pub fn ledger(&self) -> &dyn EffectLedger {
        self.ledger.as_dyn()
    }

    /// The SQLite file, if the ledger is one.
    pub(crate) fn sqlite_path(&self) -> Option<&Path> {
        self.ledger.sqlite_path()
    }

    /// The opened ledger, for what the trait does not cover (backup, prune).
    pub(crate) fn store(&self) -> &Ledger {
        &self.ledger
    }

    /// The ledger opened again with `options` (a SQLite file anew, another
    /// store shared), in the CLI's words when that fails.
    pub(crate) fn reopen(&self, options: OpenOptions) -> anyhow::Result<Ledger> {
        self.ledger.reopen(options).map_err(open_failed)
    }

    /// The ledger, for writing. A SQLite file opened read-only is reopened
    /// read-write; an older schema is migrated only with `--migrate`, as for
    /// every command, and refused without it. A PostgreSQL ledger is already
    /// writable.
    pub fn writable(&self, clock: Arc<dyn Clock>) -> anyhow::Result<Arc<dyn EffectLedger>> {
        let options = OpenOptions::default().clock(clock).migrate(self.migrate);
        Ok(self.reopen(options)?.into_dyn())
    }
}

/// Opens the ledger `--db` names, read-only where the store allows it: a
/// SQLite file (which must exist and not be empty: a ledger created on the
/// spot would make every operation look unknown), or a `postgres://` URL
/// (with the `postgres` feature).
///
/// Without `migrate` nothing is created or migrated: a SQLite file is opened
/// read-only, which proves it is a ledger this version can read without
/// writing to it; a misspelled PostgreSQL schema is an error, and a role with
/// only SELECT can read. With `migrate` an older schema is migrated in place,
/// as an agent process opening it would; only a file that holds the
/// ledger's tables (of any version) is migrated, anything else is not a
/// ledger. With `create`, a missing or empty SQLite file becomes a new ledger.
pub fn open(
    db: &LedgerUrl,
    migrate: bool,
    create: bool,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Opened> {
    if let LedgerUrl::Sqlite(path) = db {
        match check_file(path) {
            Err(err) if create && is_absent(&err) => {
                let options = SqliteOptions::default().clock(Arc::clone(&clock));
                drop(SqliteLedger::open(path, options).map_err(in_cli_words)?);
            }
            other => other?,
        }
        if migrate {
            // A migration runs only on a ledger: a read-only look first, so
            // a file without the ledger's tables is refused, not made one.
            match SqliteLedger::open(path, SqliteOptions::default().read_only(true)) {
                Ok(_) | Err(SqliteError::NeedsMigration { .. }) => {}
                Err(err) => return Err(in_cli_words(err)),
            }
        }
    }
    #[cfg(not(feature = "postgres"))]
    if db.is_postgres() {
        return Err(InputError::PostgresNotBuilt.into());
    }
    let options = OpenOptions::default()
        .clock(clock)
        .schema_from_env()
        .migrate(migrate)
        .read_only(!migrate);
    let ledger = open_url(db, options).map_err(open_failed)?;
    if let Some(sqlite) = ledger.as_sqlite().filter(|l| l.is_immutable_snapshot()) {
        eprintln!(
            "warning: this user cannot write the directory of {:?} and no agent has it open, so it is read as a snapshot; work an agent writes from now on is not shown",
            sqlite.path()
        );
    }
    Ok(Opened { ledger, migrate })
}

/// An open error in the CLI's words.
fn open_failed(err: OpenFailed) -> anyhow::Error {
    match err {
        OpenFailed::Sqlite(err) => in_cli_words(err),
        // The ledger's own error, so that its kind picks the exit code.
        OpenFailed::Postgres(err) => {
            anyhow::Error::new(err).context("cannot open the PostgreSQL ledger")
        }
        err => err.into(),
    }
}

/// A missing or empty file is refused before SQLite sees it: SQLite would
/// make a new database of it, even read-only with --migrate.
fn check_file(path: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(InputError::MissingLedger {
            path: path.to_owned(),
        }
        .into()),
        Err(err) => Err(err).with_context(|| format!("cannot read ledger file {path:?}")),
        Ok(metadata) if metadata.is_file() && metadata.len() == 0 => Err(InputError::EmptyLedger {
            path: path.to_owned(),
        }
        .into()),
        Ok(_) => Ok(()),
    }
}

/// Whether `check_file` refused a missing or empty file, which `--create` makes a ledger of.
fn is_absent(err: &anyhow::Error) -> bool {
    matches!(
        err.downcast_ref::<InputError>(),
        Some(InputError::MissingLedger { .. } | InputError::EmptyLedger { .. })
    )
}

/// The store's open errors a user can act on, in the CLI's language.
pub(crate) fn in_cli_words(err: SqliteError) -> anyhow::Error {
    match err {
        SqliteError::NeedsMigration { path, found, .. } => {
            InputError::NeedsMigration { path, found }.into()
        }
        SqliteError::NotADatabase { path, .. } => OpenError::NotALedger {
            path,
            why: "not a SQLite database",
        }
        .into(),
        SqliteError::NotALedger { path } => OpenError::NotALedger {
            path,
            why: "a SQLite database without the ledger's tables (pass --create to make a new ledger of a missing or empty file)",
        }
        .into(),
        SqliteError::IncompatibleSchema { path, .. } => OpenError::NotALedger {
            path,
            why: "its effect_operations table belongs to something else",
        }
        .into(),
        SqliteError::Busy { path, .. } => OpenError::Busy { path }.into(),
        SqliteError::ReadOnly { path, .. } => OpenError::ReadOnly { path }.into(),
        other => other.into(),
    }
}
