//! The terminal-status counters `stats` reads equal a full count, whatever
//! wrote the file: this ledger's transitions, a writer issuing its own SQL
//! (as the Python package does), prunes, and transactions cut off by a crash.

use std::path::Path;

use effect_core::{EffectLedger, EffectLedgerExt as _, EffectStatus, PruneRequest};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use proptest::prelude::*;
use serde_json::json;

use crate::support::{TestResult, claim, confirmation, evidence, op, raw};

/// Every status's count, every row read.
pub fn full_count(path: &Path) -> Result<Vec<(EffectStatus, u64)>, Box<dyn std::error::Error>> {
    let conn = raw(path)?;
    let mut counts: Vec<(EffectStatus, u64)> =
        EffectStatus::ALL.into_iter().map(|s| (s, 0)).collect();
    let mut stmt =
        conn.prepare("SELECT status, COUNT(*) FROM effect_operations GROUP BY status")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    for row in rows {
        let (status, n) = row?;
        let status: EffectStatus = status.parse()?;
        if let Some(entry) = counts.iter_mut().find(|(s, _)| *s == status) {
            entry.1 = u64::try_from(n)?;
        }
    }
    Ok(counts)
}

#[derive(Debug, Clone)]
enum Step {
    Prepare(u8),
    Claim(u8),
    Confirm(u8),
    Reject(u8),
    Unknown(u8),
    /// Another writer's `UPDATE ... SET status` (the Python package's way).
    RawStatus(u8, EffectStatus),
    /// Another writer's `INSERT` of a row already in some status.
    RawInsert(u8, EffectStatus),
    Prune,
    /// A transaction that changes statuses and deletes rows, then is cut
    /// off before its commit (what a crash leaves: nothing of it).
    Crash(u8, EffectStatus),
}

fn status() -> impl Strategy<Value = EffectStatus> {
    proptest::sample::select(EffectStatus::ALL.to_vec())
}

fn step() -> impl Strategy<Value = Step> {
    let id = 0u8..8;
    prop_oneof![
        id.clone().prop_map(Step::Prepare),
        id.clone().prop_map(Step::Claim),
        id.clone().prop_map(Step::Confirm),
        id.clone().prop_map(Step::Reject),
        id.clone().prop_map(Step::Unknown),
        (id.clone(), status()).prop_map(|(i, s)| Step::RawStatus(i, s)),
        (id.clone(), status()).prop_map(|(i, s)| Step::RawInsert(i, s)),
        Just(Step::Prune),
        (id, status()).prop_map(|(i, s)| Step::Crash(i, s)),
    ]
}

fn run(steps: &[Step]) -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("effects.sqlite3");
    let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
    let id = |i: &u8| format!("op-{i}");
    for step in steps {
        // Refusals (a transition not allowed from the current status, a
        // duplicate insert) are part of the mix: only the counts matter.
        match step {
            Step::Prepare(i) => drop(ledger.prepare(&id(i), &op(json!({ "i": i })))),
            Step::Claim(i) => drop(ledger.claim_dispatch(&id(i), &claim("w"))),
            Step::Confirm(i) => {
                drop(ledger.mark_confirmed(&id(i), Some("w"), &confirmation(json!({}))))
            }
            Step::Reject(i) => drop(ledger.mark_rejected(&id(i), "w", "declined")),
            Step::Unknown(i) => drop(ledger.mark_outcome_unknown(
                &id(i),
                Some("w"),
                "timeout",
                &evidence(json!({})),
            )),
            Step::RawStatus(i, status) => {
                raw(&path)?.execute(
                    "UPDATE effect_operations SET status = ?1 WHERE operation_id = ?2",
                    [status.as_str(), &id(i)],
                )?;
            }
            Step::RawInsert(i, status) => {
                let _ = raw(&path)?.execute(
                    "INSERT INTO effect_operations (operation_id, contract_name, contract_version, \
                     request_fingerprint, status, created_at, updated_at) \
                     VALUES (?1, 'raw', '1', 'fp', ?2, '2026-01-01T00:00:00.000000+00:00', \
                     '2026-01-01T00:00:00.000000+00:00')",
                    [&id(i), status.as_str()],
                );
            }
            Step::Prune => {
                ledger.prune(
                    &PruneRequest::before("9999-01-01T00:00:00+00:00"),
                    &mut std::io::sink(),
                )?;
            }
            Step::Crash(i, status) => {
                let mut conn = raw(&path)?;
                let tx =
                    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                tx.execute(
                    "UPDATE effect_operations SET status = ?1",
                    [status.as_str()],
                )?;
                tx.execute("DELETE FROM effect_events WHERE operation_id = ?1", [id(i)])?;
                tx.execute(
                    "DELETE FROM effect_operations WHERE operation_id = ?1",
                    [id(i)],
                )?;
                drop(tx);
            }
        }
        assert_eq!(ledger.stats()?.counts, full_count(&path)?, "after {step:?}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_counters_equal_a_full_count_after_any_mix_of_writes(
        steps in proptest::collection::vec(step(), 1..40)
    ) {
        run(&steps).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
}

/// A ledger written before the counters (version 4) gains them, true to
/// its rows, when it is migrated; opened read-only before that, it is
/// counted row by row.
#[test]
fn migrating_an_older_file_counts_what_it_holds() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("effects.sqlite3");
    let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
    for i in 0..5 {
        let id = format!("op-{i}");
        ledger.prepare(&id, &op(json!({ "i": i })))?;
        if i < 3 {
            ledger.mark_confirmed(&id, None, &confirmation(json!({})))?;
        }
    }
    drop(ledger);
    // Back to version 4: no counters, no triggers.
    raw(&path)?.execute_batch(
        "DROP TRIGGER effect_status_counts_insert; DROP TRIGGER effect_status_counts_update; \
         DROP TRIGGER effect_status_counts_delete; DROP TABLE effect_status_counts; \
         PRAGMA user_version = 4;",
    )?;
    let read_only = SqliteLedger::open(&path, SqliteOptions::default().read_only(true))?;
    assert_eq!(read_only.stats()?.counts, full_count(&path)?);
    drop(read_only);
    let version: i64 = raw(&path)?.pragma_query_value(None, "user_version", |r| r.get(0))?;
    assert_eq!(version, 4, "a read-only open migrates nothing");

    let migrated = SqliteLedger::open(&path, SqliteOptions::default())?;
    let stats = migrated.stats()?;
    assert!(stats.counts.contains(&(EffectStatus::Confirmed, 3)));
    assert!(stats.counts.contains(&(EffectStatus::Prepared, 2)));
    assert_eq!(stats.counts, full_count(&path)?);
    Ok(())
}
