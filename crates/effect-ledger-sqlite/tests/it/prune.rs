//! Pruning: old terminal operations are archived, then deleted with their
//! events; unresolved ones are never touched; a dry run changes nothing.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use effect_core::{
    ArchivedOperation, EffectLedger, EffectLedgerExt, EffectStatus, LedgerErrorKind, ManualClock,
    PruneRequest,
};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::json;

use crate::counts::full_count;
use crate::support::{TestResult, claim, confirmation, evidence, op, raw};

const CUTOFF: &str = "2026-01-02T00:00:00.000000+00:00";

/// Operations updated on 2026-01-01 (old) and 2026-01-03 (new).
fn ledger() -> Result<(tempfile::TempDir, SqliteLedger), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let clock = Arc::new(ManualClock::new(
        UNIX_EPOCH + Duration::from_secs(1_767_225_600),
    ));
    let options = SqliteOptions::default().clock(clock.clone());
    let ledger = SqliteLedger::open(dir.path().join("effects.sqlite3"), options)?;
    for (id, status) in [
        ("old confirmed", EffectStatus::Confirmed),
        ("old rejected", EffectStatus::Rejected),
        ("old quarantined", EffectStatus::Quarantined),
        ("old dispatched", EffectStatus::Dispatched),
    ] {
        settle(&ledger, id, status)?;
    }
    clock.advance(Duration::from_secs(2 * 86_400));
    settle(&ledger, "new confirmed", EffectStatus::Confirmed)?;
    Ok((dir, ledger))
}

fn settle(ledger: &SqliteLedger, id: &str, status: EffectStatus) -> TestResult {
    ledger.prepare(id, &op(json!({ "id": id })))?;
    if status == EffectStatus::Confirmed {
        ledger.mark_confirmed(id, None, &confirmation(json!({"ok": true})))?;
        return Ok(());
    }
    ledger.claim_dispatch(id, &claim("w"))?;
    match status {
        EffectStatus::Rejected => {
            ledger.mark_rejected(id, "w", "declined")?;
        }
        EffectStatus::Quarantined => {
            ledger.mark_outcome_unknown(id, Some("w"), "timeout", &evidence(json!({})))?;
            ledger.quarantine(id, "no probe", &evidence(json!({})))?;
        }
        _ => {}
    }
    Ok(())
}

fn ids(ledger: &SqliteLedger) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let mut ids: Vec<String> = ledger
        .list(&effect_core::ListQuery::new(100))?
        .into_iter()
        .map(|r| r.operation_id)
        .collect();
    ids.sort();
    Ok(ids)
}

#[test]
fn prune_archives_then_deletes_old_terminal_operations_only() -> TestResult {
    let (_dir, ledger) = ledger()?;
    let mut archive = Vec::new();
    let dry = ledger.prune(&PruneRequest::before(CUTOFF).dry_run(true), &mut archive)?;
    assert_eq!((dry.operations, dry.events, dry.dry_run), (2, 5, true));
    assert!(archive.is_empty(), "a dry run writes no archive");
    assert_eq!(ids(&ledger)?.len(), 5, "a dry run deletes nothing");

    let report = ledger.prune(&PruneRequest::before(CUTOFF), &mut archive)?;
    assert_eq!((report.operations, report.events), (2, 5));
    let archived: Vec<ArchivedOperation> = String::from_utf8(archive)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let archived_ids: Vec<&str> = archived
        .iter()
        .map(|a| a.operation.operation_id.as_str())
        .collect();
    assert_eq!(archived_ids, ["old confirmed", "old rejected"]);
    assert_eq!(archived[0].operation.output, Some(json!({"ok": true})));
    assert_eq!(archived[0].events.len(), 2);
    assert_eq!(
        ids(&ledger)?,
        ["new confirmed", "old dispatched", "old quarantined"]
    );
    assert!(ledger.events("old confirmed")?.is_empty());
    assert!(
        ledger.get("old confirmed")?.is_none(),
        "not replayed from a cache"
    );
    Ok(())
}

#[test]
fn prune_refuses_unresolved_statuses_and_keeps_everything_when_the_archive_fails() -> TestResult {
    let (_dir, ledger) = ledger()?;
    let unresolved = PruneRequest::before(CUTOFF).statuses(vec![EffectStatus::Quarantined]);
    let err = ledger.prune(&unresolved, &mut Vec::new()).unwrap_err();
    assert_eq!(err.kind(), LedgerErrorKind::InvalidInput);

    struct Full;
    impl std::io::Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    assert!(
        ledger
            .prune(&PruneRequest::before(CUTOFF), &mut Full)
            .is_err()
    );
    assert_eq!(
        ids(&ledger)?.len(),
        5,
        "nothing deleted without its archive"
    );

    let rejected = PruneRequest::before(CUTOFF).statuses(vec![EffectStatus::Rejected]);
    assert_eq!(ledger.prune(&rejected, &mut Vec::new())?.operations, 1);
    assert!(ledger.get("old confirmed")?.is_some());
    Ok(())
}

/// A prune deletes on a connection of its own whose triggers are off while
/// the status counters' are the only ones on the ledger's tables, and then
/// keeps the counters itself; a trigger of the user's own keeps them all
/// on, and fires. Either way the counters equal a full count, and the
/// ledger's own connections, which never had their triggers off, go on
/// counting.
#[test]
fn a_prune_keeps_the_counters_and_fires_the_user_s_own_triggers() -> TestResult {
    for own_trigger in [false, true] {
        let (dir, ledger) = ledger()?;
        let path = dir.path().join("effects.sqlite3");
        if own_trigger {
            raw(&path)?.execute_batch(
                "CREATE TABLE pruned (operation_id TEXT NOT NULL); \
                 CREATE TRIGGER audit_prune AFTER DELETE ON effect_operations \
                 BEGIN INSERT INTO pruned (operation_id) VALUES (OLD.operation_id); END;",
            )?;
        }
        let report = ledger.prune(&PruneRequest::before(CUTOFF), &mut Vec::new())?;
        assert_eq!(report.operations, 2, "own trigger: {own_trigger}");
        assert_eq!(ledger.stats()?.counts, full_count(&path)?);
        let counted = |status: EffectStatus| -> Result<u64, Box<dyn std::error::Error>> {
            Ok(ledger
                .stats()?
                .counts
                .into_iter()
                .find(|(s, _)| *s == status)
                .map_or(0, |(_, n)| n))
        };
        assert_eq!(counted(EffectStatus::Confirmed)?, 1, "the new one is left");
        assert_eq!(counted(EffectStatus::Rejected)?, 0);
        if own_trigger {
            let mut audited: Vec<String> = raw(&path)?
                .prepare("SELECT operation_id FROM pruned")?
                .query_map([], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            audited.sort();
            assert_eq!(audited, ["old confirmed", "old rejected"]);
        }
        settle(&ledger, "after the prune", EffectStatus::Confirmed)?;
        settle(&ledger, "rejected after the prune", EffectStatus::Rejected)?;
        assert_eq!(ledger.stats()?.counts, full_count(&path)?);
        assert_eq!(counted(EffectStatus::Confirmed)?, 2);
        assert_eq!(counted(EffectStatus::Rejected)?, 1);
    }
    Ok(())
}

/// A prune with no other writer keeps the write-ahead log short: it
/// checkpoints what is left of the log once it has grown to 16 MB, so its
/// next transaction starts the log again from the beginning. Without it,
/// the log grew with every page the prune deleted (84 MB for these 20,000
/// operations in a debug build), and the file keeps its largest size while
/// the ledger is open.
#[test]
fn a_prune_alone_starts_the_log_again_rather_than_growing_it() -> TestResult {
    const OPERATIONS: i64 = 20_000;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("effects.sqlite3");
    let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
    {
        let conn = raw(&path)?;
        conn.execute_batch(&format!(
            "BEGIN; \
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {last}) \
             INSERT INTO effect_operations (operation_id, contract_name, contract_version, \
                request_fingerprint, status, result_json, attempts, evidence_json, \
                created_at, updated_at, last_event_sequence) \
             SELECT printf('op:%06d', i), 'bulk', '1', printf('fp:%064d', i), 'confirmed', \
                '{{\"ok\":true}}', 1, '{{}}', '2026-01-01T00:00:00.000000+00:00', \
                '2026-01-01T00:00:00.000000+00:00', i * 4 + 4 FROM n; \
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {last}), \
                k(j) AS (VALUES (1), (2), (3), (4)) \
             INSERT INTO effect_events (sequence, operation_id, event_type, data_json, timestamp) \
             SELECT i * 4 + j, printf('op:%06d', i), \
                CASE j WHEN 1 THEN 'prepared' WHEN 2 THEN 'dispatched' \
                    WHEN 3 THEN 'lease_renewed' ELSE 'confirmed' END, \
                '{{\"filler\":\"{filler}\"}}', '2026-01-01T00:00:00.000000+00:00' \
             FROM n, k ORDER BY i, j; \
             COMMIT; PRAGMA wal_checkpoint(TRUNCATE);",
            last = OPERATIONS - 1,
            filler = "x".repeat(200),
        ))?;
    }
    let mut log = path.clone().into_os_string();
    log.push("-wal");
    let report = ledger.prune(&PruneRequest::before(CUTOFF), &mut std::io::sink())?;
    assert_eq!(report.operations, u64::try_from(OPERATIONS)?);
    assert_eq!(report.events, u64::try_from(OPERATIONS * 4)?);
    assert_eq!(ledger.stats()?.counts, full_count(&path)?);
    let log_bytes = std::fs::metadata(&log)?.len();
    assert!(
        log_bytes < 32 << 20,
        "the log grew to {log_bytes} bytes during the prune"
    );
    Ok(())
}

/// The child process of the kill test: what it is told to do, from the
/// environment, and the file it works on.
const KILL_ROLE: &str = "EFFECT_TEST_PRUNE_KILL";
const KILL_DB: &str = "EFFECT_TEST_PRUNE_DB";
const KILL_TEST: &str = "prune::a_prune_killed_mid_way_resumes_and_loses_nothing";
/// Operations the kill test prunes, in batches of `KILL_BATCH`.
const KILL_OLD: usize = 60;
const KILL_BATCH: usize = 7;

/// An archive that ends the process (as `kill -9` would: no destructor, no
/// flush) right after its `n`th append returned, before the store deleted
/// that batch.
struct AbortAfterAppend {
    inner: effect_core::ArchiveFile,
    appends: usize,
    abort_at: Option<usize>,
}

impl effect_core::PruneArchive for AbortAfterAppend {
    fn append(&mut self, lines: &[u8]) -> Result<(), effect_core::LedgerError> {
        self.inner.append(lines)?;
        self.appends += 1;
        if self.abort_at == Some(self.appends) {
            std::process::abort();
        }
        Ok(())
    }

    fn previous(&mut self) -> Result<Option<effect_core::ArchivedKey>, effect_core::LedgerError> {
        self.inner.previous()
    }
}

/// In the child: prune `db` into `archive.jsonl` beside it (resumed when it
/// exists), in batches of `KILL_BATCH`, aborting where `role` says:
/// `append:N` after the `N`th archive append (archived, not deleted),
/// `commit:N` after the `N`th committed batch (between batches).
fn prune_child(role: &str, db: &std::path::Path) -> TestResult {
    let ledger = SqliteLedger::open(db, SqliteOptions::default())?;
    let path = db.with_file_name("archive.jsonl");
    let inner = if path.exists() {
        effect_core::ArchiveFile::resume(&path)?
    } else {
        effect_core::ArchiveFile::create(&path)?
    };
    let (point, n) = role.split_once(':').ok_or("a kill point")?;
    let n: usize = n.parse()?;
    let mut archive = AbortAfterAppend {
        inner,
        appends: 0,
        abort_at: (point == "append").then_some(n),
    };
    // Batches end at KILL_BATCH rows, never at the time bound, however
    // loaded the machine: the test counts lines per batch.
    let limits = effect_core::PruneLimits::default()
        .batch_rows(KILL_BATCH)
        .batch_time(Duration::from_secs(600))
        .min_pause(Duration::ZERO);
    let request = PruneRequest::before(CUTOFF).limits(limits);
    let mut batches = 0;
    ledger.prune_with_progress(&request, &mut archive, &mut |_| {
        batches += 1;
        if point == "commit" && batches == n {
            std::process::abort();
        }
    })?;
    Ok(())
}

/// Runs this test again as a child in `role` on `db`; true when it was
/// killed (aborted) rather than finished.
fn run_child(role: &str, db: &std::path::Path) -> Result<bool, Box<dyn std::error::Error>> {
    crate::support::KillableChild {
        test: KILL_TEST,
        role_var: KILL_ROLE,
        db_var: KILL_DB,
    }
    .run("pruning", role, db)
}

/// A prune is killed twice, once after a batch's archive was synced but
/// before its deletion committed, once between two batches, and resumed
/// each time into the same archive: in the end the archive holds exactly
/// the operations deleted, each once, in order, as they were stored, and
/// nothing else was touched.
#[test]
fn a_prune_killed_mid_way_resumes_and_loses_nothing() -> TestResult {
    if let (Ok(role), Some(db)) = (std::env::var(KILL_ROLE), std::env::var_os(KILL_DB)) {
        return prune_child(&role, std::path::Path::new(&db));
    }
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("effects.sqlite3");
    let clock = Arc::new(ManualClock::new(
        UNIX_EPOCH + Duration::from_secs(1_767_225_600),
    ));
    let ledger = SqliteLedger::open(&db, SqliteOptions::default().clock(clock.clone()))?;
    for i in 0..KILL_OLD {
        let status = if i % 4 == 0 {
            EffectStatus::Rejected
        } else {
            EffectStatus::Confirmed
        };
        settle(&ledger, &format!("old {i:02}"), status)?;
        clock.advance(Duration::from_millis(1));
    }
    settle(&ledger, "old quarantined", EffectStatus::Quarantined)?;
    clock.advance(Duration::from_secs(2 * 86_400));
    settle(&ledger, "new confirmed", EffectStatus::Confirmed)?;
    let mut stored = std::collections::BTreeMap::new();
    for i in 0..KILL_OLD {
        let id = format!("old {i:02}");
        let record = ledger.get(&id)?.ok_or("seeded")?;
        stored.insert(id.clone(), (record, ledger.events(&id)?));
    }
    drop(ledger);

    let archive = dir.path().join("archive.jsonl");
    let lines = || -> Result<Vec<ArchivedOperation>, Box<dyn std::error::Error>> {
        Ok(std::fs::read_to_string(&archive)?
            .lines()
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?)
    };
    let left = || -> Result<usize, Box<dyn std::error::Error>> {
        Ok(
            raw(&db)?.query_row("SELECT COUNT(*) FROM effect_operations", [], |r| {
                r.get::<_, i64>(0)
            })? as usize,
        )
    };
    let total = KILL_OLD + 2;

    // Killed after the third batch was archived, before it was deleted.
    assert!(run_child("append:3", &db)?, "the child was killed");
    assert_eq!(lines()?.len(), 3 * KILL_BATCH);
    assert_eq!(
        left()?,
        total - 2 * KILL_BATCH,
        "the third batch was not deleted"
    );

    // Resumed: the third batch is deleted without a second line (the first
    // progress call), then killed after two more batches committed.
    assert!(run_child("commit:3", &db)?, "the child was killed");
    assert_eq!(lines()?.len(), 5 * KILL_BATCH);
    assert_eq!(left()?, total - 5 * KILL_BATCH);

    // Resumed to the end.
    assert!(!run_child("commit:0", &db)?, "the last child finished");
    let archived = lines()?;
    assert_eq!(
        left()?,
        2,
        "only the quarantined and the new operation are left"
    );
    let ids: Vec<&str> = archived
        .iter()
        .map(|a| a.operation.operation_id.as_str())
        .collect();
    let expected: Vec<&str> = stored.keys().map(String::as_str).collect();
    assert_eq!(ids, expected, "every operation archived once, in order");
    for line in &archived {
        let (record, events) = &stored[&line.operation.operation_id];
        assert_eq!(&line.operation, record);
        assert_eq!(&line.events, events);
    }
    let ledger = SqliteLedger::open(&db, SqliteOptions::default())?;
    assert_eq!(
        ledger.stats()?.counts,
        crate::counts::full_count(&db)?,
        "the counters are true after the kills"
    );
    assert!(ledger.get("old quarantined")?.is_some());
    assert!(ledger.get("new confirmed")?.is_some());
    assert!(ledger.get("old 00")?.is_none());
    Ok(())
}

/// Batches hold at most `batch_rows` operations each; a prune whose
/// `max_duration` has passed starts no batch and says it is not complete.
#[test]
fn prune_works_in_batches_and_stops_at_its_max_duration() -> TestResult {
    let (_dir, ledger) = ledger()?;
    let limits = effect_core::PruneLimits::default().max_duration(Some(Duration::ZERO));
    let stopped = ledger.prune(
        &PruneRequest::before(CUTOFF).limits(limits),
        &mut Vec::new(),
    )?;
    assert_eq!(
        (stopped.operations, stopped.batches, stopped.complete),
        (0, 0, false)
    );
    assert_eq!(ids(&ledger)?.len(), 5);

    let limits = effect_core::PruneLimits::default()
        .batch_rows(1)
        .batch_time(Duration::from_secs(600));
    let mut seen = Vec::new();
    let report = ledger.prune_with_progress(
        &PruneRequest::before(CUTOFF).limits(limits),
        &mut Vec::new(),
        &mut |r| seen.push(r.operations),
    )?;
    assert_eq!(
        (report.operations, report.batches, report.complete),
        (2, 2, true)
    );
    assert_eq!(seen, [1, 2], "progress after each batch");
    Ok(())
}
