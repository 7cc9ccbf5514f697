use effect_core::EffectLedgerExt as _;
use effect_core::{EffectLedger, EffectStatus};
use rusqlite::TransactionBehavior;
use serde_json::json;

use super::*;
use crate::batch::apply_in;
use crate::row::list_sql;
use crate::schema::Layout;
use crate::temp::TempLedger;

/// The query plan of `sql`, one line per step.
fn plan_of(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Vec<String> {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let rows = stmt
        .query_map(params, |row| row.get::<_, String>(3))
        .unwrap();
    rows.map(Result::unwrap).collect()
}

#[test]
fn list_queries_walk_an_index_without_sorting() {
    let ledger = TempLedger::new().unwrap();
    let conn = ledger.pool.get().unwrap();
    let sql = list_sql(Layout::Current);
    let by_status = plan_of(&conn, &sql.by_status, params!["quarantined", 10]);
    assert!(
        by_status
            .iter()
            .any(|s| s.contains("idx_effect_operations_status_list")),
        "{by_status:?}"
    );
    for step in &by_status {
        assert!(!step.contains("TEMP B-TREE"), "no sort step: {step}");
    }
    // Without a filter: one index walk per status, each stopped at the limit,
    // then one sort of at most statuses x limit rows.
    let all = plan_of(&conn, &sql.all, params![10]);
    let walks = all
        .iter()
        .filter(|s| s.contains("USING INDEX idx_effect_operations_status_list (status=?)"))
        .count();
    assert_eq!(walks, EffectStatus::ALL.len(), "{all:?}");
    assert!(
        all.iter().any(|s| s.contains("MULTI-INDEX OR")),
        "unknown statuses are found by index ranges too: {all:?}"
    );
    assert!(
        !all.iter()
            .any(|s| s.contains("SCAN effect_operations") && !s.contains("USING INDEX")),
        "{all:?}"
    );
}

#[test]
fn listing_many_operations_by_status_reads_one_page() {
    let ledger = TempLedger::new().unwrap();
    let conn = ledger.pool.get().unwrap();
    // 20k planted rows in one transaction; a page must not scan them.
    conn.execute_batch("BEGIN").unwrap();
    for i in 0..20_000 {
        let status = if i % 100 == 0 {
            "quarantined"
        } else {
            "confirmed"
        };
        conn.execute(
            "INSERT INTO effect_operations (operation_id, contract_name, request_fingerprint, \
                status, created_at, updated_at) VALUES (?1, 'c', 'f', ?2, ?3, ?3)",
            params![
                format!("op-{i:05}"),
                status,
                format!("2026-01-01T00:00:{:02}.{i:06}+00:00", i % 60)
            ],
        )
        .unwrap();
    }
    conn.execute_batch("COMMIT").unwrap();
    drop(conn);
    let page = ledger
        .list(&ListQuery::with_status(EffectStatus::Quarantined, 1000))
        .unwrap();
    assert_eq!(page.len(), 200);
    assert!(page.windows(2).all(|w| w[0].updated_at >= w[1].updated_at));
    let stats = ledger.stats().unwrap();
    assert!(stats.counts.contains(&(EffectStatus::Quarantined, 200)));
    assert!(stats.counts.contains(&(EffectStatus::Confirmed, 19_800)));
    assert_eq!(
        stats.oldest_unresolved_updated_at.as_deref(),
        Some("2026-01-01T00:00:00.000000+00:00")
    );
}

#[test]
fn apply_in_composes_inside_one_outer_transaction() {
    // The unit a batching writer will repeat: several transitions, one commit.
    let ledger = TempLedger::new().unwrap();
    let mut conn = ledger.pool.get().unwrap();
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let op = effect_core::NewOperation::new(
        "c",
        "1",
        effect_core::RequestFingerprint::of_value(&json!({})),
    );
    let clock = ledger.clock.as_ref();
    for id in ["a", "b"] {
        assert!(
            apply_in(&tx, id, &Transition::Prepare(op.clone()), clock)
                .unwrap()
                .applied
        );
    }
    // A failing transition leaves the others in the transaction intact.
    assert!(apply_in(&tx, "missing", &Transition::ExpireLease, clock).is_err());
    tx.commit().unwrap();
    drop(conn);
    assert!(ledger.get("a").unwrap().is_some());
    assert!(ledger.get("b").unwrap().is_some());
    assert_eq!(ledger.events_after(0, 10).unwrap().len(), 2);
}

#[test]
fn confirmed_records_are_replayed_without_a_transaction() {
    let options = SqliteOptions::default().busy_timeout(Duration::from_millis(10));
    let ledger = TempLedger::with_options(options).unwrap();
    let op = effect_core::NewOperation::new(
        "c",
        "1",
        effect_core::RequestFingerprint::of_value(&json!({})),
    );
    let claim = effect_core::Claim::new("t", Duration::from_secs(60));
    let again = Transition::PrepareAndClaim(op.clone(), claim.clone());
    ledger.apply("done", &again).unwrap();
    let confirmation = effect_core::Confirmation {
        output: json!({"ok": 1}),
        provider_operation_id: None,
        evidence: Default::default(),
    };
    assert!(
        ledger
            .mark_confirmed("done", Some("t"), &confirmation)
            .unwrap()
    );
    ledger
        .apply("pending", &Transition::Prepare(op.clone()))
        .unwrap();

    // Another connection holds the write lock, and this ledger does not wait.
    let holder = ledger.pool.get().unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let replay = ledger.apply("done", &again).unwrap();
    assert!(!replay.applied);
    assert_eq!(replay.record.output, Some(json!({"ok": 1})));
    // A conflicting identity is refused from the cache, as from the file.
    let mut other_version = op;
    other_version.contract_version = "2".into();
    let other = Transition::Prepare(other_version);
    assert!(matches!(
        ledger.apply("done", &other),
        Err(LedgerError::Conflict { .. })
    ));
    holder.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        ledger.events("done").unwrap().len(),
        3,
        "nothing was appended"
    );
}

#[test]
fn the_immutable_uri_escapes_what_a_uri_path_reserves() {
    let uri = immutable_uri(Path::new("/srv/agents 1/a?b#c%d/é.sqlite3"));
    assert_eq!(
        uri,
        PathBuf::from("file:/srv/agents%201/a%3Fb%23c%25d/%C3%A9.sqlite3?immutable=1")
    );
}

fn operation() -> effect_core::NewOperation {
    effect_core::NewOperation::new(
        "c",
        "1",
        effect_core::RequestFingerprint::of_value(&json!({})),
    )
}

fn synchronous_of(ledger: &TempLedger) -> i64 {
    let conn = ledger.pool.get().unwrap();
    conn.query_row("PRAGMA synchronous", [], |row| row.get(0))
        .unwrap()
}

#[test]
fn a_deferrable_batch_commits_at_normal_and_a_durable_one_at_full() {
    // One connection, so every batch runs on the one whose level is read.
    let ledger = TempLedger::with_options(SqliteOptions::default().pool_size(1)).unwrap();
    const FULL: i64 = 2;
    let claim = effect_core::Claim::new("w", Duration::from_secs(60));
    ledger
        .apply(
            "a",
            &Transition::PrepareAndClaim(operation(), claim.clone()),
        )
        .unwrap();
    assert_eq!(ledger.syncer.deferred_commits(), 0);
    assert_eq!(synchronous_of(&ledger), FULL, "a ledger starts at FULL");
    let confirm = Transition::MarkConfirmed {
        owner_token: Some("w".into()),
        confirmation: effect_core::Confirmation {
            output: json!({"ok": 1}),
            provider_operation_id: None,
            evidence: effect_core::Evidence::new(),
        },
    };
    let confirmed = ledger
        .apply_with("a", &confirm, WriteDurability::Deferrable)
        .unwrap();
    assert!(confirmed.applied);
    assert_eq!(ledger.syncer.deferred_commits(), 1, "committed at NORMAL");
    assert_eq!(
        synchronous_of(&ledger),
        FULL,
        "the connection went back to the pool at FULL"
    );
    ledger
        .apply("b", &Transition::PrepareAndClaim(operation(), claim))
        .unwrap();
    assert_eq!(
        ledger.syncer.deferred_commits(),
        1,
        "a durable batch is FULL"
    );
    ledger.sync().unwrap();
    assert_eq!(
        ledger.get("a").unwrap().unwrap().status,
        EffectStatus::Confirmed
    );
}

#[test]
fn a_ledger_opened_read_only_where_it_can_share_the_wal_is_not_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("effects.sqlite3");
    drop(SqliteLedger::open(&path, SqliteOptions::default()).unwrap());
    let ledger = SqliteLedger::open(&path, SqliteOptions::default().read_only(true)).unwrap();
    assert!(!ledger.is_immutable_snapshot());
}

#[test]
fn a_normal_ledger_ignores_deferral() {
    let options = SqliteOptions::default()
        .pool_size(1)
        .synchronous(Synchronous::Normal);
    let ledger = TempLedger::with_options(options).unwrap();
    ledger
        .apply_with(
            "a",
            &Transition::Prepare(operation()),
            WriteDurability::Deferrable,
        )
        .unwrap();
    assert_eq!(ledger.syncer.deferred_commits(), 0, "nothing to sync later");
    assert_eq!(
        synchronous_of(&ledger),
        1,
        "NORMAL, as the ledger was opened"
    );
    ledger.sync().unwrap();
}

/// The pool tests no connection on checkout; what it relies on instead is
/// that a connection returned inside a transaction is dropped, never handed
/// out again (a read left open would pin an old snapshot, a write would
/// block every other writer).
#[test]
fn a_connection_returned_inside_a_transaction_is_never_handed_out_again() {
    let ledger = TempLedger::with_options(SqliteOptions::default().pool_size(1)).unwrap();
    ledger.prepare("before", &operation()).unwrap();
    for begin in ["BEGIN", "BEGIN IMMEDIATE"] {
        let conn = ledger.pool.get().unwrap();
        conn.execute_batch(begin).unwrap();
        // A read inside the transaction, so that it holds a snapshot.
        let _: i64 = conn
            .query_row("SELECT COUNT(*) FROM effect_operations", [], |r| r.get(0))
            .unwrap();
        drop(conn);
        let again = ledger.pool.get().unwrap();
        assert!(again.is_autocommit(), "after {begin}");
        drop(again);
    }
    // The one pooled connection writes and sees the latest state.
    ledger.prepare("after", &operation()).unwrap();
    let listed = ledger.list(&ListQuery::new(10)).unwrap();
    assert_eq!(listed.len(), 2);
    assert!(ledger.get("after").unwrap().is_some());
}
