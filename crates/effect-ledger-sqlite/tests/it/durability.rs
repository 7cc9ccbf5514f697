//! What is committed stays: reopening, durability modes, ordering, threads.

use effect_core::EffectLedgerExt as _;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use effect_core::{EffectLedger, EffectStatus, ListQuery, ManualClock, Transition};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions, Synchronous};
use serde_json::json;

use crate::support::{TestResult, claim, confirmation, evidence, op};

/// Writes operations in every status; returns their ids.
fn populate(ledger: &SqliteLedger) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let ids: Vec<String> = (0..6).map(|i| format!("op-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        ledger.apply(
            id,
            &Transition::PrepareAndClaim(op(json!({"i": i})), claim("w")),
        )?;
    }
    ledger.mark_confirmed("op-0", Some("w"), &confirmation(json!({"ok": true})))?;
    ledger.mark_outcome_unknown(
        "op-1",
        Some("w"),
        "timeout",
        &evidence(json!({"dispatch_interruption": "handler_timeout"})),
    )?;
    ledger.mark_outcome_unknown("op-2", Some("w"), "timeout", &evidence(json!({})))?;
    ledger.quarantine(
        "op-2",
        "no probe",
        &evidence(json!({"policy": "quarantine"})),
    )?;
    ledger.mark_rejected("op-3", "w", "card declined")?;
    ledger.mark_outcome_unknown("op-4", Some("w"), "reset", &evidence(json!({})))?;
    ledger.reset_for_retry("op-4", &evidence(json!({"retry_basis": "not_committed"})))?;
    // op-5 stays dispatched.
    Ok(ids)
}

#[test]
fn records_and_events_survive_reopening() -> TestResult {
    for durability in [Synchronous::Full, Synchronous::Normal] {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("ledger.sqlite3");
        let options = || SqliteOptions::default().synchronous(durability);
        let ledger = SqliteLedger::open(&path, options())?;
        let ids = populate(&ledger)?;
        let records: Vec<_> = ids
            .iter()
            .map(|id| ledger.get(id))
            .collect::<Result<_, _>>()?;
        let events: Vec<_> = ids
            .iter()
            .map(|id| ledger.events(id))
            .collect::<Result<_, _>>()?;
        let listed = ledger.list(&ListQuery::new(100))?;
        let stats = ledger.stats()?;
        let all_events = ledger.events_after(0, 1000)?;
        drop(ledger);

        let reopened = SqliteLedger::open(&path, options())?;
        let records_after: Vec<_> = ids
            .iter()
            .map(|id| reopened.get(id))
            .collect::<Result<_, _>>()?;
        assert_eq!(records_after, records, "{durability:?}");
        let events_after: Vec<_> = ids
            .iter()
            .map(|id| reopened.events(id))
            .collect::<Result<_, _>>()?;
        assert_eq!(events_after, events, "{durability:?}");
        assert_eq!(reopened.list(&ListQuery::new(100))?, listed);
        assert_eq!(reopened.stats()?, stats);
        assert_eq!(reopened.events_after(0, 1000)?, all_events);

        let statuses: Vec<EffectStatus> =
            records_after.iter().flatten().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [
                EffectStatus::Confirmed,
                EffectStatus::OutcomeUnknown,
                EffectStatus::Quarantined,
                EffectStatus::Rejected,
                EffectStatus::Prepared,
                EffectStatus::Dispatched,
            ]
        );
        // The stored output is replayed after a restart.
        assert_eq!(
            records_after[0].as_ref().and_then(|r| r.output.clone()),
            Some(json!({"ok": true}))
        );
        // A live lease survives too: another worker cannot finalize it.
        assert!(!reopened.mark_confirmed("op-5", Some("other"), &confirmation(json!(1)))?);
        assert!(reopened.mark_confirmed("op-5", Some("w"), &confirmation(json!(1)))?);
    }
    Ok(())
}

#[test]
fn a_fresh_effect_is_two_commits_and_three_events() -> TestResult {
    let ledger = SqliteLedger::open_temporary()?;
    let id = "invoice:INV-7:capture";
    let first = ledger.apply(
        id,
        &Transition::PrepareAndClaim(op(json!({"invoice_id": "INV-7"})), claim("w")),
    )?;
    assert!(first.applied);
    assert_eq!(first.record.status, EffectStatus::Dispatched);
    assert_eq!(first.record.attempts, 1);
    assert!(ledger.mark_confirmed(id, Some("w"), &confirmation(json!({"payment_id": "p"})))?);
    let types: Vec<String> = ledger
        .events(id)?
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(types, ["prepared", "dispatched", "confirmed"]);
    // Preparing again replays, and claiming a confirmed operation is refused.
    assert_eq!(
        ledger
            .prepare(id, &op(json!({"invoice_id": "INV-7"})))?
            .status,
        EffectStatus::Confirmed
    );
    assert!(!ledger.claim_dispatch(id, &claim("late"))?);
    assert_eq!(ledger.events(id)?.len(), 3);
    Ok(())
}

#[test]
fn timestamps_and_leases_come_from_the_injected_clock() -> TestResult {
    let start = UNIX_EPOCH + Duration::from_micros(1_767_225_600_123_456);
    let clock = Arc::new(ManualClock::new(start));
    let ledger = SqliteLedger::open_temporary_with(SqliteOptions::default().clock(clock.clone()))?;
    let outcome = ledger.apply(
        "op",
        &Transition::PrepareAndClaim(op(json!({})), claim("w")),
    )?;
    assert_eq!(
        outcome.record.created_at,
        "2026-01-01T00:00:00.123456+00:00"
    );
    let lease_until = outcome.record.lease_until.ok_or("no lease")?;
    assert!(
        (lease_until - 1_767_225_660.123_456).abs() < 1e-5,
        "{lease_until}"
    );
    let stored = ledger.get("op")?.ok_or("missing")?;
    assert_eq!(stored, outcome.record);

    // The lease is still live: expiring it does nothing.
    assert!(!ledger.apply("op", &Transition::ExpireLease)?.applied);
    clock.advance(Duration::from_secs(61));
    let expired = ledger.apply("op", &Transition::ExpireLease)?;
    assert!(expired.applied);
    assert_eq!(expired.record.status, EffectStatus::OutcomeUnknown);
    assert_eq!(
        expired.record.updated_at,
        "2026-01-01T00:01:01.123456+00:00"
    );
    assert_eq!(ledger.get("op")?.ok_or("missing")?, expired.record);
    Ok(())
}

#[test]
fn list_is_newest_update_first_even_when_the_clock_stands_still() -> TestResult {
    let clock = Arc::new(ManualClock::new(
        UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    ));
    let ledger = SqliteLedger::open_temporary_with(SqliteOptions::default().clock(clock.clone()))?;
    for id in ["a", "b", "c"] {
        ledger.prepare(id, &op(json!({"id": id})))?;
    }
    let ids = |query: ListQuery| -> Result<Vec<String>, effect_core::LedgerError> {
        Ok(ledger
            .list(&query)?
            .into_iter()
            .map(|r| r.operation_id)
            .collect())
    };
    assert_eq!(ids(ListQuery::new(10))?, ["c", "b", "a"]);
    // Same timestamp: the last write wins the tie.
    ledger.claim_dispatch("a", &claim("w"))?;
    assert_eq!(ids(ListQuery::new(10))?, ["a", "c", "b"]);
    // A later timestamp wins regardless.
    clock.advance(Duration::from_secs(1));
    ledger.claim_dispatch("b", &claim("w"))?;
    assert_eq!(ids(ListQuery::new(10))?, ["b", "a", "c"]);
    assert_eq!(ids(ListQuery::new(2))?, ["b", "a"]);
    assert_eq!(
        ids(ListQuery::with_status(EffectStatus::Dispatched, 10))?,
        ["b", "a"]
    );
    assert_eq!(
        ids(ListQuery::with_status(EffectStatus::Prepared, 10))?,
        ["c"]
    );
    assert_eq!(
        ids(ListQuery::with_status(EffectStatus::Confirmed, 10))?,
        Vec::<String>::new()
    );
    // A no-op transition is not an update.
    assert!(!ledger.claim_dispatch("a", &claim("x"))?);
    assert_eq!(ids(ListQuery::new(10))?, ["b", "a", "c"]);
    // Nor is a lease renewal: updated_at stays, and so does the place.
    assert!(ledger.renew_lease("a", "w", Duration::from_secs(600))?);
    assert_eq!(ids(ListQuery::new(10))?, ["b", "a", "c"]);
    assert_eq!(ledger.events("a")?.len(), 2, "a renewal appends no event");
    // Renewing the lease of the older of two equal timestamps keeps it behind.
    clock.advance(Duration::from_secs(1));
    ledger.claim_dispatch("c", &claim("w"))?;
    ledger.prepare("d", &op(json!({"id": "d"})))?;
    assert_eq!(ids(ListQuery::new(2))?, ["d", "c"]);
    assert!(ledger.renew_lease("c", "w", Duration::from_secs(600))?);
    assert_eq!(ids(ListQuery::new(2))?, ["d", "c"]);
    Ok(())
}

#[test]
fn events_after_pages_through_every_operation_in_order() -> TestResult {
    let ledger = SqliteLedger::open_temporary()?;
    for i in 0..5 {
        let id = format!("op-{i}");
        ledger.apply(
            &id,
            &Transition::PrepareAndClaim(op(json!({"i": i})), claim("w")),
        )?;
        ledger.mark_confirmed(&id, Some("w"), &confirmation(json!(i)))?;
    }
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let page = ledger.events_after(after, 4)?;
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 4);
        after = page.last().map_or(after, |e| e.sequence);
        seen.extend(page);
    }
    assert_eq!(seen.len(), 15);
    assert!(seen.windows(2).all(|w| w[0].sequence < w[1].sequence));
    assert_eq!(seen, ledger.events_after(0, 1000)?);
    assert!(ledger.events_after(0, 0)?.is_empty());
    assert!(ledger.events_after(u64::MAX, 10)?.is_empty());
    Ok(())
}

#[test]
fn threads_sharing_a_ledger_have_one_claim_winner() -> TestResult {
    let ledger = SqliteLedger::open_temporary_with(SqliteOptions::default().pool_size(3))?;
    for i in 0..20 {
        ledger.prepare(&format!("op-{i}"), &op(json!({"i": i})))?;
    }
    let winners: Vec<Vec<String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let ledger = ledger.ledger().clone();
                scope.spawn(move || {
                    let token = format!("thread-{t}");
                    (0..20)
                        .filter(|i| {
                            ledger
                                .claim_dispatch(&format!("op-{i}"), &claim(&token))
                                .expect("claim")
                        })
                        .map(|i| format!("op-{i}"))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let mut all: Vec<String> = winners.into_iter().flatten().collect();
    all.sort();
    let mut expected: Vec<String> = (0..20).map(|i| format!("op-{i}")).collect();
    expected.sort();
    assert_eq!(all, expected, "every operation is claimed exactly once");
    for id in expected {
        assert_eq!(ledger.get(&id)?.map(|r| r.attempts), Some(1));
        assert_eq!(ledger.events(&id)?.len(), 2);
    }
    Ok(())
}

#[test]
fn threads_opening_a_new_file_at_once_migrate_it_once() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("nested/new.sqlite3");
    let ledgers: Vec<SqliteLedger> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|_| scope.spawn(|| SqliteLedger::open(&path, SqliteOptions::default())))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect::<Result<_, _>>()
    })?;
    for (i, ledger) in ledgers.iter().enumerate() {
        ledger.prepare(&format!("op-{i}"), &op(json!({"i": i})))?;
    }
    let first = &ledgers[0];
    assert_eq!(first.list(&ListQuery::new(100))?.len(), ledgers.len());
    assert_eq!(first.events_after(0, 100)?.len(), ledgers.len());
    Ok(())
}

#[test]
fn a_lock_held_past_the_busy_timeout_is_unavailable_and_writes_nothing() -> TestResult {
    let options = SqliteOptions::default().busy_timeout(Duration::from_millis(50));
    let ledger = SqliteLedger::open_temporary_with(options)?;
    ledger.prepare("op", &op(json!({})))?;

    // Another process (here: a raw connection) holds the write lock.
    let blocker = crate::support::raw(ledger.path())?;
    blocker.execute_batch("BEGIN IMMEDIATE")?;
    let error = ledger
        .claim_dispatch("op", &claim("w"))
        .expect_err("the file is locked");
    assert_eq!(
        error.kind(),
        effect_core::LedgerErrorKind::Unavailable,
        "{error:?}"
    );
    assert!(error.to_string().contains("busy timeout"), "{error}");
    let source = std::error::Error::source(&error).ok_or("no source")?;
    assert!(
        source.downcast_ref::<rusqlite::Error>().is_some(),
        "{source:?}"
    );
    // Reads go on while the writer waits (WAL).
    assert_eq!(
        ledger.get("op")?.map(|r| r.status),
        Some(EffectStatus::Prepared)
    );
    blocker.execute_batch("ROLLBACK")?;

    assert_eq!(
        ledger.events("op")?.len(),
        1,
        "the failed claim wrote nothing"
    );
    assert!(ledger.claim_dispatch("op", &claim("w"))?);
    Ok(())
}

/// The ledger file is deleted, or replaced by another file, while the
/// ledger is open: no transition is acknowledged after that (SQLite would
/// keep writing into the unlinked file, and a fresh file at the path would
/// let every operation be dispatched again).
#[test]
fn a_deleted_or_replaced_ledger_file_takes_no_more_writes() -> TestResult {
    for replace in [false, true] {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("effects.sqlite3");
        let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
        ledger.apply(
            "before",
            &Transition::PrepareAndClaim(op(json!({"n": 1})), claim("w")),
        )?;
        for suffix in ["", "-wal", "-shm"] {
            let file = dir.path().join(format!("effects.sqlite3{suffix}"));
            if file.exists() {
                std::fs::remove_file(&file)?;
            }
        }
        if replace {
            drop(SqliteLedger::open(&path, SqliteOptions::default())?);
        }
        for transition in [
            Transition::PrepareAndClaim(op(json!({"n": 2})), claim("w")),
            Transition::MarkConfirmed {
                owner_token: Some("w".into()),
                confirmation: confirmation(json!({"ok": true})),
            },
        ] {
            let id = if matches!(transition, Transition::PrepareAndClaim(..)) {
                "after"
            } else {
                "before"
            };
            let err = ledger
                .apply(id, &transition)
                .expect_err("a write to a deleted or replaced ledger file must fail");
            assert_eq!(
                err.kind(),
                effect_core::LedgerErrorKind::Unavailable,
                "{err}"
            );
            let message = err.to_string();
            let what = if replace { "replaced" } else { "deleted" };
            assert!(message.contains(what), "{message}");
        }
        // Nothing was committed to the file now at the path.
        if replace {
            let fresh = SqliteLedger::open(&path, SqliteOptions::default())?;
            assert!(fresh.get("after")?.is_none());
            assert!(fresh.get("before")?.is_none());
        }
    }
    Ok(())
}
