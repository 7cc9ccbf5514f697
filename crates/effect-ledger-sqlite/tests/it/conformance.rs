//! The shared ledger conformance suite and the executor suite, each check on
//! a fresh temporary file.

use std::sync::Arc;

use effect_core::EffectLedger;
use effect_ledger_sqlite::TempLedger;

#[test]
fn passes_the_ledger_conformance_suite() {
    // Each TempLedger removes its directory when the check drops it.
    let factory = || -> Arc<dyn EffectLedger> {
        Arc::new(TempLedger::new().expect("a ledger in a fresh temporary directory"))
    };
    effect_conformance::run_all(&factory);
    effect_testkit::executor_suite::run_all(&factory);
}

#[test]
fn passes_the_ledger_conformance_suite_with_deferred_outcomes() {
    // A short sync delay, so the background sync runs during the checks too.
    let options = || {
        effect_ledger_sqlite::SqliteOptions::default()
            .deferred_sync_delay(std::time::Duration::from_millis(5))
    };
    let factory = || -> Arc<dyn EffectLedger> {
        Arc::new(
            TempLedger::with_options(options()).expect("a ledger in a fresh temporary directory"),
        )
    };
    effect_conformance::run_all_deferred(&factory);
    effect_testkit::executor_suite::run_all_deferred(&factory);
}

#[test]
fn passes_the_suite_with_one_connection_and_normal_durability() {
    // One pooled connection: readers and writers of the 16-thread checks queue
    // for it instead of failing.
    let options = || {
        effect_ledger_sqlite::SqliteOptions::default()
            .pool_size(1)
            .synchronous(effect_ledger_sqlite::Synchronous::Normal)
    };
    let factory = || -> Arc<dyn EffectLedger> {
        Arc::new(
            TempLedger::with_options(options()).expect("a ledger in a fresh temporary directory"),
        )
    };
    effect_conformance::run_all(&factory);
    effect_testkit::executor_suite::run_all(&factory);
}

#[test]
fn passes_the_suite_without_group_commit_or_the_confirmed_cache() {
    // The defaults batch concurrent transitions into shared commits and answer
    // replays of confirmed records from memory; the suite must pass either way.
    let options = || {
        effect_ledger_sqlite::SqliteOptions::default()
            .group_commit(false)
            .confirmed_cache(0)
    };
    let factory = || -> Arc<dyn EffectLedger> {
        Arc::new(
            TempLedger::with_options(options()).expect("a ledger in a fresh temporary directory"),
        )
    };
    effect_conformance::run_all(&factory);
    effect_testkit::executor_suite::run_all(&factory);
}
