//! SPEC §7: a process killed right after the provider committed. After the
//! lease expires a new process reconciles through the probe; the handler is not
//! run again and the provider holds exactly one effect.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use production_agent_systems::{
    EffectExecutor, EffectLedger, EffectStatus, ExecutorOptions, HandlerError, SqliteLedger,
    SqliteOptions,
};
use serde_json::{Value, json};

use crate::provider::{FileProvider, capture_contract, forbidden_handler};

const CHILD_ENV: &str = "PAS_CRASH_CHILD_DIR";
const LEASE: Duration = Duration::from_millis(400);

fn paths(dir: &std::path::Path) -> (PathBuf, FileProvider) {
    (
        dir.join("effects.sqlite3"),
        FileProvider::new(&dir.join("provider.log")),
    )
}

fn args() -> Value {
    json!({"invoice_id": "INV-77", "amount_cents": 990})
}

/// The worker role, run in a child process by the test below: it dispatches,
/// the provider commits durably, and the process aborts before recording it.
/// Run directly (without the environment variable) it has nothing to do.
#[test]
fn crash_worker_role() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let (db, provider) = paths(std::path::Path::new(&dir));
    let ledger = SqliteLedger::open(&db, SqliteOptions::default()).unwrap();
    let options = ExecutorOptions::default().dispatch_lease(LEASE);
    let executor = EffectExecutor::with_options(Arc::new(ledger), options);
    let contract = capture_contract(&provider);
    let _ = executor.execute(
        &contract,
        &args(),
        move |_, key| -> Result<Value, HandlerError> {
            provider.capture(&key.unwrap_or_default());
            std::process::abort();
        },
    );
    unreachable!("the worker aborts inside the handler");
}

#[test]
fn process_killed_after_the_provider_committed_is_reconciled_without_rerunning() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash::crash_worker_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .status()
        .unwrap();
    assert!(!status.success(), "the worker must die by abort");
    let (db, provider) = paths(dir.path());
    assert_eq!(
        provider.commits(),
        ["capture:INV-77"],
        "the provider committed before the crash"
    );

    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(&db, SqliteOptions::default()).unwrap());
    let record = ledger.get("invoice:INV-77:capture").unwrap().unwrap();
    assert_eq!(
        record.status,
        EffectStatus::Dispatched,
        "the claim survived the crash"
    );

    let options = ExecutorOptions::default().dispatch_lease(LEASE);
    let executor = EffectExecutor::with_options(Arc::clone(&ledger), options);
    let contract = capture_contract(&provider);
    // While the dead worker's lease could still be live, nobody dispatches.
    let early = executor
        .execute(&contract, &args(), forbidden_handler)
        .unwrap();
    if early.in_progress {
        std::thread::sleep(LEASE + Duration::from_millis(100));
    }
    let result = executor
        .execute(&contract, &args(), forbidden_handler)
        .unwrap();
    assert!(result.is_confirmed(), "{result:?}");
    assert_eq!(
        result.provider_operation_id.as_deref(),
        Some("pay-capture:INV-77")
    );
    assert_eq!(provider.commits(), ["capture:INV-77"], "exactly one effect");
    let events: Vec<String> = ledger
        .events("invoice:INV-77:capture")
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(
        events,
        ["prepared", "dispatched", "outcome_unknown", "confirmed"]
    );
    let unknown = &ledger.events("invoice:INV-77:capture").unwrap()[2];
    assert_eq!(
        unknown.data["evidence"]["dispatch_interruption"],
        "lease_expired"
    );
}
