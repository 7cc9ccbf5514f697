//! Retention as a policy on PostgreSQL: a recovery worker whose clock runs
//! ahead of the server's prunes each terminal status past its own age, a
//! bounded share per pass, archives everything it deletes once, and never
//! touches unresolved work.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use effect_core::{
    ArchivedOperation, Claim, Confirmation, EffectLedger, EffectLedgerExt, EffectStatus, Evidence,
    ListQuery, ManualClock, PruneLimits, RetentionPolicy,
};
use effect_exec::{EffectExecutor, ExecutorOptions, RecoveryWorker, Retention};
use effect_ledger_postgres::PostgresLedger;

use crate::support::{TestResult, TestSchema, db_epoch, new_operation, server_url};

const DAY: Duration = Duration::from_secs(86_400);

fn statuses(
    ledger: &PostgresLedger,
) -> Result<BTreeMap<String, EffectStatus>, Box<dyn std::error::Error>> {
    Ok(ledger
        .list(&ListQuery::new(1000))?
        .into_iter()
        .map(|r| (r.operation_id, r.status))
        .collect())
}

#[test]
fn a_recovery_worker_applies_the_policy_in_bounded_passes_and_leaves_unresolved_work() -> TestResult
{
    let test = "a_recovery_worker_applies_the_policy_in_bounded_passes_and_leaves_unresolved_work";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "retention")?;
    let ledger = Arc::new(schema.ledger()?);
    let claim = Claim::new("w", Duration::from_secs(600));
    let confirmation = Confirmation {
        output: serde_json::json!({"ok": true}),
        provider_operation_id: None,
        evidence: Evidence::new(),
    };
    let none = Evidence::new();
    let mut n = 0;
    let mut next = || {
        n += 1;
        (format!("op {n:02}"), new_operation(n))
    };
    let mut unresolved = Vec::new();
    for _ in 0..12 {
        let (id, op) = next();
        ledger.prepare(&id, &op)?;
        ledger.mark_confirmed(&id, None, &confirmation)?;
    }
    for _ in 0..3 {
        let (id, op) = next();
        ledger.prepare(&id, &op)?;
        ledger.claim_dispatch(&id, &claim)?;
        ledger.mark_rejected(&id, "w", "declined")?;
    }
    for status in [
        EffectStatus::Prepared,
        EffectStatus::Dispatched,
        EffectStatus::OutcomeUnknown,
        EffectStatus::Quarantined,
    ] {
        let (id, op) = next();
        ledger.prepare(&id, &op)?;
        if status != EffectStatus::Prepared {
            ledger.claim_dispatch(&id, &claim)?;
        }
        if status.is_uncertain() {
            ledger.mark_outcome_unknown(&id, Some("w"), "timeout", &none)?;
        }
        if status == EffectStatus::Quarantined {
            ledger.quarantine(&id, "no probe", &none)?;
        }
        unresolved.push((id, status));
    }
    // The worker's clock: 40 days after the server's, so every confirmed
    // operation is past 30 days and no rejected one past 90.
    let now = db_epoch(&mut schema.admin()?)?;
    let clock = Arc::new(ManualClock::new(
        UNIX_EPOCH + Duration::from_secs_f64(now) + 40 * DAY,
    ));
    let archives = tempfile::tempdir()?;
    let policy: RetentionPolicy = "confirmed=30d,rejected=90d".parse()?;
    let policy = policy.limits(
        PruneLimits::default()
            .batch_rows(5)
            // Every selected row decoded, however slow the machine.
            .batch_time(Duration::from_secs(600))
            .min_pause(Duration::ZERO)
            .max_batches(Some(2)),
    );
    let retention = Retention::new(policy, ledger.clone(), archives.path())?;
    let executor =
        EffectExecutor::with_clock(ledger.clone(), ExecutorOptions::default(), clock.clone());
    let worker = RecoveryWorker::new(executor).retention(retention);

    let check_unresolved = || -> TestResult {
        let left = statuses(&ledger)?;
        for (id, status) in &unresolved {
            assert_eq!(left.get(id), Some(status), "{id}");
        }
        Ok(())
    };
    let first = worker.run_once()?;
    assert_eq!(first.pruned, 10, "two batches of five: {first:?}");
    check_unresolved()?;
    let second = worker.run_once()?;
    assert_eq!(second.pruned, 2, "{second:?}");
    let rules = second
        .retention
        .ok_or("the second pass applied no policy")?;
    assert!(rules.total.complete);
    assert_eq!(rules.rules.len(), 2);
    assert!(
        worker.run_once()?.retention.is_none(),
        "not due for an hour"
    );
    assert_eq!(statuses(&ledger)?.len(), 3 + 4);

    clock.advance(60 * DAY);
    let third = worker.run_once()?;
    assert_eq!(third.pruned, 3, "the rejected, past 90 days: {third:?}");
    check_unresolved()?;
    assert_eq!(statuses(&ledger)?.len(), 4);

    let mut archived = Vec::new();
    for entry in std::fs::read_dir(archives.path())? {
        for line in std::fs::read_to_string(entry?.path())?.lines() {
            let line: ArchivedOperation = serde_json::from_str(line)?;
            archived.push(line.operation.operation_id);
        }
    }
    let total = archived.len();
    archived.sort();
    archived.dedup();
    assert_eq!(
        (total, archived.len()),
        (15, 15),
        "each pruned operation archived once"
    );
    Ok(())
}
