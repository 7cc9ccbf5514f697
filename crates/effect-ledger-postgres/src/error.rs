//! How PostgreSQL and pool failures map onto [`LedgerError`] kinds.
//!
//! The ledger speaks effect-core's backend-neutral errors; the native error is
//! kept as the source, and messages describe this layer only.

use effect_core::{BoxError, LedgerError};
use postgres::error::SqlState;

/// A failed step of a transaction: either worth another attempt, or final.
#[derive(Debug)]
pub(crate) enum Step {
    /// A serialization failure, deadlock or lost insert race: run the whole
    /// transaction again. `None` when the race was detected without an error
    /// (an `INSERT ... ON CONFLICT DO NOTHING` that inserted nothing).
    Retry(Option<postgres::Error>),
    /// A prepared statement was missing on the server session, or its name
    /// taken there (behind a pooler in transaction mode): it did not run,
    /// and a transaction it was in is aborted. Run the attempt again with
    /// unnamed statements.
    Unprepared(postgres::Error),
    /// Give up with this error.
    Fail(LedgerError),
}

impl Step {
    /// Classifies a native error raised while `doing` something.
    pub(crate) fn from_pg(doing: &str, err: postgres::Error) -> Step {
        match err.code() {
            Some(code)
                if *code == SqlState::T_R_SERIALIZATION_FAILURE
                    || *code == SqlState::T_R_DEADLOCK_DETECTED =>
            {
                Step::Retry(Some(err))
            }
            _ if is_unprepared(&err) => Step::Unprepared(err),
            _ => Step::Fail(from_pg(doing, err)),
        }
    }
}

impl From<LedgerError> for Step {
    fn from(err: LedgerError) -> Self {
        Step::Fail(err)
    }
}

/// Whether `err` says a prepared statement is missing on the server session
/// (26000) or its name already taken there (42P05), behind a pooler in
/// transaction mode (`src/prepared.rs`): the statement did not run.
pub(crate) fn is_unprepared(err: &postgres::Error) -> bool {
    err.code().is_some_and(|code| {
        *code == SqlState::INVALID_SQL_STATEMENT_NAME || *code == SqlState::DUPLICATE_PSTATEMENT
    })
}

/// Maps a native error raised while `doing` something onto a ledger error kind.
pub(crate) fn from_pg(doing: &str, err: postgres::Error) -> LedgerError {
    let unavailable = match err.code() {
        // Class 08: connection exception; 53: insufficient resources (too many
        // connections, out of disk); 57P01..57P05: the server is shutting down,
        // restarting or refusing connections; 40: transaction rollback (when the
        // retries are used up).
        Some(code) => {
            let code = code.code();
            code.starts_with("08")
                || code.starts_with("53")
                || code.starts_with("57P")
                || code.starts_with("40")
        }
        // No SQLSTATE: the socket failed or the connection is gone.
        None => err.is_closed() || is_io(&err),
    };
    if unavailable {
        LedgerError::unavailable(
            format!("postgres server unavailable while {doing}"),
            boxed(err),
        )
    } else {
        LedgerError::backend(format!("postgres failed while {doing}"), boxed(err))
    }
}

/// A row value that cannot be decoded.
pub(crate) fn corrupt(what: String, err: impl Into<BoxError>) -> LedgerError {
    LedgerError::corrupt(what, Some(err.into()))
}

/// The pool could not hand out a connection in time.
pub(crate) fn from_pool(err: r2d2::Error) -> LedgerError {
    LedgerError::unavailable(
        "no postgres connection could be obtained in time",
        boxed(err),
    )
}

pub(crate) fn boxed(err: impl std::error::Error + Send + Sync + 'static) -> Option<BoxError> {
    Some(Box::new(err))
}

fn is_io(err: &postgres::Error) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}
