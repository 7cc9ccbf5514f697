//! Backups of a live ledger: complete (what is still in the `-wal` file
//! included) and consistent while another writer keeps committing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use effect_core::{EffectLedger, EffectLedgerExt, ListQuery};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::json;

use crate::support::{TestResult, op, raw};

fn count(ledger: &SqliteLedger) -> Result<usize, Box<dyn std::error::Error>> {
    Ok(ledger.list(&ListQuery::new(1000))?.len())
}

#[test]
fn a_backup_holds_every_commit_even_those_still_in_the_wal() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("effects.sqlite3");
    let ledger = SqliteLedger::open(&db, SqliteOptions::default())?;
    for i in 0..50 {
        ledger.prepare(&format!("op-{i}"), &op(json!({ "i": i })))?;
    }
    let wal = dir.path().join("effects.sqlite3-wal");
    assert!(
        std::fs::metadata(&wal)?.len() > 0,
        "commits wait in the WAL"
    );

    // Another process keeps writing while the backup runs.
    let writer = SqliteLedger::open(&db, SqliteOptions::default())?;
    let stop = Arc::new(AtomicBool::new(false));
    let writing = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                writer
                    .prepare(&format!("during-{i}"), &op(json!({ "during": i })))
                    .unwrap();
                i += 1;
            }
            i
        })
    };
    let copy = dir.path().join("backup.sqlite3");
    ledger.backup(&copy)?;
    stop.store(true, Ordering::SeqCst);
    let written_during = writing.join().unwrap();

    // The copy is one file: nothing of it is left in a WAL beside it.
    assert!(!dir.path().join("backup.sqlite3-wal").exists());
    let check: String = raw(&copy)?.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    assert_eq!(check, "ok");
    let restored = SqliteLedger::open(&copy, SqliteOptions::default().read_only(true))?;
    let restored_count = count(&restored)?;
    assert!(
        (50..=50 + written_during).contains(&restored_count),
        "{restored_count} of 50 + {written_during}"
    );
    for i in 0..50 {
        assert!(
            restored.get(&format!("op-{i}"))?.is_some(),
            "op-{i} missing"
        );
    }
    // A backup never overwrites.
    assert!(ledger.backup(&copy).is_err());
    Ok(())
}
