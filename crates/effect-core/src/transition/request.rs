//! What a caller asks of the ledger: the [`Transition`]s and the requests
//! they carry.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::budget::BudgetCharge;
use crate::compensation::CompensationStep;
use crate::fingerprint::RequestFingerprint;
use crate::record::{EffectRecord, Evidence, Revision};

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
    /// ([`Redaction`](crate::Redaction)). Recorded in the `prepared` event of an
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

    pub(super) fn holds(&self, record: &EffectRecord) -> bool {
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
        /// [`event::BLOCKED_INTENT_UNREADABLE`](crate::event::BLOCKED_INTENT_UNREADABLE) or
        /// [`event::BLOCKED_CONTRACT_WEAKENED`](crate::event::BLOCKED_CONTRACT_WEAKENED).
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
