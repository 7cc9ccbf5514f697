//! The ledger state machine of docs/spec.md §4 as one pure function.
//!
//! Every store loads the current record, calls [`plan`], and writes what it
//! returns in the same transaction. The rules live here once, so the memory,
//! SQLite and PostgreSQL stores cannot drift apart.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::budget::{BudgetCharge, BudgetDeferral, BudgetRefusal, BudgetUsage, BudgetWrite};
use crate::canonical::RequestFingerprint;
use crate::clock::{format_timestamp, unix_seconds};
use crate::compensation::CompensationStep;
use crate::error::LedgerError;
use crate::event;
use crate::evidence;
use crate::record::{EffectRecord, Evidence, Revision};
use crate::status::EffectStatus;

/// The identity of an operation to prepare.
///
/// Built with [`NewOperation::new`] and the `with_*` methods, so that a field
/// added later is not a breaking change:
///
/// ```
/// use effect_core::{NewOperation, RequestFingerprint};
/// use serde_json::json;
///
/// let args = json!({"invoice_id": "INV-1"});
/// let op = NewOperation::new("capture_payment", "1", RequestFingerprint::of_value(&args))
///     .with_provider_idempotency_key(Some("capture:INV-1".to_owned()))
///     .with_intent(Some(args));
/// assert!(!op.requires_approval);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NewOperation {
    /// The contract's name.
    pub contract_name: String,
    /// The contract's version.
    pub contract_version: String,
    /// The fingerprint of the canonical arguments.
    pub fingerprint: RequestFingerprint,
    /// The provider idempotency key, if the contract has one.
    pub provider_idempotency_key: Option<String>,
    /// The stored intent: the arguments (or their sealed envelope) that a
    /// recovery worker dispatches without the caller, when the contract
    /// stores them ([`crate::intent`]). Recorded with the `prepared` event,
    /// in the same commit as the operation; not part of its identity.
    pub intent: Option<Value>,
    /// The contract requires a human approval before each dispatch
    /// (docs/approval.md): a new operation is created `awaiting_approval`
    /// instead of `prepared`. Recorded when the operation is created; an
    /// existing operation keeps what it was created with.
    pub requires_approval: bool,
    /// What an approver is shown of the request: the arguments with secrets
    /// and the contract's redacted fields replaced by the marker
    /// ([`crate::redaction`]). Recorded in the `prepared` event of an
    /// operation created `awaiting_approval` (key
    /// [`intent::REDACTED_KEY`](crate::intent::REDACTED_KEY)), ignored
    /// otherwise; not part of its identity.
    pub redacted_arguments: Option<Value>,
    /// The W3C `traceparent` of the execution that created the operation,
    /// when it was traced (effect-otel), recorded with the `prepared` event
    /// ([`crate::trace::EVENT_KEY`]) so that a recovery worker's trace links
    /// back to it. Not part of the operation's identity.
    pub trace_context: Option<String>,
    /// The safety terms of the contract the operation is claimed under
    /// ([`crate::terms`]), recorded with the `prepared` event (key
    /// [`terms::EVENT_KEY`](crate::terms::EVENT_KEY)) so that later calls
    /// decide under them. With terms, a [`Transition::PrepareAndClaim`]
    /// claims only the operation it creates: an existing one is left as it
    /// is, for its caller to compare its contract with the stored terms
    /// before a [`Transition::Claim`]. Not part of the identity.
    pub contract_terms: Option<crate::terms::ContractTerms>,
}

impl NewOperation {
    /// An operation of contract `contract_name` at `contract_version` with
    /// this request fingerprint: no provider key, no stored intent, no
    /// approval rule, no trace context, no stored terms.
    pub fn new(
        contract_name: impl Into<String>,
        contract_version: impl Into<String>,
        fingerprint: RequestFingerprint,
    ) -> Self {
        NewOperation {
            contract_name: contract_name.into(),
            contract_version: contract_version.into(),
            fingerprint,
            provider_idempotency_key: None,
            intent: None,
            requires_approval: false,
            redacted_arguments: None,
            trace_context: None,
            contract_terms: None,
        }
    }

    /// With this provider idempotency key.
    #[must_use]
    pub fn with_provider_idempotency_key(mut self, key: Option<String>) -> Self {
        self.provider_idempotency_key = key;
        self
    }

    /// With this stored intent ([`NewOperation::intent`]).
    #[must_use]
    pub fn with_intent(mut self, intent: Option<Value>) -> Self {
        self.intent = intent;
        self
    }

    /// Created `awaiting_approval` when `true` ([`NewOperation::requires_approval`]).
    #[must_use]
    pub fn with_requires_approval(mut self, requires_approval: bool) -> Self {
        self.requires_approval = requires_approval;
        self
    }

    /// With what an approver is shown ([`NewOperation::redacted_arguments`]).
    #[must_use]
    pub fn with_redacted_arguments(mut self, redacted: Option<Value>) -> Self {
        self.redacted_arguments = redacted;
        self
    }

    /// With the creating execution's `traceparent` ([`NewOperation::trace_context`]).
    #[must_use]
    pub fn with_trace_context(mut self, trace_context: Option<String>) -> Self {
        self.trace_context = trace_context;
        self
    }

    /// With the contract's stored terms ([`NewOperation::contract_terms`]).
    #[must_use]
    pub fn with_contract_terms(mut self, terms: Option<crate::terms::ContractTerms>) -> Self {
        self.contract_terms = terms;
        self
    }
}

impl Claim {
    /// A claim by `owner_token` for a lease of `lease`, charged to no budget.
    pub fn new(owner_token: impl Into<String>, lease: Duration) -> Self {
        Claim {
            owner_token: owner_token.into(),
            lease,
            budgets: Vec::new(),
        }
    }

    /// Charged to these budgets ([`Claim::budgets`]).
    #[must_use]
    pub fn with_budgets(mut self, budgets: Vec<BudgetCharge>) -> Self {
        self.budgets = budgets;
        self
    }
}

/// A human's approval of one dispatch of one exact request
/// (docs/approval.md). Single use: the claim that dispatches the operation
/// consumes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    /// The request fingerprint approved, as the ledger stores it
    /// ([`EffectRecord::request_fingerprint`]): an approval of other
    /// arguments is a conflict.
    pub request_fingerprint: String,
    /// Who approved. The library does not authenticate it.
    pub actor: String,
    /// Why.
    pub reason: String,
    /// Until when a claim may use it, on the ledger's clock.
    pub expires_at: SystemTime,
}

/// A request for the dispatch lease, built with [`Claim::new`] (and
/// [`Claim::with_budgets`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Claim {
    /// A token unique to this attempt; only its holder may finalize.
    pub owner_token: String,
    /// How long the lease lasts unless renewed, measured on the ledger's clock.
    pub lease: Duration,
    /// The budgets the dispatch is charged to (docs/approval.md#budgets):
    /// the store reads their use in the claim's transaction and refuses the
    /// claim when a limit would be exceeded. Empty for no budget.
    pub budgets: Vec<BudgetCharge>,
}

/// A confirmed outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Confirmation {
    /// The effect's output, stored for replay.
    pub output: Value,
    /// The provider's id for the effect.
    pub provider_operation_id: Option<String>,
    /// What the confirmation rests on; replaces the record's evidence.
    pub evidence: Evidence,
}

/// An operator's decision about an uncertain operation.
#[derive(Debug, Clone, PartialEq)]
pub enum ManualAction {
    /// The effect happened, with this output.
    Confirm {
        /// The effect's output, stored for replay.
        output: Value,
        /// The provider's id for the effect.
        provider_operation_id: Option<String>,
    },
    /// The effect did not happen and must not be retried.
    Reject,
    /// The effect did not happen; the next execution may dispatch again.
    ///
    /// Refused while the record says a previous handler may still be running
    /// (its deadline passed or its lease expired) or its dispatch lease has
    /// not ended, unless the operator states that it stopped: a retry then
    /// could send the request a second time.
    AuthorizeRetry {
        /// The operator states that no previous handler of this operation is
        /// still running (the process is gone, the request was never sent).
        /// Recorded in the evidence as
        /// [`HANDLER_STOPPED_ASSERTED`](crate::evidence::HANDLER_STOPPED_ASSERTED).
        handler_stopped: bool,
    },
}

/// Who made an operator's decision, why, and where the evidence is: the
/// audit trail of a [`ManualResolution`], a cancel or a compensation request.
/// Every field must be non-blank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audit {
    /// Who decided. The library does not authenticate it.
    pub actor: String,
    /// Why.
    pub reason: String,
    /// Where the evidence is (ticket, provider dashboard link, ...).
    pub evidence_reference: String,
}

impl Audit {
    /// An audit trail entry.
    pub fn new(
        actor: impl Into<String>,
        reason: impl Into<String>,
        evidence_reference: impl Into<String>,
    ) -> Self {
        Audit {
            actor: actor.into(),
            reason: reason.into(),
            evidence_reference: evidence_reference.into(),
        }
    }
}

/// An audited manual resolution (docs/spec.md §4, last three rows).
#[derive(Debug, Clone, PartialEq)]
pub struct ManualResolution {
    /// The decision.
    pub action: ManualAction,
    /// Who decided it, why, and where the evidence is.
    pub audit: Audit,
}

impl ManualResolution {
    /// `action`, decided as `audit` says.
    pub fn new(action: ManualAction, audit: Audit) -> Self {
        ManualResolution { action, audit }
    }
}

/// The condition of a [`Transition::Guarded`] transition, checked inside the
/// store's write transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// The record must still be in this revision (see [`Revision`]).
    pub revision: Revision,
    /// Also refuse when the current record says that a previous handler may
    /// still be running (see [`EffectRecord::handler_may_still_be_running`]).
    pub no_running_handler: bool,
}

impl Guard {
    /// Holds while `record` is unchanged.
    pub fn unchanged(record: &EffectRecord) -> Self {
        Guard {
            revision: record.revision(),
            no_running_handler: false,
        }
    }

    /// Holds while `record` is unchanged and says no previous handler may still run.
    #[must_use]
    pub fn no_running_handler(mut self) -> Self {
        self.no_running_handler = true;
        self
    }

    fn holds(&self, record: &EffectRecord) -> bool {
        record.revision() == self.revision
            && !(self.no_running_handler && record.handler_may_still_be_running())
    }
}

/// One ledger transition (docs/spec.md §4).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Transition {
    /// Create the operation, or check that the stored one has the same identity.
    Prepare(NewOperation),
    /// `Prepare`, then claim the dispatch lease if the operation is `prepared`,
    /// in one transaction: a fresh effect's first durable commit.
    PrepareAndClaim(NewOperation, Claim),
    /// Claim the dispatch lease of a `prepared` operation.
    Claim(Claim),
    /// Extend the lease of a live owner. Appends no event.
    RenewLease {
        /// The owner's token.
        owner_token: String,
        /// The new lease length from now.
        lease: Duration,
    },
    /// Turn a `dispatched` operation whose lease has ended into `outcome_unknown`.
    ExpireLease,
    /// The outcome is uncertain. With an owner: from `dispatched`; without: from
    /// `outcome_unknown` or `quarantined`.
    MarkOutcomeUnknown {
        /// The owner's token, when finalizing a dispatch.
        owner_token: Option<String>,
        /// What went wrong.
        error: String,
        /// Merged into the record's evidence.
        evidence: Evidence,
    },
    /// The effect happened. With an owner: from `dispatched`; without: from
    /// `prepared`, `outcome_unknown` or `quarantined` (already `confirmed` is a no-op success).
    MarkConfirmed {
        /// The owner's token, when finalizing a dispatch.
        owner_token: Option<String>,
        /// The outcome.
        confirmation: Confirmation,
    },
    /// The provider definitively refused the effect; from `dispatched` by its owner.
    MarkRejected {
        /// The owner's token.
        owner_token: String,
        /// The provider's refusal.
        error: String,
    },
    /// Park an uncertain operation for an operator.
    Quarantine {
        /// Why it cannot be settled automatically.
        error: String,
        /// Merged into the record's evidence.
        evidence: Evidence,
    },
    /// Allow another dispatch of an uncertain operation.
    ResetForRetry {
        /// Why a retry is safe; merged into the record's evidence.
        evidence: Evidence,
    },
    /// An operator's audited decision.
    Resolve(ManualResolution),
    /// Record a human's approval of an operation `awaiting_approval`
    /// (docs/approval.md); the next claim consumes it.
    Approve(Approval),
    /// A human's denial of an operation `awaiting_approval`: it becomes
    /// `rejected`, terminally.
    DenyApproval {
        /// Who denied. The library does not authenticate it.
        actor: String,
        /// Why.
        reason: String,
    },
    /// An operator's audited cancellation of an operation not yet
    /// dispatched (`prepared`, whoever it waits for, or
    /// `awaiting_approval`): it becomes `rejected` with a `cancelled`
    /// event, and its budget charges, if any, are given back. Planned in
    /// the store's write transaction like a claim, so of a cancel and a
    /// racing claim exactly one applies: a claim that committed first
    /// makes the cancel an invalid transition (the operation is
    /// `dispatched`), and a cancel that committed first leaves the claim
    /// nothing to dispatch.
    Cancel {
        /// Who cancelled. The library does not authenticate it.
        actor: String,
        /// Why.
        reason: String,
        /// Where the evidence is (ticket, conversation, ...).
        evidence_reference: String,
    },
    /// What a handler returned after its attempt lost its claim (its lease
    /// expired and another caller moved the record on): appended as a
    /// `late_observation` event with `observation` and the status it found,
    /// never changing the record, its `updated_at` included. Refused while
    /// `owner_token` still holds the dispatch: its owner finalizes instead.
    RecordLateObservation {
        /// The token of the attempt that observed it.
        owner_token: String,
        /// What it observed (outcome, output, error, evidence), redacted.
        observation: Evidence,
    },
    /// A recovery worker cannot dispatch the operation (docs/spec.md §5c):
    /// no registered version reads its stored intent, or the running
    /// contract weakens its stored terms. Appended as a `recovery_blocked`
    /// event with `reason`, `error` and the running `contract_version`,
    /// never changing the record, its `updated_at` included. The worker
    /// appends it once per reason, not on every pass.
    RecordRecoveryBlocked {
        /// [`event::BLOCKED_INTENT_UNREADABLE`] or
        /// [`event::BLOCKED_CONTRACT_WEAKENED`].
        reason: &'static str,
        /// What blocks it, without the operation's arguments.
        error: String,
        /// The version of the contract the worker ran.
        contract_version: String,
    },
    /// The contract's precondition failed before the operation's first
    /// dispatch (`prepared` or `awaiting_approval`, never dispatched): it
    /// becomes `rejected` with the reason (event `precondition_failed`),
    /// nothing sent or charged.
    RejectByPrecondition {
        /// Why the precondition refused it.
        reason: String,
    },
    /// A step of a compensation's trail (docs/compensation.md): on a
    /// confirmed original, a request, the start or the end of its
    /// compensation; on the compensation, the link to its original. None
    /// changes a status.
    Compensation(CompensationStep),
    /// The inner transition, only if the guard holds on the current record;
    /// otherwise nothing is written and the outcome is not applied. A decision
    /// made on an earlier read (a probe's answer, an operator's look at the
    /// record) is applied through this, so that it never lands on a record that
    /// changed meanwhile. The inner transition must not be a prepare or
    /// another guarded transition.
    Guarded(Guard, Box<Transition>),
}

impl Transition {
    /// A short name for messages and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Transition::Prepare(_) => "prepare",
            Transition::PrepareAndClaim(..) => "prepare and claim",
            Transition::Claim(_) => "claim dispatch",
            Transition::RenewLease { .. } => "renew lease",
            Transition::ExpireLease => "expire lease",
            Transition::MarkOutcomeUnknown { .. } => "mark outcome unknown",
            Transition::MarkConfirmed { .. } => "mark confirmed",
            Transition::MarkRejected { .. } => "mark rejected",
            Transition::Quarantine { .. } => "quarantine",
            Transition::ResetForRetry { .. } => "reset for retry",
            Transition::Resolve(resolution) => match resolution.action {
                ManualAction::Confirm { .. } => "manually confirm",
                ManualAction::Reject => "manually reject",
                ManualAction::AuthorizeRetry { .. } => "authorize a retry of",
            },
            Transition::Approve(_) => "approve",
            Transition::DenyApproval { .. } => "deny approval of",
            Transition::Cancel { .. } => "cancel",
            Transition::Compensation(step) => step.name(),
            Transition::RecordLateObservation { .. } => "record a late observation of",
            Transition::RecordRecoveryBlocked { .. } => "record why recovery is blocked for",
            Transition::RejectByPrecondition { .. } => "reject by precondition",
            Transition::Guarded(_, inner) => inner.name(),
        }
    }
}

/// What a transition did.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionOutcome {
    /// False when a guard did not hold (wrong status, stale owner token, live lease).
    pub applied: bool,
    /// The record after the transition (the unchanged record when not applied).
    pub record: EffectRecord,
}

/// An event to append, in order, with the write.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingEvent {
    /// The event type of docs/spec.md §4.
    pub event_type: &'static str,
    /// The event's data.
    pub data: Value,
    /// The transition's time.
    pub timestamp: String,
}

/// How a planned write changes the stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// A new record, with its first events.
    Insert,
    /// An existing record moves on, with at least one event.
    Transition,
    /// An existing record changes in place without an event (a lease renewal):
    /// its `updated_at` and event bookkeeping stay as they are.
    InPlace,
}

/// What a store must persist, atomically, for a transition.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    /// How the record changes.
    pub kind: WriteKind,
    /// Events to append after the record is written, in order: empty exactly
    /// when the kind is [`WriteKind::InPlace`].
    pub events: Vec<PendingEvent>,
    /// Budget charges to record or give back, in the same transaction
    /// (docs/approval.md#budgets); empty for most writes.
    pub budgets: Vec<BudgetWrite>,
}

/// The plan for one transition: the outcome to report, and what to write (if anything).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// What the caller is told once the write (if any) is durable.
    pub outcome: TransitionOutcome,
    /// What to persist; `None` when nothing changes.
    pub write: Option<Write>,
}

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

fn check_identity(
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

    fn create(&mut self, operation_id: &str, op: &NewOperation) -> EffectRecord {
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

    fn lease_until(&self, lease: Duration) -> f64 {
        unix_seconds(self.now + lease)
    }

    fn claim(
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

    /// Checks the claim's budgets against the use the store read: `Ok` with
    /// the operation's charges (`{budget, amount}` each; new charges are
    /// queued to be written), or the refusal and the refusing budget's
    /// deferral when one limit would be exceeded, nothing charged. An
    /// operation charged once (a retry of an uncertain dispatch) is not
    /// charged again.
    #[allow(clippy::type_complexity)] // one private call site reads it at once
    fn charge_budgets(
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
    fn refused(
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
    fn deferral_expired(&mut self, record: &mut EffectRecord) {
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
    fn end_by_budget(
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

    /// Whether `record` (awaiting approval) holds an approval a claim may
    /// use now: of its own request fingerprint and not expired.
    fn approval_usable(&self, record: &EffectRecord) -> bool {
        record.approval().is_some_and(|approval| {
            approval.get("request_fingerprint").and_then(Value::as_str)
                == Some(record.request_fingerprint.as_str())
                && approval
                    .get("expires_at_unix")
                    .and_then(Value::as_f64)
                    .is_some_and(|until| until > unix_seconds(self.now))
        })
    }

    /// Gives back the charges of an operation that is being rejected, with
    /// a `budget_refunded` event naming them, when it has any.
    fn refund(&mut self, charges: Option<Value>) {
        self.budget_writes.push(BudgetWrite::Refund);
        if let Some(charges) = charges.filter(|c| c.as_array().is_some_and(|a| !a.is_empty())) {
            self.event(event::BUDGET_REFUNDED, json!({ "budget_charges": charges }));
        }
    }

    /// Takes the approval a claim of `record` (awaiting approval) consumes:
    /// present, of the record's own request fingerprint, and not expired by
    /// the ledger's clock. An expired or unusable one is dropped, with an
    /// `approval_expired` event, and the operation keeps waiting.
    fn usable_approval(&mut self, record: &mut EffectRecord) -> Option<Value> {
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

    fn step(
        &mut self,
        mut record: EffectRecord,
        transition: &Transition,
    ) -> Result<(bool, EffectRecord), LedgerError> {
        use EffectStatus as S;
        let status = record.status;
        let owned_by =
            |token: &str| status == S::Dispatched && record.owner_token.as_deref() == Some(token);
        let applied = match transition {
            Transition::Prepare(_) | Transition::PrepareAndClaim(..) | Transition::Guarded(..) => {
                false
            }
            Transition::Claim(claim) => return self.claim(record, claim),
            Transition::RenewLease { owner_token, lease } => {
                if !owned_by(owner_token) {
                    return Ok((false, record));
                }
                record.lease_until = Some(self.lease_until(*lease));
                self.dirty = true;
                true
            }
            Transition::ExpireLease => {
                let expired = status == S::Dispatched
                    && record
                        .lease_until
                        .is_none_or(|until| until <= unix_seconds(self.now));
                if !expired {
                    return Ok((false, record));
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
                    &mut record,
                    S::OutcomeUnknown,
                    event::OUTCOME_UNKNOWN,
                    error,
                    &evidence,
                );
                true
            }
            Transition::MarkOutcomeUnknown {
                owner_token,
                error,
                evidence,
            } => {
                let allowed = match owner_token {
                    Some(token) => owned_by(token),
                    None => status.is_uncertain(),
                };
                if !allowed {
                    return Ok((false, record));
                }
                self.uncertain(
                    &mut record,
                    S::OutcomeUnknown,
                    event::OUTCOME_UNKNOWN,
                    error,
                    evidence,
                );
                true
            }
            Transition::MarkConfirmed {
                owner_token,
                confirmation,
            } => {
                let allowed = match owner_token {
                    Some(token) => owned_by(token),
                    None if status == S::Confirmed => return Ok((true, record)),
                    None => matches!(status, S::Prepared | S::OutcomeUnknown | S::Quarantined),
                };
                if !allowed {
                    return Ok((false, record));
                }
                record.status = S::Confirmed;
                record.output = Some(confirmation.output.clone());
                record.provider_operation_id = confirmation.provider_operation_id.clone();
                let link = record.evidence.remove(evidence::COMPENSATES);
                record.evidence = confirmation.evidence.clone();
                keep_link(&mut record.evidence, link);
                record.error = None;
                release(&mut record);
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
            Transition::MarkRejected { owner_token, error } => {
                if !owned_by(owner_token) {
                    return Ok((false, record));
                }
                record.status = S::Rejected;
                record.error = Some(error.clone());
                release(&mut record);
                self.event(event::REJECTED, json!({ "error": error }));
                let charges = record.evidence.remove(evidence::BUDGET_CHARGES);
                self.refund(charges);
                true
            }
            Transition::Quarantine { error, evidence } => {
                if !status.is_uncertain() {
                    return Ok((false, record));
                }
                self.uncertain(
                    &mut record,
                    S::Quarantined,
                    event::QUARANTINED,
                    error,
                    evidence,
                );
                true
            }
            Transition::ResetForRetry { evidence } => {
                if !status.is_uncertain() {
                    return Ok((false, record));
                }
                record.status = next_dispatchable(&record);
                record.error = None;
                record.evidence.extend(evidence.clone());
                release(&mut record);
                self.event(event::RETRY_AUTHORIZED, json!({ "evidence": evidence }));
                true
            }
            Transition::Resolve(resolution) => {
                self.resolve(&mut record, resolution, transition.name())?;
                true
            }
            Transition::Approve(approval) => {
                self.approve(&mut record, approval, transition.name())?;
                true
            }
            Transition::Compensation(step) => {
                self.compensation(&mut record, step)?;
                true
            }
            Transition::RejectByPrecondition { reason } => {
                if reason.trim().is_empty() {
                    return Err(LedgerError::invalid_input(
                        "a precondition's refusal needs a reason",
                    ));
                }
                if !matches!(status, S::Prepared | S::AwaitingApproval) || record.attempts > 0 {
                    return Err(LedgerError::InvalidTransition {
                        operation_id: record.operation_id.clone(),
                        transition: transition.name(),
                        status,
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
                true
            }
            Transition::RecordLateObservation {
                owner_token,
                observation,
            } => {
                if owned_by(owner_token) {
                    return Err(LedgerError::InvalidTransition {
                        operation_id: record.operation_id.clone(),
                        transition: transition.name(),
                        status,
                    });
                }
                let mut data = observation.clone();
                data.insert("status_when_observed".into(), status.as_str().into());
                self.event(event::LATE_OBSERVATION, Value::Object(data));
                true
            }
            Transition::RecordRecoveryBlocked {
                reason,
                error,
                contract_version,
            } => {
                self.event(
                    event::RECOVERY_BLOCKED,
                    json!({
                        "reason": reason,
                        "error": error,
                        "contract_version": contract_version,
                        "status_when_blocked": status.as_str(),
                    }),
                );
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
                check_decision(actor, reason)?;
                if status != S::AwaitingApproval {
                    return Err(LedgerError::InvalidTransition {
                        operation_id: record.operation_id.clone(),
                        transition: transition.name(),
                        status,
                    });
                }
                let error = format!("approval denied by {actor}: {reason}");
                record.status = S::Rejected;
                record.evidence.remove(evidence::APPROVAL);
                record.evidence.insert("actor".into(), actor.clone().into());
                record
                    .evidence
                    .insert("reason".into(), reason.clone().into());
                record
                    .evidence
                    .insert(evidence::RESOLUTION.into(), "approval_denied".into());
                self.event(
                    event::APPROVAL_DENIED,
                    json!({ "actor": actor, "reason": reason, "error": error }),
                );
                record.error = Some(error);
                true
            }
        };
        Ok((applied, record))
    }

    /// Moves `record` to an uncertain `status`. A repeat that would change
    /// nothing (same status, same error, evidence already present) writes
    /// nothing, so calling again on a quarantined operation leaves no trail.
    fn uncertain(
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

    /// Records `approval` on an operation awaiting approval, refusing an
    /// approval of other arguments, one already expired, and a second one
    /// while an unused approval stands.
    fn approve(
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

    /// Cancels an operation not yet dispatched: `rejected`, audited like a
    /// manual resolution (the evidence it replaces kept one level deep),
    /// and its charges given back unless an earlier attempt may have
    /// committed (a retry resting on a guaranteed provider key).
    fn cancel(
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

    fn resolve(
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

/// The bound of `record`'s budget deferral, in seconds since the Unix
/// epoch; `None` when it is not deferred or waits without a bound.
fn deferral_until(record: &EffectRecord) -> Option<f64> {
    record
        .evidence
        .get(evidence::BUDGET_DEFERRAL)?
        .get("deferred_until_unix")?
        .as_f64()
}

/// A refusal as its event's data and the record's evidence hold it.
fn refusal_data(refusal: &BudgetRefusal) -> Value {
    // Serializing a struct of strings and integers cannot fail.
    serde_json::to_value(refusal).unwrap_or(Value::Null)
}

/// The time `unix` seconds after the epoch; the epoch for a time before it
/// or one a `SystemTime` cannot hold.
fn from_unix(unix: f64) -> SystemTime {
    Duration::try_from_secs_f64(unix)
        .ok()
        .and_then(|since| SystemTime::UNIX_EPOCH.checked_add(since))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// Where an uncertain operation goes when another dispatch is allowed:
/// `prepared`, or `awaiting_approval` when its contract requires a human
/// approval before each dispatch (the approval of an earlier one was used).
fn next_dispatchable(record: &EffectRecord) -> EffectStatus {
    if record.requires_approval() {
        EffectStatus::AwaitingApproval
    } else {
        EffectStatus::Prepared
    }
}

/// Refuses an approval or denial without an actor or a reason.
fn check_decision(actor: &str, reason: &str) -> Result<(), LedgerError> {
    for (field, value) in [("actor", actor), ("reason", reason)] {
        if value.trim().is_empty() {
            return Err(LedgerError::invalid_input(format!(
                "an approval decision needs a non-empty {field}"
            )));
        }
    }
    Ok(())
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

mod compensating;
#[cfg(test)]
mod tests;
