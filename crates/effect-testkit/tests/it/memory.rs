//! The reference ledger passes the whole suite.

use std::sync::Arc;

use effect_core::{EffectLedger, MemoryLedger};
use effect_testkit::conformance;

fn memory() -> Arc<dyn EffectLedger> {
    Arc::new(MemoryLedger::new())
}

#[test]
fn memory_ledger_passes_every_check() {
    conformance::run_all(&memory);
}

#[test]
fn memory_ledger_passes_every_check_with_deferred_outcomes() {
    conformance::run_all_deferred(&memory);
}

#[test]
fn the_deferred_mode_defers_exactly_the_outcomes_of_dispatches() {
    use effect_core::{Confirmation, Evidence, Transition};
    use serde_json::json;
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
    assert!(conformance::is_dispatch_outcome(&outcome));
    assert!(!conformance::is_dispatch_outcome(&reconciled));
    assert!(!conformance::is_dispatch_outcome(&Transition::ExpireLease));
}

#[test]
fn checks_are_listed_once_by_their_own_names() {
    let mut names: Vec<&str> = conformance::CHECKS.iter().map(|(name, _)| *name).collect();
    let count = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), count, "duplicate check names");
}
