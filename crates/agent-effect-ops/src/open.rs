//! Opening the ledger without ever creating or silently migrating one.

use std::path::Path;
use std::sync::Arc;

use effect_core::{Clock, EffectLedger, LedgerError};
use production_agent_systems::open::{
    Ledger, LedgerUrl, NotALedger, OpenError as OpenFailed, OpenOptions, open_url,
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

    /// The ledger opened again (a SQLite file anew, another store shared),
    /// read-only or not, in the CLI's words when that fails. As for the first
    /// open, an older schema is migrated only with `--migrate`, and nothing
    /// is created (a file removed meanwhile stays removed).
    pub(crate) fn reopen(&self, clock: Arc<dyn Clock>, read_only: bool) -> anyhow::Result<Ledger> {
        let options = OpenOptions::default()
            .clock(clock)
            .read_only(read_only)
            .migrate(self.migrate && !read_only)
            .create(false);
        let postgres = self.sqlite_path().is_none();
        self.ledger
            .reopen(options)
            .map_err(|err| open_failed(err, postgres))
    }

    /// The ledger, for writing. A SQLite file opened read-only is reopened
    /// read-write; an older schema is migrated only with `--migrate`, as for
    /// every command, and refused without it. A PostgreSQL ledger is already
    /// writable.
    pub fn writable(&self, clock: Arc<dyn Clock>) -> anyhow::Result<Arc<dyn EffectLedger>> {
        Ok(self.reopen(clock, false)?.into_dyn())
    }
}

/// Opens the ledger `--db` names, read-only where the store allows it: a
/// SQLite file, or a `postgres://` URL (with the `postgres` feature).
///
/// Only a place that holds the ledger's tables is a ledger: a missing or
/// empty file, a database or schema without them, is refused and never
/// written, `--migrate` or not (an empty ledger made on the spot would make
/// every operation look unknown). With `create` such a place becomes a new
/// ledger. Without `migrate` nothing is migrated: a SQLite file is opened
/// read-only, which proves it is a ledger this version can read without
/// writing to it, and a role with only SELECT can read a PostgreSQL schema.
/// With `migrate` an older schema is migrated in place, as an agent process
/// opening it would.
pub fn open(
    db: &LedgerUrl,
    migrate: bool,
    create: bool,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Opened> {
    #[cfg(not(feature = "postgres"))]
    if db.is_postgres() {
        return Err(InputError::PostgresNotBuilt.into());
    }
    let options = OpenOptions::default()
        .clock(clock)
        .schema_from_env()
        .read_only(!migrate)
        .migrate(migrate)
        .create(create);
    let ledger = open_url(db, options).map_err(|err| open_failed(err, db.is_postgres()))?;
    if ledger.is_snapshot() {
        eprintln!(
            "warning: this user cannot write the directory of {db} and no agent has it open, so it is read as a snapshot; work an agent writes from now on is not shown"
        );
    }
    Ok(Opened { ledger, migrate })
}

/// An open error in the CLI's words: what to pass instead, never the
/// store's own text (which repeats SQLite's and names library options).
fn open_failed(err: OpenFailed, postgres: bool) -> anyhow::Error {
    match err {
        OpenFailed::NotALedger {
            location, reason, ..
        } => match reason {
            NotALedger::Missing => InputError::MissingLedger { location }.into(),
            NotALedger::EmptyFile => InputError::EmptyLedger { location }.into(),
            reason => OpenError::NotALedger {
                location,
                why: not_a_ledger_because(reason, postgres),
            }
            .into(),
        },
        OpenFailed::NeedsMigration { location, found } => {
            InputError::NeedsMigration { location, found }.into()
        }
        OpenFailed::Busy { location, .. } => OpenError::Busy { location }.into(),
        OpenFailed::ReadOnly { location, .. } => OpenError::ReadOnly { location }.into(),
        // The ledger's own error, so that its kind picks the exit code.
        OpenFailed::Postgres(err) => {
            anyhow::Error::new(err).context("cannot open the PostgreSQL ledger")
        }
        other => anyhow::Error::new(LedgerError::from(other)).context("cannot open the ledger"),
    }
}

/// Why a place is not a ledger, and how to make one there when that is what
/// the operator wants.
fn not_a_ledger_because(reason: NotALedger, postgres: bool) -> &'static str {
    match (reason, postgres) {
        (NotALedger::NotADatabase, _) => "not a SQLite database",
        (NotALedger::ForeignTables, false) => {
            "its effect_operations table belongs to something else"
        }
        (NotALedger::ForeignTables, true) => {
            "the schema holds the tables of something else; name the ledger's schema with EFFECT_LEDGER_SCHEMA"
        }
        (NotALedger::NoSchema, _) => {
            "the schema does not exist; name the ledger's schema with EFFECT_LEDGER_SCHEMA, or pass --create to make a new ledger there"
        }
        (_, true) => {
            "the schema holds none of the ledger's tables; pass --create to make a new ledger there"
        }
        (_, false) => {
            "a SQLite database without the ledger's tables (pass --create to make a new ledger of a missing or empty file)"
        }
    }
}
