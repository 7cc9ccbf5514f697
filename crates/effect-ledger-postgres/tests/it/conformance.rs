//! The shared ledger conformance suite, each check in a fresh schema.

use std::sync::{Arc, Mutex, PoisonError};

use effect_core::EffectLedger;

use crate::support::{TestResult, TestSchema, server_url};

/// Runs `suite` on ledgers in fresh schemas named after `prefix`.
fn run_in_fresh_schemas(
    test: &str,
    prefix: &str,
    suite: fn(&dyn Fn() -> Arc<dyn EffectLedger>),
) -> TestResult {
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    // Dropped after the suite, which drops every schema it made.
    let schemas: Mutex<Vec<TestSchema>> = Mutex::new(Vec::new());
    let factory = || -> Arc<dyn EffectLedger> {
        let schema = TestSchema::new(&url, prefix).expect("a fresh schema name");
        let ledger = schema.ledger().expect("a ledger in a fresh schema");
        schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(schema);
        Arc::new(ledger)
    };
    suite(&factory);
    Ok(())
}

#[test]
fn passes_the_ledger_conformance_suite() -> TestResult {
    run_in_fresh_schemas(
        "passes_the_ledger_conformance_suite",
        "conformance",
        |factory| effect_testkit::conformance::run_all(factory),
    )
}

#[test]
fn passes_the_ledger_conformance_suite_with_deferred_outcomes() -> TestResult {
    run_in_fresh_schemas(
        "passes_the_ledger_conformance_suite_with_deferred_outcomes",
        "conformance_deferred",
        |factory| effect_testkit::conformance::run_all_deferred(factory),
    )
}
