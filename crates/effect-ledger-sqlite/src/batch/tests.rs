#![allow(clippy::disallowed_methods)] // Tests time real stores and processes.
use effect_core::EffectLedgerExt as _;
use std::time::Duration;

use effect_core::Transition;
use effect_core::{
    Claim, EffectLedger, LedgerErrorKind, NewOperation, RequestFingerprint, SystemClock,
};
use serde_json::json;

use super::*;
use crate::temp::TempLedger;

/// The ledger's default busy timeout.
const TIMEOUT: Duration = Duration::from_secs(5);

fn op(args: serde_json::Value) -> NewOperation {
    NewOperation::new("capture_payment", "1", RequestFingerprint::of_value(&args))
}

fn claim(token: &str) -> Claim {
    Claim::new(token, Duration::from_secs(60))
}

/// [`write_batch`] of transitions whose callers knew nothing of the rows.
fn write_unknown(
    conn: &Connection,
    clock: &dyn Clock,
    file: &LedgerFile,
    batch: &[(&str, &Transition)],
) -> Vec<Answer> {
    let items: Vec<Item<'_>> = batch
        .iter()
        .map(|&(id, transition)| (id, transition, &Known::Nothing))
        .collect();
    write_batch(conn, clock, file, TIMEOUT, &items)
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
    let answers = write_unknown(&conn, &SystemClock, &ledger.file, &batch);
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

/// Writes `a`, `poison` and `c` in one batch, the write of `poison` failing
/// with `action`, and checks that only `poison` failed and left nothing.
fn only_the_poisoned_transition_fails(action: &str) {
    let ledger = TempLedger::new().unwrap();
    let conn = ledger.pool.get().unwrap();
    poison(&conn, action);
    let prepare = Transition::Prepare(op(json!({})));
    let batch = [("a", &prepare), ("poison", &prepare), ("c", &prepare)];
    let answers = write_unknown(&conn, &SystemClock, &ledger.file, &batch);
    conn.execute_batch("DROP TRIGGER poison").unwrap();
    assert!(conn.is_autocommit(), "no transaction is left open");
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
fn a_failed_write_rolls_back_to_its_savepoint_only() {
    only_the_poisoned_transition_fails("ABORT");
}

#[test]
fn a_write_that_ends_the_transaction_fails_alone_and_the_rest_is_rewritten() {
    only_the_poisoned_transition_fails("ROLLBACK");
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
    let answers = write_unknown(
        &conn,
        &SystemClock,
        &ledger.file,
        &[("a", &prepare), ("b", &prepare)],
    );
    holder.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        kinds(&answers),
        [
            Err(LedgerErrorKind::Unavailable),
            Err(LedgerErrorKind::Unavailable)
        ]
    );
}

#[test]
fn a_write_transaction_holds_the_write_lock() {
    let ledger = TempLedger::new().unwrap();
    let conn = ledger.pool.get().unwrap();
    conn.execute_batch("BEGIN DEFERRED").unwrap();
    let mut tx = WriteTx {
        conn: &conn,
        writing: false,
    };
    tx.take_write_lock().unwrap();
    let other = ledger.pool.get().unwrap();
    other.busy_timeout(Duration::ZERO).unwrap();
    let error = other.execute_batch("BEGIN IMMEDIATE").unwrap_err();
    assert!(is_contention(&error), "{error}");
    drop(tx);
    assert!(conn.is_autocommit(), "dropping it rolls back");
    other.execute_batch("BEGIN IMMEDIATE; ROLLBACK").unwrap();
}

#[test]
fn transitions_that_write_nothing_do_not_wait_for_the_write_lock() {
    let ledger = TempLedger::new().unwrap();
    let prepare = Transition::Prepare(op(json!({"n": 1})));
    ledger.prepare("a", &op(json!({"n": 1}))).unwrap();
    let conn = ledger.pool.get().unwrap();
    conn.busy_timeout(Duration::ZERO).unwrap();
    // Another connection holds the write lock throughout.
    let holder = ledger.pool.get().unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    // Preparing the same operation again writes nothing: it is answered.
    let answers = write_unknown(&conn, &SystemClock, &ledger.file, &[("a", &prepare)]);
    assert_eq!(kinds(&answers), [Ok(false)]);
    // A transition that writes cannot take the lock, and does not wait.
    let answers = write_unknown(&conn, &SystemClock, &ledger.file, &[("b", &prepare)]);
    assert_eq!(kinds(&answers), [Err(LedgerErrorKind::Unavailable)]);
    holder.execute_batch("ROLLBACK").unwrap();
    drop((conn, holder));
    assert!(ledger.get("b").unwrap().is_none());
}

/// A clock that runs `hook` once, at its `at`-th reading (from 1).
struct HookClock<F: Fn() + Send + Sync> {
    at: usize,
    readings: std::sync::atomic::AtomicUsize,
    hook: F,
}

impl<F: Fn() + Send + Sync> std::fmt::Debug for HookClock<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookClock").field("at", &self.at).finish()
    }
}

impl<F: Fn() + Send + Sync> Clock for HookClock<F> {
    fn now(&self) -> std::time::SystemTime {
        let reading = self
            .readings
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        if reading == self.at {
            (self.hook)();
        }
        SystemClock.now()
    }
}

#[test]
fn a_plan_made_on_a_stale_read_is_made_again_under_the_write_lock() {
    let ledger = TempLedger::new().unwrap();
    ledger.prepare("a", &op(json!({"n": 1}))).unwrap();
    ledger.prepare("b", &op(json!({"n": 2}))).unwrap();
    let conn = ledger.pool.get().unwrap();
    let other = std::sync::Mutex::new(ledger.pool.get().unwrap());
    // After the batch's first read (of "a"), another connection claims "b".
    let clock = HookClock {
        at: 2,
        readings: Default::default(),
        hook: || {
            let other = other.lock().unwrap();
            let claim_b = Transition::Claim(claim("other"));
            let tx = WriteTx::begin(&other, Begin::Immediate, TIMEOUT).unwrap();
            apply_in(&other, "b", &claim_b, &SystemClock).unwrap();
            tx.commit().unwrap();
        },
    };
    let prepare_a = Transition::Prepare(op(json!({"n": 1})));
    let claim_b = Transition::Claim(claim("mine"));
    let answers = write_unknown(
        &conn,
        &clock,
        &ledger.file,
        &[("a", &prepare_a), ("b", &claim_b)],
    );
    drop((conn, other));
    // Planned on the stale read, "b" looked claimable; planned again, it is
    // in progress under the other claim, and that claim stands.
    assert_eq!(kinds(&answers), [Ok(false), Ok(false)]);
    let b = ledger.get("b").unwrap().unwrap();
    assert_eq!(b.owner_token.as_deref(), Some("other"));
    assert_eq!(event_types(&ledger, "b"), ["prepared", "dispatched"]);
}

#[test]
fn a_write_waits_for_the_lock_to_be_released_within_the_busy_timeout() {
    let ledger = TempLedger::new().unwrap();
    let conn = ledger.pool.get().unwrap();
    let holder = ledger.pool.get().unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let prepare = Transition::Prepare(op(json!({})));
    let started = std::time::Instant::now();
    let answers = std::thread::scope(|scope| {
        scope.spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            holder.execute_batch("ROLLBACK").unwrap();
        });
        write_unknown(&conn, &SystemClock, &ledger.file, &[("a", &prepare)])
    });
    assert_eq!(kinds(&answers), [Ok(true)]);
    assert!(started.elapsed() >= Duration::from_millis(30));
    assert!(conn.is_autocommit());
    drop(conn);
    assert_eq!(event_types(&ledger, "a"), ["prepared"]);
}

#[test]
fn a_prepare_known_absent_is_planned_on_the_row_another_writer_inserted() {
    let ledger = TempLedger::new().unwrap();
    // Another writer created both operations after the callers' reads.
    ledger.prepare("same", &op(json!({"n": 1}))).unwrap();
    ledger.prepare("other", &op(json!({"n": 2}))).unwrap();
    let conn = ledger.pool.get().unwrap();
    let claim_same = Transition::PrepareAndClaim(op(json!({"n": 1})), claim("t"));
    let conflicting = Transition::PrepareAndClaim(op(json!({"n": 3})), claim("t"));
    let fresh = Transition::PrepareAndClaim(op(json!({"n": 4})), claim("t"));
    let absent = Known::Absent;
    let batch: [Item<'_>; 4] = [
        ("same", &claim_same, &absent),
        ("other", &conflicting, &absent),
        ("fresh", &fresh, &absent),
        // Known absent, but written just above in this transaction.
        ("fresh", &fresh, &absent),
    ];
    let answers = write_batch(&conn, &SystemClock, &ledger.file, TIMEOUT, &batch);
    drop(conn);
    assert_eq!(
        kinds(&answers),
        [
            Ok(true),
            Err(LedgerErrorKind::Conflict),
            Ok(true),
            Ok(false)
        ]
    );
    assert_eq!(event_types(&ledger, "same"), ["prepared", "dispatched"]);
    assert_eq!(event_types(&ledger, "other"), ["prepared"]);
    assert_eq!(event_types(&ledger, "fresh"), ["prepared", "dispatched"]);
}

#[test]
fn an_outcome_known_on_a_stale_row_is_planned_on_the_fresh_one() {
    let ledger = TempLedger::new().unwrap();
    let claimed = ledger
        .apply(
            "a",
            &Transition::PrepareAndClaim(op(json!({"n": 1})), claim("t")),
        )
        .unwrap();
    // Another writer renewed the lease since the claim was remembered.
    assert!(
        ledger
            .renew_lease("a", "t", Duration::from_secs(600))
            .unwrap()
    );
    let renewed = ledger.get("a").unwrap().unwrap();
    assert_ne!(renewed.lease_until, claimed.record.lease_until);
    let conn = ledger.pool.get().unwrap();
    let fail = Transition::MarkOutcomeUnknown {
        owner_token: Some("t".into()),
        error: "timed out".into(),
        evidence: Default::default(),
    };
    let stale = Known::Row(claimed.record);
    let answers = write_batch(
        &conn,
        &SystemClock,
        &ledger.file,
        TIMEOUT,
        &[("a", &fail, &stale)],
    );
    drop(conn);
    assert_eq!(kinds(&answers), [Ok(true)]);
    assert_eq!(
        event_types(&ledger, "a"),
        ["prepared", "dispatched", "outcome_unknown"]
    );
}

#[test]
fn the_events_of_one_batch_take_consecutive_sequences_past_refused_transitions() {
    let ledger = TempLedger::new().unwrap();
    ledger.prepare("before", &op(json!({"n": 0}))).unwrap();
    let conn = ledger.pool.get().unwrap();
    let prepare_a = Transition::PrepareAndClaim(op(json!({"n": 1})), claim("t"));
    let conflicting = Transition::Prepare(op(json!({"n": 2})));
    let renew = Transition::RenewLease {
        owner_token: "t".into(),
        lease: Duration::from_secs(90),
    };
    let fail = Transition::MarkOutcomeUnknown {
        owner_token: Some("t".into()),
        error: "timed out".into(),
        evidence: Default::default(),
    };
    // Refused after its events were written (the amount cannot be
    // stored): rolled back to its savepoint, it leaves no gap.
    let mut over_budget = claim("t");
    over_budget.budgets.push(effect_core::BudgetCharge {
        budget: "spend".into(),
        amount: u64::MAX,
        max_count: None,
        max_amount: None,
        window: effect_core::BudgetWindow::Total,
        defer: None,
    });
    let unstorable = Transition::PrepareAndClaim(op(json!({"n": 3})), over_budget);
    let batch = [
        ("a", &prepare_a),
        ("before", &conflicting),
        ("b", &unstorable),
        // No event: the next sequence stays as it was.
        ("a", &renew),
        ("a", &fail),
    ];
    let answers = write_unknown(&conn, &SystemClock, &ledger.file, &batch);
    drop(conn);
    assert_eq!(
        kinds(&answers),
        [
            Ok(true),
            Err(LedgerErrorKind::Conflict),
            Err(LedgerErrorKind::InvalidInput),
            Ok(true),
            Ok(true)
        ]
    );
    let refused = answers[2].as_ref().err().map(ToString::to_string);
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.contains("too large to store")),
        "{refused:?}"
    );
    assert_eq!(event_types(&ledger, "b"), Vec::<String>::new());
    let sequences: Vec<(u64, String)> = ledger
        .events_after(0, 100)
        .unwrap()
        .into_iter()
        .map(|e| (e.sequence, e.event_type))
        .collect();
    let expected = [
        (1, "prepared"),
        (2, "prepared"),
        (3, "dispatched"),
        (4, "outcome_unknown"),
    ];
    assert_eq!(sequences, expected.map(|(s, t)| (s, t.to_owned())).to_vec());
}
