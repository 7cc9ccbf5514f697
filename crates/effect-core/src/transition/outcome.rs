//! What a dispatch's owner, the reconciler or a recovery worker records
//! about an outcome (docs/spec.md §4): confirmed, rejected, unknown or
//! quarantined, a reset for another attempt, a precondition's refusal
//! before the first dispatch, and the events that change no status (a late
//! observation, why recovery is blocked).

use serde_json::{Value, json};

use super::{Confirmation, Planner, keep_link, object, release};
use crate::error::LedgerError;
use crate::event;
use crate::evidence;
use crate::record::{EffectRecord, Evidence};
use crate::status::EffectStatus;

impl Planner {
    /// [`Transition::MarkOutcomeUnknown`](super::Transition::MarkOutcomeUnknown):
    /// by the owner of the dispatch, or without a token on an operation
    /// already uncertain.
    pub(super) fn mark_outcome_unknown(
        &mut self,
        record: &mut EffectRecord,
        owner_token: Option<&str>,
        error: &str,
        evidence: &Evidence,
    ) -> bool {
        let allowed = match owner_token {
            Some(token) => record.owned_by(token),
            None => record.status.is_uncertain(),
        };
        if !allowed {
            return false;
        }
        self.uncertain(
            record,
            EffectStatus::OutcomeUnknown,
            event::OUTCOME_UNKNOWN,
            error,
            evidence,
        );
        true
    }

    /// [`Transition::MarkConfirmed`](super::Transition::MarkConfirmed): by
    /// the owner of the dispatch, or without a token by the reconciler of an
    /// operation not dispatched now (a repeat on a confirmed one is applied
    /// and writes nothing).
    pub(super) fn mark_confirmed(
        &mut self,
        record: &mut EffectRecord,
        owner_token: Option<&str>,
        confirmation: &Confirmation,
    ) -> bool {
        use EffectStatus as S;
        let status = record.status;
        let allowed = match owner_token {
            Some(token) => record.owned_by(token),
            None if status == S::Confirmed => return true,
            None => matches!(status, S::Prepared | S::OutcomeUnknown | S::Quarantined),
        };
        if !allowed {
            return false;
        }
        record.status = S::Confirmed;
        record.output = Some(confirmation.output.clone());
        record.provider_operation_id = confirmation.provider_operation_id.clone();
        let link = record.evidence.remove(evidence::COMPENSATES);
        record.evidence = confirmation.evidence.clone();
        keep_link(&mut record.evidence, link);
        record.error = None;
        release(record);
        self.event(
            event::CONFIRMED,
            object([
                ("evidence", Value::Object(record.evidence.clone())),
                (
                    "provider_operation_id",
                    record.provider_operation_id.clone().into(),
                ),
            ]),
        );
        true
    }

    /// [`Transition::MarkRejected`](super::Transition::MarkRejected): by the
    /// owner of the dispatch; its budget charges go back.
    pub(super) fn mark_rejected(
        &mut self,
        record: &mut EffectRecord,
        owner_token: &str,
        error: &str,
    ) -> bool {
        if !record.owned_by(owner_token) {
            return false;
        }
        record.status = EffectStatus::Rejected;
        record.error = Some(error.to_owned());
        release(record);
        self.event(event::REJECTED, json!({ "error": error }));
        let charges = record.evidence.remove(evidence::BUDGET_CHARGES);
        self.refund(charges);
        true
    }

    /// [`Transition::Quarantine`](super::Transition::Quarantine): an
    /// uncertain operation waits for an operator.
    pub(super) fn quarantine(
        &mut self,
        record: &mut EffectRecord,
        error: &str,
        evidence: &Evidence,
    ) -> bool {
        if !record.status.is_uncertain() {
            return false;
        }
        self.uncertain(
            record,
            EffectStatus::Quarantined,
            event::QUARANTINED,
            error,
            evidence,
        );
        true
    }

    /// [`Transition::ResetForRetry`](super::Transition::ResetForRetry): an
    /// uncertain operation may be dispatched again, on this evidence.
    pub(super) fn reset_for_retry(
        &mut self,
        record: &mut EffectRecord,
        evidence: &Evidence,
    ) -> bool {
        if !record.status.is_uncertain() {
            return false;
        }
        record.status = next_dispatchable(record);
        record.error = None;
        record.evidence.extend(evidence.clone());
        release(record);
        self.event(event::RETRY_AUTHORIZED, json!({ "evidence": evidence }));
        true
    }

    /// [`Transition::RejectByPrecondition`](super::Transition::RejectByPrecondition):
    /// a precondition refused an operation never dispatched.
    pub(super) fn reject_by_precondition(
        &mut self,
        record: &mut EffectRecord,
        reason: &str,
        name: &'static str,
    ) -> Result<(), LedgerError> {
        use EffectStatus as S;
        if reason.trim().is_empty() {
            return Err(LedgerError::invalid_input(
                "a precondition's refusal needs a reason",
            ));
        }
        if !matches!(record.status, S::Prepared | S::AwaitingApproval) || record.attempts > 0 {
            return Err(LedgerError::InvalidTransition {
                operation_id: record.operation_id.clone(),
                transition: name,
                status: record.status,
            });
        }
        let error = format!("precondition failed: {reason}");
        record.status = S::Rejected;
        record.error = Some(error.clone());
        let mut evidence = Evidence::new();
        evidence.insert(
            evidence::RESOLUTION.into(),
            evidence::RESOLUTION_PRECONDITION_FAILED.into(),
        );
        keep_link(
            &mut evidence,
            record.evidence.get(evidence::COMPENSATES).cloned(),
        );
        record.evidence = evidence;
        self.event(event::PRECONDITION_FAILED, json!({ "error": error }));
        Ok(())
    }

    /// [`Transition::RecordLateObservation`](super::Transition::RecordLateObservation):
    /// an event only, refused to the dispatch's current owner.
    pub(super) fn record_late_observation(
        &mut self,
        record: &EffectRecord,
        owner_token: &str,
        observation: &Evidence,
        name: &'static str,
    ) -> Result<(), LedgerError> {
        if record.owned_by(owner_token) {
            return Err(LedgerError::InvalidTransition {
                operation_id: record.operation_id.clone(),
                transition: name,
                status: record.status,
            });
        }
        let mut data = observation.clone();
        data.insert("status_when_observed".into(), record.status.as_str().into());
        self.event(event::LATE_OBSERVATION, Value::Object(data));
        Ok(())
    }

    /// [`Transition::RecordRecoveryBlocked`](super::Transition::RecordRecoveryBlocked):
    /// an event only.
    pub(super) fn record_recovery_blocked(
        &mut self,
        record: &EffectRecord,
        reason: &str,
        error: &str,
        contract_version: &str,
    ) {
        self.event(
            event::RECOVERY_BLOCKED,
            json!({
                "reason": reason,
                "error": error,
                "contract_version": contract_version,
                "status_when_blocked": record.status.as_str(),
            }),
        );
    }

    /// Moves `record` to an uncertain `status`. A repeat that would change
    /// nothing (same status, same error, evidence already present) writes
    /// nothing, so calling again on a quarantined operation leaves no trail.
    pub(super) fn uncertain(
        &mut self,
        record: &mut EffectRecord,
        status: EffectStatus,
        event_type: &'static str,
        error: &str,
        evidence: &Evidence,
    ) {
        let repeat = record.status == status
            && record.error.as_deref() == Some(error)
            && record.owner_token.is_none()
            && evidence
                .iter()
                .all(|(key, value)| record.evidence.get(key) == Some(value));
        if repeat {
            return;
        }
        record.status = status;
        record.error = Some(error.to_owned());
        record.evidence.extend(evidence.clone());
        release(record);
        self.event(
            event_type,
            object([
                ("error", Value::String(error.to_owned())),
                ("evidence", Value::Object(evidence.clone())),
            ]),
        );
    }
}

/// Where an uncertain operation goes when another dispatch is allowed:
/// `prepared`, or `awaiting_approval` when its contract requires a human
/// approval before each dispatch (the approval of an earlier one was used).
pub(super) fn next_dispatchable(record: &EffectRecord) -> EffectStatus {
    if record.requires_approval() {
        EffectStatus::AwaitingApproval
    } else {
        EffectStatus::Prepared
    }
}
