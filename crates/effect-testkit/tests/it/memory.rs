//! The reference ledger passes both suites: the ledger conformance suite
//! (effect-conformance) and the executor suite.

use std::sync::Arc;

use effect_conformance as conformance;
use effect_core::{EffectLedger, MemoryLedger};
use effect_testkit::executor_suite;

fn memory() -> Arc<dyn EffectLedger> {
    Arc::new(MemoryLedger::new())
}

#[test]
fn memory_ledger_passes_every_check() {
    conformance::run_all(&memory);
    executor_suite::run_all(&memory);
}

#[test]
fn memory_ledger_passes_every_check_with_deferred_outcomes() {
    conformance::run_all_deferred(&memory);
    executor_suite::run_all_deferred(&memory);
}

#[test]
fn checks_are_listed_once_by_their_own_names() {
    let mut names: Vec<&str> = conformance::CHECKS
        .iter()
        .chain(executor_suite::CHECKS)
        .map(|(name, _)| *name)
        .collect();
    let count = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(
        names.len(),
        count,
        "a check listed twice, or in both suites"
    );
    // Every check the suite had before it was split runs in one of the two.
    assert_eq!(
        (conformance::CHECKS.len(), executor_suite::CHECKS.len()),
        (71, 14)
    );
}

#[test]
fn the_run_counts_every_check_of_the_executor_suite() {
    // A factory that counts the ledgers it makes: each check asks for at
    // least one, so every listed check ran.
    let made = std::sync::atomic::AtomicUsize::new(0);
    let factory = || -> Arc<dyn EffectLedger> {
        made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        memory()
    };
    executor_suite::run_all(&factory);
    assert!(
        made.load(std::sync::atomic::Ordering::SeqCst) >= executor_suite::CHECKS.len(),
        "{} ledgers for {} checks",
        made.load(std::sync::atomic::Ordering::SeqCst),
        executor_suite::CHECKS.len()
    );
}
