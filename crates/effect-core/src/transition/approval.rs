//! A human's approval of one dispatch (docs/approval.md): recording it,
//! the claim's use of it (an expired or foreign one is dropped), and a
//! denial.

use serde_json::{Value, json};

use super::{Approval, Planner};
use crate::clock::{format_timestamp, unix_seconds};
use crate::error::LedgerError;
use crate::event;
use crate::evidence;
use crate::record::EffectRecord;
use crate::status::EffectStatus;

impl Planner {
    /// Records `approval` on an operation awaiting approval, refusing an
    /// approval of other arguments, one already expired, and a second one
    /// while an unused approval stands.
    pub(super) fn approve(
        &mut self,
        record: &mut EffectRecord,
        approval: &Approval,
        name: &'static str,
    ) -> Result<(), LedgerError> {
        check_decision(&approval.actor, &approval.reason)?;
        let id = || record.operation_id.clone();
        if record.status != EffectStatus::AwaitingApproval {
            return Err(LedgerError::InvalidTransition {
                operation_id: id(),
                transition: name,
                status: record.status,
            });
        }
        if approval.request_fingerprint != record.request_fingerprint {
            return Err(LedgerError::Conflict {
                operation_id: id(),
                field: "request fingerprint (the approval is for other arguments)",
            });
        }
        let now = unix_seconds(self.now);
        let expires_at_unix = unix_seconds(approval.expires_at);
        if expires_at_unix <= now {
            return Err(LedgerError::ApprovalRefused {
                operation_id: id(),
                why: "the approval has already expired",
            });
        }
        let standing = record
            .approval()
            .and_then(|a| a.get("expires_at_unix"))
            .and_then(Value::as_f64)
            .is_some_and(|until| until > now);
        if standing {
            return Err(LedgerError::ApprovalRefused {
                operation_id: id(),
                why: "it already has an unused approval",
            });
        }
        let grant = json!({
            "request_fingerprint": approval.request_fingerprint,
            "actor": approval.actor,
            "reason": approval.reason,
            "approved_at": self.at,
            "expires_at": format_timestamp(approval.expires_at),
            "expires_at_unix": expires_at_unix,
        });
        let mut data = grant.clone();
        if let Value::Object(map) = &mut data {
            map.remove("expires_at_unix");
        }
        record.evidence.insert(evidence::APPROVAL.into(), grant);
        self.event(event::APPROVED, data);
        Ok(())
    }

    /// Whether `record` (awaiting approval) holds an approval a claim may
    /// use now: of its own request fingerprint and not expired.
    pub(super) fn approval_usable(&self, record: &EffectRecord) -> bool {
        record.approval().is_some_and(|approval| {
            approval.get("request_fingerprint").and_then(Value::as_str)
                == Some(record.request_fingerprint.as_str())
                && approval
                    .get("expires_at_unix")
                    .and_then(Value::as_f64)
                    .is_some_and(|until| until > unix_seconds(self.now))
        })
    }

    /// Takes the approval a claim of `record` (awaiting approval) consumes:
    /// present, of the record's own request fingerprint, and not expired by
    /// the ledger's clock. An expired or unusable one is dropped, with an
    /// `approval_expired` event, and the operation keeps waiting.
    pub(super) fn usable_approval(&mut self, record: &mut EffectRecord) -> Option<Value> {
        let approval = record.approval()?.clone();
        let expires = approval
            .get("expires_at_unix")
            .and_then(Value::as_f64)
            .unwrap_or(f64::NEG_INFINITY);
        let same_request = approval.get("request_fingerprint").and_then(Value::as_str)
            == Some(record.request_fingerprint.as_str());
        record.evidence.remove(evidence::APPROVAL);
        if same_request && expires > unix_seconds(self.now) {
            return Some(Value::Object(approval));
        }
        let mut data = approval;
        data.remove("expires_at_unix");
        self.event(event::APPROVAL_EXPIRED, Value::Object(data));
        None
    }

    /// [`Transition::DenyApproval`](super::Transition::DenyApproval): an
    /// operation awaiting approval is rejected, audited.
    pub(super) fn deny_approval(
        &mut self,
        record: &mut EffectRecord,
        actor: &str,
        reason: &str,
        name: &'static str,
    ) -> Result<(), LedgerError> {
        check_decision(actor, reason)?;
        if record.status != EffectStatus::AwaitingApproval {
            return Err(LedgerError::InvalidTransition {
                operation_id: record.operation_id.clone(),
                transition: name,
                status: record.status,
            });
        }
        let error = format!("approval denied by {actor}: {reason}");
        record.status = EffectStatus::Rejected;
        record.evidence.remove(evidence::APPROVAL);
        record.evidence.insert("actor".into(), actor.into());
        record.evidence.insert("reason".into(), reason.into());
        record
            .evidence
            .insert(evidence::RESOLUTION.into(), "approval_denied".into());
        self.event(
            event::APPROVAL_DENIED,
            json!({ "actor": actor, "reason": reason, "error": error }),
        );
        record.error = Some(error);
        Ok(())
    }
}

/// Refuses an approval or denial without an actor or a reason.
pub(super) fn check_decision(actor: &str, reason: &str) -> Result<(), LedgerError> {
    for (field, value) in [("actor", actor), ("reason", reason)] {
        if value.trim().is_empty() {
            return Err(LedgerError::invalid_input(format!(
                "an approval decision needs a non-empty {field}"
            )));
        }
    }
    Ok(())
}
