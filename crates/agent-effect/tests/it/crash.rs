//! crash-after-commit across a real process: the worker aborts after the
//! provider committed, the parent reconciles after the lease expired.

use std::sync::Arc;

use effect_core::EffectLedger;
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use effect_test_support::snapshots;
use effect_testkit::provider::FakePaymentProvider;
use serde_json::Value;

use crate::{agent_effect, stderr, stdout};

#[test]
fn the_worker_really_aborts_and_the_handler_is_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("crash");
    let output = agent_effect(&[
        "--scenario",
        "crash-after-commit",
        "--dir",
        run_dir.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // The child was killed by the abort, not an orderly exit.
    let err = stderr(&output);
    #[cfg(unix)]
    assert!(err.contains("SIGABRT"), "{err}");
    assert!(err.contains("worker process died"), "{err}");

    // The provider file, written by the dead worker, holds exactly one capture.
    let provider = FakePaymentProvider::open(run_dir.join("provider.jsonl")).unwrap();
    assert_eq!(provider.committed_count().unwrap(), 1);
    let calls = std::fs::read_to_string(run_dir.join("handler-calls.log")).unwrap();
    assert_eq!(
        calls.lines().count(),
        1,
        "the handler ran once, in the worker: {calls}"
    );

    // The ledger shows the expired lease and the probe's confirmation.
    let ledger: Arc<dyn EffectLedger> = Arc::new(
        SqliteLedger::open(run_dir.join("ledger.sqlite3"), SqliteOptions::default()).unwrap(),
    );
    let events = ledger.events("invoice:INV-1042:capture").unwrap();
    let unknown = events
        .iter()
        .find(|e| e.event_type == "outcome_unknown")
        .unwrap();
    assert_eq!(
        unknown.data["evidence"]["dispatch_interruption"],
        "lease_expired"
    );
    assert_eq!(
        unknown.data["evidence"]["handler_may_still_be_running"],
        true
    );

    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["handler_calls"], 1);
    assert_eq!(report["naive_baseline"]["committed_effect_count"], 2);
    snapshots::settings()
        .bind(|| insta::assert_json_snapshot!("scenario_crash_after_commit", report));
}
