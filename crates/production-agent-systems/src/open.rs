//! Choosing a store from one string: a SQLite file path or a `postgres://` URL.
//!
//! Every binary of the workspace opens its ledger here, so a path and a URL
//! mean the same thing to each of them:
//!
//! ```
//! use production_agent_systems::open::{LedgerUrl, OpenOptions, open};
//!
//! assert!(matches!(LedgerUrl::parse("effects.sqlite3")?, LedgerUrl::Sqlite(_)));
//! assert!(matches!(
//!     LedgerUrl::parse("postgres://agent@db.internal/effects")?,
//!     LedgerUrl::Postgres(_)
//! ));
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("effects.sqlite3");
//! let ledger = open(path.to_str().ok_or("not UTF-8")?, OpenOptions::default())?;
//! assert!(ledger.as_sqlite().is_some());
//! assert!(ledger.as_dyn().get("invoice:INV-1:capture")?.is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

mod fresh;

pub use fresh::{FreshLedger, open_fresh};

use effect_core::{Clock, EffectLedger, LedgerError, MemoryLedger, PruneReport, PruneRequest};

/// Where a ledger lives, as written on a command line or in a configuration
/// file: `postgres://…` or `postgresql://…` is a PostgreSQL database,
/// `memory:` a throwaway in-memory ledger (nothing survives the process),
/// anything else the path of a SQLite file. A libpq `key=value` connection string is
/// not recognised here (it would read as a file name): write it as a URL,
/// or call `PostgresLedger::connect`, which takes both forms.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LedgerUrl {
    /// A SQLite ledger file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL, as `PostgresLedger::connect` takes it.
    Postgres(String),
    /// `memory:`, a [`MemoryLedger`]: throwaway, for trials and tests.
    Memory,
}

impl LedgerUrl {
    /// How a throwaway in-memory ledger is written.
    pub const MEMORY: &'static str = "memory:";

    /// Reads `text`; only an empty string is refused.
    pub fn parse(text: &str) -> Result<LedgerUrl, OpenError> {
        if text.trim().is_empty() {
            return Err(OpenError::Empty);
        }
        if text == Self::MEMORY {
            return Ok(LedgerUrl::Memory);
        }
        if is_postgres_url(text) {
            return Ok(LedgerUrl::Postgres(text.to_owned()));
        }
        Ok(LedgerUrl::Sqlite(PathBuf::from(text)))
    }

    /// Whether this names a PostgreSQL database.
    pub fn is_postgres(&self) -> bool {
        matches!(self, LedgerUrl::Postgres(_))
    }
}

impl std::str::FromStr for LedgerUrl {
    type Err = OpenError;

    fn from_str(text: &str) -> Result<LedgerUrl, OpenError> {
        LedgerUrl::parse(text)
    }
}

/// A URL's password never reaches a log line.
impl fmt::Debug for LedgerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerUrl::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            LedgerUrl::Postgres(url) => f.debug_tuple("Postgres").field(&redacted(url)).finish(),
            LedgerUrl::Memory => f.write_str("Memory"),
        }
    }
}

/// The path, or the URL without its password.
impl fmt::Display for LedgerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerUrl::Sqlite(path) => write!(f, "{}", path.display()),
            LedgerUrl::Postgres(url) => f.write_str(&redacted(url)),
            LedgerUrl::Memory => f.write_str(Self::MEMORY),
        }
    }
}

fn is_postgres_url(text: &str) -> bool {
    let lower = text.get(..13).unwrap_or(text).to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// `postgres://user:secret@host/db` as `postgres://user:***@host/db`.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((credentials, host)) if credentials.contains(':') => {
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        _ => url.to_owned(),
    }
}

/// How [`open`] opens each kind of store: the options of the store the URL
/// names are used, the others ignored.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct OpenOptions {
    /// Options of a SQLite file.
    #[cfg(feature = "sqlite")]
    pub sqlite: effect_ledger_sqlite::SqliteOptions,
    /// Options of a PostgreSQL database.
    #[cfg(feature = "postgres")]
    pub postgres: effect_ledger_postgres::PostgresOptions,
    /// The clock of a `memory:` ledger (default the system clock).
    pub memory_clock: Option<Arc<dyn Clock>>,
}

/// The variable naming the PostgreSQL schema of a ledger opened from a URL,
/// read by [`OpenOptions::schema_from_env`].
pub const SCHEMA_VARIABLE: &str = "EFFECT_LEDGER_SCHEMA";

impl OpenOptions {
    /// The clock of a SQLite ledger. A PostgreSQL ledger always reads the
    /// database server's clock, which every host sharing it agrees on.
    #[must_use]
    pub fn clock(self, clock: Arc<dyn Clock>) -> Self {
        OpenOptions {
            #[cfg(feature = "sqlite")]
            sqlite: self.sqlite.clock(Arc::clone(&clock)),
            memory_clock: Some(clock),
            ..self
        }
    }

    /// Opens to read only: a SQLite file read-only, and neither store
    /// created nor migrated.
    #[must_use]
    pub fn read_only(self, read_only: bool) -> Self {
        let options = if read_only { self.migrate(false) } else { self };
        OpenOptions {
            #[cfg(feature = "sqlite")]
            sqlite: options.sqlite.read_only(read_only),
            ..options
        }
    }

    /// The PostgreSQL schema (default `effect_ledger`).
    #[must_use]
    pub fn schema(self, schema: impl Into<String>) -> Self {
        let schema = schema.into();
        #[cfg(not(feature = "postgres"))]
        drop(schema);
        OpenOptions {
            #[cfg(feature = "postgres")]
            postgres: self.postgres.schema(schema),
            ..self
        }
    }

    /// The PostgreSQL schema named by [`SCHEMA_VARIABLE`]
    /// (`EFFECT_LEDGER_SCHEMA`), when it is set: every binary reads it here.
    #[must_use]
    pub fn schema_from_env(self) -> Self {
        match std::env::var(SCHEMA_VARIABLE) {
            Ok(schema) if !schema.is_empty() => self.schema(schema),
            _ => self,
        }
    }

    /// Whether opening may create the ledger and migrate an older schema (the
    /// default), for either store. With `false` an older schema is refused and
    /// a missing PostgreSQL schema is an error.
    #[must_use]
    pub fn migrate(self, allowed: bool) -> Self {
        OpenOptions {
            #[cfg(feature = "sqlite")]
            sqlite: self.sqlite.migrate(allowed),
            #[cfg(feature = "postgres")]
            postgres: self.postgres.migrate(allowed),
            ..self
        }
    }

    /// Replaces the SQLite options.
    #[cfg(feature = "sqlite")]
    #[must_use]
    pub fn sqlite(mut self, options: effect_ledger_sqlite::SqliteOptions) -> Self {
        self.sqlite = options;
        self
    }

    /// Replaces the PostgreSQL options.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn postgres(mut self, options: effect_ledger_postgres::PostgresOptions) -> Self {
        self.postgres = options;
        self
    }
}

/// An opened ledger, with its concrete store for what the [`EffectLedger`]
/// trait does not cover (backups, pruning).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Ledger {
    /// A SQLite file.
    #[cfg(feature = "sqlite")]
    Sqlite(Arc<effect_ledger_sqlite::SqliteLedger>),
    /// A PostgreSQL schema.
    #[cfg(feature = "postgres")]
    Postgres(Arc<effect_ledger_postgres::PostgresLedger>),
    /// A throwaway in-memory ledger (`memory:`).
    Memory(Arc<MemoryLedger>),
}

impl Ledger {
    /// The ledger as the executor takes it.
    pub fn into_dyn(self) -> Arc<dyn EffectLedger> {
        match self {
            #[cfg(feature = "sqlite")]
            Ledger::Sqlite(ledger) => ledger,
            #[cfg(feature = "postgres")]
            Ledger::Postgres(ledger) => ledger,
            Ledger::Memory(ledger) => ledger,
        }
    }

    /// The ledger, borrowed.
    pub fn as_dyn(&self) -> &dyn EffectLedger {
        match self {
            #[cfg(feature = "sqlite")]
            Ledger::Sqlite(ledger) => ledger.as_ref(),
            #[cfg(feature = "postgres")]
            Ledger::Postgres(ledger) => ledger.as_ref(),
            Ledger::Memory(ledger) => ledger.as_ref(),
        }
    }

    /// The SQLite file, if the ledger is one.
    pub fn sqlite_path(&self) -> Option<&std::path::Path> {
        match self {
            #[cfg(feature = "sqlite")]
            Ledger::Sqlite(ledger) => Some(ledger.path()),
            _ => None,
        }
    }

    /// Opens the same ledger again with `options`: a SQLite file is opened
    /// anew (to write a file opened read-only, say); a PostgreSQL or memory
    /// ledger, whose handle already writes, is shared.
    ///
    /// # Errors
    ///
    /// As [`open_url`].
    pub fn reopen(&self, options: OpenOptions) -> Result<Ledger, OpenError> {
        match self {
            #[cfg(feature = "sqlite")]
            Ledger::Sqlite(ledger) => {
                open_url(&LedgerUrl::Sqlite(ledger.path().to_owned()), options)
            }
            other => {
                drop(options);
                Ok(other.clone())
            }
        }
    }

    /// Deletes resolved operations as `request` asks, writing each to
    /// `archive` first (see `SqliteLedger::prune`, `PostgresLedger::prune`).
    ///
    /// # Errors
    ///
    /// The store's; [`LedgerError::Unsupported`] for a memory ledger.
    pub fn prune(
        &self,
        request: &PruneRequest,
        archive: &mut dyn std::io::Write,
    ) -> Result<PruneReport, LedgerError> {
        match self {
            #[cfg(feature = "sqlite")]
            Ledger::Sqlite(ledger) => ledger.prune(request, archive),
            #[cfg(feature = "postgres")]
            Ledger::Postgres(ledger) => ledger.prune(request, archive),
            Ledger::Memory(_) => Err(LedgerError::Unsupported {
                capability: "pruning a memory ledger",
            }),
        }
    }

    /// An online copy of the ledger at `destination`, which must not exist
    /// (see `SqliteLedger::backup`). Only a SQLite file has one: a PostgreSQL
    /// database is backed up with the server's tools.
    ///
    /// # Errors
    ///
    /// The store's; [`LedgerError::Unsupported`] for another store.
    pub fn backup(&self, destination: &std::path::Path) -> Result<(), LedgerError> {
        #[cfg(not(feature = "sqlite"))]
        let _ = destination;
        match self {
            #[cfg(feature = "sqlite")]
            Ledger::Sqlite(ledger) => ledger.backup(destination),
            _ => Err(LedgerError::Unsupported {
                capability: "backing up a ledger that is not a SQLite file",
            }),
        }
    }

    /// The SQLite store, if that is what was opened.
    #[cfg(feature = "sqlite")]
    pub fn as_sqlite(&self) -> Option<&Arc<effect_ledger_sqlite::SqliteLedger>> {
        match self {
            Ledger::Sqlite(ledger) => Some(ledger),
            _ => None,
        }
    }

    /// The PostgreSQL store, if that is what was opened.
    #[cfg(feature = "postgres")]
    pub fn as_postgres(&self) -> Option<&Arc<effect_ledger_postgres::PostgresLedger>> {
        match self {
            Ledger::Postgres(ledger) => Some(ledger),
            _ => None,
        }
    }
}

/// Opens the ledger `url` names (see [`LedgerUrl`]) with the options of its
/// store.
pub fn open(url: &str, options: OpenOptions) -> Result<Ledger, OpenError> {
    open_url(&LedgerUrl::parse(url)?, options)
}

/// Opens the ledger at an already parsed [`LedgerUrl`].
pub fn open_url(url: &LedgerUrl, options: OpenOptions) -> Result<Ledger, OpenError> {
    match url {
        LedgerUrl::Memory => Ok(Ledger::Memory(Arc::new(match options.memory_clock {
            Some(clock) => MemoryLedger::with_clock(clock),
            None => MemoryLedger::new(),
        }))),
        #[cfg(feature = "sqlite")]
        LedgerUrl::Sqlite(path) => Ok(Ledger::Sqlite(Arc::new(
            effect_ledger_sqlite::SqliteLedger::open(path, options.sqlite)?,
        ))),
        #[cfg(not(feature = "sqlite"))]
        LedgerUrl::Sqlite(_) => {
            drop(options);
            Err(OpenError::NotBuilt {
                url: url.clone(),
                feature: "sqlite",
            })
        }
        #[cfg(feature = "postgres")]
        LedgerUrl::Postgres(text) => Ok(Ledger::Postgres(Arc::new(
            effect_ledger_postgres::PostgresLedger::connect(text, options.postgres)
                .map_err(OpenError::Postgres)?,
        ))),
        #[cfg(not(feature = "postgres"))]
        LedgerUrl::Postgres(_) => {
            drop(options);
            Err(OpenError::NotBuilt {
                url: url.clone(),
                feature: "postgres",
            })
        }
    }
}

/// Why [`open`] could not open a ledger.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The string names no ledger at all.
    #[error("no ledger given: pass a SQLite file path or a postgres:// URL")]
    Empty,
    /// The URL names a store this build leaves out.
    #[error("{url} names a ledger this build cannot open: enable the `{feature}` feature")]
    NotBuilt {
        /// The ledger, as given (without a password).
        url: LedgerUrl,
        /// The cargo feature that adds the store.
        feature: &'static str,
    },
    /// The SQLite store refused the file.
    #[cfg(feature = "sqlite")]
    #[error(transparent)]
    Sqlite(#[from] effect_ledger_sqlite::SqliteError),
    /// The PostgreSQL store could not connect or open its schema.
    #[error(transparent)]
    Postgres(LedgerError),
    /// A fresh ledger's place could not be made.
    #[error("{doing}")]
    Fresh {
        /// What failed.
        doing: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl From<OpenError> for LedgerError {
    fn from(err: OpenError) -> LedgerError {
        match err {
            #[cfg(feature = "sqlite")]
            OpenError::Sqlite(err) => err.into(),
            OpenError::Postgres(err) => err,
            other => LedgerError::invalid_input(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_scheme_picks_postgres_and_anything_else_is_a_file() {
        for url in [
            "postgres://u@h/db",
            "postgresql://u@h/db",
            "POSTGRES://u@h/db",
        ] {
            assert!(
                LedgerUrl::parse(url)
                    .map(|u| u.is_postgres())
                    .unwrap_or(false),
                "{url}"
            );
        }
        for path in ["effects.sqlite3", "/var/lib/x/postgres", "./postgres:/x"] {
            assert_eq!(
                LedgerUrl::parse(path).ok(),
                Some(LedgerUrl::Sqlite(PathBuf::from(path)))
            );
        }
        assert!(matches!(LedgerUrl::parse("  "), Err(OpenError::Empty)));
    }

    #[test]
    fn a_password_is_never_displayed() {
        let url = LedgerUrl::parse("postgres://agent:s3cret@db:5432/effects?sslmode=require")
            .map(|u| u.to_string())
            .unwrap_or_default();
        assert_eq!(url, "postgres://agent:***@db:5432/effects?sslmode=require");
        let debug = format!("{:?}", LedgerUrl::parse("postgres://a:pw@h/d").ok());
        assert!(!debug.contains("pw"), "{debug}");
        assert_eq!(
            redacted("postgres://agent@db/effects"),
            "postgres://agent@db/effects"
        );
    }
}
