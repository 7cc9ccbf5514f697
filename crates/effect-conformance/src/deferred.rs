//! The suite in the executor's deferred-outcomes mode: [`DeferredOutcomes`]
//! asks the store to defer exactly the writes that mode defers.

use std::sync::Arc;
use std::time::Duration;

use effect_core::{
    EffectLedger, EffectRecord, LedgerError, LedgerEvent, LedgerStats, ListQuery, Transition,
    TransitionOutcome, WriteDurability,
};

use super::{LedgerFactory, NamedCheck};

/// A ledger decorator that applies the outcome of a dispatch (a
/// confirmation, rejection or uncertain outcome by the owner of the lease)
/// as [`WriteDurability::Deferrable`], as `ExecutorOptions::deferred_outcomes`
/// in effect-exec does for a contract with a probe or a guaranteed key, and
/// every other transition durably. Every other method forwards.
///
/// ```
/// use std::sync::Arc;
/// use effect_core::{EffectLedger, MemoryLedger};
/// use effect_conformance::{self as conformance, DeferredOutcomes};
///
/// let factory = || -> Arc<dyn EffectLedger> { Arc::new(DeferredOutcomes::new(MemoryLedger::new())) };
/// // The whole suite in this mode is `conformance::run_all_deferred`.
/// let failures = conformance::run_checks(&factory, &conformance::CHECKS[..3]);
/// assert!(failures.is_empty(), "{failures:?}");
/// ```
#[derive(Debug)]
pub struct DeferredOutcomes<L> {
    inner: L,
}

impl<L: EffectLedger> DeferredOutcomes<L> {
    /// Wraps `inner`.
    pub fn new(inner: L) -> Self {
        DeferredOutcomes { inner }
    }

    /// The wrapped ledger.
    pub fn inner(&self) -> &L {
        &self.inner
    }
}

/// Whether the deferred-outcomes mode defers `transition`: the outcome its
/// owner records once the handler has returned.
pub fn is_dispatch_outcome(transition: &Transition) -> bool {
    matches!(
        transition,
        Transition::MarkConfirmed {
            owner_token: Some(_),
            ..
        } | Transition::MarkOutcomeUnknown {
            owner_token: Some(_),
            ..
        } | Transition::MarkRejected { .. }
    )
}

#[deny(clippy::missing_trait_methods)]
impl<L: EffectLedger> EffectLedger for DeferredOutcomes<L> {
    fn apply_with(
        &self,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        let durability = if is_dispatch_outcome(transition) {
            WriteDurability::Deferrable
        } else {
            durability
        };
        self.inner.apply_with(operation_id, transition, durability)
    }

    fn sync(&self) -> Result<(), LedgerError> {
        self.inner.sync()
    }

    fn get(&self, operation_id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        self.inner.get(operation_id)
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        self.inner.list(query)
    }

    fn events(&self, operation_id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.inner.events(operation_id)
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.inner.events_after(after, limit)
    }

    fn count_events(
        &self,
        operation_ids: &[&str],
        event_type: &str,
    ) -> Result<Vec<u64>, LedgerError> {
        self.inner.count_events(operation_ids, event_type)
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        self.inner.stats()
    }

    fn longest_lock_wait(&self) -> Option<Duration> {
        self.inner.longest_lock_wait()
    }
}

/// [`run_all`](super::run_all) with every ledger of `factory` wrapped in
/// [`DeferredOutcomes`]: the suite in the deferred-outcomes mode. Each
/// check ends with a [`sync`](EffectLedger::sync) of its ledger, which must
/// succeed.
///
/// # Panics
///
/// As [`run_all`](super::run_all).
pub fn run_all_deferred(factory: LedgerFactory<'_>) {
    super::run_all(&deferring(factory));
}

/// [`run_checks`](super::run_checks) in the deferred-outcomes mode, as
/// [`run_all_deferred`] runs them: for a subset, or another suite's checks
/// (effect-testkit's executor suite).
pub fn run_checks_deferred(factory: LedgerFactory<'_>, checks: &[NamedCheck]) -> Vec<String> {
    super::run_checks(&deferring(factory), checks)
}

/// `factory`'s ledgers in [`DeferredOutcomes`], synced when a check drops them.
fn deferring(factory: LedgerFactory<'_>) -> impl Fn() -> Arc<dyn EffectLedger> + '_ {
    move || -> Arc<dyn EffectLedger> {
        Arc::new(SyncOnDrop(Arc::new(DeferredOutcomes::new(factory()))))
    }
}

/// Syncs the ledger when the check drops it, and fails the check when the
/// sync fails.
#[derive(Debug)]
struct SyncOnDrop(Arc<dyn EffectLedger>);

impl Drop for SyncOnDrop {
    fn drop(&mut self) {
        if let Err(err) = self.0.sync()
            && !std::thread::panicking()
        {
            panic!("syncing the deferred outcomes of a conformance check failed: {err}");
        }
    }
}

#[deny(clippy::missing_trait_methods)]
impl EffectLedger for SyncOnDrop {
    fn apply_with(
        &self,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        self.0.apply_with(operation_id, transition, durability)
    }

    fn sync(&self) -> Result<(), LedgerError> {
        self.0.sync()
    }

    fn get(&self, operation_id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        self.0.get(operation_id)
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        self.0.list(query)
    }

    fn events(&self, operation_id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.0.events(operation_id)
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.0.events_after(after, limit)
    }

    fn count_events(
        &self,
        operation_ids: &[&str],
        event_type: &str,
    ) -> Result<Vec<u64>, LedgerError> {
        self.0.count_events(operation_ids, event_type)
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        self.0.stats()
    }

    fn longest_lock_wait(&self) -> Option<Duration> {
        self.0.longest_lock_wait()
    }
}
