//! The ledger state machine of docs/spec.md §4 as one pure function.
//!
//! Every store loads the current record, calls [`plan`], and writes what it
//! returns in the same transaction. The rules live here once, so the memory,
//! SQLite and PostgreSQL stores cannot drift apart.

use std::time::SystemTime;

use serde_json::Value;

use crate::budget::{BudgetCharge, BudgetUsage, BudgetWrite};
use crate::clock::format_timestamp;
use crate::error::LedgerError;
use crate::evidence;
use crate::record::{EffectRecord, Evidence};
use crate::status::EffectStatus;

mod approval;
mod budget;
mod claim;
mod compensating;
mod operator;
mod outcome;
mod prepare;
pub(crate) mod request;
#[cfg(test)]
mod tests;
pub(crate) mod write;

pub use write::{PendingEvent, Plan, Write, WriteKind};

use request::{
    Approval, Claim, Confirmation, ManualAction, ManualResolution, NewOperation, Transition,
};
use write::TransitionOutcome;

use prepare::check_identity;

/// Decides a transition for `operation_id`, given its current record and the
/// ledger's clock reading.
///
/// # Errors
///
/// [`LedgerError::NotFound`] when the operation is absent (except for prepare),
/// [`LedgerError::Conflict`] when a prepare's identity differs from the stored one,
/// [`LedgerError::InvalidInput`] for a blank operation id or a manual resolution
/// with a blank actor, reason or evidence reference, and
/// [`LedgerError::InvalidTransition`] for a manual resolution outside
/// `outcome_unknown` / `quarantined`, and [`LedgerError::HandlerMayStillRun`]
/// for a retry authorization while a previous handler may still run and the
/// operator did not state that it stopped.
pub fn plan(
    operation_id: &str,
    current: Option<EffectRecord>,
    transition: &Transition,
    now: SystemTime,
) -> Result<Plan, LedgerError> {
    plan_with_budgets(operation_id, current, transition, now, &[])
}

/// The budgets a transition's claim is charged to: what a store must read
/// ([`BudgetUsage`]) in the transition's transaction before it plans with
/// [`plan_with_budgets`]. Empty for every other transition.
pub fn budget_charges(transition: &Transition) -> &[BudgetCharge] {
    match transition {
        Transition::Claim(claim) | Transition::PrepareAndClaim(_, claim) => &claim.budgets,
        Transition::Guarded(_, inner) => match &**inner {
            Transition::Claim(claim) => &claim.budgets,
            _ => &[],
        },
        _ => &[],
    }
}

/// The owner token of an owner's outcome: a confirmation, rejection or
/// unknown outcome given with the token of the claim it settles. Its plan
/// depends on the record and not on the clock, so a store that remembers
/// the record its claim wrote may plan it on that record, provided the
/// write applies only if the row is still that record. `None` for every
/// other transition.
pub fn owner_outcome_token(transition: &Transition) -> Option<&str> {
    match transition {
        Transition::MarkConfirmed {
            owner_token: Some(token),
            ..
        }
        | Transition::MarkOutcomeUnknown {
            owner_token: Some(token),
            ..
        }
        | Transition::MarkRejected {
            owner_token: token, ..
        } => Some(token),
        _ => None,
    }
}

/// Whether the transition may give budget charges back (a rejection): a
/// store that writes budgets apart from the record must then run it where
/// it can write [`BudgetWrite::Refund`].
pub fn may_refund(transition: &Transition) -> bool {
    match transition {
        Transition::MarkRejected { .. } | Transition::Cancel { .. } => true,
        Transition::Resolve(resolution) => matches!(resolution.action, ManualAction::Reject),
        Transition::Guarded(_, inner) => may_refund(inner),
        _ => false,
    }
}

/// [`plan`], for a store that enforces budgets: `usage` holds what the
/// store read, in this transaction, for each budget of
/// [`budget_charges`]. A claim whose budget has no usage here fails with
/// [`LedgerError::Unsupported`]; a claim that would exceed a limit is not
/// applied, and appends a `budget_exceeded` event (docs/approval.md#budgets).
///
/// # Errors
///
/// As [`plan`].
pub fn plan_with_budgets(
    operation_id: &str,
    current: Option<EffectRecord>,
    transition: &Transition,
    now: SystemTime,
    usage: &[BudgetUsage],
) -> Result<Plan, LedgerError> {
    if operation_id.trim().is_empty() {
        return Err(LedgerError::invalid_input("operation id must not be blank"));
    }
    check_storable(transition)?;
    let at = format_timestamp(now);
    let mut planner = Planner {
        now,
        at,
        events: Vec::new(),
        dirty: false,
        keep_updated_at: false,
        usage: usage.to_vec(),
        budget_writes: Vec::new(),
    };
    let (new_op, claim) = match transition {
        Transition::Prepare(op) => (Some(op), None),
        Transition::PrepareAndClaim(op, claim) => (Some(op), Some(claim)),
        _ => (None, None),
    };
    if let Some(op) = new_op {
        let (record, insert) = match current {
            Some(record) => {
                check_identity(operation_id, &record, op)?;
                (record, false)
            }
            None => (planner.create(operation_id, op), true),
        };
        let (applied, record) = match claim {
            // An existing operation is claimed only once its caller has
            // compared its contract with the terms stored with it.
            Some(_) if !insert && op.contract_terms.is_some() => (false, record),
            Some(claim) => planner.claim(record, claim)?,
            None => (insert, record),
        };
        return Ok(planner.finish(applied, record, insert));
    }
    let Some(record) = current else {
        return Err(LedgerError::NotFound {
            operation_id: operation_id.to_owned(),
        });
    };
    let transition = match transition {
        Transition::Guarded(guard, inner) => {
            if matches!(
                **inner,
                Transition::Prepare(_) | Transition::PrepareAndClaim(..) | Transition::Guarded(..)
            ) {
                return Err(LedgerError::invalid_input(format!(
                    "a guarded transition cannot be a {}",
                    inner.name()
                )));
            }
            if !guard.holds(&record) {
                return Ok(planner.finish(false, record, false));
            }
            &**inner
        }
        other => other,
    };
    let was_uncertain = record.status.is_uncertain();
    let (applied, record) = planner.step(record, transition)?;
    // An unresolved operation keeps the time it became unresolved: moving
    // between uncertain statuses appends events but does not renew
    // `updated_at`, so the age an operator alerts on keeps growing.
    planner.keep_updated_at = (was_uncertain && record.status.is_uncertain())
        || matches!(
            transition,
            Transition::RecordLateObservation { .. } | Transition::RecordRecoveryBlocked { .. }
        );
    Ok(planner.finish(applied, record, false))
}

/// Refuses JSON a store could not read back (nested deeper than
/// [`MAX_DEPTH`](crate::canonical::MAX_DEPTH)) before anything is planned,
/// whoever the caller is; the executor checks earlier, with the caller's
/// own error. The check walks the value without recursion.
fn check_storable(transition: &Transition) -> Result<(), LedgerError> {
    let refuse = |what: &str, err: crate::error::CanonicalError| {
        LedgerError::invalid_input(format!("the {what} cannot be stored: {err}"))
    };
    let evidence = |map: &Evidence| {
        map.values()
            .try_for_each(crate::canonical::check_depth)
            .map_err(|err| refuse("evidence", err))
    };
    match transition {
        Transition::MarkOutcomeUnknown { evidence: e, .. }
        | Transition::RecordLateObservation { observation: e, .. }
        | Transition::Quarantine { evidence: e, .. }
        | Transition::ResetForRetry { evidence: e } => evidence(e),
        Transition::MarkConfirmed { confirmation, .. } => {
            crate::canonical::check_depth(&confirmation.output)
                .map_err(|err| refuse("output", err))?;
            evidence(&confirmation.evidence)
        }
        Transition::Resolve(ManualResolution {
            action: ManualAction::Confirm { output, .. },
            ..
        }) => crate::canonical::check_depth(output).map_err(|err| refuse("output", err)),
        Transition::Guarded(_, inner) => match **inner {
            Transition::Guarded(..) => Ok(()),
            ref inner => check_storable(inner),
        },
        _ => Ok(()),
    }
}

struct Planner {
    now: SystemTime,
    at: String,
    events: Vec<PendingEvent>,
    /// Set by anything that changes the record.
    dirty: bool,
    /// Leave `updated_at` as it is even when events are appended.
    keep_updated_at: bool,
    /// What the store read of the claim's budgets.
    usage: Vec<BudgetUsage>,
    /// Budget changes to write with the record.
    budget_writes: Vec<BudgetWrite>,
}

impl Planner {
    fn event(&mut self, event_type: &'static str, data: Value) {
        self.dirty = true;
        self.events.push(PendingEvent {
            event_type,
            data,
            timestamp: self.at.clone(),
        });
    }

    fn finish(self, applied: bool, mut record: EffectRecord, insert: bool) -> Plan {
        let write = if !self.dirty {
            None
        } else {
            let kind = if insert {
                WriteKind::Insert
            } else if self.events.is_empty() {
                WriteKind::InPlace
            } else {
                WriteKind::Transition
            };
            if kind != WriteKind::InPlace && !self.keep_updated_at {
                record.updated_at = self.at;
            }
            Some(Write {
                kind,
                events: self.events,
                budgets: self.budget_writes,
            })
        };
        Plan {
            outcome: TransitionOutcome { applied, record },
            write,
        }
    }

    /// Plans `transition` (neither a prepare nor guarded) on `record`: each
    /// kind of transition is planned in its own module.
    fn step(
        &mut self,
        mut record: EffectRecord,
        transition: &Transition,
    ) -> Result<(bool, EffectRecord), LedgerError> {
        let name = transition.name();
        let applied = match transition {
            Transition::Prepare(_) | Transition::PrepareAndClaim(..) | Transition::Guarded(..) => {
                false
            }
            Transition::Claim(claim) => return self.claim(record, claim),
            Transition::RenewLease { owner_token, lease } => {
                self.renew_lease(&mut record, owner_token, *lease)
            }
            Transition::ExpireLease => self.expire_lease(&mut record),
            Transition::MarkOutcomeUnknown {
                owner_token,
                error,
                evidence,
            } => self.mark_outcome_unknown(&mut record, owner_token.as_deref(), error, evidence),
            Transition::MarkConfirmed {
                owner_token,
                confirmation,
            } => self.mark_confirmed(&mut record, owner_token.as_deref(), confirmation),
            Transition::MarkRejected { owner_token, error } => {
                self.mark_rejected(&mut record, owner_token, error)
            }
            Transition::Quarantine { error, evidence } => {
                self.quarantine(&mut record, error, evidence)
            }
            Transition::ResetForRetry { evidence } => self.reset_for_retry(&mut record, evidence),
            Transition::Resolve(resolution) => {
                self.resolve(&mut record, resolution, name)?;
                true
            }
            Transition::Approve(approval) => {
                self.approve(&mut record, approval, name)?;
                true
            }
            Transition::Compensation(step) => {
                self.compensation(&mut record, step)?;
                true
            }
            Transition::RejectByPrecondition { reason } => {
                self.reject_by_precondition(&mut record, reason, name)?;
                true
            }
            Transition::RecordLateObservation {
                owner_token,
                observation,
            } => {
                self.record_late_observation(&record, owner_token, observation, name)?;
                true
            }
            Transition::RecordRecoveryBlocked {
                reason,
                error,
                contract_version,
            } => {
                self.record_recovery_blocked(&record, reason, error, contract_version);
                true
            }
            Transition::Cancel {
                actor,
                reason,
                evidence_reference,
            } => {
                self.cancel(&mut record, actor, reason, evidence_reference)?;
                true
            }
            Transition::DenyApproval { actor, reason } => {
                self.deny_approval(&mut record, actor, reason, name)?;
                true
            }
        };
        Ok((applied, record))
    }
}

impl EffectRecord {
    /// Whether `token` owns this record's live dispatch.
    fn owned_by(&self, token: &str) -> bool {
        self.status == EffectStatus::Dispatched && self.owner_token.as_deref() == Some(token)
    }
}

/// Keeps a compensation's link to its original ([`evidence::COMPENSATES`])
/// when its evidence is replaced.
fn keep_link(evidence: &mut Evidence, link: Option<Value>) {
    if let Some(link) = link {
        evidence.insert(evidence::COMPENSATES.into(), link);
    }
}

/// A JSON object of these members: what `json!` builds from them, without
/// serializing each value again.
fn object<const N: usize>(members: [(&str, Value); N]) -> Value {
    // Inserted one by one: collecting into the map would sort a copy first.
    let mut map = serde_json::Map::new();
    for (key, value) in members {
        map.insert(key.to_owned(), value);
    }
    Value::Object(map)
}

/// Drops the dispatch lease.
fn release(record: &mut EffectRecord) {
    record.owner_token = None;
    record.lease_until = None;
}
