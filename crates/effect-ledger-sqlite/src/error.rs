//! [`SqliteError`] for opening a ledger, and the mapping of SQLite failures onto
//! the backend-neutral [`LedgerError`] kinds.

use std::fmt;
use std::io;
use std::path::PathBuf;

use effect_core::{BoxError, LedgerError, LedgerErrorKind};
use rusqlite::ErrorCode;

/// A failure to open (or create, or migrate) a SQLite ledger.
///
/// Convert it into a [`LedgerError`] with `?` or `From` where a caller only
/// deals in ledger errors; [`kind`](SqliteError::kind) tells which kind it becomes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteError {
    /// The path does not name a durable database file (empty, `:memory:`, a
    /// `file:` URI, a directory).
    #[error("sqlite ledger path {path:?} is not usable: {reason}")]
    InvalidPath {
        /// The path as given.
        path: PathBuf,
        /// Why it is refused, and what to pass instead.
        reason: &'static str,
    },
    /// An option is out of range.
    #[error("invalid sqlite ledger option {option}: {reason}")]
    InvalidOption {
        /// The option's name.
        option: &'static str,
        /// What the accepted values are.
        reason: &'static str,
    },
    /// The directory that should hold the database could not be created.
    #[error("cannot create the directory {path:?} for the sqlite ledger")]
    CreateDirectory {
        /// The directory.
        path: PathBuf,
        /// The file system's error.
        #[source]
        source: io::Error,
    },
    /// The file exists but SQLite reads it as no database, or a damaged one
    /// (or it is encrypted). A failed read of an intact file can look the
    /// same, so the advice is to check before restoring anything.
    #[error(
        "{path:?} is not a usable sqlite ledger database; if the disk reported I/O errors, retry \
         once they stop; otherwise check the file with PRAGMA integrity_check and restore the \
         ledger from a backup only if that fails (a new file would forget every operation)"
    )]
    NotADatabase {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The database cannot be written: a read-write open found a file that
    /// could only be opened for reading (its mode bits, an immutable
    /// attribute, a read-only mount), or a step of opening needed a write
    /// (WAL mode, migrations). Refused at open, so no write fails later.
    #[error(
        "sqlite ledger {path:?} is read-only; grant write access to the file and its directory (WAL mode creates -wal and -shm files beside it), or open it with SqliteOptions::read_only"
    )]
    ReadOnly {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// Another connection held the database lock for longer than the busy timeout.
    #[error(
        "sqlite ledger {path:?} stayed locked by another connection past the busy timeout; retry, or raise SqliteOptions::busy_timeout"
    )]
    Busy {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The database was written by a newer version of this library.
    #[error(
        "sqlite ledger {path:?} has schema version {found}, newer than the latest this library knows ({supported}); upgrade effect-ledger-sqlite"
    )]
    NewerSchema {
        /// The database file.
        path: PathBuf,
        /// The schema version found in the file.
        found: i64,
        /// The latest schema version this library knows.
        supported: i64,
    },
    /// The database has an `effect_operations` table that lacks a column the
    /// ledger needs: it belongs to something else.
    #[error(
        "sqlite database {path:?} has an effect_operations table without the column {column}; it is not an effect ledger"
    )]
    IncompatibleSchema {
        /// The database file.
        path: PathBuf,
        /// The missing column.
        column: &'static str,
    },
    /// The database has no `effect_operations` table: it is someone else's
    /// database, and opening it never adds ledger tables to it; or, opened
    /// read-only, a database with no tables at all (an empty file), which a
    /// read-write open would make a new ledger of.
    #[error("sqlite database {path:?} is not an effect ledger: it has no effect_operations table")]
    NotALedger {
        /// The database file.
        path: PathBuf,
    },
    /// The ledger still needs a migration, which this open may not run: it is
    /// read-only, or [`SqliteOptions::migrate`](crate::SqliteOptions::migrate) is off.
    #[error(
        "sqlite ledger {path:?} has schema version {found} and needs migrating to {supported}; open it once read-write with migration allowed"
    )]
    NeedsMigration {
        /// The database file.
        path: PathBuf,
        /// The schema version found in the file.
        found: i64,
        /// The version this library migrates to.
        supported: i64,
    },
    /// SQLite cannot open or create the file.
    #[error(
        "cannot open sqlite ledger file {path:?}; check that its directory exists and that this process may create and write files there"
    )]
    CannotOpen {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The disk failed an I/O request (`SQLITE_IOERR`) or is full
    /// (`SQLITE_FULL`) while the ledger was being opened: worth another
    /// attempt once the disk recovers.
    #[error(
        "the disk failed an I/O request while opening sqlite ledger {path:?} ({step}); retry once it recovers"
    )]
    Io {
        /// The database file.
        path: PathBuf,
        /// What was being done.
        step: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// SQLite kept another journal mode when asked for WAL.
    #[error(
        "sqlite ledger {path:?} stayed in journal mode {mode:?} instead of WAL; put it on a local file system that supports shared memory"
    )]
    WalUnavailable {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite reported.
        mode: String,
    },
    /// Any other SQLite failure while opening or migrating.
    #[error("cannot open sqlite ledger {path:?} while {step}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// What was being done.
        step: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The connection pool could not be built.
    #[error("cannot build the connection pool for sqlite ledger {path:?}")]
    Pool {
        /// The database file.
        path: PathBuf,
        /// The pool's error.
        #[source]
        source: r2d2::Error,
    },
}

impl SqliteError {
    /// The [`LedgerErrorKind`] this error becomes as a [`LedgerError`].
    pub fn kind(&self) -> LedgerErrorKind {
        match self {
            SqliteError::InvalidPath { .. } | SqliteError::InvalidOption { .. } => {
                LedgerErrorKind::InvalidInput
            }
            SqliteError::NotADatabase { .. }
            | SqliteError::IncompatibleSchema { .. }
            | SqliteError::NotALedger { .. } => LedgerErrorKind::Corrupt,
            SqliteError::Busy { .. } | SqliteError::Pool { .. } | SqliteError::Io { .. } => {
                LedgerErrorKind::Unavailable
            }
            SqliteError::NewerSchema { .. } | SqliteError::NeedsMigration { .. } => {
                LedgerErrorKind::Unsupported
            }
            SqliteError::CreateDirectory { .. }
            | SqliteError::ReadOnly { .. }
            | SqliteError::CannotOpen { .. }
            | SqliteError::WalUnavailable { .. }
            | SqliteError::Open { .. } => LedgerErrorKind::Backend,
        }
    }

    /// Classifies a SQLite failure during `step` of opening `path`.
    pub(crate) fn open(path: PathBuf, step: &'static str, source: rusqlite::Error) -> Self {
        match source.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
                SqliteError::NotADatabase { path, source }
            }
            Some(ErrorCode::ReadOnly) => SqliteError::ReadOnly { path, source },
            Some(ErrorCode::CannotOpen) => SqliteError::CannotOpen { path, source },
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                SqliteError::Busy { path, source }
            }
            Some(ErrorCode::SystemIoFailure | ErrorCode::DiskFull) => {
                SqliteError::Io { path, step, source }
            }
            _ => SqliteError::Open { path, step, source },
        }
    }
}

impl SqliteError {
    /// Whether SQLite could not open or read the file for lack of write
    /// access (to the file, its `-wal`/`-shm` files or its directory).
    pub(crate) fn is_permission(&self) -> bool {
        let source = match self {
            SqliteError::ReadOnly { .. } | SqliteError::CannotOpen { .. } => return true,
            SqliteError::Open { source, .. } => source,
            _ => return false,
        };
        matches!(
            source.sqlite_error_code(),
            Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen | ErrorCode::PermissionDenied)
        )
    }
}

impl From<SqliteError> for LedgerError {
    fn from(error: SqliteError) -> Self {
        let message = "cannot open the sqlite ledger";
        match error.kind() {
            // InvalidInput carries no source, so the cause goes into the message.
            LedgerErrorKind::InvalidInput => LedgerError::invalid_input(error.to_string()),
            LedgerErrorKind::Corrupt => LedgerError::corrupt(message, boxed(error)),
            LedgerErrorKind::Unavailable => LedgerError::unavailable(message, boxed(error)),
            _ => LedgerError::backend(message, boxed(error)),
        }
    }
}

/// Maps a SQLite failure during a ledger operation onto a [`LedgerError`],
/// keeping SQLite's error as the source. `doing` says what the ledger was doing,
/// e.g. `applying mark confirmed to operation "x"`.
pub(crate) fn ledger_error(doing: impl fmt::Display, error: rusqlite::Error) -> LedgerError {
    if matches!(
        error,
        rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
    ) {
        return LedgerError::corrupt(format!("undecodable value while {doing}"), boxed(error));
    }
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => LedgerError::unavailable(
            format!(
                "sqlite ledger stayed locked by another connection past the busy timeout while {doing}; retry later, or give the ledger a longer busy timeout"
            ),
            boxed(error),
        ),
        Some(ErrorCode::CannotOpen) => LedgerError::unavailable(
            format!(
                "cannot open the sqlite ledger file while {doing}; check that the file and its directory still exist and are accessible"
            ),
            boxed(error),
        ),
        Some(ErrorCode::TooBig) => LedgerError::invalid_input(format!(
            "a value is too large for the sqlite ledger while {doing}; nothing was written"
        )),
        _ if sync_failed(&error) => LedgerError::unavailable(
            format!(
                "the disk did not confirm a sqlite ledger commit (fsync failed) while {doing}; \
                 the write may or may not be durable, and this ledger refuses writes until it \
                 is opened again"
            ),
            boxed(error),
        ),
        Some(ErrorCode::SystemIoFailure) => LedgerError::unavailable(
            format!(
                "the disk holding the sqlite ledger failed an I/O request while {doing}; \
                 retry later"
            ),
            boxed(error),
        ),
        Some(ErrorCode::DiskFull) => LedgerError::unavailable(
            format!(
                "the disk holding the sqlite ledger is full while {doing}; free space and retry"
            ),
            boxed(error),
        ),
        // SQLite answers SQLITE_CORRUPT for a read that failed or came back
        // short as well as for a damaged file: the advice is to look first.
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => LedgerError::corrupt(
            format!(
                "sqlite read the ledger file as damaged while {doing}; if the disk reported I/O \
                 errors, retry once they stop; if it persists, check the file with PRAGMA \
                 integrity_check and restore it from a backup only if that fails"
            ),
            boxed(error),
        ),
        Some(ErrorCode::ReadOnly) => LedgerError::backend(
            format!(
                "the sqlite ledger is read-only while {doing}; grant write access to the file, its -wal/-shm files and its directory, or open it read-write"
            ),
            boxed(error),
        ),
        _ => LedgerError::backend(format!("sqlite failed while {doing}"), boxed(error)),
    }
}

/// Whether SQLite failed to sync a file (`SQLITE_IOERR_FSYNC`,
/// `SQLITE_IOERR_DIR_FSYNC`).
fn sync_failed(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(code, _)
            if code.extended_code == rusqlite::ffi::SQLITE_IOERR_FSYNC
                || code.extended_code == rusqlite::ffi::SQLITE_IOERR_DIR_FSYNC
    )
}

/// Whether a ledger error comes from a failed sync of the ledger's files.
pub(crate) fn is_sync_failure(error: &LedgerError) -> bool {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<rusqlite::Error>())
        .is_some_and(sync_failed)
}

/// Whether a ledger error is SQLite's plain `SQLITE_READONLY`: the
/// connection's database or write-ahead log was opened read-only.
pub(crate) fn is_read_only_handle(error: &LedgerError) -> bool {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<rusqlite::Error>())
        .is_some_and(|error| {
            matches!(
                error,
                rusqlite::Error::SqliteFailure(code, _)
                    if code.extended_code == rusqlite::ffi::SQLITE_READONLY
            )
        })
}

/// Maps a failure to check a connection out of the pool.
pub(crate) fn pool_error(doing: impl fmt::Display, error: r2d2::Error) -> LedgerError {
    LedgerError::unavailable(
        format!(
            "no sqlite connection became free while {doing}; retry later, or give the ledger a larger connection pool"
        ),
        boxed(error),
    )
}

fn boxed(error: impl std::error::Error + Send + Sync + 'static) -> Option<BoxError> {
    Some(Box::new(error))
}

#[cfg(test)]
mod tests;
