//! Approval on SQLite: callers with ledgers of their own on one file race
//! on approved operations, and each is dispatched once (the claim checks and
//! consumes the approval in the same transaction).

#![allow(clippy::unwrap_used)] // Test helpers unwrap: a panic is a failing test with its message.

use std::sync::Arc;

use effect_core::EffectLedger;
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use effect_testkit::executor_suite::callers_dispatch_each_approved_operation_once;

/// Callers, each with a ledger of its own (its own connection pool).
const CALLERS: usize = 6;

#[test]
fn callers_on_several_connections_dispatch_each_approved_operation_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("approval.sqlite3");
    let handles: Vec<Arc<dyn EffectLedger>> = (0..CALLERS)
        .map(|_| -> Arc<dyn EffectLedger> {
            Arc::new(SqliteLedger::open(&path, SqliteOptions::default()).unwrap())
        })
        .collect();
    callers_dispatch_each_approved_operation_once(&handles);
}
