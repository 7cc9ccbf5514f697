//! An operator's decisions (docs/spec.md §4, last rows): the audited
//! manual resolution of an uncertain operation (confirm, reject, authorize a
//! retry) and the cancellation of one not yet dispatched.

use serde_json::{Value, json};

use super::{ManualAction, ManualResolution, Planner, keep_link, release};
use crate::clock::unix_seconds;
use crate::error::LedgerError;
use crate::event;
use crate::evidence;
use crate::record::{EffectRecord, Evidence};
use crate::status::EffectStatus;

impl Planner {
    /// Cancels an operation not yet dispatched: `rejected`, audited like a
    /// manual resolution (the evidence it replaces kept one level deep),
    /// and its charges given back unless an earlier attempt may have
    /// committed (a retry resting on a guaranteed provider key).
    pub(super) fn cancel(
        &mut self,
        record: &mut EffectRecord,
        actor: &str,
        reason: &str,
        evidence_reference: &str,
    ) -> Result<(), LedgerError> {
        for (field, value) in [
            ("actor", actor),
            ("reason", reason),
            ("evidence reference", evidence_reference),
        ] {
            if value.trim().is_empty() {
                return Err(LedgerError::invalid_input(format!(
                    "a cancellation needs a non-empty {field}"
                )));
            }
        }
        if !matches!(
            record.status,
            EffectStatus::Prepared | EffectStatus::AwaitingApproval
        ) {
            return Err(LedgerError::InvalidTransition {
                operation_id: record.operation_id.clone(),
                transition: "cancel",
                status: record.status,
            });
        }
        let mut evidence = Evidence::new();
        evidence.insert("actor".into(), actor.into());
        evidence.insert("evidence_reference".into(), evidence_reference.into());
        evidence.insert("reason".into(), reason.into());
        evidence.insert(
            evidence::RESOLUTION.into(),
            evidence::RESOLUTION_CANCELLED.into(),
        );
        let mut before = std::mem::take(&mut record.evidence);
        before.remove(evidence::EVIDENCE_BEFORE_RESOLUTION);
        keep_link(&mut evidence, before.get(evidence::COMPENSATES).cloned());
        let may_have_committed = before.get(evidence::RETRY_BASIS).and_then(Value::as_str)
            == Some(evidence::RETRY_BASIS_GUARANTEED_KEY);
        let charges = before.get(evidence::BUDGET_CHARGES).cloned();
        if !before.is_empty() {
            evidence.insert(
                evidence::EVIDENCE_BEFORE_RESOLUTION.into(),
                Value::Object(before),
            );
        }
        let error = format!("cancelled by {actor}: {reason}");
        record.status = EffectStatus::Rejected;
        release(record);
        self.event(
            event::CANCELLED,
            json!({ "error": error, "evidence": evidence }),
        );
        record.error = Some(error);
        record.evidence = evidence;
        if may_have_committed {
            // Its charges stay: the provider may hold the earlier attempt.
            if let Some(charges) = charges {
                record
                    .evidence
                    .insert(evidence::BUDGET_CHARGES.into(), charges);
            }
        } else {
            self.refund(charges);
        }
        Ok(())
    }

    pub(super) fn resolve(
        &mut self,
        record: &mut EffectRecord,
        resolution: &ManualResolution,
        name: &'static str,
    ) -> Result<(), LedgerError> {
        for (field, value) in [
            ("actor", &resolution.audit.actor),
            ("reason", &resolution.audit.reason),
            ("evidence reference", &resolution.audit.evidence_reference),
        ] {
            if value.trim().is_empty() {
                return Err(LedgerError::invalid_input(format!(
                    "a manual resolution needs a non-empty {field}"
                )));
            }
        }
        if !record.status.is_uncertain() {
            return Err(LedgerError::InvalidTransition {
                operation_id: record.operation_id.clone(),
                transition: name,
                status: record.status,
            });
        }
        if let ManualAction::AuthorizeRetry {
            handler_stopped: false,
        } = resolution.action
        {
            let lease_live = record
                .lease_until
                .is_some_and(|until| until > unix_seconds(self.now));
            let why = if record.handler_may_still_be_running() {
                Some("its evidence says a previous handler may still be running")
            } else if lease_live {
                Some("its dispatch lease has not ended")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(LedgerError::HandlerMayStillRun {
                    operation_id: record.operation_id.clone(),
                    why,
                });
            }
        }
        let mut evidence = Evidence::new();
        evidence.insert("actor".into(), resolution.audit.actor.clone().into());
        evidence.insert(
            "evidence_reference".into(),
            resolution.audit.evidence_reference.clone().into(),
        );
        evidence.insert("reason".into(), resolution.audit.reason.clone().into());
        let record_required_approval = record.requires_approval();
        // What was known before the decision stays on the record and in the
        // event, one level deep (an earlier resolution's copy is not nested).
        let mut before = std::mem::take(&mut record.evidence);
        before.remove(evidence::EVIDENCE_BEFORE_RESOLUTION);
        keep_link(&mut evidence, before.get(evidence::COMPENSATES).cloned());
        if !before.is_empty() {
            evidence.insert(
                evidence::EVIDENCE_BEFORE_RESOLUTION.into(),
                Value::Object(before),
            );
        }
        release(record);
        match &resolution.action {
            ManualAction::Confirm {
                output,
                provider_operation_id,
            } => {
                evidence.insert(evidence::RESOLUTION.into(), "manual_confirmation".into());
                record.status = EffectStatus::Confirmed;
                record.output = Some(output.clone());
                record.provider_operation_id = provider_operation_id.clone();
                record.error = None;
                self.event(
                    event::MANUALLY_CONFIRMED,
                    json!({ "evidence": evidence, "provider_operation_id": provider_operation_id }),
                );
            }
            ManualAction::Reject => {
                // The effect did not happen: its charges go back.
                let charges = evidence
                    .get(evidence::EVIDENCE_BEFORE_RESOLUTION)
                    .and_then(|before| before.get(evidence::BUDGET_CHARGES))
                    .cloned();
                evidence.insert(evidence::RESOLUTION.into(), "manual_rejection".into());
                let error = format!(
                    "manually rejected by {}: {}",
                    resolution.audit.actor, resolution.audit.reason
                );
                record.status = EffectStatus::Rejected;
                self.event(
                    event::MANUALLY_REJECTED,
                    json!({ "error": error, "evidence": evidence }),
                );
                record.error = Some(error);
                self.refund(charges);
            }
            ManualAction::AuthorizeRetry { handler_stopped } => {
                // False either because nothing said otherwise or because the
                // operator stated it; the earlier value stays in
                // EVIDENCE_BEFORE_RESOLUTION and the statement beside it.
                evidence.insert(
                    evidence::HANDLER_MAY_STILL_BE_RUNNING.into(),
                    Value::Bool(false),
                );
                if *handler_stopped {
                    evidence.insert(evidence::HANDLER_STOPPED_ASSERTED.into(), Value::Bool(true));
                }
                evidence.insert(
                    evidence::RESOLUTION.into(),
                    "manual_retry_authorization".into(),
                );
                evidence.insert(
                    evidence::RETRY_BASIS.into(),
                    evidence::RETRY_BASIS_OPERATOR.into(),
                );
                if record_required_approval {
                    evidence.insert(evidence::APPROVAL_REQUIRED.into(), Value::Bool(true));
                    record.status = EffectStatus::AwaitingApproval;
                } else {
                    record.status = EffectStatus::Prepared;
                }
                record.error = None;
                self.event(
                    event::MANUAL_RETRY_AUTHORIZED,
                    json!({ "evidence": evidence }),
                );
            }
        }
        record.evidence = evidence;
        Ok(())
    }
}
