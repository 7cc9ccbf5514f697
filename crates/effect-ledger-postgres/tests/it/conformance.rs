//! The shared ledger conformance suite, each check in a fresh schema.

use std::sync::{Arc, Mutex, PoisonError};

use effect_core::EffectLedger;

use crate::support::{TestResult, TestSchema, server_url};

#[test]
fn passes_the_ledger_conformance_suite() -> TestResult {
    let Some(url) = server_url("passes_the_ledger_conformance_suite") else {
        return Ok(());
    };
    // Dropped after the suite, which drops every schema it made.
    let schemas: Mutex<Vec<TestSchema>> = Mutex::new(Vec::new());
    let factory = || -> Arc<dyn EffectLedger> {
        let schema = TestSchema::new(&url, "conformance").expect("a fresh schema name");
        let ledger = schema.ledger().expect("a ledger in a fresh schema");
        schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(schema);
        Arc::new(ledger)
    };
    effect_testkit::conformance::run_all(&factory);
    Ok(())
}

#[test]
fn passes_the_ledger_conformance_suite_with_deferred_outcomes() -> TestResult {
    let Some(url) = server_url("passes_the_ledger_conformance_suite_with_deferred_outcomes") else {
        return Ok(());
    };
    let schemas: Mutex<Vec<TestSchema>> = Mutex::new(Vec::new());
    let factory = || -> Arc<dyn EffectLedger> {
        let schema = TestSchema::new(&url, "conformance_deferred").expect("a fresh schema name");
        let ledger = schema.ledger().expect("a ledger in a fresh schema");
        schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(schema);
        Arc::new(ledger)
    };
    effect_testkit::conformance::run_all_deferred(&factory);
    Ok(())
}
