//! Operations per status for `stats`, in time that follows what is counted,
//! not the ledger's size.
//!
//! Terminal statuses (`confirmed`, `rejected`) grow with the ledger: their
//! counts are read from `effect_status_counts`, which triggers keep in the
//! transaction that changes a status (`migrations/0005_status_counters.sql`).
//! The others are counted through the status index, in time proportional to
//! their number. The statuses present are found by seeking the index once
//! per distinct value, so a status no [`EffectStatus`] parses is still
//! reported as corrupt. A file without the counters (opened read-only before
//! it was migrated) is counted row by row, as before.

use effect_core::{EffectStatus, LedgerError};
use rusqlite::{Connection, OptionalExtension};

use crate::error::ledger_error;

/// The statuses whose counts the triggers keep.
pub(crate) const COUNTED: [EffectStatus; 2] = [EffectStatus::Confirmed, EffectStatus::Rejected];

/// Counts per status, every [`EffectStatus`] listed, from the counters and
/// the status index.
pub(crate) fn status_counts(conn: &Connection) -> Result<Vec<(EffectStatus, u64)>, LedgerError> {
    let doing = || "counting operations per status".to_owned();
    let mut counts: Vec<(EffectStatus, u64)> =
        EffectStatus::ALL.into_iter().map(|s| (s, 0)).collect();
    // One index seek per distinct status (a skip over each run of equal
    // values), not a scan.
    let present: Vec<String> = {
        let mut stmt = conn
            .prepare_cached(
                "WITH RECURSIVE present(status) AS ( \
                     SELECT MIN(status) FROM effect_operations \
                     UNION ALL \
                     SELECT (SELECT MIN(status) FROM effect_operations o WHERE o.status > present.status) \
                     FROM present WHERE present.status IS NOT NULL) \
                 SELECT status FROM present WHERE status IS NOT NULL",
            )
            .map_err(|e| ledger_error(doing(), e))?;
        let rows = stmt
            .query_map([], |row| row.get(0))
            .map_err(|e| ledger_error(doing(), e))?;
        rows.collect::<Result<_, _>>()
            .map_err(|e| ledger_error(doing(), e))?
    };
    for text in present {
        let status = text
            .parse::<EffectStatus>()
            .map_err(|e| unknown_status(conn, &text, e))?;
        let count: i64 = if COUNTED.contains(&status) {
            conn.prepare_cached("SELECT operations FROM effect_status_counts WHERE status = ?1")
                .and_then(|mut stmt| stmt.query_row([&text], |row| row.get(0)).optional())
                .map_err(|e| ledger_error(doing(), e))?
                .unwrap_or(0)
        } else {
            conn.prepare_cached("SELECT COUNT(*) FROM effect_operations WHERE status = ?1")
                .and_then(|mut stmt| stmt.query_row([&text], |row| row.get(0)))
                .map_err(|e| ledger_error(doing(), e))?
        };
        if let Some(entry) = counts.iter_mut().find(|(s, _)| *s == status) {
            entry.1 = u64::try_from(count).unwrap_or(0);
        }
    }
    Ok(counts)
}

/// Counts per status, every row read: a file without the counters.
pub(crate) fn full_count(conn: &Connection) -> Result<Vec<(EffectStatus, u64)>, LedgerError> {
    let doing = || "counting operations per status".to_owned();
    let mut counts: Vec<(EffectStatus, u64)> =
        EffectStatus::ALL.into_iter().map(|s| (s, 0)).collect();
    let mut stmt = conn
        .prepare_cached("SELECT status, COUNT(*) FROM effect_operations GROUP BY status")
        .map_err(|e| ledger_error(doing(), e))?;
    let mut rows = stmt.query([]).map_err(|e| ledger_error(doing(), e))?;
    while let Some(row) = rows.next().map_err(|e| ledger_error(doing(), e))? {
        let status: String = row.get(0).map_err(|e| ledger_error(doing(), e))?;
        let count: i64 = row.get(1).map_err(|e| ledger_error(doing(), e))?;
        let parsed = status
            .parse::<EffectStatus>()
            .map_err(|e| unknown_status(conn, &status, e))?;
        if let Some(entry) = counts.iter_mut().find(|(s, _)| *s == parsed) {
            entry.1 = u64::try_from(count).unwrap_or(0);
        }
    }
    Ok(counts)
}

/// A status no [`EffectStatus`] parses, named with one operation that has it.
fn unknown_status(
    conn: &Connection,
    status: &str,
    cause: effect_core::ParseStatusError,
) -> LedgerError {
    let example: Option<String> = conn
        .query_row(
            "SELECT operation_id FROM effect_operations WHERE status = ?1 LIMIT 1",
            [status],
            |row| row.get(0),
        )
        .optional()
        .ok()
        .flatten();
    let message = match example {
        Some(id) => format!("operation {id:?} (and perhaps others) has an unreadable status"),
        None => "an operation has an unreadable status".to_owned(),
    };
    LedgerError::corrupt(message, Some(Box::new(cause) as effect_core::BoxError))
}
