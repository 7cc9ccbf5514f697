use std::path::PathBuf;

use effect_core::{LedgerError, LedgerErrorKind};
use rusqlite::ffi;

use super::{SqliteError, ledger_error};

fn sqlite(code: std::ffi::c_int, message: &str) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(ffi::Error::new(code), Some(message.to_owned()))
}

/// SQLite's `SQLITE_CORRUPT` also comes from a failed read of an intact
/// file: the advice is to retry and check, not to restore at once.
#[test]
fn a_corrupt_answer_advises_checking_before_restoring() {
    for (code, text) in [
        (ffi::SQLITE_CORRUPT, "database disk image is malformed"),
        (ffi::SQLITE_NOTADB, "file is not a database"),
    ] {
        let error = ledger_error("reading operation \"x\"", sqlite(code, text));
        assert_eq!(error.kind(), LedgerErrorKind::Corrupt);
        let message = error.to_string();
        for advice in [
            "retry once they stop",
            "PRAGMA integrity_check",
            "only if that fails",
        ] {
            assert!(
                message.contains(advice),
                "{advice:?} missing from {message}"
            );
        }
        let opening = SqliteError::open(PathBuf::from("effects.sqlite3"), "x", sqlite(code, text));
        assert!(
            matches!(opening, SqliteError::NotADatabase { .. }),
            "{opening:?}"
        );
        assert!(
            opening.to_string().contains("only if that fails"),
            "{opening}"
        );
    }
}

/// An I/O error or a full disk while opening is worth another attempt.
#[test]
fn an_io_error_while_opening_is_unavailable() {
    for code in [
        ffi::SQLITE_IOERR_READ,
        ffi::SQLITE_IOERR_SHORT_READ,
        ffi::SQLITE_IOERR_WRITE,
        ffi::SQLITE_FULL,
    ] {
        let error = SqliteError::open(
            PathBuf::from("effects.sqlite3"),
            "switching to WAL mode",
            sqlite(code, "disk I/O error"),
        );
        assert!(matches!(error, SqliteError::Io { .. }), "{error:?}");
        assert_eq!(error.kind(), LedgerErrorKind::Unavailable);
        assert_eq!(
            LedgerError::from(error).kind(),
            LedgerErrorKind::Unavailable
        );
    }
    // Not every failure to open is passing: a file SQLite cannot open stays
    // a backend error.
    let error = SqliteError::open(
        PathBuf::from("effects.sqlite3"),
        "opening the file",
        sqlite(ffi::SQLITE_CANTOPEN, "unable to open database file"),
    );
    assert_eq!(error.kind(), LedgerErrorKind::Backend);
}
