//! Rows ↔ records and events, in the value formats of docs/spec.md §8: statuses as their
//! exact strings, timestamps as the record's ISO text, `lease_until` as REAL,
//! JSON columns as compact JSON text.
//!
//! Decoding never panics: a value the ledger cannot read becomes
//! [`LedgerError::Corrupt`] naming the operation (and the event) it belongs to.

use std::sync::LazyLock;

use effect_core::canonical::canonical_json;
use effect_core::transition::PendingEvent;
use effect_core::{BoxError, EffectRecord, EffectStatus, LedgerError, LedgerEvent};
use rusqlite::types::{FromSql, ToSql};
use rusqlite::{Connection, Row, params};
use serde_json::Value;

use crate::error::ledger_error;
use crate::schema::Layout;

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

/// The operation columns, in [`decode_record`]'s order.
pub(crate) const RECORD_COLUMNS: &str = record_columns!();

/// One operation by id.
pub(crate) const SELECT_RECORD: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM effect_operations WHERE operation_id = ?1"
);

/// The queries of `list` on a file of one [`Layout`].
#[derive(Debug)]
pub(crate) struct ListSql {
    /// A page of operations, newest update first; `?1` is the limit.
    pub(crate) all: String,
    /// A page of operations in status `?1`, newest update first; `?2` is the limit.
    pub(crate) by_status: String,
    /// The sort key of operation `?1`, for a cursor: `updated_at`, the
    /// last event's sequence (0 before version 3) and the rowid.
    pub(crate) cursor: String,
    /// [`all`](Self::all) after a cursor: `?1` the limit, `?2`..`?4` the
    /// cursor's sort key.
    pub(crate) all_after: String,
    /// [`by_status`](Self::by_status) after an optional cursor (`?3`..`?5`,
    /// NULL for none), and, when `?6` is not NULL, only leases ended by
    /// `?6` (seconds since the epoch).
    pub(crate) by_status_after: String,
}

/// The `list` queries for a file of this layout.
///
/// Newest update first, ties broken by the latest event (the last transition
/// first, even when the clock did not move), then by rowid. On the current
/// layout a status page walks `idx_effect_operations_status_list`, and a page
/// of every status merges one such walk per status, each stopped at the
/// limit (plus one over the ranges between statuses, for a row whose status
/// is unknown): no query reads more than the statuses times the limit,
/// whatever the ledger's size. Files read as they are from before version 3 order
/// ties by rowid alone. A cursor continues below the sort key of the
/// operation it names, the same key the order uses.
pub(crate) fn list_sql(layout: Layout) -> &'static ListSql {
    static CURRENT: LazyLock<ListSql> = LazyLock::new(|| {
        const ORDER: &str = "ORDER BY updated_at DESC, last_event_sequence DESC, rowid DESC";
        const KEY: &str = "(updated_at, last_event_sequence, rowid)";
        let walk = |filter: &str, after: &str| {
            format!(
                "SELECT * FROM (SELECT {}, last_event_sequence, rowid AS list_rowid \
                 FROM effect_operations WHERE ({filter}){after} {ORDER} LIMIT ?1)",
                record_columns!()
            )
        };
        let mut known: Vec<&str> = EffectStatus::ALL.iter().map(|s| s.as_str()).collect();
        known.sort_unstable();
        let mut filters: Vec<String> = known
            .iter()
            .map(|status| format!("status = '{status}'"))
            .collect();
        // A status no version of the ledger writes sorts between, before or
        // after the known ones: these ranges are empty in a healthy ledger, and
        // otherwise list such a row, which then fails to decode as corrupt
        // rather than vanish from the list.
        let below = known.first().map(|first| format!("status < '{first}'"));
        let between = known
            .windows(2)
            .map(|w| format!("(status > '{}' AND status < '{}')", w[0], w[1]));
        let above = known.last().map(|last| format!("status > '{last}'"));
        let others: Vec<String> = below.into_iter().chain(between).chain(above).collect();
        filters.push(others.join(" OR "));
        let merged = |after: &str| {
            let walks: Vec<String> = filters.iter().map(|f| walk(f, after)).collect();
            format!(
                "SELECT {} FROM ({}) \
                 ORDER BY updated_at DESC, last_event_sequence DESC, list_rowid DESC LIMIT ?1",
                record_columns!(),
                walks.join(" UNION ALL ")
            )
        };
        ListSql {
            all: merged(""),
            by_status: format!(
                "SELECT {} FROM effect_operations WHERE status = ?1 {ORDER} LIMIT ?2",
                record_columns!()
            ),
            cursor: "SELECT updated_at, last_event_sequence, rowid FROM effect_operations \
                     WHERE operation_id = ?1"
                .to_owned(),
            all_after: merged(&format!(" AND {KEY} < (?2, ?3, ?4)")),
            by_status_after: format!(
                "SELECT {} FROM effect_operations WHERE status = ?1 \
                 AND (?3 IS NULL OR {KEY} < (?3, ?4, ?5)) \
                 AND (?6 IS NULL OR lease_until IS NULL OR lease_until <= ?6) \
                 {ORDER} LIMIT ?2",
                record_columns!()
            ),
        }
    });
    static BEFORE_LAST_EVENT: LazyLock<ListSql> = LazyLock::new(|| {
        const ORDER: &str = "ORDER BY updated_at DESC, rowid DESC";
        // The middle term of the cursor is always 0 on these files.
        const KEY: &str = "(updated_at, 0, rowid)";
        ListSql {
            all: format!(
                "SELECT {} FROM effect_operations {ORDER} LIMIT ?1",
                record_columns!()
            ),
            by_status: format!(
                "SELECT {} FROM effect_operations WHERE status = ?1 {ORDER} LIMIT ?2",
                record_columns!()
            ),
            cursor: "SELECT updated_at, 0, rowid FROM effect_operations WHERE operation_id = ?1"
                .to_owned(),
            all_after: format!(
                "SELECT {} FROM effect_operations WHERE {KEY} < (?2, ?3, ?4) {ORDER} LIMIT ?1",
                record_columns!()
            ),
            by_status_after: format!(
                "SELECT {} FROM effect_operations WHERE status = ?1 \
                 AND (?3 IS NULL OR {KEY} < (?3, ?4, ?5)) \
                 AND (?6 IS NULL OR lease_until IS NULL OR lease_until <= ?6) \
                 {ORDER} LIMIT ?2",
                record_columns!()
            ),
        }
    });
    match layout {
        Layout::Current => &CURRENT,
        Layout::BeforeLastEvent => &BEFORE_LAST_EVENT,
    }
}

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
    decode(row, Json::Strict)
}

/// [`decode_record`] for `list`: a row whose JSON cells cannot be read is
/// still listed, with no output and its evidence replaced by one entry,
/// [`LEDGER_READ_ERROR`](effect_core::evidence::LEDGER_READ_ERROR), saying
/// what could not be read; `get` of that operation
/// reports the error itself. One unreadable row never fails a listing.
pub(crate) fn decode_listed(row: &Row<'_>) -> Result<EffectRecord, LedgerError> {
    decode(row, Json::Lenient)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Json {
    Strict,
    Lenient,
}

fn decode(row: &Row<'_>, json: Json) -> Result<EffectRecord, LedgerError> {
    let operation_id: String = row.get(0).map_err(|e| {
        LedgerError::corrupt("an operation row has an unreadable operation_id", boxed(e))
    })?;
    let at = Cells {
        row,
        whose: Whose::Operation(&operation_id),
    };
    let status: String = at.get(5, "status")?;
    let status = status
        .parse::<EffectStatus>()
        .map_err(|e| at.corrupt("status", e))?;
    let mut unreadable = Vec::new();
    let output = at
        .get::<Option<String>>(6, "result_json")?
        .map(|text| serde_json::from_str::<Value>(&text))
        .transpose();
    let output = match (output, json) {
        (Ok(output), _) => output,
        (Err(e), Json::Lenient) => {
            unreadable.push(format!("result_json: {e}"));
            None
        }
        (Err(e), Json::Strict) => return Err(at.corrupt("result_json", e)),
    };
    let attempts: i64 = at.get(9, "attempts")?;
    let attempts = u32::try_from(attempts).map_err(|e| at.corrupt("attempts", e))?;
    let evidence: String = at.get(10, "evidence_json")?;
    let evidence = match serde_json::from_str::<Value>(&evidence) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!(
            "expected a JSON object, found {}",
            json_kind(&other)
        )),
        Err(e) => Err(e.to_string()),
    };
    let mut evidence = match (evidence, json) {
        (Ok(map), _) => map,
        (Err(e), Json::Lenient) => {
            unreadable.push(format!("evidence_json: {e}"));
            effect_core::Evidence::new()
        }
        (Err(e), Json::Strict) => return Err(at.corrupt("evidence_json", e)),
    };
    if !unreadable.is_empty() {
        evidence = effect_core::Evidence::new();
        evidence.insert(
            effect_core::evidence::LEDGER_READ_ERROR.into(),
            unreadable.join("; ").into(),
        );
    }
    // Every cell is read before the record takes the operation id.
    let contract_name: String = at.get(1, "contract_name")?;
    let contract_version: String = at.get(2, "contract_version")?;
    let request_fingerprint: String = at.get(3, "request_fingerprint")?;
    let provider_idempotency_key = at.get(4, "provider_idempotency_key")?;
    let provider_operation_id = at.get(7, "provider_operation_id")?;
    let error = at.get(8, "error")?;
    let owner_token = at.get(11, "owner_token")?;
    let lease_until = at.get(12, "lease_until")?;
    let created_at: String = at.get(13, "created_at")?;
    let updated_at = at.get(14, "updated_at")?;
    let mut record = EffectRecord::new(
        operation_id,
        contract_name,
        contract_version,
        request_fingerprint,
        created_at,
    );
    record.provider_idempotency_key = provider_idempotency_key;
    record.status = status;
    record.output = output;
    record.provider_operation_id = provider_operation_id;
    record.error = error;
    record.attempts = attempts;
    record.evidence = evidence;
    record.owner_token = owner_token;
    record.lease_until = lease_until;
    record.updated_at = updated_at;
    Ok(record)
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
        whose: Whose::Event(sequence, &operation_id),
    };
    let sequence = u64::try_from(sequence).map_err(|e| at.corrupt("sequence", e))?;
    let data: String = at.get(3, "data_json")?;
    let data = serde_json::from_str(&data).map_err(|e| at.corrupt("data_json", e))?;
    let event_type = at.get(2, "event_type")?;
    let timestamp = at.get(4, "timestamp")?;
    Ok(LedgerEvent {
        sequence,
        event_type,
        data,
        timestamp,
        operation_id,
    })
}

/// How [`write_record`] writes a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordWrite {
    /// A new operation, whose latest event has this sequence (`None` when
    /// it has no event yet).
    Insert { last_event: Option<i64> },
    /// A transition that appended events, the latest with this sequence: it
    /// becomes the row's `list` tie-break, so among equal `updated_at` the
    /// last transition comes first even when the clock did not move.
    Transition { last_event: i64 },
    /// A change without events (a lease renewal): the row keeps its place in
    /// `list`, as its `updated_at` does.
    InPlace,
}

/// What [`write_record`] requires of the row before it writes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Expect<'r> {
    /// Nothing: the caller read the row in this write transaction (or found
    /// none), so the write must change exactly one row.
    Read,
    /// No row: an insert writes nothing should the operation exist.
    Absent,
    /// The row holds exactly this record, every column the record has: an
    /// update writes nothing otherwise.
    Row(&'r EffectRecord),
}

/// The columns an update rewrites, `?2` to `?15`; `?1` is the operation id.
macro_rules! update_set {
    () => {
        "UPDATE effect_operations SET \
            contract_name = ?2, contract_version = ?3, request_fingerprint = ?4, \
            provider_idempotency_key = ?5, status = ?6, result_json = ?7, \
            provider_operation_id = ?8, error = ?9, attempts = ?10, evidence_json = ?11, \
            owner_token = ?12, lease_until = ?13, created_at = ?14, updated_at = ?15"
    };
}

/// A guarded update: the columns that can change, `?6` to `?13`, `?15`
/// and `?16`; the others (`?2` to `?5`, `?14`) must hold the values the
/// record keeps, and the rest of the row the known record's values, bound
/// at `?17` to `?25`.
macro_rules! guarded_update {
    ($last_event:literal) => {
        concat!(
            "UPDATE effect_operations SET \
                status = ?6, result_json = ?7, provider_operation_id = ?8, error = ?9, \
                attempts = ?10, evidence_json = ?11, owner_token = ?12, lease_until = ?13, \
                updated_at = ?15",
            $last_event,
            " WHERE operation_id = ?1 AND contract_name = ?2 AND contract_version = ?3 \
                AND request_fingerprint = ?4 AND provider_idempotency_key IS ?5 \
                AND created_at = ?14 AND status = ?17 AND result_json IS ?18 \
                AND provider_operation_id IS ?19 AND error IS ?20 AND attempts = ?21 \
                AND evidence_json = ?22 AND owner_token IS ?23 AND lease_until IS ?24 \
                AND updated_at = ?25"
        )
    };
}

macro_rules! insert_record {
    () => {
        "INSERT INTO effect_operations (operation_id, contract_name, contract_version, \
            request_fingerprint, provider_idempotency_key, status, result_json, \
            provider_operation_id, error, attempts, evidence_json, owner_token, lease_until, \
            created_at, updated_at, last_event_sequence) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
    };
}

/// Writes the full record, in place (a transition rewrites the row's cells,
/// never its rowid), if the row is as `expect` says. Returns whether it
/// wrote; with [`Expect::Read`] it always writes or fails.
pub(crate) fn write_record(
    conn: &Connection,
    record: &EffectRecord,
    how: RecordWrite,
    expect: Expect<'_>,
) -> Result<bool, LedgerError> {
    let doing = || format!("writing operation {:?}", record.operation_id);
    // Key-sorted compact text, whatever serde_json features the build has
    // (another crate may turn on `preserve_order`).
    let output = record.output.as_ref().map(canonical_json);
    let evidence = canonical_json(&Value::Object(record.evidence.clone()));
    let guarded = matches!(expect, Expect::Row(_));
    let (sql, last_event) = match (how, guarded) {
        (RecordWrite::Insert { last_event }, _) => (
            match expect {
                Expect::Absent => {
                    concat!(insert_record!(), " ON CONFLICT (operation_id) DO NOTHING")
                }
                _ => insert_record!(),
            },
            last_event,
        ),
        (RecordWrite::Transition { last_event }, false) => (
            concat!(
                update_set!(),
                ", last_event_sequence = ?16 WHERE operation_id = ?1"
            ),
            Some(last_event),
        ),
        (RecordWrite::Transition { last_event }, true) => (
            guarded_update!(", last_event_sequence = ?16"),
            Some(last_event),
        ),
        (RecordWrite::InPlace, false) => (concat!(update_set!(), " WHERE operation_id = ?1"), None),
        // `?16` is not named: it binds NULL, unused.
        (RecordWrite::InPlace, true) => (guarded_update!(""), None),
    };
    let mut stmt = conn
        .prepare_cached(sql)
        .map_err(|e| ledger_error(doing(), e))?;
    let attempts = i64::from(record.attempts);
    let status = record.status.as_str();
    let mut values: Vec<&dyn ToSql> = vec![
        &record.operation_id,
        &record.contract_name,
        &record.contract_version,
        &record.request_fingerprint,
        &record.provider_idempotency_key,
        &status,
        &output,
        &record.provider_operation_id,
        &record.error,
        &attempts,
        &evidence,
        &record.owner_token,
        &record.lease_until,
        &record.created_at,
        &record.updated_at,
        &last_event,
    ];
    let expected = match expect {
        Expect::Row(expected) => {
            // The guarded update leaves these columns as they are: the
            // record must keep the known values.
            if (
                &record.contract_name,
                &record.contract_version,
                &record.request_fingerprint,
                &record.provider_idempotency_key,
                &record.created_at,
            ) != (
                &expected.contract_name,
                &expected.contract_version,
                &expected.request_fingerprint,
                &expected.provider_idempotency_key,
                &expected.created_at,
            ) {
                return Ok(false);
            }
            Some((
                expected,
                expected.output.as_ref().map(canonical_json),
                canonical_json(&Value::Object(expected.evidence.clone())),
                i64::from(expected.attempts),
                expected.status.as_str(),
            ))
        }
        Expect::Read | Expect::Absent => None,
    };
    if let Some((expected, output, evidence, attempts, status)) = &expected {
        values.extend_from_slice(&[
            status as &dyn ToSql,
            output,
            &expected.provider_operation_id,
            &expected.error,
            attempts,
            evidence,
            &expected.owner_token,
            &expected.lease_until,
            &expected.updated_at,
        ]);
    } else if how == RecordWrite::InPlace {
        // An in-place write leaves last_event_sequence alone: it binds 15 values.
        values.truncate(15);
    }
    let changed = stmt
        .execute(values.as_slice())
        .map_err(|e| ledger_error(doing(), e))?;
    match (changed, expect) {
        (1, _) => Ok(true),
        (0, Expect::Absent | Expect::Row(_)) => Ok(false),
        (changed, _) => Err(LedgerError::backend(
            format!("{} changed {changed} rows instead of one", doing()),
            None,
        )),
    }
}

/// The sequence the next event gets: one above the largest (events are never
/// deleted, so sequences only grow). Read inside the write transaction, which
/// no other writer can interleave with.
pub(crate) fn next_event_sequence(conn: &Connection) -> Result<i64, LedgerError> {
    let doing = || "reading the latest event sequence".to_owned();
    let mut stmt = conn
        .prepare_cached("SELECT MAX(sequence) FROM effect_events")
        .map_err(|e| ledger_error(doing(), e))?;
    let latest: Option<i64> = stmt
        .query_row([], |row| row.get(0))
        .map_err(|e| ledger_error(doing(), e))?;
    latest.unwrap_or(0).checked_add(1).ok_or_else(|| {
        LedgerError::backend("the event sequence has reached its largest value", None)
    })
}

/// Appends `events` with consecutive sequences from `first` (which the
/// caller has checked do not overflow), one statement each: a statement
/// writing several rows would need a statement journal, which costs more
/// than the statements it saves.
pub(crate) fn insert_events(
    conn: &Connection,
    operation_id: &str,
    first: i64,
    events: &[PendingEvent],
) -> Result<(), LedgerError> {
    for (event, sequence) in events.iter().zip(first..) {
        let doing = || {
            format!(
                "appending a {} event to operation {operation_id:?}",
                event.event_type
            )
        };
        let data = canonical_json(&event.data);
        conn.prepare_cached(
            "INSERT INTO effect_events (sequence, operation_id, event_type, data_json, timestamp) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                sequence,
                operation_id,
                event.event_type,
                data,
                event.timestamp
            ])
        })
        .map_err(|e| ledger_error(doing(), e))?;
    }
    Ok(())
}

/// Reads the cells of one row, naming the row in every error.
struct Cells<'r, 's, 'w> {
    row: &'r Row<'s>,
    whose: Whose<'w>,
}

/// The row [`Cells`] reads, named only when an error needs the name (a
/// decode that succeeds formats no message).
#[derive(Debug, Clone, Copy)]
enum Whose<'w> {
    Operation(&'w str),
    Event(i64, &'w str),
}

impl std::fmt::Display for Whose<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Whose::Operation(id) => write!(f, "operation {id:?}"),
            Whose::Event(sequence, id) => write!(f, "event {sequence} of operation {id:?}"),
        }
    }
}

impl Cells<'_, '_, '_> {
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

/// The operation's record, if it exists.
pub(crate) fn load(
    conn: &Connection,
    operation_id: &str,
) -> Result<Option<EffectRecord>, LedgerError> {
    let doing = || format!("reading operation {operation_id:?}");
    // The primary key allows at most one row.
    Ok(collect(
        conn,
        SELECT_RECORD,
        params![operation_id],
        decode_record,
        &doing,
    )?
    .pop())
}

/// Runs a cached query and decodes every row.
pub(crate) fn collect<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    decode: fn(&rusqlite::Row<'_>) -> Result<T, LedgerError>,
    doing: &dyn Fn() -> String,
) -> Result<Vec<T>, LedgerError> {
    let mut stmt = conn
        .prepare_cached(sql)
        .map_err(|e| ledger_error(doing(), e))?;
    let mut rows = stmt.query(params).map_err(|e| ledger_error(doing(), e))?;
    let mut decoded = Vec::new();
    while let Some(row) = rows.next().map_err(|e| ledger_error(doing(), e))? {
        decoded.push(decode(row)?);
    }
    Ok(decoded)
}
