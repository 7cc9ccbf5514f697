//! Budgets on PostgreSQL (docs/approval.md#budgets): callers on several
//! connections never together exceed a budget (the claim locks the budget's
//! row and charges it in its transaction).

use std::sync::Arc;

use effect_core::EffectLedger;
use effect_testkit::executor_suite::callers_never_exceed_a_budget;

use crate::support::{TestResult, TestSchema, server_url};

/// Callers, each with a ledger of its own (its own connection).
const CALLERS: usize = 8;

#[test]
fn callers_on_several_connections_never_exceed_a_budget() -> TestResult {
    let Some(url) = server_url("callers_on_several_connections_never_exceed_a_budget") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "budget_race")?;
    let mut handles: Vec<Arc<dyn EffectLedger>> = Vec::new();
    for _ in 0..CALLERS {
        let ledger = effect_ledger_postgres::PostgresLedger::connect(
            &schema.url,
            schema.options().pool_size(1),
        )?;
        handles.push(Arc::new(ledger));
    }
    callers_never_exceed_a_budget(&handles);
    Ok(())
}
