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
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use fresh::{FreshLedger, open_fresh};

use effect_core::{
    Clock, EffectLedger, LedgerError, LedgerErrorKind, MemoryLedger, PruneArchive, PruneReport,
    PruneRequest,
};

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
#[derive(Debug, Clone)]
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
    /// See [`OpenOptions::create`]: `None` until set, the store's own rule.
    create: Option<bool>,
    /// See [`OpenOptions::migrate`].
    migrate: bool,
    /// See [`OpenOptions::read_only`].
    read_only: bool,
}

impl Default for OpenOptions {
    /// Each store's default options: read-write, creating a missing ledger
    /// and migrating an older one.
    fn default() -> Self {
        OpenOptions {
            #[cfg(feature = "sqlite")]
            sqlite: effect_ledger_sqlite::SqliteOptions::default(),
            #[cfg(feature = "postgres")]
            postgres: effect_ledger_postgres::PostgresOptions::default(),
            memory_clock: None,
            create: None,
            migrate: true,
            read_only: false,
        }
    }
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
    /// created nor migrated. `read_only(true)` turns [`create`](Self::create)
    /// and [`migrate`](Self::migrate) off; turn `create` on after it to make a
    /// missing ledger first and then open it read-only.
    #[must_use]
    pub fn read_only(self, read_only: bool) -> Self {
        let options = if read_only {
            self.migrate(false).create(false)
        } else {
            self
        };
        OpenOptions {
            #[cfg(feature = "sqlite")]
            sqlite: options.sqlite.read_only(read_only),
            read_only,
            ..options
        }
    }

    /// Whether opening may make a new, empty ledger where there is none: a
    /// missing or empty SQLite file, a PostgreSQL schema that does not exist
    /// or holds nothing. A new ledger is made at the current schema version
    /// whatever [`migrate`](Self::migrate) says. With `false` such a place is
    /// [`OpenError::NotALedger`] and nothing is written: an empty ledger made
    /// on the spot would make every operation look unknown.
    ///
    /// Once set, either way, any other place must hold the ledger's tables (of
    /// any version) to be opened or migrated: a SQLite database without them,
    /// a schema holding someone else's tables, is [`OpenError::NotALedger`].
    /// Unset (the default), a new ledger is made only when migrating is
    /// allowed, in a missing or empty SQLite file, a SQLite database without
    /// tables, or a PostgreSQL schema that is missing or holds nothing. A
    /// PostgreSQL schema holding someone else's tables is
    /// [`OpenError::NotALedger`] whatever the options say, and nothing is
    /// added to it.
    ///
    /// ```
    /// use production_agent_systems::open::{NotALedger, OpenError, OpenOptions, open};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("effects.sqlite3");
    /// let path = path.to_str().ok_or("not UTF-8")?;
    /// let err = open(path, OpenOptions::default().create(false)).expect_err("no file");
    /// assert!(matches!(err, OpenError::NotALedger { reason: NotALedger::Missing, .. }));
    /// assert!(std::fs::read_dir(dir.path())?.next().is_none(), "nothing written");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn create(mut self, create: bool) -> Self {
        self.create = Some(create);
        self
    }

    /// Whether a missing or empty place may become a new ledger, and whether
    /// any other place must hold the ledger's tables (see [`create`](Self::create)).
    fn creation(&self) -> (bool, bool) {
        (self.create.unwrap_or(self.migrate), self.create.is_some())
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

    /// Whether opening may migrate a ledger with an older schema (the
    /// default), for either store. With `false` an older schema is
    /// [`OpenError::NeedsMigration`]. With [`create`](Self::create) off, only
    /// a place that holds the ledger's tables (of any version) is migrated:
    /// anything else is [`OpenError::NotALedger`], never made a ledger.
    #[must_use]
    pub fn migrate(self, allowed: bool) -> Self {
        OpenOptions {
            #[cfg(feature = "sqlite")]
            sqlite: self.sqlite.migrate(allowed),
            #[cfg(feature = "postgres")]
            postgres: self.postgres.migrate(allowed),
            migrate: allowed,
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

    /// Whether a read-only open of a SQLite file reads it as an immutable
    /// snapshot (this user cannot write its directory and no agent has it
    /// open), so work written after the open is not seen; see
    /// `SqliteLedger::is_immutable_snapshot`. Always `false` for other stores.
    pub fn is_snapshot(&self) -> bool {
        match self {
            #[cfg(feature = "sqlite")]
            Ledger::Sqlite(ledger) => ledger.is_immutable_snapshot(),
            _ => false,
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
        archive: &mut dyn PruneArchive,
    ) -> Result<PruneReport, LedgerError> {
        self.prune_with_progress(request, archive, &mut |_| {})
    }

    /// [`prune`](Self::prune), calling `progress` with the report so far
    /// after each batch.
    ///
    /// # Errors
    ///
    /// As [`prune`](Self::prune).
    pub fn prune_with_progress(
        &self,
        request: &PruneRequest,
        archive: &mut dyn PruneArchive,
        progress: &mut dyn FnMut(&PruneReport),
    ) -> Result<PruneReport, LedgerError> {
        #[cfg(not(any(feature = "sqlite", feature = "postgres")))]
        let _ = (request, archive, progress);
        match self {
            #[cfg(feature = "sqlite")]
            Ledger::Sqlite(ledger) => ledger.prune_with_progress(request, archive, progress),
            #[cfg(feature = "postgres")]
            Ledger::Postgres(ledger) => ledger.prune_with_progress(request, archive, progress),
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
        LedgerUrl::Sqlite(path) => sqlite::open(path, options),
        #[cfg(not(feature = "sqlite"))]
        LedgerUrl::Sqlite(_) => {
            drop(options);
            Err(OpenError::NotBuilt {
                url: url.clone(),
                feature: "sqlite",
            })
        }
        #[cfg(feature = "postgres")]
        LedgerUrl::Postgres(text) => postgres::open(text, options),
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
    /// There is no ledger there: nothing, or something else. Nothing was
    /// written.
    #[error("{location} is not a ledger: {reason}")]
    NotALedger {
        /// The file (quoted) or the PostgreSQL schema and database (without
        /// a password).
        location: String,
        /// What is there instead.
        reason: NotALedger,
        /// The store's own error, when it found out.
        #[source]
        source: Option<LedgerError>,
    },
    /// The ledger has an older schema, and the options do not allow
    /// migrating it. Nothing was written.
    #[error("the ledger {location} has an older schema (version {found}) and needs migrating")]
    NeedsMigration {
        /// As in [`OpenError::NotALedger`].
        location: String,
        /// Its schema version.
        found: i64,
    },
    /// Another process held the ledger locked past the busy timeout.
    #[error("the ledger {location} stayed locked by another process past the busy timeout")]
    Busy {
        /// As in [`OpenError::NotALedger`].
        location: String,
        /// The store's error.
        #[source]
        source: LedgerError,
    },
    /// Opening needs to write (a SQLite file's `-wal` and `-shm` files, a
    /// migration) and this user cannot.
    #[error("the ledger {location} cannot be opened for writing by this user")]
    ReadOnly {
        /// As in [`OpenError::NotALedger`].
        location: String,
        /// The store's error.
        #[source]
        source: LedgerError,
    },
    /// The SQLite store refused the file for another reason.
    #[cfg(feature = "sqlite")]
    #[error(transparent)]
    Sqlite(effect_ledger_sqlite::SqliteError),
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

/// What is where a ledger was expected ([`OpenError::NotALedger`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotALedger {
    /// No file at the path.
    Missing,
    /// An empty file, which SQLite would make a new database of.
    EmptyFile,
    /// A file that is not a SQLite database (or is damaged or encrypted).
    NotADatabase,
    /// A database or schema that holds none of the ledger's tables.
    NoLedgerTables,
    /// A database or schema that holds someone else's tables.
    ForeignTables,
    /// The PostgreSQL schema does not exist.
    NoSchema,
}

impl fmt::Display for NotALedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NotALedger::Missing => "it does not exist",
            NotALedger::EmptyFile => "it is an empty file",
            NotALedger::NotADatabase => "it is not a SQLite database",
            NotALedger::NoLedgerTables => "it holds none of the ledger's tables",
            NotALedger::ForeignTables => "it holds tables of something else",
            NotALedger::NoSchema => "the schema does not exist",
        })
    }
}

impl OpenError {
    /// The backend-neutral kind of this error, as its [`LedgerError`] has it:
    /// [`InvalidInput`](LedgerErrorKind::InvalidInput) for a string or a
    /// place that names no ledger, [`Unsupported`](LedgerErrorKind::Unsupported)
    /// for a ledger that needs migrating, and so on.
    pub fn kind(&self) -> LedgerErrorKind {
        match self {
            OpenError::Empty | OpenError::NotBuilt { .. } | OpenError::NotALedger { .. } => {
                LedgerErrorKind::InvalidInput
            }
            OpenError::NeedsMigration { .. } => LedgerErrorKind::Unsupported,
            OpenError::Busy { .. } => LedgerErrorKind::Unavailable,
            OpenError::ReadOnly { source, .. } => source.kind(),
            #[cfg(feature = "sqlite")]
            OpenError::Sqlite(err) => err.kind(),
            OpenError::Postgres(err) => err.kind(),
            OpenError::Fresh { .. } => LedgerErrorKind::Backend,
        }
    }
}

impl From<OpenError> for LedgerError {
    fn from(err: OpenError) -> LedgerError {
        match err {
            #[cfg(feature = "sqlite")]
            OpenError::Sqlite(err) => err.into(),
            OpenError::Postgres(err) => err,
            OpenError::NotALedger {
                source: Some(source),
                ..
            }
            | OpenError::Busy { source, .. }
            | OpenError::ReadOnly { source, .. } => source,
            OpenError::NeedsMigration { .. } => LedgerError::Unsupported {
                capability: "opening a ledger that needs migrating without migrating it",
            },
            other => LedgerError::invalid_input(other.to_string()),
        }
    }
}

/// A SQLite or PostgreSQL ledger's batched prune, for a
/// [`RetentionPolicy`](effect_core::RetentionPolicy); a memory ledger
/// answers [`LedgerError::Unsupported`].
impl effect_core::PruneLedger for Ledger {
    fn prune_with_progress(
        &self,
        request: &PruneRequest,
        archive: &mut dyn PruneArchive,
        progress: &mut dyn FnMut(&PruneReport),
    ) -> Result<PruneReport, LedgerError> {
        Ledger::prune_with_progress(self, request, archive, progress)
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
