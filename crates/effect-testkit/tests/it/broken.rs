//! The suite can fail: deliberately wrong ledgers make it panic.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use effect_core::{
    EffectLedger, EffectRecord, LedgerError, LedgerEvent, LedgerStats, ListQuery, MemoryLedger,
    Transition, TransitionOutcome,
};
use effect_testkit::conformance;

/// A ledger whose claims always report success, whatever the status.
#[derive(Debug, Default)]
struct ClaimAlwaysWins(MemoryLedger);

impl EffectLedger for ClaimAlwaysWins {
    fn apply(&self, id: &str, transition: &Transition) -> Result<TransitionOutcome, LedgerError> {
        let mut outcome = self.0.apply(id, transition)?;
        if matches!(transition, Transition::Claim(_)) {
            outcome.applied = true;
        }
        Ok(outcome)
    }
    fn get(&self, id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        self.0.get(id)
    }
    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        self.0.list(query)
    }
    fn events(&self, id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.0.events(id)
    }
    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.0.events_after(after, limit)
    }
    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        self.0.stats()
    }
}

#[test]
fn run_all_panics_for_a_ledger_whose_claim_always_wins() {
    let factory = || -> Arc<dyn EffectLedger> { Arc::new(ClaimAlwaysWins::default()) };
    let failures = conformance::run_checks(&factory, conformance::CHECKS);
    assert!(
        failures
            .iter()
            .any(|f| f.contains("`claim_only_from_prepared`")),
        "{failures:#?}"
    );
    let result = panic::catch_unwind(AssertUnwindSafe(|| conformance::run_all(&factory)));
    let payload = result.expect_err("run_all must panic");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("claim_only_from_prepared"), "{message}");
}
