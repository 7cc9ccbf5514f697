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

use crate::support::{TestResult, claim, confirmation, evidence, op};

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
