//! Durability across process deaths. docs/spec.md §7: a process killed right after the
//! provider committed; after the lease expires a new process reconciles through
//! the probe, the handler is not run again and the provider holds exactly one
//! effect. Also: a process killed after its claim was durable but before its
//! request left, where only an honest basis may allow a second dispatch.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use effect_test_support::time::past_every_lease;
use production_agent_systems::effect_core::{Clock, ManualClock};

use production_agent_systems::recovery::Sweeper;
use production_agent_systems::{
    EffectExecutor, EffectLedger, EffectRecord, EffectStatus, ExecutorOptions, HandlerError,
    SqliteLedger, SqliteOptions,
};
use serde_json::{Value, json};

use crate::provider::{FileProvider, capture_contract, forbidden_handler};

const CHILD_ENV: &str = "PAS_CRASH_CHILD_DIR";
/// Set (to anything) when the worker must die before the provider commits.
const BEFORE_SEND_ENV: &str = "PAS_CRASH_BEFORE_SEND";
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
    let ledger = SqliteLedger::open(&db, SqliteOptions::default().busy_timeout(LEASE / 3)).unwrap();
    let options = ExecutorOptions::default().dispatch_lease(LEASE);
    let executor = EffectExecutor::with_options(Arc::new(ledger), options);
    let contract = capture_contract(&provider);
    let before_send = std::env::var_os(BEFORE_SEND_ENV).is_some();
    let _ = executor.execute(
        &contract,
        &args(),
        move |_, key| -> Result<Value, HandlerError> {
            if !before_send {
                provider.capture(&key.into_provider_key().unwrap_or_default());
            }
            std::process::abort();
        },
    );
    unreachable!("the worker aborts inside the handler");
}

/// The ledger as a process that starts after the worker died opens it, on
/// `clock`.
fn reopen(db: &Path, clock: Arc<dyn Clock>) -> Arc<dyn EffectLedger> {
    let options = SqliteOptions::default()
        .busy_timeout(LEASE / 3)
        .clock(clock);
    Arc::new(SqliteLedger::open(db, options).unwrap())
}

/// The ledger and the worker's claim as a process that starts after the
/// worker died sees them: the claim durable, its lease over.
fn after_the_worker(db: &Path) -> (Arc<dyn EffectLedger>, EffectRecord) {
    let ledger = reopen(db, past_every_lease(LEASE));
    let record = ledger.get("invoice:INV-77:capture").unwrap().unwrap();
    assert_eq!(
        record.status,
        EffectStatus::Dispatched,
        "the claim was durable before the handler ran"
    );
    (ledger, record)
}

/// Runs the worker role in a child process that dies by abort.
fn run_worker(dir: &std::path::Path, before_send: bool) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "crash::crash_worker_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir);
    if before_send {
        command.env(BEFORE_SEND_ENV, "1");
    }
    let status = command.status().unwrap();
    assert!(!status.success(), "the worker must die by abort");
}

#[test]
fn process_killed_after_its_claim_but_before_sending_is_never_blindly_resent() {
    let dir = tempfile::tempdir().unwrap();
    run_worker(dir.path(), true);
    let (db, provider) = paths(dir.path());
    assert!(
        provider.commits().is_empty(),
        "nothing reached the provider"
    );
    let (ledger, _) = after_the_worker(&db);
    let options = ExecutorOptions::default().dispatch_lease(LEASE);
    let executor = EffectExecutor::with_options(Arc::clone(&ledger), options);
    // The probe finds nothing, but the dead worker's request could still be in
    // flight as far as anyone can prove, and the key is not guaranteed: park it.
    let result = executor
        .execute(&capture_contract(&provider), &args(), forbidden_handler)
        .unwrap();
    assert_eq!(result.status, EffectStatus::Quarantined);
    assert_eq!(result.evidence["dispatch_interruption"], "lease_expired");
    assert!(provider.commits().is_empty(), "no blind second dispatch");
}

#[test]
fn process_killed_after_the_provider_committed_is_reconciled_without_rerunning() {
    let dir = tempfile::tempdir().unwrap();
    run_worker(dir.path(), false);
    let (db, provider) = paths(dir.path());
    assert_eq!(
        provider.commits(),
        ["capture:INV-77"],
        "the provider committed before the crash"
    );

    // The ledger's clock stands a moment before the dead worker's lease ends.
    let (_, claimed) = after_the_worker(&db);
    let lease_until = claimed
        .lease_until
        .expect("a dispatched record has a lease");
    let clock = Arc::new(ManualClock::new(
        UNIX_EPOCH + Duration::from_secs_f64(lease_until) - Duration::from_millis(1),
    ));
    let ledger = reopen(&db, clock.clone());

    let options = ExecutorOptions::default().dispatch_lease(LEASE);
    let executor = EffectExecutor::with_options(Arc::clone(&ledger), options);
    let contract = capture_contract(&provider);
    // While the dead worker's lease is live, nobody dispatches.
    let early = executor
        .execute(&contract, &args(), forbidden_handler)
        .unwrap();
    assert!(early.in_progress, "{early:?}");
    assert_eq!(early.status, EffectStatus::Dispatched);
    clock.advance(Duration::from_millis(2));
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

#[test]
fn a_sweep_in_a_new_process_settles_a_dispatch_killed_after_the_provider_committed() {
    let dir = tempfile::tempdir().unwrap();
    run_worker(dir.path(), false);
    let (db, provider) = paths(dir.path());
    assert_eq!(provider.commits(), ["capture:INV-77"]);

    // A service starting up: it registers its contracts and sweeps, with no
    // agent ever calling the same operation again.
    let (ledger, _) = after_the_worker(&db);
    let executor = EffectExecutor::with_options(
        Arc::clone(&ledger),
        ExecutorOptions::default().dispatch_lease(LEASE),
    );
    let sweeper = Sweeper::new(executor).register(capture_contract(&provider));
    let report = sweeper.sweep().unwrap();
    assert_eq!((report.examined, report.confirmed), (1, 1), "{report:?}");
    let record = ledger.get("invoice:INV-77:capture").unwrap().unwrap();
    assert_eq!(record.status, EffectStatus::Confirmed);
    assert_eq!(
        record.provider_operation_id.as_deref(),
        Some("pay-capture:INV-77")
    );
    assert_eq!(provider.commits(), ["capture:INV-77"], "exactly one effect");
}
