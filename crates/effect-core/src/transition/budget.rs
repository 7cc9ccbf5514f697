//! Budgets at a claim (docs/approval.md#budgets): charging the claim's
//! budgets, a refusal that rejects or defers the operation, a deferral past
//! its bound, and the refund of a rejected operation's charges.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::{Claim, Planner, release};
use crate::budget::{BudgetDeferral, BudgetRefusal, BudgetWrite};
use crate::clock::{format_timestamp, unix_seconds};
use crate::error::LedgerError;
use crate::event;
use crate::evidence;
use crate::record::EffectRecord;
use crate::status::EffectStatus;

impl Planner {
    /// Checks the claim's budgets against the use the store read: `Ok` with
    /// the operation's charges (`{budget, amount}` each; new charges are
    /// queued to be written), or the refusal and the refusing budget's
    /// deferral when one limit would be exceeded, nothing charged. An
    /// operation charged once (a retry of an uncertain dispatch) is not
    /// charged again.
    #[allow(clippy::type_complexity)] // one private call site reads it at once
    pub(super) fn charge_budgets(
        &mut self,
        claim: &Claim,
    ) -> Result<Result<Vec<Value>, (BudgetRefusal, Option<BudgetDeferral>)>, LedgerError> {
        let mut charges = Vec::new();
        let mut writes = Vec::new();
        for charge in &claim.budgets {
            let Some(usage) = self.usage.iter().find(|u| u.budget == charge.budget) else {
                return Err(LedgerError::Unsupported {
                    capability: "budgets (a claim charged to a budget)",
                });
            };
            if let Some(amount) = usage.charged {
                charges.push(json!({ "budget": charge.budget, "amount": amount }));
                continue;
            }
            let count = usage.count.saturating_add(1);
            let amount = usage.amount.saturating_add(charge.amount);
            let over = charge.max_count.is_some_and(|max| count > max)
                || charge.max_amount.is_some_and(|max| amount > max);
            if over {
                let refusal = BudgetRefusal {
                    budget: charge.budget.clone(),
                    window: charge.window.storage(),
                    max_count: charge.max_count,
                    max_amount: charge.max_amount,
                    used_count: usage.count,
                    used_amount: usage.amount,
                    amount: charge.amount,
                };
                return Ok(Err((refusal, charge.defer)));
            }
            charges.push(json!({ "budget": charge.budget, "amount": charge.amount }));
            writes.push(BudgetWrite::Charge {
                charge: charge.clone(),
                at_unix: unix_seconds(self.now),
            });
        }
        self.budget_writes.extend(writes);
        Ok(Ok(charges))
    }

    /// Records a budget's refusal of a claim of `record`: by default the
    /// operation is rejected (`budget_exceeded`); when the budget defers,
    /// or the operation was dispatched before (a retry, charged to its
    /// other budgets, must not be called rejected), it stays where it is,
    /// deferred (`budget_deferred`), and a repeat of the same refusal
    /// within the deferral writes nothing.
    pub(super) fn refused(
        &mut self,
        record: &mut EffectRecord,
        refusal: &BudgetRefusal,
        defer: Option<BudgetDeferral>,
    ) {
        let data = refusal_data(refusal);
        let standing = record.evidence.get(evidence::BUDGET_DEFERRAL).cloned();
        if standing.is_none() && defer.is_none() && record.attempts == 0 {
            let error =
                format!("refused by budget {refusal}: rejected, nothing was sent or charged");
            record
                .evidence
                .insert(evidence::BUDGET_EXCEEDED.into(), data.clone());
            self.end_by_budget(
                record,
                event::BUDGET_EXCEEDED,
                evidence::RESOLUTION_BUDGET_EXCEEDED,
                data,
                error,
            );
            return;
        }
        let deferral = match standing {
            Some(standing) => standing,
            None => {
                let until = defer.map(|bound| bound.until_unix(self.now));
                if until.is_some_and(|until| until <= unix_seconds(self.now)) {
                    // A bound already past: there is nothing to wait for.
                    record
                        .evidence
                        .insert(evidence::BUDGET_EXCEEDED.into(), data);
                    self.deferral_expired(record);
                    return;
                }
                json!({
                    "deferred_until": until.map(|u| format_timestamp(from_unix(u))),
                    "deferred_until_unix": until,
                })
            }
        };
        let same_budget = record
            .evidence
            .get(evidence::BUDGET_EXCEEDED)
            .and_then(|before| before.get("budget"))
            .and_then(Value::as_str)
            == Some(refusal.budget.as_str());
        if same_budget && record.evidence.contains_key(evidence::BUDGET_DEFERRAL) {
            // Deferred already, by this budget: nothing changed.
            return;
        }
        let mut event_data = data.clone();
        if let (Value::Object(map), Value::Object(bound)) = (&mut event_data, &deferral) {
            map.insert(
                "deferred_until".to_owned(),
                bound.get("deferred_until").cloned().unwrap_or(Value::Null),
            );
        }
        record
            .evidence
            .insert(evidence::BUDGET_EXCEEDED.into(), data);
        record
            .evidence
            .insert(evidence::BUDGET_DEFERRAL.into(), deferral);
        self.event(event::BUDGET_DEFERRED, event_data);
    }

    /// Rejects a deferred operation whose bound has passed
    /// (`budget_deferral_expired`), with the refusal it was deferred on.
    pub(super) fn deferral_expired(&mut self, record: &mut EffectRecord) {
        let deferred_until = record
            .evidence
            .get(evidence::BUDGET_DEFERRAL)
            .and_then(|d| d.get("deferred_until"))
            .cloned()
            .unwrap_or(Value::Null);
        let refusal = record.evidence.get(evidence::BUDGET_EXCEEDED).cloned();
        let error = format!(
            "budget deferral expired at {}: rejected, nothing was sent or charged",
            deferred_until.as_str().unwrap_or("its bound")
        );
        let mut data = refusal.unwrap_or_else(|| json!({}));
        if let Value::Object(map) = &mut data {
            map.insert("deferred_until".to_owned(), deferred_until);
        }
        // The deferral stays in the evidence: it names the bound that passed.
        self.end_by_budget(
            record,
            event::BUDGET_DEFERRAL_EXPIRED,
            evidence::RESOLUTION_BUDGET_DEFERRAL_EXPIRED,
            data,
            error,
        );
    }

    /// Makes an operation a budget refused `rejected`: its unused approval
    /// is dropped (the refusal stays in its evidence), and the event's data
    /// is `data` (the refusal) with the error.
    pub(super) fn end_by_budget(
        &mut self,
        record: &mut EffectRecord,
        event_type: &'static str,
        resolution: &'static str,
        mut data: Value,
        error: String,
    ) {
        record.status = EffectStatus::Rejected;
        record.evidence.remove(evidence::APPROVAL);
        record
            .evidence
            .insert(evidence::RESOLUTION.into(), resolution.into());
        if let Value::Object(map) = &mut data {
            map.insert("error".to_owned(), Value::String(error.clone()));
        }
        record.error = Some(error);
        release(record);
        self.event(event_type, data);
    }

    /// Gives back the charges of an operation that is being rejected, with
    /// a `budget_refunded` event naming them, when it has any.
    pub(super) fn refund(&mut self, charges: Option<Value>) {
        self.budget_writes.push(BudgetWrite::Refund);
        if let Some(charges) = charges.filter(|c| c.as_array().is_some_and(|a| !a.is_empty())) {
            self.event(event::BUDGET_REFUNDED, json!({ "budget_charges": charges }));
        }
    }
}

/// The bound of `record`'s budget deferral, in seconds since the Unix
/// epoch; `None` when it is not deferred or waits without a bound.
pub(super) fn deferral_until(record: &EffectRecord) -> Option<f64> {
    record
        .evidence
        .get(evidence::BUDGET_DEFERRAL)?
        .get("deferred_until_unix")?
        .as_f64()
}

/// A refusal as its event's data and the record's evidence hold it.
pub(super) fn refusal_data(refusal: &BudgetRefusal) -> Value {
    // Serializing a struct of strings and integers cannot fail.
    serde_json::to_value(refusal).unwrap_or(Value::Null)
}

/// The time `unix` seconds after the epoch; the epoch for a time before it
/// or one a `SystemTime` cannot hold.
pub(super) fn from_unix(unix: f64) -> SystemTime {
    Duration::try_from_secs_f64(unix)
        .ok()
        .and_then(|since| SystemTime::UNIX_EPOCH.checked_add(since))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}
