//! The event types a transition appends (see [`LedgerEvent`](crate::LedgerEvent)).
//!
//! These strings are stored, and the Python package writes and reads the same
//! ones, so they never change.

/// The operation was created.
pub const PREPARED: &str = "prepared";
/// A caller claimed the dispatch lease.
pub const DISPATCHED: &str = "dispatched";
/// The effect happened.
pub const CONFIRMED: &str = "confirmed";
/// The provider definitively refused the effect.
pub const REJECTED: &str = "rejected";
/// The outcome is uncertain.
pub const OUTCOME_UNKNOWN: &str = "outcome_unknown";
/// The operation was parked for an operator.
pub const QUARANTINED: &str = "quarantined";
/// What a handler returned after its attempt lost the lease or the record
/// moved on: untrusted evidence beside the decision, never a status change
/// (docs/spec.md §4). Not written by the Python package.
pub const LATE_OBSERVATION: &str = "late_observation";
/// A recovery worker cannot dispatch the operation: no registered version
/// reads its stored intent, or the running contract weakens its stored
/// terms (docs/spec.md §5c); never a status change. Not written by the
/// Python package, which lists it like any event.
pub const RECOVERY_BLOCKED: &str = "recovery_blocked";
/// `recovery_blocked`'s reason: no registered version reads the stored intent.
pub const BLOCKED_INTENT_UNREADABLE: &str = "intent_unreadable";
/// `recovery_blocked`'s reason: the running contract weakens the stored terms.
pub const BLOCKED_CONTRACT_WEAKENED: &str = "contract_weakened";
/// The contract's precondition failed before the first dispatch: the
/// operation is rejected, nothing sent. Not written by the Python package.
pub const PRECONDITION_FAILED: &str = "precondition_failed";
/// Another dispatch was allowed by reconciliation.
pub const RETRY_AUTHORIZED: &str = "retry_authorized";
/// An operator confirmed the effect.
pub const MANUALLY_CONFIRMED: &str = "manually_confirmed";
/// An operator rejected the effect.
pub const MANUALLY_REJECTED: &str = "manually_rejected";
/// An operator allowed another dispatch.
pub const MANUAL_RETRY_AUTHORIZED: &str = "manual_retry_authorized";

/// A human approved one dispatch of the operation's exact request
/// (docs/approval.md). Not written by the Python package.
pub const APPROVED: &str = "approved";
/// A human denied the operation; it is `rejected`. Not written by the Python
/// package.
pub const APPROVAL_DENIED: &str = "approval_denied";
/// A claim found the operation's approval expired and dropped it; the
/// operation waits for a new approval. Not written by the Python package.
pub const APPROVAL_EXPIRED: &str = "approval_expired";

/// A claim was refused because a budget's limit would be exceeded
/// (docs/approval.md#budgets); nothing was dispatched or charged, and the
/// operation is `rejected` (earlier versions left it `prepared`). Not
/// written by the Python package.
pub const BUDGET_EXCEEDED: &str = "budget_exceeded";
/// A budget refused a claim of an operation whose contract defers such
/// refusals: it stays `prepared` (or `awaiting_approval`) until the bound
/// in the data, and a later claim inside it dispatches it when the budget
/// has room. Written once per deferral, not per refused claim. Not written
/// by the Python package.
pub const BUDGET_DEFERRED: &str = "budget_deferred";
/// A claim found the operation's budget deferral past its bound: the
/// operation is `rejected`, nothing dispatched or charged. Not written by
/// the Python package.
pub const BUDGET_DEFERRAL_EXPIRED: &str = "budget_deferral_expired";
/// An operator cancelled an operation before it was dispatched
/// (`prepared` or `awaiting_approval`): it is `rejected`, and its budget
/// charges, if any, are given back. Not written by the Python package.
pub const CANCELLED: &str = "cancelled";
/// The charges of a rejected operation were given back to their budgets.
/// Not written by the Python package.
pub const BUDGET_REFUNDED: &str = "budget_refunded";
/// An operator asked for the compensation of a confirmed operation
/// (docs/compensation.md). Not written by the Python package.
pub const COMPENSATION_REQUESTED: &str = "compensation_requested";
/// On a confirmed operation: its compensation, another operation, was
/// started. Not written by the Python package.
pub const COMPENSATION_STARTED: &str = "compensation_started";
/// On a confirmed operation: its compensation was confirmed. Not written by
/// the Python package.
pub const COMPENSATED: &str = "compensated";
/// On a confirmed operation: its compensation was rejected by the provider;
/// the effect stands. Not written by the Python package.
pub const COMPENSATION_REJECTED: &str = "compensation_rejected";
/// On a compensation: the operation it undoes. Not written by the Python
/// package.
pub const COMPENSATION_OF: &str = "compensation_of";
