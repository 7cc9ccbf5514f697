//! The deferred-outcomes mode asks the store to defer exactly the outcome
//! of a dispatch, and only for a contract with a probe or a guaranteed key.

use std::sync::{Arc, Mutex};

use effect_core::{
    EffectLedger, EffectRecord, LedgerError, LedgerEvent, LedgerStats, ListQuery, MemoryLedger,
    Transition, TransitionOutcome, WriteDurability,
};
use effect_exec::{EffectExecutor, ExecutorOptions};

use crate::provider::{
    BOTH, FakeProvider, Fault, GUARANTEED_ONLY, NEITHER, PROBE_ONLY, Variant, contract, handler,
    invoice,
};

/// Remembers the durability asked for each transition, by name.
#[derive(Debug, Default)]
struct Recorder {
    inner: MemoryLedger,
    asked: Mutex<Vec<(&'static str, WriteDurability)>>,
}

impl EffectLedger for Recorder {
    fn apply_with(
        &self,
        id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        self.asked
            .lock()
            .unwrap()
            .push((transition.name(), durability));
        self.inner.apply_with(id, transition, durability)
    }

    fn get(&self, id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        self.inner.get(id)
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        self.inner.list(query)
    }

    fn events(&self, id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.inner.events(id)
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.inner.events_after(after, limit)
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        self.inner.stats()
    }
}

const DURABLE: WriteDurability = WriteDurability::Durable;
const DEFERRABLE: WriteDurability = WriteDurability::Deferrable;

/// Executes one call in the mode (or not) with the provider's `faults`, and
/// returns the durability asked per transition.
fn asked(
    variant: Variant,
    deferred: bool,
    faults: &[Fault],
) -> Vec<(&'static str, WriteDurability)> {
    let ledger = Arc::new(Recorder::default());
    let provider = FakeProvider::new(true).script(faults);
    let executor = EffectExecutor::with_options(
        ledger.clone(),
        ExecutorOptions::default().deferred_outcomes(deferred),
    );
    executor
        .execute(
            &contract(&provider, variant),
            &invoice("INV-3"),
            handler(&provider),
        )
        .unwrap();
    assert!(provider.committed() <= 1, "one effect at most");
    ledger.asked.lock().unwrap().clone()
}

#[test]
fn a_confirmation_is_deferred_and_the_claim_is_not() {
    for variant in [PROBE_ONLY, GUARANTEED_ONLY, BOTH] {
        assert_eq!(
            asked(variant, true, &[]),
            [
                ("prepare and claim", DURABLE),
                ("mark confirmed", DEFERRABLE)
            ],
            "{variant:?}"
        );
    }
}

#[test]
fn a_rejection_is_deferred() {
    assert_eq!(
        asked(PROBE_ONLY, true, &[Fault::Reject]),
        [
            ("prepare and claim", DURABLE),
            ("mark rejected", DEFERRABLE)
        ]
    );
}

#[test]
fn an_uncertain_outcome_is_deferred_and_its_reconciliation_is_durable() {
    // The handler fails before committing; the probe finds nothing, so a
    // retry is authorized and dispatched, and confirms.
    assert_eq!(
        asked(PROBE_ONLY, true, &[Fault::BeforeCommit]),
        [
            ("prepare and claim", DURABLE),
            ("mark outcome unknown", DEFERRABLE),
            ("reset for retry", DURABLE),
            ("claim dispatch", DURABLE),
            ("mark confirmed", DEFERRABLE),
        ]
    );
    // The handler committed but lost its answer: the probe confirms, durably.
    assert_eq!(
        asked(PROBE_ONLY, true, &[Fault::AfterCommit]),
        [
            ("prepare and claim", DURABLE),
            ("mark outcome unknown", DEFERRABLE),
            ("mark confirmed", DURABLE),
        ]
    );
}

#[test]
fn without_a_safe_basis_or_without_the_mode_every_write_is_durable() {
    let unguaranteed_key = Variant {
        key: true,
        guaranteed: false,
        probe: false,
    };
    for (variant, deferred) in [
        (NEITHER, true),
        (unguaranteed_key, true),
        (PROBE_ONLY, false),
        (GUARANTEED_ONLY, false),
    ] {
        for faults in [&[][..], &[Fault::Reject], &[Fault::BeforeCommit]] {
            let asked = asked(variant, deferred, faults);
            assert!(
                asked.iter().all(|(_, d)| *d == DURABLE),
                "{variant:?} deferred={deferred} {faults:?}: {asked:?}"
            );
        }
    }
}
