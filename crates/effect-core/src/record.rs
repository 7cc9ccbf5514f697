//! What the ledger stores and what execution returns.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::status::{EffectStatus, ProbeStatus};

/// Evidence: a JSON object describing why an operation is in its status.
pub type Evidence = Map<String, Value>;

/// One operation as stored in the ledger.
///
/// It will gain fields, so outside this crate build one with
/// [`EffectRecord::new`] and set the rest: a store reading its rows back
/// does exactly that.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EffectRecord {
    /// The stable business identity.
    pub operation_id: String,
    /// The contract's name.
    pub contract_name: String,
    /// The contract's version.
    pub contract_version: String,
    /// `blake3:<hex>`, or a bare SHA-256 hex digest written by the Python package.
    pub request_fingerprint: String,
    /// The key forwarded to the provider on every attempt.
    pub provider_idempotency_key: Option<String>,
    /// Where the operation stands.
    pub status: EffectStatus,
    /// The stored output of a confirmed operation.
    pub output: Option<Value>,
    /// The provider's id for the effect, when known.
    pub provider_operation_id: Option<String>,
    /// The last error, for uncertain and rejected operations.
    pub error: Option<String>,
    /// How many dispatches were claimed.
    pub attempts: u32,
    /// Why the operation is in its status.
    pub evidence: Evidence,
    /// The token of the caller holding the dispatch lease.
    pub owner_token: Option<String>,
    /// When the dispatch lease ends, in seconds since the Unix epoch.
    pub lease_until: Option<f64>,
    /// ISO-8601 UTC creation time.
    pub created_at: String,
    /// ISO-8601 UTC time of the last transition.
    pub updated_at: String,
}

impl EffectRecord {
    /// A record as `prepare` creates it: status `prepared`, no attempt, no
    /// key, output, error, evidence or lease, updated when created.
    ///
    /// ```
    /// use effect_core::{EffectRecord, EffectStatus};
    ///
    /// let mut record = EffectRecord::new(
    ///     "invoice:INV-1:capture",
    ///     "capture_payment",
    ///     "1",
    ///     "blake3:00",
    ///     "2026-01-01T00:00:00.000000+00:00",
    /// );
    /// record.status = EffectStatus::Quarantined;
    /// record.attempts = 1;
    /// assert_eq!(record.updated_at, record.created_at);
    /// ```
    pub fn new(
        operation_id: impl Into<String>,
        contract_name: impl Into<String>,
        contract_version: impl Into<String>,
        request_fingerprint: impl Into<String>,
        created_at: impl Into<String>,
    ) -> Self {
        let created_at = created_at.into();
        EffectRecord {
            operation_id: operation_id.into(),
            contract_name: contract_name.into(),
            contract_version: contract_version.into(),
            request_fingerprint: request_fingerprint.into(),
            provider_idempotency_key: None,
            status: EffectStatus::Prepared,
            output: None,
            provider_operation_id: None,
            error: None,
            attempts: 0,
            evidence: Evidence::new(),
            owner_token: None,
            lease_until: None,
            updated_at: created_at.clone(),
            created_at,
        }
    }

    /// The version of this record a decision is based on (see [`Revision`]).
    pub fn revision(&self) -> Revision {
        Revision {
            status: self.status,
            attempts: self.attempts,
            updated_at: self.updated_at.clone(),
        }
    }

    /// True when the operation is `dispatched` and its lease has ended by
    /// `now` (seconds since the Unix epoch): a stale dispatch, whose worker is
    /// gone or stopped renewing, which [`Transition::ExpireLease`](crate::Transition::ExpireLease)
    /// would record as uncertain.
    pub fn is_stale_at(&self, now: f64) -> bool {
        self.status == EffectStatus::Dispatched && self.lease_until.is_none_or(|until| until <= now)
    }

    /// True when the record says that a previous handler may still be running
    /// (evidence `handler_may_still_be_running=true`: a missed deadline or an
    /// expired lease), so an authoritative `not_committed` does not prove that
    /// the request will never be sent.
    pub fn handler_may_still_be_running(&self) -> bool {
        self.evidence
            .get(crate::evidence::HANDLER_MAY_STILL_BE_RUNNING)
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// True when the operation's contract requires a human approval before
    /// each dispatch (evidence `approval_required=true`, docs/approval.md).
    pub fn requires_approval(&self) -> bool {
        self.evidence
            .get(crate::evidence::APPROVAL_REQUIRED)
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// The unused approval of an operation `awaiting_approval`, if one was
    /// given (see [`APPROVAL`](crate::evidence::APPROVAL)).
    pub fn approval(&self) -> Option<&Map<String, Value>> {
        self.evidence
            .get(crate::evidence::APPROVAL)
            .and_then(Value::as_object)
    }

    /// Where this confirmed operation's compensation stands, once one was
    /// started (docs/compensation.md).
    pub fn compensation(&self) -> Option<crate::compensation::CompensationLink> {
        self.evidence
            .get(crate::evidence::COMPENSATION)
            .and_then(crate::compensation::CompensationLink::from_value)
    }

    /// The operator's standing request to compensate this confirmed
    /// operation, if one was recorded.
    pub fn compensation_request(&self) -> Option<&Map<String, Value>> {
        self.evidence
            .get(crate::evidence::COMPENSATION_REQUEST)
            .and_then(Value::as_object)
    }

    /// The operation this one compensates, when it is a compensation.
    pub fn compensates(&self) -> Option<&str> {
        self.evidence
            .get(crate::evidence::COMPENSATES)
            .and_then(Value::as_str)
    }

    /// True when the last dispatch's handler reported that nothing left the
    /// process, and no handler may still be running.
    pub fn reported_not_sent(&self) -> bool {
        self.evidence
            .get(crate::evidence::DISPATCH_INTERRUPTION)
            .and_then(Value::as_str)
            == Some(crate::evidence::INTERRUPTED_BEFORE_SENDING)
            && !self.handler_may_still_be_running()
    }
}

/// What identifies one state of an operation: its status, how many dispatches
/// were claimed, and the time of its last status change.
///
/// A reconciliation decides on a record it read, then asks a probe, which can
/// take a while. Every transition it applies on the strength of that answer
/// is [conditional](crate::Transition::Guarded) on the record still having
/// the revision it read: a new dispatch since then (a higher attempt count),
/// or any status change, means the answer may be about an older attempt, and
/// the caller starts its round again from the current record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    /// The status it was read in.
    pub status: EffectStatus,
    /// Dispatches claimed when it was read.
    pub attempts: u32,
    /// Its `updated_at` when it was read.
    pub updated_at: String,
}

/// One entry of an operation's append-only history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerEvent {
    /// Ledger-wide, strictly increasing order.
    pub sequence: u64,
    /// The operation it belongs to.
    pub operation_id: String,
    /// `prepared`, `dispatched`, `confirmed`, ... (docs/spec.md §4).
    pub event_type: String,
    /// The event's data (docs/spec.md §4).
    pub data: Value,
    /// ISO-8601 UTC time.
    pub timestamp: String,
}

/// What an [`EffectResult`] tells its caller ([`EffectResult::outcome`]).
/// None of these but `Confirmed` says the effect happened, and none but
/// `Rejected` says it did not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome<'a> {
    /// The effect happened; its stored output.
    Confirmed {
        /// The output, if one is stored.
        output: Option<&'a Value>,
    },
    /// Another caller holds the dispatch, or a retry is pending: ask again
    /// (or effect-exec's `EffectExecutor::wait`), never dispatch it yourself.
    InProgress,
    /// Nobody knows yet whether it happened; it is reconciled later (the
    /// next call, a sweep or a recovery worker), never retried blindly.
    Unknown {
        /// Why it is uncertain.
        reason: &'a str,
    },
    /// Nothing can settle it automatically: it waits for an operator.
    Quarantined {
        /// Why it is quarantined.
        reason: &'a str,
    },
    /// Nothing was dispatched: the contract requires a human approval of
    /// this exact request first (docs/approval.md). Ask again once it is
    /// approved; a denial makes it `Rejected`.
    AwaitingApproval,
    /// The provider definitively refused it, or a human denied its
    /// approval; it is never retried.
    Rejected {
        /// The refusal.
        reason: &'a str,
    },
}

/// What an outcome probe learned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutcomeProbeResult {
    /// The verdict.
    pub status: ProbeStatus,
    /// The effect's output, for `committed`.
    pub output: Option<Value>,
    /// The provider's id for the effect.
    pub provider_operation_id: Option<String>,
    /// What the verdict rests on.
    pub evidence: Evidence,
}

impl OutcomeProbeResult {
    /// The effect happened and produced `output`.
    pub fn committed(output: Value) -> Self {
        OutcomeProbeResult::with_status(ProbeStatus::Committed, Some(output))
    }

    /// Authoritative: the request can never commit later.
    pub fn not_committed() -> Self {
        OutcomeProbeResult::with_status(ProbeStatus::NotCommitted, None)
    }

    /// The provider is still processing it.
    pub fn pending() -> Self {
        OutcomeProbeResult::with_status(ProbeStatus::Pending, None)
    }

    /// The evidence cannot settle it.
    pub fn unknown() -> Self {
        OutcomeProbeResult::with_status(ProbeStatus::Unknown, None)
    }

    /// The provider holds something that contradicts the request (a
    /// payment for the invoice with another amount): the operation is
    /// quarantined, never confirmed or retried. Put what the provider holds
    /// in the [`evidence`](Self::evidence), without secrets.
    pub fn conflict() -> Self {
        OutcomeProbeResult::with_status(ProbeStatus::Conflict, None)
    }

    /// Sets the provider's id for the effect.
    #[must_use]
    pub fn provider_operation_id(mut self, id: impl Into<String>) -> Self {
        self.provider_operation_id = Some(id.into());
        self
    }

    /// Adds one evidence entry.
    #[must_use]
    pub fn evidence(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.evidence.insert(key.into(), value.into());
        self
    }

    fn with_status(status: ProbeStatus, output: Option<Value>) -> Self {
        OutcomeProbeResult {
            status,
            output,
            provider_operation_id: None,
            evidence: Evidence::new(),
        }
    }
}

/// What one execution of an operation returns (docs/spec.md §5, step 3).
///
/// It will gain fields; outside this crate build one with
/// [`EffectResult::from_record`] and set the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EffectResult {
    /// The operation id.
    pub operation_id: String,
    /// The status when execution returned.
    pub status: EffectStatus,
    /// The stored output of a confirmed operation.
    pub output: Option<Value>,
    /// The last error.
    pub error: Option<String>,
    /// Dispatches claimed so far.
    pub attempts: u32,
    /// True when a stored confirmed result was replayed instead of dispatching.
    pub duplicate_suppressed: bool,
    /// True when another live caller holds the dispatch lease.
    pub in_progress: bool,
    /// The provider's id for the effect.
    pub provider_operation_id: Option<String>,
    /// Why the operation is in its status.
    pub evidence: Evidence,
}

/// The result describing a stored record, as
/// [`EffectResult::from_record`] does, moving its fields rather than copying them.
///
/// ```
/// use effect_core::{EffectRecord, EffectResult};
///
/// let record = EffectRecord::new("op-1", "send_email", "1", "fp", "2026-01-01T00:00:00.000000+00:00");
/// assert_eq!(EffectResult::from_record(&record), EffectResult::from(record));
/// ```
impl From<EffectRecord> for EffectResult {
    fn from(record: EffectRecord) -> Self {
        EffectResult {
            operation_id: record.operation_id,
            status: record.status,
            output: record.output,
            error: record.error,
            attempts: record.attempts,
            duplicate_suppressed: false,
            in_progress: false,
            provider_operation_id: record.provider_operation_id,
            evidence: record.evidence,
        }
    }
}

impl EffectResult {
    /// The result describing a stored record.
    pub fn from_record(record: &EffectRecord) -> Self {
        EffectResult {
            operation_id: record.operation_id.clone(),
            status: record.status,
            output: record.output.clone(),
            error: record.error.clone(),
            attempts: record.attempts,
            duplicate_suppressed: false,
            in_progress: false,
            provider_operation_id: record.provider_operation_id.clone(),
            evidence: record.evidence.clone(),
        }
    }

    /// True when the operation is confirmed.
    pub fn is_confirmed(&self) -> bool {
        self.status == EffectStatus::Confirmed
    }

    /// What the result tells the caller, as one value a `match` must cover.
    ///
    /// ```
    /// use effect_core::{EffectRecord, EffectResult, EffectStatus, Outcome};
    ///
    /// let mut record = EffectRecord::new("op-1", "send_email", "1", "fp", "2026-01-01T00:00:00.000000+00:00");
    /// record.status = EffectStatus::Quarantined;
    /// record.error = Some("no authoritative outcome probe".into());
    /// let result = EffectResult::from_record(&record);
    /// match result.outcome() {
    ///     Outcome::Confirmed { output } => println!("done: {output:?}"),
    ///     Outcome::InProgress => println!("another caller is on it; ask again"),
    ///     Outcome::Unknown { reason } => println!("not known yet, reconciled later: {reason}"),
    ///     Outcome::Quarantined { reason } => assert_eq!(reason, "no authoritative outcome probe"),
    ///     Outcome::AwaitingApproval => println!("nothing sent: waits for a human's approval"),
    ///     Outcome::Rejected { reason } => println!("refused, never retried: {reason}"),
    /// }
    /// ```
    pub fn outcome(&self) -> Outcome<'_> {
        let reason = self.error.as_deref().unwrap_or("");
        match self.status {
            EffectStatus::Confirmed => Outcome::Confirmed {
                output: self.output.as_ref(),
            },
            EffectStatus::Rejected => Outcome::Rejected { reason },
            EffectStatus::Quarantined => Outcome::Quarantined { reason },
            EffectStatus::OutcomeUnknown => Outcome::Unknown { reason },
            EffectStatus::AwaitingApproval => Outcome::AwaitingApproval,
            EffectStatus::Prepared | EffectStatus::Dispatched => Outcome::InProgress,
        }
    }

    /// Marks the result in progress when the operation is `dispatched` or
    /// `prepared`: a caller that stops there (because another caller moved the
    /// record on) must not report either status as if it were an outcome.
    #[must_use]
    pub fn in_progress_if_active(mut self) -> Self {
        if matches!(
            self.status,
            EffectStatus::Dispatched | EffectStatus::Prepared
        ) {
            self.in_progress = true;
        }
        self
    }
}
