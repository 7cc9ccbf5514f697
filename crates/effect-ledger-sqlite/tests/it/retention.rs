//! Retention as a policy on SQLite: a recovery worker on a manual clock
//! prunes each terminal status past its own age, a bounded share per pass,
//! archives everything it deletes once, and never touches unresolved work.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use effect_core::{
    ArchivedOperation, EffectLedger, EffectLedgerExt, EffectStatus, ListQuery, ManualClock,
    PruneLimits, RetentionPolicy, Transition,
};
use effect_exec::{EffectExecutor, ExecutorOptions, RecoveryReport, RecoveryWorker, Retention};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::json;

use crate::support::{TestResult, claim, confirmation, evidence, op};

const DAY: Duration = Duration::from_secs(86_400);

/// Every operation's status, by id.
fn statuses(
    ledger: &SqliteLedger,
) -> Result<BTreeMap<String, EffectStatus>, Box<dyn std::error::Error>> {
    Ok(ledger
        .list(&ListQuery::new(1000))?
        .into_iter()
        .map(|r| (r.operation_id, r.status))
        .collect())
}

fn settle(ledger: &SqliteLedger, id: &str, status: EffectStatus) -> TestResult {
    ledger.prepare(id, &op(json!({ "id": id })))?;
    match status {
        EffectStatus::Prepared => {}
        EffectStatus::Confirmed => {
            ledger.mark_confirmed(id, None, &confirmation(json!({"ok": true})))?;
        }
        _ => {
            ledger.claim_dispatch(id, &claim("w"))?;
            match status {
                EffectStatus::Rejected => {
                    ledger.mark_rejected(id, "w", "declined")?;
                }
                EffectStatus::OutcomeUnknown => {
                    ledger.mark_outcome_unknown(id, Some("w"), "timeout", &evidence(json!({})))?;
                }
                EffectStatus::Quarantined => {
                    ledger.mark_outcome_unknown(id, Some("w"), "timeout", &evidence(json!({})))?;
                    ledger.quarantine(id, "no probe", &evidence(json!({})))?;
                }
                _ => {}
            }
        }
    }
    Ok(())
}

#[test]
fn a_recovery_worker_applies_the_policy_in_bounded_passes_and_leaves_unresolved_work() -> TestResult
{
    let dir = tempfile::tempdir()?;
    let archives = dir.path().join("archives");
    std::fs::create_dir(&archives)?;
    let start = UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01
    let clock = Arc::new(ManualClock::new(start));
    let ledger = Arc::new(SqliteLedger::open(
        dir.path().join("effects.sqlite3"),
        SqliteOptions::default().clock(clock.clone()),
    )?);
    // Day 0: 25 confirmed, 6 rejected, one cancelled, and unresolved work
    // of every kind, all old.
    for i in 0..25 {
        settle(
            &ledger,
            &format!("old confirmed {i:02}"),
            EffectStatus::Confirmed,
        )?;
    }
    for i in 0..6 {
        settle(
            &ledger,
            &format!("old rejected {i}"),
            EffectStatus::Rejected,
        )?;
    }
    settle(&ledger, "old cancelled", EffectStatus::Prepared)?;
    ledger.apply(
        "old cancelled",
        &Transition::Cancel {
            actor: "ops".into(),
            reason: "duplicate".into(),
            evidence_reference: "TICKET-1".into(),
        },
    )?;
    let unresolved = [
        ("old prepared", EffectStatus::Prepared),
        ("old dispatched", EffectStatus::Dispatched),
        ("old outcome_unknown", EffectStatus::OutcomeUnknown),
        ("old quarantined", EffectStatus::Quarantined),
    ];
    for (id, status) in unresolved {
        settle(&ledger, id, status)?;
    }
    // Day 20: three more confirmed.
    clock.advance(20 * DAY);
    for i in 0..3 {
        settle(
            &ledger,
            &format!("new confirmed {i}"),
            EffectStatus::Confirmed,
        )?;
    }
    // Day 40: confirmed past 30 days go, rejected (90 days) stay.
    clock.advance(20 * DAY);

    let policy: RetentionPolicy = "confirmed=30d,rejected=90d".parse()?;
    let policy = policy.limits(
        PruneLimits::default()
            .batch_rows(10)
            // One write transaction per batch, however slow the machine.
            .batch_time(Duration::from_secs(600))
            .min_pause(Duration::ZERO)
            .writers_pause(Duration::ZERO)
            .max_batches(Some(2)),
    );
    let retention = Retention::new(policy, ledger.clone(), &archives)?;
    let executor =
        EffectExecutor::with_clock(ledger.clone(), ExecutorOptions::default(), clock.clone());
    let worker = RecoveryWorker::new(executor).retention(retention);

    let pass = |expected: u64| -> Result<RecoveryReport, Box<dyn std::error::Error>> {
        let report = worker.run_once()?;
        assert_eq!(report.pruned, expected, "{report:?}");
        // The unresolved operations were examined, never dispatched (no
        // handler is registered), never pruned.
        assert_eq!(report.unregistered + report.too_recent, 3, "{report:?}");
        Ok(report)
    };
    // Two batches of 10 per pass: the first pass stops with 5 left.
    let first = pass(20)?;
    assert!(!first.retention.as_ref().is_some_and(|r| r.total.complete));
    // Not complete: the next pass goes on at once, without the clock moving.
    let second = pass(5)?;
    let second = second
        .retention
        .ok_or("the second pass applied no policy")?;
    assert!(second.total.complete);
    assert_eq!(
        second
            .rules
            .iter()
            .map(|r| r.operations)
            .collect::<Vec<_>>(),
        [5, 0]
    );
    // Complete: not due again for an hour.
    assert!(pass(0)?.retention.is_none());

    let left = statuses(&ledger)?;
    assert_eq!(left.len(), 3 + 6 + 1 + 4, "{left:?}");
    assert!(left.keys().all(|id| !id.starts_with("old confirmed")));
    for (id, status) in unresolved {
        assert_eq!(left.get(id), Some(&status), "{id}");
    }

    // Day 100: the rejected and the cancelled pass 90 days, the new
    // confirmed 30.
    clock.advance(60 * DAY);
    pass(10)?;
    let left = statuses(&ledger)?;
    assert_eq!(left.len(), 4, "{left:?}");
    for (id, status) in unresolved {
        assert_eq!(left.get(id), Some(&status), "{id}");
    }

    // Every pruned operation is in the day's archive exactly once.
    let mut archived = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&archives)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    files.sort();
    assert_eq!(
        files,
        [
            "effect-retention-20260210.jsonl",
            "effect-retention-20260411.jsonl"
        ]
    );
    for file in &files {
        for line in std::fs::read_to_string(archives.join(file))?.lines() {
            let line: ArchivedOperation = serde_json::from_str(line)?;
            archived.push(line.operation.operation_id);
        }
    }
    let total = archived.len();
    archived.sort();
    archived.dedup();
    assert_eq!((total, archived.len()), (35, 35));
    Ok(())
}

#[test]
fn a_policy_below_the_minimum_retention_or_on_unresolved_work_is_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ledger = Arc::new(SqliteLedger::open(
        dir.path().join("effects.sqlite3"),
        SqliteOptions::default(),
    )?);
    let hasty = RetentionPolicy::new().keep(EffectStatus::Confirmed, Duration::from_secs(60));
    assert!(Retention::new(hasty, ledger.clone(), dir.path()).is_err());
    let mut unresolved = RetentionPolicy::new().keep(EffectStatus::Confirmed, 30 * DAY);
    unresolved.rules[0].status = EffectStatus::Quarantined;
    assert!(Retention::new(unresolved, ledger.clone(), dir.path()).is_err());
    let fine = RetentionPolicy::new().keep(EffectStatus::Confirmed, 30 * DAY);
    assert!(Retention::new(fine.clone(), ledger.clone(), dir.path().join("missing")).is_err());
    let retention = Retention::new(fine, ledger, dir.path())?;
    assert_eq!(
        retention.policy().limits.max_batches,
        Some(effect_exec::DEFAULT_BATCHES_PER_PASS)
    );
    Ok(())
}

const KILL_TEST: &str = "retention::a_worker_killed_mid_retention_resumes_the_day_s_archive";
const KILL_ROLE: &str = "EFFECT_TEST_RETENTION_KILL_ROLE";
const KILL_DB: &str = "EFFECT_TEST_RETENTION_KILL_DB";
const KILL_BATCH: usize = 5;
const KILL_OLD: usize = 23;
/// 2026-01-01, when the child's operations were settled.
const SEEDED: u64 = 1_767_225_600;

/// The store's prune, with an archive that aborts the process right after
/// its `abort_at`th append returned (the batch synced, not yet deleted).
struct AbortingStore {
    inner: Arc<SqliteLedger>,
    abort_at: Option<usize>,
}

struct AbortAfterAppend<'a> {
    inner: &'a mut dyn effect_core::PruneArchive,
    appends: usize,
    abort_at: Option<usize>,
}

impl effect_core::PruneArchive for AbortAfterAppend<'_> {
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

impl effect_core::PruneLedger for AbortingStore {
    fn prune_with_progress(
        &self,
        request: &effect_core::PruneRequest,
        archive: &mut dyn effect_core::PruneArchive,
        progress: &mut dyn FnMut(&effect_core::PruneReport),
    ) -> Result<effect_core::PruneReport, effect_core::LedgerError> {
        let mut archive = AbortAfterAppend {
            inner: archive,
            appends: 0,
            abort_at: self.abort_at,
        };
        self.inner
            .prune_with_progress(request, &mut archive, progress)
    }
}

/// In the child: one recovery pass 40 days after the seeding, whose
/// retention aborts after the `role`th archive append (`none`: never).
fn retention_child(role: &str, db: &std::path::Path) -> TestResult {
    let clock = Arc::new(ManualClock::new(
        UNIX_EPOCH + Duration::from_secs(SEEDED) + 40 * DAY,
    ));
    let ledger = Arc::new(SqliteLedger::open(
        db,
        SqliteOptions::default().clock(clock.clone()),
    )?);
    let store = Arc::new(AbortingStore {
        inner: ledger.clone(),
        abort_at: role.parse().ok(),
    });
    let policy: RetentionPolicy = "confirmed=30d".parse()?;
    // Batches end at KILL_BATCH rows, never at the time bound.
    let policy = policy.limits(
        PruneLimits::default()
            .batch_rows(KILL_BATCH)
            .batch_time(Duration::from_secs(600))
            .min_pause(Duration::ZERO),
    );
    let archives = db.parent().ok_or("the ledger's directory")?;
    let retention = Retention::new(policy, store, archives)?;
    let executor = EffectExecutor::with_clock(ledger, ExecutorOptions::default(), clock);
    let report = RecoveryWorker::new(executor)
        .retention(retention)
        .run_once()?;
    if report.retention.is_none() {
        return Err("the retention failed".into());
    }
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
    .run("recovery", role, db)
}

/// A worker is killed while its retention has archived a batch but not yet
/// deleted it; the next pass resumes the day's archive, deletes that batch
/// without a second line, and goes on: every pruned operation is in the
/// archive once, and the unresolved one is untouched.
#[test]
fn a_worker_killed_mid_retention_resumes_the_day_s_archive() -> TestResult {
    if let (Ok(role), Some(db)) = (std::env::var(KILL_ROLE), std::env::var_os(KILL_DB)) {
        return retention_child(&role, std::path::Path::new(&db));
    }
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("effects.sqlite3");
    let clock = Arc::new(ManualClock::new(UNIX_EPOCH + Duration::from_secs(SEEDED)));
    let ledger = SqliteLedger::open(&db, SqliteOptions::default().clock(clock.clone()))?;
    for i in 0..KILL_OLD {
        settle(&ledger, &format!("old {i:02}"), EffectStatus::Confirmed)?;
        clock.advance(Duration::from_millis(1));
    }
    settle(&ledger, "old quarantined", EffectStatus::Quarantined)?;
    drop(ledger);
    let archive = dir.path().join("effect-retention-20260210.jsonl");
    let lines = || -> Result<Vec<String>, Box<dyn std::error::Error>> {
        Ok(std::fs::read_to_string(&archive)?
            .lines()
            .map(|line| {
                serde_json::from_str::<ArchivedOperation>(line).map(|a| a.operation.operation_id)
            })
            .collect::<Result<_, _>>()?)
    };
    let left = || -> Result<BTreeMap<String, EffectStatus>, Box<dyn std::error::Error>> {
        statuses(&SqliteLedger::open(&db, SqliteOptions::default())?)
    };

    // Killed after the second batch was archived, before it was deleted.
    assert!(run_child("2", &db)?, "the child was killed");
    assert_eq!(lines()?.len(), 2 * KILL_BATCH);
    assert_eq!(
        left()?.len(),
        KILL_OLD + 1 - KILL_BATCH,
        "the second batch is still there"
    );

    // The next pass: the second batch deleted without a second line, then
    // the rest.
    assert!(!run_child("none", &db)?, "the second child finished");
    let archived = lines()?;
    let expected: Vec<String> = (0..KILL_OLD).map(|i| format!("old {i:02}")).collect();
    assert_eq!(
        archived, expected,
        "every operation archived once, in order"
    );
    let left = left()?;
    assert_eq!(
        left.into_iter().collect::<Vec<_>>(),
        [("old quarantined".to_owned(), EffectStatus::Quarantined)]
    );
    Ok(())
}
