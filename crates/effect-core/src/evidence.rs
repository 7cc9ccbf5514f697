//! The evidence keys and values the safety rules read and write.
//!
//! Evidence is a JSON object on each record (see [`Evidence`](crate::Evidence)).
//! Most of it is free-form (a probe's own evidence, an operator's reason), but
//! these entries decide what reconciliation may do, so every crate spells them
//! through these constants.

/// `true` when a previous handler may still send its request: its deadline
/// passed or its lease expired. A `not_committed` probe then does not
/// authorize a retry unless the provider key is guaranteed idempotent.
pub const HANDLER_MAY_STILL_BE_RUNNING: &str = "handler_may_still_be_running";

/// How a dispatch ended without an outcome: one of the `INTERRUPTED_*` values.
pub const DISPATCH_INTERRUPTION: &str = "dispatch_interruption";
/// The handler returned an error.
pub const INTERRUPTED_BY_HANDLER_EXCEPTION: &str = "handler_exception";
/// The handler missed its deadline.
pub const INTERRUPTED_BY_HANDLER_TIMEOUT: &str = "handler_timeout";
/// The dispatch lease expired before an outcome was recorded.
pub const INTERRUPTED_BY_LEASE_EXPIRY: &str = "lease_expired";
/// The handler reported that nothing left the process (effect-exec's
/// `HandlerError::not_sent`).
pub const INTERRUPTED_BEFORE_SENDING: &str = "not_sent";
/// The handler's output could not be stored.
pub const INTERRUPTED_BY_UNSTORABLE_OUTPUT: &str = "unstorable_output";

/// Why a retry was authorized: one of the `RETRY_BASIS_*` values.
pub const RETRY_BASIS: &str = "retry_basis";
/// The provider's documented idempotency key covers the repeat.
pub const RETRY_BASIS_GUARANTEED_KEY: &str = "provider_idempotency_guaranteed";
/// The handler reported that the request was never sent.
pub const RETRY_BASIS_NOT_SENT: &str = "handler_reported_not_sent";
/// An authoritative probe said the request did not commit.
pub const RETRY_BASIS_PROBE_NOT_COMMITTED: &str = "probe_not_committed";
/// An operator authorized the retry (`manual_retry_authorized`), on the
/// evidence they recorded.
pub const RETRY_BASIS_OPERATOR: &str = "operator";

/// The probe's verdict that a transition rests on.
pub const PROBE_STATUS: &str = "probe_status";
/// Why the probe itself failed.
pub const PROBE_ERROR: &str = "probe_error";
/// `"failed"` when an output did not satisfy the contract's postcondition.
pub const POSTCONDITION: &str = "postcondition";
/// Where a confirmation came from (`"handler_return"`).
pub const SOURCE: &str = "source";
/// A confirmation from the handler's own return value.
pub const SOURCE_HANDLER_RETURN: &str = "handler_return";
/// `true` on a manual retry authorization whose operator stated that no
/// previous handler is still running, which the planner otherwise requires
/// the record to show.
pub const HANDLER_STOPPED_ASSERTED: &str = "handler_stopped_asserted";
/// On a manually resolved record (and in its event): the evidence the record
/// held before the operator's decision, so a resolution never erases what was
/// known.
pub const EVIDENCE_BEFORE_RESOLUTION: &str = "evidence_before_resolution";
/// The kind of an operator's decision (`manual_confirmation`, ...).
pub const RESOLUTION: &str = "resolution";

/// `true` on an operation whose contract requires a human approval before
/// each dispatch (docs/approval.md): set when it is created and kept through
/// every uncertain status, so a retry waits for a new approval.
pub const APPROVAL_REQUIRED: &str = "approval_required";
/// The unused approval of an operation `awaiting_approval`: an object with
/// [`APPROVAL_FIELDS`]. The claim that dispatches the operation removes it
/// (single use) and records it in its `dispatched` event.
pub const APPROVAL: &str = "approval";
/// The fields of an [`APPROVAL`] entry: the approved request fingerprint,
/// who approved and why, when, and until when (ISO-8601 UTC text and the
/// same instant in seconds since the Unix epoch, which the claim compares).
pub const APPROVAL_FIELDS: [&str; 6] = [
    "request_fingerprint",
    "actor",
    "reason",
    "approved_at",
    "expires_at",
    "expires_at_unix",
];

/// On a confirmed operation whose compensation started
/// (docs/compensation.md): an object with the compensation's
/// `operation_id`, `contract_name`, `contract_version` and `state`
/// (`started`, `confirmed` or `rejected`).
pub const COMPENSATION: &str = "compensation";
/// On a confirmed operation: an operator's request for its compensation, an
/// object with `actor`, `reason`, `evidence_reference` and `requested_at`.
pub const COMPENSATION_REQUEST: &str = "compensation_request";
/// On a compensation: the operation id of the operation it undoes. Kept
/// through its confirmation and any manual resolution.
pub const COMPENSATES: &str = "compensates";

/// Set, alone, on a record a store *lists* although its stored output or
/// evidence cannot be read (nested too deep, or not JSON): what could not be
/// read. Reading that operation itself reports the error.
pub const LEDGER_READ_ERROR: &str = "ledger_read_error";

/// The budgets the operation's dispatch was charged to, each
/// `{budget, amount}` (docs/approval.md#budgets): kept while the operation
/// can still be rejected, so a rejection gives them back.
pub const BUDGET_CHARGES: &str = "budget_charges";

/// The last claim of the operation was refused over a budget: the
/// refusal ([`BudgetRefusal`](crate::BudgetRefusal)) its `budget_exceeded`
/// or `budget_deferred` event recorded. Dropped by the next claim that
/// dispatches.
pub const BUDGET_EXCEEDED: &str = "budget_exceeded";

/// The operation is deferred by a budget (docs/approval.md#budgets):
/// `{deferred_until, deferred_until_unix}`, both `null` for a retry of an
/// operation already charged elsewhere, which waits without a bound. Set by
/// the claim a budget first refused; a claim past `deferred_until_unix`
/// rejects the operation instead of dispatching it. Dropped by the claim
/// that dispatches.
pub const BUDGET_DEFERRAL: &str = "budget_deferral";

/// The value of [`RESOLUTION`] on an operation a budget refusal rejected.
pub const RESOLUTION_BUDGET_EXCEEDED: &str = "budget_exceeded";
/// The value of [`RESOLUTION`] on an operation whose budget deferral
/// expired before a claim could dispatch it.
pub const RESOLUTION_BUDGET_DEFERRAL_EXPIRED: &str = "budget_deferral_expired";
/// The value of [`RESOLUTION`] on an operation its contract's precondition
/// rejected before its first dispatch.
pub const RESOLUTION_PRECONDITION_FAILED: &str = "precondition_failed";
/// The value of [`RESOLUTION`] on an operation an operator cancelled
/// before its dispatch.
pub const RESOLUTION_CANCELLED: &str = "cancelled";
