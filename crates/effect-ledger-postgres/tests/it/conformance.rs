//! The shared ledger conformance suite and the executor suite, each check in
//! a fresh schema.

use std::sync::{Arc, Mutex, PoisonError};

use effect_core::EffectLedger;
use effect_ledger_postgres::{PostgresLedger, PostgresOptions};

use crate::support::{TestResult, TestSchema, server_url};

/// Runs `suite` on ledgers in fresh schemas named after `prefix`.
fn run_in_fresh_schemas(
    test: &str,
    prefix: &str,
    suite: fn(&dyn Fn() -> Arc<dyn EffectLedger>),
) -> TestResult {
    run_with_options(test, prefix, |options| options, suite)
}

/// [`run_in_fresh_schemas`] with the ledgers' options changed by `tune`.
fn run_with_options(
    test: &str,
    prefix: &str,
    tune: fn(PostgresOptions) -> PostgresOptions,
    suite: fn(&dyn Fn() -> Arc<dyn EffectLedger>),
) -> TestResult {
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    // Dropped after the suite, which drops every schema it made.
    let schemas: Mutex<Vec<TestSchema>> = Mutex::new(Vec::new());
    let factory = || -> Arc<dyn EffectLedger> {
        let schema = TestSchema::new(&url, prefix).expect("a fresh schema name");
        let ledger = PostgresLedger::connect(&url, tune(schema.options()))
            .expect("a ledger in a fresh schema");
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
        |factory| {
            effect_conformance::run_all(factory);
            effect_testkit::executor_suite::run_all(factory);
        },
    )
}

#[test]
fn passes_the_ledger_conformance_suite_with_deferred_outcomes() -> TestResult {
    run_in_fresh_schemas(
        "passes_the_ledger_conformance_suite_with_deferred_outcomes",
        "conformance_deferred",
        |factory| {
            effect_conformance::run_all_deferred(factory);
            effect_testkit::executor_suite::run_all_deferred(factory);
        },
    )
}

/// Every commit asynchronous (`durable_commits(false)`, the benchmarks'
/// W2): what the ledger answers is unchanged.
#[test]
fn passes_the_ledger_conformance_suite_with_asynchronous_commits() -> TestResult {
    run_with_options(
        "passes_the_ledger_conformance_suite_with_asynchronous_commits",
        "conformance_async",
        |options| options.durable_commits(false),
        |factory| {
            effect_conformance::run_all(factory);
            effect_testkit::executor_suite::run_all(factory);
        },
    )
}

/// Every statement unnamed (`prepared_statements(false)`, the behaviour
/// before statements were prepared): what the ledger answers is unchanged.
#[test]
fn passes_the_ledger_conformance_suite_with_unnamed_statements() -> TestResult {
    run_with_options(
        "passes_the_ledger_conformance_suite_with_unnamed_statements",
        "conformance_unnamed",
        |options| options.prepared_statements(false),
        |factory| {
            effect_conformance::run_all(factory);
            effect_testkit::executor_suite::run_all(factory);
        },
    )
}
