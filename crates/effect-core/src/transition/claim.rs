//! The dispatch lease: a claim (after its approval and budgets are
//! checked), its renewal by the owner, and its expiry into
//! `outcome_unknown` (docs/spec.md §4).

use std::time::Duration;

use serde_json::Value;

use super::budget::deferral_until;
use super::{Claim, Planner, object};
use crate::clock::unix_seconds;
use crate::error::LedgerError;
use crate::event;
use crate::evidence;
use crate::record::{EffectRecord, Evidence};
use crate::status::EffectStatus;

impl Planner {
    pub(super) fn lease_until(&self, lease: Duration) -> f64 {
        unix_seconds(self.now + lease)
    }

    pub(super) fn claim(
        &mut self,
        mut record: EffectRecord,
        claim: &Claim,
    ) -> Result<(bool, EffectRecord), LedgerError> {
        match record.status {
            EffectStatus::Prepared => {}
            EffectStatus::AwaitingApproval if self.approval_usable(&record) => {}
            EffectStatus::AwaitingApproval => {
                // Drops an expired approval (with its event, and an earlier
                // budget refusal or deferral with it: the next approval is
                // a new decision); nothing to claim.
                if record.approval().is_some() {
                    let _expired = self.usable_approval(&mut record);
                    record.evidence.remove(evidence::BUDGET_EXCEEDED);
                    record.evidence.remove(evidence::BUDGET_DEFERRAL);
                }
                return Ok((false, record));
            }
            _ => return Ok((false, record)),
        }
        // A deferral past its bound ends the operation, whatever room the
        // budget has now: it was meant to go out within the bound or not at
        // all.
        if let Some(until) = deferral_until(&record)
            && until <= unix_seconds(self.now)
        {
            self.deferral_expired(&mut record);
            return Ok((false, record));
        }
        // Budgets first: a refused claim is charged nothing, and the
        // operation is rejected or, when its budget defers, stays where it
        // is with its approval.
        let charges = match self.charge_budgets(claim)? {
            Ok(charges) => charges,
            Err((refusal, defer)) => {
                self.refused(&mut record, &refusal, defer);
                return Ok((false, record));
            }
        };
        record.evidence.remove(evidence::BUDGET_EXCEEDED);
        record.evidence.remove(evidence::BUDGET_DEFERRAL);
        let approval = if record.status == EffectStatus::AwaitingApproval {
            self.usable_approval(&mut record)
        } else {
            None
        };
        if !charges.is_empty() {
            record
                .evidence
                .insert(evidence::BUDGET_CHARGES.into(), Value::Array(charges));
        }
        record.status = EffectStatus::Dispatched;
        record.attempts = record.attempts.saturating_add(1);
        record.owner_token = Some(claim.owner_token.clone());
        record.lease_until = Some(self.lease_until(claim.lease));
        let mut data = object([("attempt", Value::from(record.attempts))]);
        if let (Some(approval), Value::Object(map)) = (approval, &mut data) {
            map.insert(evidence::APPROVAL.to_owned(), approval);
        }
        if let (Some(charges), Value::Object(map)) =
            (record.evidence.get(evidence::BUDGET_CHARGES), &mut data)
            && !claim.budgets.is_empty()
        {
            map.insert(evidence::BUDGET_CHARGES.to_owned(), charges.clone());
        }
        self.event(event::DISPATCHED, data);
        Ok((true, record))
    }

    /// [`Transition::RenewLease`](super::Transition::RenewLease): the owner
    /// extends its live lease.
    pub(super) fn renew_lease(
        &mut self,
        record: &mut EffectRecord,
        owner_token: &str,
        lease: Duration,
    ) -> bool {
        if !record.owned_by(owner_token) {
            return false;
        }
        record.lease_until = Some(self.lease_until(lease));
        self.dirty = true;
        true
    }

    /// [`Transition::ExpireLease`](super::Transition::ExpireLease): a
    /// dispatch whose lease has ended becomes `outcome_unknown`, its handler
    /// possibly still running.
    pub(super) fn expire_lease(&mut self, record: &mut EffectRecord) -> bool {
        let expired = record.status == EffectStatus::Dispatched
            && record
                .lease_until
                .is_none_or(|until| until <= unix_seconds(self.now));
        if !expired {
            return false;
        }
        let mut evidence = Evidence::new();
        evidence.insert(
            evidence::HANDLER_MAY_STILL_BE_RUNNING.into(),
            Value::Bool(true),
        );
        evidence.insert(
            evidence::DISPATCH_INTERRUPTION.into(),
            evidence::INTERRUPTED_BY_LEASE_EXPIRY.into(),
        );
        let error = "dispatch lease expired before an outcome was recorded; \
                     the previous handler may still be running";
        self.uncertain(
            record,
            EffectStatus::OutcomeUnknown,
            event::OUTCOME_UNKNOWN,
            error,
            &evidence,
        );
        true
    }
}
