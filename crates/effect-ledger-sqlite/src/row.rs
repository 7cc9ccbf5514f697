//! Rows ↔ records and events, in the value formats of SPEC §8: statuses as their
//! exact strings, timestamps as the record's ISO text, `lease_until` as REAL,
//! JSON columns as compact JSON text.
//!
//! Decoding never panics: a value the ledger cannot read becomes
//! [`LedgerError::Corrupt`] naming the operation (and the event) it belongs to.

use effect_core::transition::PendingEvent;
use effect_core::{BoxError, EffectRecord, EffectStatus, LedgerError, LedgerEvent};
use rusqlite::types::FromSql;
use rusqlite::{Connection, Row, params};
use serde_json::Value;

use crate::error::ledger_error;

/// The operation columns, in [`decode_record`]'s order.
macro_rules! record_columns {
    () => {
        "operation_id, contract_name, contract_version, request_fingerprint, \
         provider_idempotency_key, status, result_json, provider_operation_id, error, attempts, \
         evidence_json, owner_token, lease_until, created_at, updated_at"
    };
}

/// The event columns, in [`decode_event`]'s order.
macro_rules! event_columns {
    () => {
        "sequence, operation_id, event_type, data_json, timestamp"
    };
}

/// One operation by id.
pub(crate) const SELECT_RECORD: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM effect_operations WHERE operation_id = ?1"
);

/// A page of operations, newest update first (walks `idx_effect_operations_updated`).
pub(crate) const LIST_ALL: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM effect_operations ORDER BY updated_at DESC, rowid DESC LIMIT ?1"
);

/// A page of operations in one status, newest update first (walks
/// `idx_effect_operations_status_updated`).
pub(crate) const LIST_BY_STATUS: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM effect_operations WHERE status = ?1 ORDER BY updated_at DESC, rowid DESC LIMIT ?2"
);

/// One operation's events in sequence order.
pub(crate) const SELECT_EVENTS: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM effect_events WHERE operation_id = ?1 ORDER BY sequence"
);

/// A page of all events after a sequence.
pub(crate) const SELECT_EVENTS_AFTER: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM effect_events WHERE sequence > ?1 ORDER BY sequence LIMIT ?2"
);

/// Decodes a row selected with the operation columns (see [`SELECT_RECORD`]).
pub(crate) fn decode_record(row: &Row<'_>) -> Result<EffectRecord, LedgerError> {
    let operation_id: String = row.get(0).map_err(|e| {
        LedgerError::corrupt("an operation row has an unreadable operation_id", boxed(e))
    })?;
    let at = Cells {
        row,
        whose: format!("operation {operation_id:?}"),
    };
    let status: String = at.get(5, "status")?;
    let status = status
        .parse::<EffectStatus>()
        .map_err(|e| at.corrupt("status", e))?;
    let output = at
        .get::<Option<String>>(6, "result_json")?
        .map(|text| serde_json::from_str::<Value>(&text))
        .transpose()
        .map_err(|e| at.corrupt("result_json", e))?;
    let attempts: i64 = at.get(9, "attempts")?;
    let attempts = u32::try_from(attempts).map_err(|e| at.corrupt("attempts", e))?;
    let evidence: String = at.get(10, "evidence_json")?;
    let evidence = match serde_json::from_str::<Value>(&evidence) {
        Ok(Value::Object(map)) => map,
        Ok(other) => {
            return Err(at.corrupt(
                "evidence_json",
                format!("expected a JSON object, found {}", json_kind(&other)),
            ));
        }
        Err(e) => return Err(at.corrupt("evidence_json", e)),
    };
    Ok(EffectRecord {
        contract_name: at.get(1, "contract_name")?,
        contract_version: at.get(2, "contract_version")?,
        request_fingerprint: at.get(3, "request_fingerprint")?,
        provider_idempotency_key: at.get(4, "provider_idempotency_key")?,
        status,
        output,
        provider_operation_id: at.get(7, "provider_operation_id")?,
        error: at.get(8, "error")?,
        attempts,
        evidence,
        owner_token: at.get(11, "owner_token")?,
        lease_until: at.get(12, "lease_until")?,
        created_at: at.get(13, "created_at")?,
        updated_at: at.get(14, "updated_at")?,
        operation_id,
    })
}

/// Decodes a row selected with the event columns (see [`SELECT_EVENTS`]).
pub(crate) fn decode_event(row: &Row<'_>) -> Result<LedgerEvent, LedgerError> {
    let sequence: i64 = row
        .get(0)
        .map_err(|e| LedgerError::corrupt("an event row has an unreadable sequence", boxed(e)))?;
    let operation_id: String = row.get(1).map_err(|e| {
        LedgerError::corrupt(
            format!("event {sequence} has an unreadable operation_id"),
            boxed(e),
        )
    })?;
    let at = Cells {
        row,
        whose: format!("event {sequence} of operation {operation_id:?}"),
    };
    let sequence = u64::try_from(sequence).map_err(|e| at.corrupt("sequence", e))?;
    let data: String = at.get(3, "data_json")?;
    let data = serde_json::from_str(&data).map_err(|e| at.corrupt("data_json", e))?;
    Ok(LedgerEvent {
        sequence,
        event_type: at.get(2, "event_type")?,
        data,
        timestamp: at.get(4, "timestamp")?,
        operation_id,
    })
}

/// How [`write_record`] writes a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordWrite {
    /// A new operation.
    Insert,
    /// A transition (it appended events): the row also moves to the end of the
    /// rowid order, so `list`'s tie-break (`rowid DESC` among equal
    /// `updated_at`) is "last transition first", as for the reference ledger,
    /// even when the clock did not move.
    Transition,
    /// A change without events (a lease renewal): the row keeps its place,
    /// as its `updated_at` does.
    InPlace,
}

/// Writes the full record.
pub(crate) fn write_record(
    conn: &Connection,
    record: &EffectRecord,
    how: RecordWrite,
) -> Result<(), LedgerError> {
    let doing = || format!("writing operation {:?}", record.operation_id);
    let output = record
        .output
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| {
            LedgerError::backend(
                format!("cannot encode the output while {}", doing()),
                boxed(e),
            )
        })?;
    let evidence = serde_json::to_string(&record.evidence).map_err(|e| {
        LedgerError::backend(
            format!("cannot encode the evidence while {}", doing()),
            boxed(e),
        )
    })?;
    let sql = match how {
        RecordWrite::Insert => {
            "INSERT INTO effect_operations (operation_id, contract_name, contract_version, \
                request_fingerprint, provider_idempotency_key, status, result_json, \
                provider_operation_id, error, attempts, evidence_json, owner_token, lease_until, \
                created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
        }
        RecordWrite::Transition => {
            "UPDATE effect_operations SET \
                rowid = (SELECT MAX(rowid) FROM effect_operations) + 1, \
                contract_name = ?2, contract_version = ?3, request_fingerprint = ?4, \
                provider_idempotency_key = ?5, status = ?6, result_json = ?7, \
                provider_operation_id = ?8, error = ?9, attempts = ?10, evidence_json = ?11, \
                owner_token = ?12, lease_until = ?13, created_at = ?14, updated_at = ?15 \
             WHERE operation_id = ?1"
        }
        RecordWrite::InPlace => {
            "UPDATE effect_operations SET \
                contract_name = ?2, contract_version = ?3, request_fingerprint = ?4, \
                provider_idempotency_key = ?5, status = ?6, result_json = ?7, \
                provider_operation_id = ?8, error = ?9, attempts = ?10, evidence_json = ?11, \
                owner_token = ?12, lease_until = ?13, created_at = ?14, updated_at = ?15 \
             WHERE operation_id = ?1"
        }
    };
    let mut stmt = conn
        .prepare_cached(sql)
        .map_err(|e| ledger_error(doing(), e))?;
    let changed = stmt
        .execute(params![
            record.operation_id,
            record.contract_name,
            record.contract_version,
            record.request_fingerprint,
            record.provider_idempotency_key,
            record.status.as_str(),
            output,
            record.provider_operation_id,
            record.error,
            i64::from(record.attempts),
            evidence,
            record.owner_token,
            record.lease_until,
            record.created_at,
            record.updated_at,
        ])
        .map_err(|e| ledger_error(doing(), e))?;
    if changed != 1 {
        return Err(LedgerError::backend(
            format!("{} changed {changed} rows instead of one", doing()),
            None,
        ));
    }
    Ok(())
}

/// Appends one event; its sequence is assigned by SQLite.
pub(crate) fn insert_event(
    conn: &Connection,
    operation_id: &str,
    event: &PendingEvent,
) -> Result<(), LedgerError> {
    let doing = || {
        format!(
            "appending a {} event to operation {operation_id:?}",
            event.event_type
        )
    };
    let data = serde_json::to_string(&event.data).map_err(|e| {
        LedgerError::backend(
            format!("cannot encode the event data while {}", doing()),
            boxed(e),
        )
    })?;
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO effect_events (operation_id, event_type, data_json, timestamp) \
             VALUES (?1, ?2, ?3, ?4)",
        )
        .map_err(|e| ledger_error(doing(), e))?;
    stmt.execute(params![
        operation_id,
        event.event_type,
        data,
        event.timestamp
    ])
    .map_err(|e| ledger_error(doing(), e))?;
    Ok(())
}

/// Reads the cells of one row, naming the row in every error.
struct Cells<'r, 's> {
    row: &'r Row<'s>,
    whose: String,
}

impl Cells<'_, '_> {
    fn get<T: FromSql>(&self, index: usize, column: &str) -> Result<T, LedgerError> {
        self.row.get(index).map_err(|e| self.corrupt(column, e))
    }

    fn corrupt(&self, column: &str, cause: impl Into<BoxError>) -> LedgerError {
        LedgerError::corrupt(
            format!("{} has an unreadable {column}", self.whose),
            Some(cause.into()),
        )
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn boxed(error: impl std::error::Error + Send + Sync + 'static) -> Option<BoxError> {
    Some(Box::new(error))
}
