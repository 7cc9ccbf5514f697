//! Integration tests of effect-conformance: the reference ledger passes the
//! suite in both modes, and the deferred mode defers exactly the outcomes of
//! dispatches. (effect-testkit's tests show that every check catches a
//! broken ledger.)
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failing test with its message.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_core::{Confirmation, EffectLedger, Evidence, MemoryLedger, Transition};
use serde_json::json;

#[test]
fn memory_ledger_passes_every_check() {
    // Each check asks the factory for at least one fresh ledger: every listed
    // check ran.
    let made = AtomicUsize::new(0);
    let factory = || -> Arc<dyn EffectLedger> {
        made.fetch_add(1, Ordering::SeqCst);
        Arc::new(MemoryLedger::new())
    };
    effect_conformance::run_all(&factory);
    let made = made.load(Ordering::SeqCst);
    assert!(
        made >= effect_conformance::CHECKS.len(),
        "{made} ledgers for {} checks",
        effect_conformance::CHECKS.len()
    );
}

#[test]
fn memory_ledger_passes_every_check_with_deferred_outcomes() {
    effect_conformance::run_all_deferred(&|| -> Arc<dyn EffectLedger> {
        Arc::new(MemoryLedger::new())
    });
}

#[test]
fn the_deferred_mode_defers_exactly_the_outcomes_of_dispatches() {
    let confirmation = || Confirmation {
        output: json!(1),
        provider_operation_id: None,
        evidence: Evidence::new(),
    };
    let outcome = Transition::MarkConfirmed {
        owner_token: Some("w".into()),
        confirmation: confirmation(),
    };
    let reconciled = Transition::MarkConfirmed {
        owner_token: None,
        confirmation: confirmation(),
    };
    assert!(effect_conformance::is_dispatch_outcome(&outcome));
    assert!(!effect_conformance::is_dispatch_outcome(&reconciled));
    assert!(!effect_conformance::is_dispatch_outcome(
        &Transition::ExpireLease
    ));
}
