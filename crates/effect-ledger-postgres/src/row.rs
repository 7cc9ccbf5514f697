//! Converting between table rows and effect-core's records and events.

use effect_core::canonical::canonical_json;
use effect_core::{EffectRecord, EffectStatus, Evidence, LedgerError, LedgerEvent};
use postgres::Row;
use postgres::types::{FromSql, ToSql, Type};
use serde_json::Value;

use crate::error::corrupt;

/// Reads one `effect_operations` row. Undecodable values (an unknown status,
/// invalid JSON, a negative attempt count) are [`LedgerError::Corrupt`].
pub(crate) fn record(row: &Row) -> Result<EffectRecord, LedgerError> {
    decode(row, false)
}

/// [`record`] for `list`: a row whose stored JSON cannot be read is listed
/// without its output, its evidence replaced by
/// [`LEDGER_READ_ERROR`](effect_core::evidence::LEDGER_READ_ERROR) saying
/// why, so one unreadable row never fails a listing.
pub(crate) fn listed(row: &Row) -> Result<EffectRecord, LedgerError> {
    decode(row, true)
}

fn decode(row: &Row, lenient: bool) -> Result<EffectRecord, LedgerError> {
    let operation_id: String = column(row, "operation_id", "?")?;
    let id = operation_id.as_str();
    let status: String = column(row, "status", id)?;
    let status = status
        .parse::<EffectStatus>()
        .map_err(|err| corrupt(format!("operation {id:?} has an unknown status"), err))?;
    let attempts: i32 = column(row, "attempts", id)?;
    let attempts = u32::try_from(attempts).map_err(|err| {
        corrupt(
            format!("operation {id:?} has a negative attempt count"),
            err,
        )
    })?;
    let output = column::<Option<String>>(row, "result_json", id)?
        .map(|text| json(&text, "result_json", id))
        .transpose();
    let evidence = match column::<Option<String>>(row, "evidence_json", id)? {
        None => Ok(Evidence::new()),
        Some(text) => match json(&text, "evidence_json", id) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(Value::Null) => Ok(Evidence::new()),
            Ok(_) => Err(LedgerError::corrupt(
                format!("evidence_json of operation {id:?} is not a JSON object"),
                None,
            )),
            Err(err) => Err(err),
        },
    };
    let (output, evidence) = match (output, evidence) {
        (Ok(output), Ok(evidence)) => (output, evidence),
        (Err(err), _) | (_, Err(err)) if !lenient => return Err(err),
        (output, evidence) => {
            let why: Vec<String> = [output.err(), evidence.err()]
                .into_iter()
                .flatten()
                .map(|err| {
                    let mut text = err.to_string();
                    if let Some(source) = std::error::Error::source(&err) {
                        text.push_str(&format!(": {source}"));
                    }
                    text
                })
                .collect();
            let mut flagged = Evidence::new();
            flagged.insert(
                effect_core::evidence::LEDGER_READ_ERROR.into(),
                why.join("; ").into(),
            );
            (None, flagged)
        }
    };
    let mut record = EffectRecord::new(
        operation_id.clone(),
        column::<String>(row, "contract_name", id)?,
        column::<String>(row, "contract_version", id)?,
        column::<String>(row, "request_fingerprint", id)?,
        column::<String>(row, "created_at", id)?,
    );
    record.provider_idempotency_key = column(row, "provider_idempotency_key", id)?;
    record.status = status;
    record.output = output;
    record.provider_operation_id = column(row, "provider_operation_id", id)?;
    record.error = column(row, "error", id)?;
    record.attempts = attempts;
    record.evidence = evidence;
    record.owner_token = column(row, "owner_token", id)?;
    record.lease_until = column(row, "lease_until", id)?;
    record.updated_at = column(row, "updated_at", id)?;
    Ok(record)
}

/// Reads one `effect_events` row.
pub(crate) fn event(row: &Row) -> Result<LedgerEvent, LedgerError> {
    let operation_id: String = column(row, "operation_id", "?")?;
    let id = operation_id.as_str();
    let sequence: i64 = column(row, "sequence", id)?;
    let sequence = u64::try_from(sequence).map_err(|err| {
        corrupt(
            format!("an event of operation {id:?} has a negative sequence"),
            err,
        )
    })?;
    let data: String = column(row, "data_json", id)?;
    Ok(LedgerEvent {
        sequence,
        data: json(&data, "data_json", id)?,
        event_type: column(row, "event_type", id)?,
        timestamp: column(row, "timestamp", id)?,
        operation_id,
    })
}

/// The 15 parameters of the insert and update statements, in column order.
pub(crate) struct RecordParams {
    result_json: Option<String>,
    evidence_json: String,
    attempts: i32,
    status: &'static str,
}

impl RecordParams {
    /// The types of [`RecordParams::bind`]'s values, in order.
    pub(crate) const TYPES: [Type; 15] = [
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT4,
        Type::TEXT,
        Type::TEXT,
        Type::FLOAT8,
        Type::TEXT,
        Type::TEXT,
    ];

    pub(crate) fn new(record: &EffectRecord) -> Result<RecordParams, LedgerError> {
        let attempts = i32::try_from(record.attempts).map_err(|_| {
            LedgerError::invalid_input(format!(
                "operation {:?} has more attempts than the ledger can store",
                record.operation_id
            ))
        })?;
        Ok(RecordParams {
            // Key-sorted compact text, whatever serde_json features the
            // build has (another crate may turn on `preserve_order`).
            result_json: record.output.as_ref().map(canonical_json),
            evidence_json: canonical_json(&Value::Object(record.evidence.clone())),
            attempts,
            status: record.status.as_str(),
        })
    }

    pub(crate) fn bind<'a>(&'a self, record: &'a EffectRecord) -> [&'a (dyn ToSql + Sync); 15] {
        [
            &record.operation_id,
            &record.contract_name,
            &record.contract_version,
            &record.request_fingerprint,
            &record.provider_idempotency_key,
            &self.status,
            &self.result_json,
            &record.provider_operation_id,
            &record.error,
            &self.attempts,
            &self.evidence_json,
            &record.owner_token,
            &record.lease_until,
            &record.created_at,
            &record.updated_at,
        ]
    }
}

fn column<'a, T: FromSql<'a>>(row: &'a Row, name: &str, id: &str) -> Result<T, LedgerError> {
    row.try_get(name).map_err(|err| {
        corrupt(
            format!("column {name} of operation {id:?} cannot be decoded"),
            err,
        )
    })
}

fn json(text: &str, name: &str, id: &str) -> Result<Value, LedgerError> {
    serde_json::from_str(text)
        .map_err(|err| corrupt(format!("{name} of operation {id:?} is not valid JSON"), err))
}
