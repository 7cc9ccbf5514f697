//! The [`EffectLedger`] trait: durable storage of operations and their history.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::budget::BudgetUse;
use crate::error::LedgerError;
use crate::record::{EffectRecord, Evidence, LedgerEvent};
use crate::status::EffectStatus;
use crate::transition::request::{
    Approval, Claim, Confirmation, ManualResolution, NewOperation, Transition,
};
use crate::transition::write::TransitionOutcome;

/// The largest page [`EffectLedger::list`] returns.
pub const MAX_LIST_LIMIT: usize = 1000;

/// Which operations to list: newest update first.
///
/// ```
/// use effect_core::{EffectStatus, ListQuery};
/// let first = ListQuery::with_status(EffectStatus::Quarantined, 100);
/// // The next page: the operations listed after the last one of this page.
/// let next = first.clone().after("invoice:INV-7:capture");
/// assert_eq!(next.after.as_deref(), Some("invoice:INV-7:capture"));
/// // Dispatches whose lease has expired (their worker is gone).
/// assert!(ListQuery::stale(100).stale);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListQuery {
    /// Only operations in this status.
    pub status: Option<EffectStatus>,
    /// At most this many, `1..=1000`.
    pub limit: usize,
    /// A cursor: only the operations listed after this one (the last one of
    /// the previous page), in the list's order as it is now. An operation
    /// updated while a caller pages moves to the front: it may be missed by
    /// that pass or listed twice, never lost from the ledger.
    pub after: Option<String>,
    /// Only `dispatched` operations whose lease has expired by the store's
    /// clock (the one that judges leases): "stale", their worker gone.
    pub stale: bool,
}

impl ListQuery {
    /// Up to `limit` operations of any status.
    pub fn new(limit: usize) -> Self {
        ListQuery {
            status: None,
            limit,
            after: None,
            stale: false,
        }
    }

    /// Up to `limit` operations in `status`.
    pub fn with_status(status: EffectStatus, limit: usize) -> Self {
        ListQuery {
            status: Some(status),
            ..ListQuery::new(limit)
        }
    }

    /// Up to `limit` stale dispatches (see [`ListQuery::stale`](Self#structfield.stale)).
    pub fn stale(limit: usize) -> Self {
        ListQuery {
            stale: true,
            ..ListQuery::new(limit)
        }
    }

    /// The page after the operation `operation_id`.
    #[must_use]
    pub fn after(mut self, operation_id: impl Into<String>) -> Self {
        self.after = Some(operation_id.into());
        self
    }

    /// Checks the limit and the filters.
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] when the limit is outside `1..=1000`, or
    /// when `stale` is combined with a status other than `dispatched`.
    pub fn validate(&self) -> Result<(), LedgerError> {
        if !(1..=MAX_LIST_LIMIT).contains(&self.limit) {
            return Err(LedgerError::invalid_input(format!(
                "list limit must be between 1 and {MAX_LIST_LIMIT}, got {}",
                self.limit
            )));
        }
        if self.stale && self.status.is_some_and(|s| s != EffectStatus::Dispatched) {
            return Err(LedgerError::invalid_input(
                "only dispatched operations can be stale",
            ));
        }
        Ok(())
    }

    /// The error of a cursor (`after`) that names no operation, worded alike
    /// by every store.
    pub fn unknown_cursor(operation_id: &str) -> LedgerError {
        LedgerError::invalid_input(format!(
            "the list cursor names no operation: {operation_id:?}"
        ))
    }

    /// The status the query reads: `dispatched` for stale dispatches.
    pub fn status_filter(&self) -> Option<EffectStatus> {
        if self.stale {
            Some(EffectStatus::Dispatched)
        } else {
            self.status
        }
    }
}

/// Counts per status and the oldest unresolved operation.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LedgerStats {
    /// Operations per status, every status present (zero when none).
    pub counts: Vec<(EffectStatus, u64)>,
    /// `updated_at` of the least recently updated operation in
    /// `outcome_unknown` or `quarantined`.
    pub oldest_unresolved_updated_at: Option<String>,
    /// `dispatched` operations whose lease has expired by the store's clock
    /// (see [`ListQuery::stale`](ListQuery#structfield.stale)).
    #[serde(default)]
    pub stale_dispatched: u64,
    /// Each budget's use in its current window, by name
    /// (docs/approval.md#budgets); empty when no dispatch was ever charged.
    #[serde(default)]
    pub budgets: Vec<BudgetUse>,
}

/// How durable a write must be before [`EffectLedger::apply_with`] answers.
///
/// The executor asks for [`Deferrable`](WriteDurability::Deferrable) only for
/// the outcome of a dispatch whose contract can reconcile a lost outcome (an
/// outcome probe or a guaranteed provider key), and only in its opt-in
/// deferred-outcomes mode: a lost outcome leaves the record `dispatched`, its
/// lease expires and it is reconciled like any interrupted dispatch. A claim
/// is always [`Durable`](WriteDurability::Durable): a lost claim could let a
/// second dispatch go out.
///
/// ```
/// use effect_core::WriteDurability;
/// assert_eq!(WriteDurability::default(), WriteDurability::Durable);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteDurability {
    /// On stable storage before the caller is answered (the default).
    #[default]
    Durable,
    /// The store may answer once the write is committed and visible, before it
    /// is on stable storage. It must make the write durable soon: no later
    /// than its next durable write, a bounded delay, or
    /// [`EffectLedger::sync`], whichever comes first. A store that cannot
    /// defer treats it as [`Durable`](WriteDurability::Durable).
    Deferrable,
}

/// Durable storage of effect operations (docs/spec.md §4).
///
/// A store implements six required methods; every transition goes through
/// [`apply_with`](EffectLedger::apply_with), which must evaluate
/// [`transition::plan`](crate::transition::plan) on the current record and
/// persist its write, record and events, in one transaction, before
/// returning. A store that can answer before a write is on stable storage
/// honours [`WriteDurability::Deferrable`] there and overrides
/// [`sync`](EffectLedger::sync); any other store ignores the durability.
/// [`apply`](EffectLedgerExt::apply) (a durable `apply_with`) and the named
/// transitions (`prepare`, `mark_confirmed`, ...) are conveniences in
/// [`EffectLedgerExt`], implemented once for every ledger.
///
/// The trait is object-safe: executors hold an `Arc<dyn EffectLedger>`.
pub trait EffectLedger: Send + Sync + fmt::Debug {
    /// Applies one transition atomically, durably unless `durability` lets
    /// the store answer before the write reaches stable storage (see
    /// [`WriteDurability::Deferrable`]). A store that cannot defer treats
    /// every write as [`Durable`](WriteDurability::Durable).
    ///
    /// # Errors
    ///
    /// See [`transition::plan`](crate::transition::plan), plus the store's own
    /// failures ([`LedgerError::Unavailable`], [`LedgerError::Backend`], ...).
    fn apply_with(
        &self,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError>;

    /// Makes every write this ledger answered as
    /// [`Deferrable`](WriteDurability::Deferrable) durable before returning.
    /// The default does nothing: a store that never defers has nothing to sync.
    ///
    /// # Errors
    ///
    /// Store failures; the deferred writes are then not known to be durable.
    fn sync(&self) -> Result<(), LedgerError> {
        Ok(())
    }

    /// The operation, if it exists.
    ///
    /// # Errors
    ///
    /// Store failures, or [`LedgerError::Corrupt`] for undecodable rows.
    fn get(&self, operation_id: &str) -> Result<Option<EffectRecord>, LedgerError>;

    /// Operations, newest update first: ordered by `updated_at` (the time of
    /// the last transition; a lease renewal does not change it), descending.
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] for a query [`ListQuery::validate`]
    /// refuses, or a cursor (`after`) that names no operation; store failures.
    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError>;

    /// An operation's events in sequence order (empty when it does not exist).
    ///
    /// # Errors
    ///
    /// Store failures.
    fn events(&self, operation_id: &str) -> Result<Vec<LedgerEvent>, LedgerError>;

    /// Events of all operations with a sequence greater than `after`, in
    /// sequence order, at most `limit` of them (for exporting to a log pipeline).
    ///
    /// A cursor that follows the answers (`after` set to the last sequence
    /// returned) never skips an event and never sees one twice: once an
    /// event with sequence `n` has been returned here, no event with a
    /// smaller sequence may commit later. A store whose appends commit in
    /// parallel returns an event only once no writer that could precede it
    /// is still running, so a page may be shorter than `limit` for a moment
    /// (PostgreSQL does this; SQLite and memory append one at a time).
    /// On SQLite, where a writer takes the largest sequence in the file plus
    /// one (the Python package's layout), a prune that deletes the newest
    /// events lets later events take their sequences again: a cursor past
    /// them skips those (docs/operations.md, `export`).
    ///
    /// # Errors
    ///
    /// Store failures.
    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError>;

    /// How many events of type `event_type` each of `operation_ids` has, in
    /// the same order (0 for an operation that does not exist): for a page
    /// of operations at once (the console's queue marks the ones with a
    /// `late_observation`). A durable store answers in one query; this
    /// default reads each operation's events.
    ///
    /// # Errors
    ///
    /// Store failures.
    fn count_events(
        &self,
        operation_ids: &[&str],
        event_type: &str,
    ) -> Result<Vec<u64>, LedgerError> {
        operation_ids
            .iter()
            .map(|id| {
                let events = self.events(id)?;
                Ok(events.iter().filter(|e| e.event_type == event_type).count() as u64)
            })
            .collect()
    }

    /// Counts per status and the oldest unresolved operation.
    ///
    /// # Errors
    ///
    /// Store failures.
    fn stats(&self) -> Result<LedgerStats, LedgerError>;

    /// How long one transition may wait for the store's lock before it
    /// fails (SQLite's busy timeout), when that is bounded and can be long.
    /// A lease renewal can wait that long while another process writes, so
    /// the executor refuses a dispatch lease shorter than twice this. `None`
    /// (the default) when waits are short or unbounded by the store.
    fn longest_lock_wait(&self) -> Option<Duration> {
        None
    }
}

/// Named transitions over [`EffectLedger::apply_with`], for every ledger.
///
/// These build the [`Transition`] and report what the store answered; no
/// store implements them (the blanket implementation covers every
/// [`EffectLedger`], `dyn` ones included), so a store or a decorator (a
/// fault injector, a metrics wrapper) implements the small trait above
/// and gets these for free, and they cannot drift between stores.
pub trait EffectLedgerExt: EffectLedger {
    /// Applies one transition atomically and durably: `apply_with` at
    /// [`WriteDurability::Durable`].
    ///
    /// # Errors
    ///
    /// As [`EffectLedger::apply_with`].
    fn apply(
        &self,
        operation_id: &str,
        transition: &Transition,
    ) -> Result<TransitionOutcome, LedgerError> {
        self.apply_with(operation_id, transition, WriteDurability::Durable)
    }

    /// Creates the operation, or checks that the stored one has the same
    /// identity, and returns the stored record.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Conflict`] when the identity differs.
    fn prepare(&self, operation_id: &str, op: &NewOperation) -> Result<EffectRecord, LedgerError> {
        Ok(self
            .apply(operation_id, &Transition::Prepare(op.clone()))?
            .record)
    }

    /// Claims the dispatch lease of a `prepared` operation; false otherwise.
    ///
    /// # Errors
    ///
    /// [`LedgerError::NotFound`]; store failures.
    fn claim_dispatch(&self, operation_id: &str, claim: &Claim) -> Result<bool, LedgerError> {
        Ok(self
            .apply(operation_id, &Transition::Claim(claim.clone()))?
            .applied)
    }

    /// Marks the outcome uncertain (see [`Transition::MarkOutcomeUnknown`]).
    ///
    /// # Errors
    ///
    /// [`LedgerError::NotFound`]; store failures.
    fn mark_outcome_unknown(
        &self,
        operation_id: &str,
        owner_token: Option<&str>,
        error: &str,
        evidence: &Evidence,
    ) -> Result<bool, LedgerError> {
        let transition = Transition::MarkOutcomeUnknown {
            owner_token: owner_token.map(str::to_owned),
            error: error.to_owned(),
            evidence: evidence.clone(),
        };
        Ok(self.apply(operation_id, &transition)?.applied)
    }

    /// Confirms the effect (see [`Transition::MarkConfirmed`]).
    ///
    /// # Errors
    ///
    /// [`LedgerError::NotFound`]; store failures.
    fn mark_confirmed(
        &self,
        operation_id: &str,
        owner_token: Option<&str>,
        confirmation: &Confirmation,
    ) -> Result<bool, LedgerError> {
        let transition = Transition::MarkConfirmed {
            owner_token: owner_token.map(str::to_owned),
            confirmation: confirmation.clone(),
        };
        Ok(self.apply(operation_id, &transition)?.applied)
    }

    /// Records a definitive rejection by the owner of the dispatch.
    ///
    /// # Errors
    ///
    /// [`LedgerError::NotFound`]; store failures.
    fn mark_rejected(
        &self,
        operation_id: &str,
        owner_token: &str,
        error: &str,
    ) -> Result<bool, LedgerError> {
        let transition = Transition::MarkRejected {
            owner_token: owner_token.to_owned(),
            error: error.to_owned(),
        };
        Ok(self.apply(operation_id, &transition)?.applied)
    }

    /// Quarantines an uncertain operation.
    ///
    /// # Errors
    ///
    /// [`LedgerError::NotFound`]; store failures.
    fn quarantine(
        &self,
        operation_id: &str,
        error: &str,
        evidence: &Evidence,
    ) -> Result<bool, LedgerError> {
        let transition = Transition::Quarantine {
            error: error.to_owned(),
            evidence: evidence.clone(),
        };
        Ok(self.apply(operation_id, &transition)?.applied)
    }

    /// Allows another dispatch of an uncertain operation.
    ///
    /// # Errors
    ///
    /// [`LedgerError::NotFound`]; store failures.
    fn reset_for_retry(
        &self,
        operation_id: &str,
        evidence: &Evidence,
    ) -> Result<bool, LedgerError> {
        let transition = Transition::ResetForRetry {
            evidence: evidence.clone(),
        };
        Ok(self.apply(operation_id, &transition)?.applied)
    }

    /// Extends a live owner's lease; false when the token no longer owns it.
    ///
    /// # Errors
    ///
    /// [`LedgerError::NotFound`]; store failures.
    fn renew_lease(
        &self,
        operation_id: &str,
        owner_token: &str,
        lease: Duration,
    ) -> Result<bool, LedgerError> {
        let transition = Transition::RenewLease {
            owner_token: owner_token.to_owned(),
            lease,
        };
        Ok(self.apply(operation_id, &transition)?.applied)
    }

    /// Applies an operator's audited decision.
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] for a blank actor, reason or evidence
    /// reference; [`LedgerError::InvalidTransition`] outside `outcome_unknown` /
    /// `quarantined`; [`LedgerError::NotFound`].
    fn resolve_manually(
        &self,
        operation_id: &str,
        resolution: &ManualResolution,
    ) -> Result<EffectRecord, LedgerError> {
        Ok(self
            .apply(operation_id, &Transition::Resolve(resolution.clone()))?
            .record)
    }

    /// Records a human's approval of one dispatch of an operation
    /// `awaiting_approval` (docs/approval.md); the next claim consumes it.
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] for a blank actor or reason;
    /// [`LedgerError::Conflict`] when the approved fingerprint is not the
    /// operation's; [`LedgerError::InvalidTransition`] outside
    /// `awaiting_approval`; [`LedgerError::ApprovalRefused`] for an approval
    /// already expired or while an unused one stands; [`LedgerError::NotFound`].
    fn approve(
        &self,
        operation_id: &str,
        approval: &Approval,
    ) -> Result<EffectRecord, LedgerError> {
        Ok(self
            .apply(operation_id, &Transition::Approve(approval.clone()))?
            .record)
    }

    /// Denies an operation `awaiting_approval`: it becomes `rejected`,
    /// terminally, with the actor and reason in its evidence and event.
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] for a blank actor or reason;
    /// [`LedgerError::InvalidTransition`] outside `awaiting_approval`;
    /// [`LedgerError::NotFound`].
    fn deny_approval(
        &self,
        operation_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<EffectRecord, LedgerError> {
        let transition = Transition::DenyApproval {
            actor: actor.to_owned(),
            reason: reason.to_owned(),
        };
        Ok(self.apply(operation_id, &transition)?.record)
    }
}

impl<L: EffectLedger + ?Sized> EffectLedgerExt for L {}

/// A shared ledger is a ledger, so decorators (fault injectors, metrics) can
/// wrap an `Arc<dyn EffectLedger>`. Every method forwards.
#[deny(clippy::missing_trait_methods)]
impl<L: EffectLedger + ?Sized> EffectLedger for std::sync::Arc<L> {
    fn apply_with(
        &self,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        (**self).apply_with(operation_id, transition, durability)
    }

    fn sync(&self) -> Result<(), LedgerError> {
        (**self).sync()
    }

    fn get(&self, operation_id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        (**self).get(operation_id)
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        (**self).list(query)
    }

    fn events(&self, operation_id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        (**self).events(operation_id)
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        (**self).events_after(after, limit)
    }

    fn count_events(
        &self,
        operation_ids: &[&str],
        event_type: &str,
    ) -> Result<Vec<u64>, LedgerError> {
        (**self).count_events(operation_ids, event_type)
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        (**self).stats()
    }

    fn longest_lock_wait(&self) -> Option<Duration> {
        (**self).longest_lock_wait()
    }
}
