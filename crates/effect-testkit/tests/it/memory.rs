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
fn checks_are_listed_once_by_their_own_names() {
    let mut names: Vec<&str> = conformance::CHECKS.iter().map(|(name, _)| *name).collect();
    let count = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), count, "duplicate check names");
}
