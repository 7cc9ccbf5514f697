use std::time::Duration;

use effect_core::transition::Transition;
use effect_core::{
    Claim, EffectLedger, LedgerErrorKind, NewOperation, RequestFingerprint, SystemClock,
};
use serde_json::json;

use super::*;
use crate::temp::TempLedger;

fn op(args: serde_json::Value) -> NewOperation {
    NewOperation {
        contract_name: "capture_payment".into(),
        contract_version: "1".into(),
        fingerprint: RequestFingerprint::of_value(&args),
        provider_idempotency_key: None,
    }
}

fn claim(token: &str) -> Claim {
    Claim {
        owner_token: token.into(),
        lease: Duration::from_secs(60),
    }
}

fn kinds(answers: &[Answer]) -> Vec<Result<bool, LedgerErrorKind>> {
    answers
        .iter()
        .map(|a| a.as_ref().map(|o| o.applied).map_err(LedgerError::kind))
        .collect()
}

fn event_types(ledger: &TempLedger, id: &str) -> Vec<String> {
    let events = ledger.events(id).unwrap();
    events.into_iter().map(|e| e.event_type).collect()
}

#[test]
fn refused_transitions_fail_alone_and_later_ones_see_earlier_writes() {
    let ledger = TempLedger::new().unwrap();
    ledger.prepare("taken", &op(json!({"n": 1}))).unwrap();
    let conn = ledger.pool.get().unwrap();
    let prepare_a = Transition::Prepare(op(json!({"n": 2})));
    let conflicting = Transition::Prepare(op(json!({"n": 3})));
    let claim_a = Transition::Claim(claim("t"));
    let batch = [
        ("a", &prepare_a),
        ("taken", &conflicting),
        ("missing", &Transition::ExpireLease),
        // Sees the prepare above, written in the same transaction.
        ("a", &claim_a),
    ];
    let answers = write_batch(&conn, &SystemClock, &batch);
    drop(conn);
    assert_eq!(
        kinds(&answers),
        [
            Ok(true),
            Err(LedgerErrorKind::Conflict),
            Err(LedgerErrorKind::NotFound),
            Ok(true),
        ]
    );
    assert_eq!(event_types(&ledger, "a"), ["prepared", "dispatched"]);
    assert_eq!(event_types(&ledger, "taken"), ["prepared"]);
    assert!(ledger.get("missing").unwrap().is_none());
}

/// A trigger makes the write of operation `poison` fail; `action` is what
/// SQLite does about it (`ABORT`: the statement; `ROLLBACK`: the transaction).
fn poison(conn: &Connection, action: &str) {
    conn.execute_batch(&format!(
        "CREATE TEMP TRIGGER poison BEFORE INSERT ON effect_events
         WHEN NEW.operation_id = 'poison'
         BEGIN SELECT RAISE({action}, 'poisoned'); END;"
    ))
    .unwrap();
}

#[test]
fn a_failed_write_rolls_back_to_its_savepoint_only() {
    let ledger = TempLedger::new().unwrap();
    let conn = ledger.pool.get().unwrap();
    poison(&conn, "ABORT");
    let prepare = Transition::Prepare(op(json!({})));
    let batch = [("a", &prepare), ("poison", &prepare), ("c", &prepare)];
    let answers = write_batch(&conn, &SystemClock, &batch);
    conn.execute_batch("DROP TRIGGER poison").unwrap();
    drop(conn);
    assert_eq!(
        kinds(&answers),
        [Ok(true), Err(LedgerErrorKind::Backend), Ok(true)]
    );
    // Its record was written before the event failed, and is gone with it.
    assert!(ledger.get("poison").unwrap().is_none());
    assert_eq!(event_types(&ledger, "a"), ["prepared"]);
    assert_eq!(event_types(&ledger, "c"), ["prepared"]);
}

#[test]
fn a_write_that_ends_the_transaction_fails_alone_and_the_rest_is_rewritten() {
    let ledger = TempLedger::new().unwrap();
    let conn = ledger.pool.get().unwrap();
    poison(&conn, "ROLLBACK");
    let prepare = Transition::Prepare(op(json!({})));
    let batch = [("a", &prepare), ("poison", &prepare), ("c", &prepare)];
    let answers = write_batch(&conn, &SystemClock, &batch);
    conn.execute_batch("DROP TRIGGER poison").unwrap();
    assert!(conn.is_autocommit(), "no transaction is left open");
    drop(conn);
    assert_eq!(
        kinds(&answers),
        [Ok(true), Err(LedgerErrorKind::Backend), Ok(true)]
    );
    assert!(ledger.get("poison").unwrap().is_none());
    assert_eq!(event_types(&ledger, "a"), ["prepared"]);
    assert_eq!(event_types(&ledger, "c"), ["prepared"]);
}

#[test]
fn a_failed_begin_fails_every_transition_with_its_kind() {
    let ledger = TempLedger::new().unwrap();
    let conn = ledger.pool.get().unwrap();
    // Another connection holds the write lock; this one does not wait.
    let holder = ledger.pool.get().unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    conn.busy_timeout(Duration::ZERO).unwrap();
    let prepare = Transition::Prepare(op(json!({})));
    let answers = write_batch(&conn, &SystemClock, &[("a", &prepare), ("b", &prepare)]);
    holder.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        kinds(&answers),
        [
            Err(LedgerErrorKind::Unavailable),
            Err(LedgerErrorKind::Unavailable)
        ]
    );
}
