//! The planner's rules for [`Transition::Compensation`](super::Transition::Compensation)
//! (docs/spec.md §5e): none changes a status, and a repeat writes nothing.

use serde_json::{Value, json};

use super::Planner;
use crate::compensation::{CompensationLink, CompensationStep};
use crate::error::LedgerError;
use crate::event;
use crate::evidence;
use crate::record::EffectRecord;
use crate::status::EffectStatus;

impl Planner {
    pub(super) fn compensation(
        &mut self,
        record: &mut EffectRecord,
        step: &CompensationStep,
    ) -> Result<(), LedgerError> {
        if let CompensationStep::Of { original } = step {
            return self.link_to_original(record, original);
        }
        if record.status != EffectStatus::Confirmed {
            return Err(LedgerError::InvalidTransition {
                operation_id: record.operation_id.clone(),
                transition: step.name(),
                status: record.status,
            });
        }
        match step {
            CompensationStep::Request {
                actor,
                reason,
                evidence_reference,
            } => {
                for (field, value) in [
                    ("actor", actor),
                    ("reason", reason),
                    ("evidence reference", evidence_reference),
                ] {
                    if value.trim().is_empty() {
                        return Err(LedgerError::invalid_input(format!(
                            "a compensation request needs a non-empty {field}"
                        )));
                    }
                }
                let finished = record.compensation().is_some_and(|link| link.is_finished());
                if record.compensation_request().is_some() || finished {
                    return Ok(());
                }
                let request = json!({
                    "actor": actor,
                    "reason": reason,
                    "evidence_reference": evidence_reference,
                    "requested_at": self.at,
                });
                record
                    .evidence
                    .insert(evidence::COMPENSATION_REQUEST.into(), request.clone());
                self.event(event::COMPENSATION_REQUESTED, request);
                Ok(())
            }
            CompensationStep::Start {
                operation_id,
                contract_name,
                contract_version,
            } => {
                if *operation_id == record.operation_id {
                    return Err(LedgerError::invalid_input(
                        "an operation cannot be its own compensation",
                    ));
                }
                match record.compensation() {
                    Some(link) if link.operation_id == *operation_id => return Ok(()),
                    Some(_) => {
                        return Err(LedgerError::Conflict {
                            operation_id: record.operation_id.clone(),
                            field: "compensation operation id (another compensation was started)",
                        });
                    }
                    None => {}
                }
                record.evidence.insert(
                    evidence::COMPENSATION.into(),
                    json!({
                        "operation_id": operation_id,
                        "contract_name": contract_name,
                        "contract_version": contract_version,
                        "state": CompensationLink::STARTED,
                    }),
                );
                self.event(
                    event::COMPENSATION_STARTED,
                    json!({
                        "compensation_operation_id": operation_id,
                        "contract_name": contract_name,
                        "contract_version": contract_version,
                    }),
                );
                Ok(())
            }
            CompensationStep::Finish {
                operation_id,
                status,
            } => self.finish_compensation(record, operation_id, *status),
            CompensationStep::Of { .. } => Ok(()),
        }
    }

    fn finish_compensation(
        &mut self,
        record: &mut EffectRecord,
        operation_id: &str,
        status: EffectStatus,
    ) -> Result<(), LedgerError> {
        let event_type = match status {
            EffectStatus::Confirmed => event::COMPENSATED,
            EffectStatus::Rejected => event::COMPENSATION_REJECTED,
            other => {
                return Err(LedgerError::invalid_input(format!(
                    "a compensation finishes confirmed or rejected, not {other}"
                )));
            }
        };
        let Some(link) = record.compensation() else {
            return Err(LedgerError::invalid_input(
                "no compensation of this operation was started",
            ));
        };
        if link.operation_id != operation_id {
            return Err(LedgerError::Conflict {
                operation_id: record.operation_id.clone(),
                field: "compensation operation id (another compensation was started)",
            });
        }
        if link.state == status.as_str() {
            return Ok(());
        }
        if link.is_finished() {
            return Err(LedgerError::invalid_input(format!(
                "the compensation already finished {}",
                link.state
            )));
        }
        if let Some(Value::Object(map)) = record.evidence.get_mut(evidence::COMPENSATION) {
            map.insert("state".into(), status.as_str().into());
        }
        record.evidence.remove(evidence::COMPENSATION_REQUEST);
        self.event(
            event_type,
            json!({ "compensation_operation_id": operation_id }),
        );
        Ok(())
    }

    /// Records on a compensation the operation it undoes.
    fn link_to_original(
        &mut self,
        record: &mut EffectRecord,
        original: &str,
    ) -> Result<(), LedgerError> {
        if original == record.operation_id {
            return Err(LedgerError::invalid_input(
                "an operation cannot compensate itself",
            ));
        }
        match record.compensates() {
            Some(linked) if linked == original => return Ok(()),
            Some(_) => {
                return Err(LedgerError::Conflict {
                    operation_id: record.operation_id.clone(),
                    field: "compensated operation (it compensates another one)",
                });
            }
            None => {}
        }
        record
            .evidence
            .insert(evidence::COMPENSATES.into(), original.into());
        self.event(event::COMPENSATION_OF, json!({ "compensates": original }));
        Ok(())
    }
}

#[cfg(test)]
mod tests;
