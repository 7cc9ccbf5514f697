//! Pruning in PostgreSQL: old terminal operations are archived, then deleted
//! with their events; unresolved ones stay; a dry run changes nothing.

use std::time::{Duration, UNIX_EPOCH};

use effect_core::format_timestamp;
use effect_core::{
    ArchivedOperation, Claim, Confirmation, EffectLedger, EffectLedgerExt, EffectStatus, Evidence,
    LedgerErrorKind, ListQuery, PruneRequest,
};

use crate::support::{TestResult, TestSchema, db_epoch, new_operation, server_url};

#[test]
fn prune_archives_then_deletes_old_terminal_operations_only() -> TestResult {
    let Some(url) = server_url("prune_archives_then_deletes_old_terminal_operations_only") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "prune")?;
    let ledger = schema.ledger()?;
    let confirmation = Confirmation {
        output: serde_json::json!({"ok": true}),
        provider_operation_id: None,
        evidence: Evidence::new(),
    };
    let claim = Claim::new("w", Duration::from_secs(60));
    ledger.prepare("old confirmed", &new_operation(1))?;
    ledger.mark_confirmed("old confirmed", None, &confirmation)?;
    ledger.prepare("old rejected", &new_operation(2))?;
    ledger.claim_dispatch("old rejected", &claim)?;
    ledger.mark_rejected("old rejected", "w", "declined")?;
    ledger.prepare("old dispatched", &new_operation(3))?;
    ledger.claim_dispatch("old dispatched", &claim)?;
    std::thread::sleep(Duration::from_millis(5));
    let now = db_epoch(&mut schema.admin()?)?;
    let cutoff = format_timestamp(UNIX_EPOCH + Duration::from_secs_f64(now));
    std::thread::sleep(Duration::from_millis(5));
    ledger.prepare("new confirmed", &new_operation(4))?;
    ledger.mark_confirmed("new confirmed", None, &confirmation)?;

    let refused = PruneRequest::before(&cutoff).statuses(vec![EffectStatus::Dispatched]);
    let err = ledger.prune(&refused, &mut Vec::new()).unwrap_err();
    assert_eq!(err.kind(), LedgerErrorKind::InvalidInput);

    let mut archive = Vec::new();
    let dry = ledger.prune(&PruneRequest::before(&cutoff).dry_run(true), &mut archive)?;
    assert_eq!((dry.operations, dry.events), (2, 5));
    assert!(archive.is_empty());
    assert_eq!(ledger.list(&ListQuery::new(10))?.len(), 4);

    let report = ledger.prune(&PruneRequest::before(&cutoff), &mut archive)?;
    assert_eq!((report.operations, report.events), (2, 5));
    let archived: Vec<ArchivedOperation> = String::from_utf8(archive)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let ids: Vec<&str> = archived
        .iter()
        .map(|a| a.operation.operation_id.as_str())
        .collect();
    assert_eq!(ids, ["old confirmed", "old rejected"]);
    let mut left: Vec<String> = ledger
        .list(&ListQuery::new(10))?
        .into_iter()
        .map(|r| r.operation_id)
        .collect();
    left.sort();
    assert_eq!(left, ["new confirmed", "old dispatched"]);
    assert!(ledger.events("old rejected")?.is_empty());
    Ok(())
}

/// An archive whose second append is durable but answered with an error
/// (as a crash right after the sync would leave it): that batch is not
/// deleted, and a prune resumed into the same archive deletes it without a
/// second line, then goes on in batches.
struct FailAfterSecondAppend {
    inner: effect_core::ArchiveFile,
    appends: usize,
}

impl effect_core::PruneArchive for FailAfterSecondAppend {
    fn append(&mut self, lines: &[u8]) -> Result<(), effect_core::LedgerError> {
        self.inner.append(lines)?;
        self.appends += 1;
        if self.appends == 2 {
            return Err(effect_core::LedgerError::backend(
                "cut off after the sync",
                None,
            ));
        }
        Ok(())
    }
}

#[test]
fn an_interrupted_batched_prune_resumes_without_a_second_line() -> TestResult {
    let Some(url) = server_url("an_interrupted_batched_prune_resumes_without_a_second_line") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "prune_resume")?;
    let ledger = schema.ledger()?;
    confirm_operations(&ledger, "op", 10)?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("archive.jsonl");
    let limits = effect_core::PruneLimits::default()
        .batch_rows(3)
        .batch_time(Duration::from_secs(600))
        .min_pause(Duration::ZERO);
    let request = PruneRequest::before("9999-01-01T00:00:00+00:00").limits(limits);
    let mut failing = FailAfterSecondAppend {
        inner: effect_core::ArchiveFile::create(&path)?,
        appends: 0,
    };
    assert!(ledger.prune(&request, &mut failing).is_err());
    assert_eq!(
        ledger.list(&ListQuery::new(100))?.len(),
        7,
        "the second batch stayed"
    );
    assert_eq!(std::fs::read_to_string(&path)?.lines().count(), 6);

    let mut resumed = effect_core::ArchiveFile::resume(&path)?;
    let report = ledger.prune(&request, &mut resumed)?;
    assert_eq!((report.operations, report.resumed), (7, 3));
    assert!(ledger.list(&ListQuery::new(100))?.is_empty());
    let archived: Vec<ArchivedOperation> = std::fs::read_to_string(&path)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let mut ids: Vec<&str> = archived
        .iter()
        .map(|a| a.operation.operation_id.as_str())
        .collect();
    assert_eq!(ids.len(), 10, "each operation once");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 10, "no operation twice");
    assert!(archived.iter().all(|a| a.events.len() == 2));
    Ok(())
}

/// While another session commits, the prune's batches stay small (at most
/// 50 operations after the first); the archive still holds each deleted
/// operation once and the writer's effects are all confirmed.
#[test]
fn a_prune_beside_another_session_s_commits_takes_small_batches() -> TestResult {
    let Some(url) = server_url("a_prune_beside_another_session_s_commits_takes_small_batches")
    else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "prune_beside")?;
    let ledger = schema.ledger()?;
    let confirmation = Confirmation {
        output: serde_json::json!({"ok": true}),
        provider_operation_id: None,
        evidence: Evidence::new(),
    };
    confirm_operations(&ledger, "old", 600)?;
    std::thread::sleep(Duration::from_millis(5));
    let now = db_epoch(&mut schema.admin()?)?;
    let cutoff = format_timestamp(UNIX_EPOCH + Duration::from_secs_f64(now));
    std::thread::sleep(Duration::from_millis(5));

    let limits = effect_core::PruneLimits::default()
        .batch_rows(400)
        .batch_time(Duration::from_secs(600));
    let request = PruneRequest::before(&cutoff).limits(limits);
    let writer = schema.ledger()?;
    let done = std::sync::atomic::AtomicBool::new(false);
    let (report, archive, written) = std::thread::scope(|scope| {
        let writing = scope.spawn(|| -> Result<usize, effect_core::LedgerError> {
            let mut n = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) || n == 0 {
                let id = format!("new-{n}");
                writer.prepare(&id, &new_operation(1_000 + n))?;
                writer.mark_confirmed(&id, None, &confirmation)?;
                n += 1;
            }
            Ok(n)
        });
        let mut archive = Vec::new();
        let report = ledger.prune(&request, &mut archive);
        done.store(true, std::sync::atomic::Ordering::Release);
        let written = writing.join().expect("the writer does not panic");
        (report, archive, written)
    });
    let (report, written) = (report?, written?);
    assert_eq!(report.operations, 600);
    assert!(
        report.batches >= 4,
        "a first batch of 400, then at most 50 beside the writer: {} batches",
        report.batches
    );
    let mut ids: Vec<String> = String::from_utf8(archive)?
        .lines()
        .map(serde_json::from_str::<ArchivedOperation>)
        .map(|line| line.map(|a| a.operation.operation_id))
        .collect::<Result<_, _>>()?;
    assert_eq!(ids.len(), 600);
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 600, "each operation once");
    assert_eq!(
        ledger
            .stats()?
            .counts
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect::<Vec<_>>(),
        vec![(EffectStatus::Confirmed, written as u64)],
        "only the writer's operations are left, each confirmed"
    );
    Ok(())
}

/// A prune whose last batch is full finds nothing in the next and syncs
/// the deletions committed before it in a transaction of its own, which
/// runs (its flush of the log is the server's and not observable here;
/// the server's background writer flushes it soon anyway).
#[test]
fn a_prune_ending_on_a_full_batch_completes() -> TestResult {
    let Some(url) = server_url("a_prune_ending_on_a_full_batch_completes") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "prune_full_batch")?;
    let ledger = schema.ledger()?;
    confirm_operations(&ledger, "op", 6)?;
    let limits = effect_core::PruneLimits::default()
        .batch_rows(3)
        .batch_time(Duration::from_secs(600));
    let request = PruneRequest::before("9999-01-01T00:00:00+00:00").limits(limits);
    let mut archive = Vec::new();
    let report = ledger.prune(&request, &mut archive)?;
    assert_eq!((report.operations, report.batches), (6, 2));
    assert!(report.complete);
    assert_eq!(String::from_utf8(archive)?.lines().count(), 6);
    assert!(ledger.list(&ListQuery::new(100))?.is_empty());
    assert!(ledger.stats()?.counts.iter().all(|(_, n)| *n == 0));
    Ok(())
}

/// `count` operations `{prefix}-0` … prepared and confirmed.
fn confirm_operations(
    ledger: &effect_ledger_postgres::PostgresLedger,
    prefix: &str,
    count: usize,
) -> TestResult {
    let confirmation = Confirmation {
        output: serde_json::json!({"ok": true}),
        provider_operation_id: None,
        evidence: Evidence::new(),
    };
    for n in 0..count {
        let id = format!("{prefix}-{n}");
        ledger.prepare(&id, &new_operation(n))?;
        ledger.mark_confirmed(&id, None, &confirmation)?;
    }
    Ok(())
}
