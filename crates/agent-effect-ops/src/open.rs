//! Opening the ledger without ever creating or silently migrating one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use effect_core::{Clock, EffectLedger};
use effect_ledger_sqlite::{SqliteError, SqliteLedger, SqliteOptions};

use crate::error::{InputError, OpenError};

/// An opened ledger: read-only where the store allows it.
pub struct Opened {
    ledger: Arc<dyn EffectLedger>,
    /// The SQLite file, reopened read-write for a resolution.
    pub(crate) sqlite_path: Option<PathBuf>,
    /// Whether `--migrate` was given: the only way a file is migrated.
    migrate: bool,
    /// The PostgreSQL ledger, for what the trait does not cover (prune).
    #[cfg(feature = "postgres")]
    pub(crate) postgres: Option<Arc<effect_ledger_postgres::PostgresLedger>>,
}

impl Opened {
    /// The ledger, for reading.
    pub fn ledger(&self) -> &dyn EffectLedger {
        self.ledger.as_ref()
    }

    /// The ledger, for writing. A SQLite file opened read-only is reopened
    /// read-write; an older schema is migrated only with `--migrate`, as for
    /// every command, and refused without it. A PostgreSQL ledger is already
    /// writable.
    pub fn writable(&self, clock: Arc<dyn Clock>) -> anyhow::Result<Arc<dyn EffectLedger>> {
        match &self.sqlite_path {
            Some(path) => {
                let options = SqliteOptions::default().clock(clock).migrate(self.migrate);
                Ok(Arc::new(
                    SqliteLedger::open(path, options).map_err(in_cli_words)?,
                ))
            }
            None => Ok(Arc::clone(&self.ledger)),
        }
    }
}

/// Opens the ledger `--db` names: a `postgres://` URL (with the `postgres`
/// feature) or a SQLite file (see [`open_sqlite`]).
pub fn open(db: &Path, migrate: bool, clock: Arc<dyn Clock>) -> anyhow::Result<Opened> {
    let text = db.to_string_lossy();
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        return open_postgres(&text, migrate);
    }
    let ledger = open_sqlite(db, migrate, clock)?;
    Ok(Opened {
        sqlite_path: Some(ledger.path().to_owned()),
        ledger: Arc::new(ledger),
        migrate,
        #[cfg(feature = "postgres")]
        postgres: None,
    })
}

#[cfg(feature = "postgres")]
fn open_postgres(url: &str, migrate: bool) -> anyhow::Result<Opened> {
    use effect_ledger_postgres::{PostgresLedger, PostgresOptions};
    let schema = std::env::var("EFFECT_LEDGER_SCHEMA")
        .unwrap_or_else(|_| effect_ledger_postgres::DEFAULT_SCHEMA.to_owned());
    // Without --migrate nothing is created or migrated: a misspelled schema
    // is an error, and a role with only SELECT can read.
    let options = PostgresOptions::default().schema(schema).migrate(migrate);
    let ledger =
        PostgresLedger::connect(url, options).context("cannot open the PostgreSQL ledger")?;
    let ledger = Arc::new(ledger);
    Ok(Opened {
        ledger: Arc::clone(&ledger) as Arc<dyn EffectLedger>,
        sqlite_path: None,
        migrate: false,
        postgres: Some(ledger),
    })
}

#[cfg(not(feature = "postgres"))]
fn open_postgres(_url: &str, _migrate: bool) -> anyhow::Result<Opened> {
    Err(InputError::PostgresNotBuilt.into())
}

/// Opens the ledger at `path` for reading.
///
/// The file must exist and not be empty: a ledger that is created on the spot
/// would make every operation look unknown. Without `migrate` the file is opened read-only, which
/// proves it is a ledger this version can read, without writing to it. With
/// `migrate` it is opened read-write, which migrates an older schema in place as
/// an agent process would.
pub fn open_sqlite(
    path: &Path,
    migrate: bool,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<SqliteLedger> {
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
        return SqliteLedger::open(path, options).map_err(in_cli_words);
    }
    SqliteLedger::open(path, options.read_only(true)).map_err(in_cli_words)
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
            why: "a SQLite database without the ledger's tables",
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
