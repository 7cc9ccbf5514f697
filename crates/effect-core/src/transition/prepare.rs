//! Creating an operation: its first record and `prepared` event, and the
//! identity a later prepare of the same operation id must match
//! (docs/spec.md §4, first rows).

use serde_json::Value;

use super::{NewOperation, Planner, object};
use crate::error::LedgerError;
use crate::event;
use crate::evidence;
use crate::record::{EffectRecord, Evidence};
use crate::status::EffectStatus;

impl Planner {
    pub(super) fn create(&mut self, operation_id: &str, op: &NewOperation) -> EffectRecord {
        let fingerprint = op.fingerprint.stored();
        let mut data = object([
            ("contract_name", Value::String(op.contract_name.clone())),
            (
                "contract_version",
                Value::String(op.contract_version.clone()),
            ),
            ("request_fingerprint", Value::String(fingerprint.clone())),
        ]);
        if let (Some(intent), Value::Object(map)) = (&op.intent, &mut data) {
            map.insert(
                crate::intent::EVENT_KEY.to_owned(),
                crate::intent::envelope(intent),
            );
        }
        if let (Some(context), Value::Object(map)) = (&op.trace_context, &mut data) {
            map.insert(
                crate::trace::EVENT_KEY.to_owned(),
                Value::String(context.clone()),
            );
        }
        if let (Some(terms), Value::Object(map)) = (&op.contract_terms, &mut data) {
            map.insert(crate::terms::EVENT_KEY.to_owned(), terms.to_value());
        }
        if let (true, Value::Object(map)) = (op.requires_approval, &mut data) {
            map.insert(evidence::APPROVAL_REQUIRED.to_owned(), Value::Bool(true));
            if let Some(shown) = &op.redacted_arguments {
                map.insert(crate::intent::REDACTED_KEY.to_owned(), shown.clone());
            }
        }
        self.event(event::PREPARED, data);
        let mut record = EffectRecord {
            operation_id: operation_id.to_owned(),
            contract_name: op.contract_name.clone(),
            contract_version: op.contract_version.clone(),
            request_fingerprint: fingerprint,
            provider_idempotency_key: op.provider_idempotency_key.clone(),
            status: EffectStatus::Prepared,
            output: None,
            provider_operation_id: None,
            error: None,
            attempts: 0,
            evidence: Evidence::new(),
            owner_token: None,
            lease_until: None,
            created_at: self.at.clone(),
            // An insert is always written with the transition's time
            // (`finish`): no copy of it is made here.
            updated_at: String::new(),
        };
        if op.requires_approval {
            record.status = EffectStatus::AwaitingApproval;
            record
                .evidence
                .insert(evidence::APPROVAL_REQUIRED.into(), Value::Bool(true));
        }
        record
    }
}

pub(super) fn check_identity(
    operation_id: &str,
    record: &EffectRecord,
    op: &NewOperation,
) -> Result<(), LedgerError> {
    let field = if record.contract_name != op.contract_name {
        "contract name"
    } else if record.contract_version != op.contract_version {
        "contract version"
    } else if !op.fingerprint.matches(&record.request_fingerprint) {
        "request fingerprint (the arguments differ)"
    } else if record.provider_idempotency_key != op.provider_idempotency_key {
        "provider idempotency key"
    } else {
        return Ok(());
    };
    Err(LedgerError::Conflict {
        operation_id: operation_id.to_owned(),
        field,
    })
}
