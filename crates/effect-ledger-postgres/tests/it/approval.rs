//! Approval on PostgreSQL: callers on several connections race on approved
//! operations, and each is dispatched once (the claim checks and consumes
//! the approval in the same transaction).

use std::sync::Arc;

use effect_core::EffectLedger;
use effect_testkit::executor_suite::callers_dispatch_each_approved_operation_once;

use crate::support::{TestResult, TestSchema, server_url};

/// Callers, each with a ledger of its own (its own connection pool).
const CALLERS: usize = 6;

#[test]
fn callers_on_several_connections_dispatch_each_approved_operation_once() -> TestResult {
    let Some(url) =
        server_url("callers_on_several_connections_dispatch_each_approved_operation_once")
    else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "approval_race")?;
    let mut handles: Vec<Arc<dyn EffectLedger>> = Vec::new();
    for _ in 0..CALLERS {
        let ledger = effect_ledger_postgres::PostgresLedger::connect(
            &schema.url,
            schema.options().pool_size(1),
        )?;
        handles.push(Arc::new(ledger));
    }
    callers_dispatch_each_approved_operation_once(&handles);
    Ok(())
}
