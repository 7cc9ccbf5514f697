//! Deferred outcomes across process deaths: a worker in the executor's
//! deferred-outcomes mode is answered, then aborts before any background
//! sync. A process crash keeps the outcome (its commit is in the operating
//! system's cache); a power loss may lose it, which is simulated by putting
//! back the ledger files as they were once the claim was durable. Either
//! way the operation ends confirmed with one effect at the provider, and
//! an outcome without a safe basis is never deferred.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use effect_test_support::time::past_every_lease;
use production_agent_systems::recovery::Sweeper;
use production_agent_systems::{
    EffectContract, EffectExecutor, EffectLedger, EffectStatus, ExecutorOptions, HandlerError,
    SqliteLedger, SqliteOptions,
};
use serde_json::{Value, json};

use crate::provider::{FileProvider, capture_contract, forbidden_handler};

const CHILD_ENV: &str = "PAS_DEFERRED_CHILD_DIR";
/// The contract of the child: `probe`, `key` or `none`.
const BASIS_ENV: &str = "PAS_DEFERRED_BASIS";
const LEASE: Duration = Duration::from_millis(600);
const ID: &str = "invoice:INV-88:capture";

fn args() -> Value {
    json!({"invoice_id": "INV-88", "amount_cents": 1200})
}

fn ledger_path(dir: &Path) -> PathBuf {
    dir.join("effects.sqlite3")
}

fn provider(dir: &Path) -> FileProvider {
    FileProvider::new(&dir.join("provider.log"))
}

/// The contract for `basis`: the probe of the file provider, a guaranteed
/// key without a probe, or a key the provider does not guarantee and no probe.
fn contract(basis: &str, provider: &FileProvider) -> EffectContract {
    if basis == "probe" {
        return capture_contract(provider);
    }
    effect_test_support::contracts::capture_payment()
        .provider_idempotency_guaranteed(basis == "key")
        .build()
        .unwrap()
}

fn options() -> SqliteOptions {
    // No background sync before the abort: only a durable commit or the
    // close could make the outcome durable, and neither happens.
    SqliteOptions::default()
        .busy_timeout(LEASE / 3)
        .deferred_sync_delay(Duration::from_secs(600))
}

fn executor(ledger: &Arc<dyn EffectLedger>) -> EffectExecutor {
    let options = ExecutorOptions::default()
        .dispatch_lease(LEASE)
        .deferred_outcomes(true);
    EffectExecutor::with_options(Arc::clone(ledger), options)
}

/// The ledger files as the handler found them: the claim durable, the
/// outcome not yet written. What a power loss right after the answer can
/// leave of a deferred outcome.
fn snapshot_dir(dir: &Path) -> PathBuf {
    dir.join("after-claim")
}

/// The worker role, run in a child process by the tests below. Run directly
/// (without the environment variable) it has nothing to do.
#[test]
fn deferred_worker_role() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let basis = std::env::var(BASIS_ENV).unwrap();
    let provider = provider(&dir);
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(ledger_path(&dir), options()).unwrap());
    let executor = executor(&ledger);
    let contract = contract(&basis, &provider);
    let files = dir.clone();
    let result = executor
        .execute(
            &contract,
            &args(),
            move |_, key| -> Result<Value, HandlerError> {
                let snapshot = snapshot_dir(&files);
                std::fs::create_dir_all(&snapshot).unwrap();
                for name in ["effects.sqlite3", "effects.sqlite3-wal"] {
                    std::fs::copy(files.join(name), snapshot.join(name)).unwrap();
                }
                Ok(provider.capture(&key.into_provider_key().unwrap_or_default()))
            },
        )
        .unwrap();
    // The caller has its answer: record it where the parent can read it,
    // then die before anything else reaches the ledger.
    std::fs::write(
        dir.join("answer.json"),
        serde_json::to_vec(&result.output).unwrap(),
    )
    .unwrap();
    assert!(result.is_confirmed());
    std::process::abort();
}

/// Runs the worker for `basis` in a child process that dies by abort, and
/// returns the output its caller was answered with.
fn run_worker(dir: &Path, basis: &str) -> Value {
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "deferred::deferred_worker_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .env(BASIS_ENV, basis)
        .status()
        .unwrap();
    assert!(!status.success(), "the worker must die by abort");
    let answer = std::fs::read(dir.join("answer.json")).expect("the worker was answered");
    assert_eq!(
        provider(dir).commits(),
        ["capture:INV-88"],
        "the provider committed before the crash"
    );
    serde_json::from_slice(&answer).unwrap()
}

/// The ledger as a process that starts after the worker died opens it: the
/// worker's lease is over on its clock.
fn reopen(dir: &Path) -> Arc<dyn EffectLedger> {
    let options = options().clock(past_every_lease(LEASE));
    Arc::new(SqliteLedger::open(ledger_path(dir), options).unwrap())
}

#[test]
fn a_deferred_outcome_survives_the_death_of_its_process() {
    for basis in ["probe", "key"] {
        let dir = tempfile::tempdir().unwrap();
        let answered = run_worker(dir.path(), basis);
        let ledger = reopen(dir.path());
        let record = ledger.get(ID).unwrap().unwrap();
        assert_eq!(record.status, EffectStatus::Confirmed, "{basis}");
        assert_eq!(record.output.as_ref(), Some(&answered), "{basis}");
        let provider = provider(dir.path());
        let replay = executor(&ledger)
            .execute(&contract(basis, &provider), &args(), forbidden_handler)
            .unwrap();
        assert!(replay.duplicate_suppressed, "{basis}: {replay:?}");
        assert_eq!(replay.output, Some(answered));
        assert_eq!(
            provider.commits(),
            ["capture:INV-88"],
            "{basis}: one effect"
        );
    }
}

#[test]
fn an_outcome_without_a_safe_basis_is_durable_when_its_process_dies() {
    let dir = tempfile::tempdir().unwrap();
    let answered = run_worker(dir.path(), "none");
    let ledger = reopen(dir.path());
    let record = ledger.get(ID).unwrap().unwrap();
    assert_eq!(record.status, EffectStatus::Confirmed);
    assert_eq!(record.output, Some(answered));
    let provider = provider(dir.path());
    let sweeper = Sweeper::new(executor(&ledger)).register(contract("none", &provider));
    assert_eq!(sweeper.sweep().unwrap().examined, 0, "nothing to reconcile");
    let replay = executor(&ledger)
        .execute(&contract("none", &provider), &args(), forbidden_handler)
        .unwrap();
    assert!(replay.duplicate_suppressed, "never dispatched again");
    assert_eq!(provider.commits(), ["capture:INV-88"], "one effect");
}

/// Puts back the ledger files as they were once the claim was durable.
fn lose_the_outcome(dir: &Path) {
    let snapshot = snapshot_dir(dir);
    for name in ["effects.sqlite3", "effects.sqlite3-wal"] {
        std::fs::copy(snapshot.join(name), dir.join(name)).unwrap();
    }
    // The shared-memory index belongs to the log it indexed; SQLite
    // rebuilds it from the log.
    let _ = std::fs::remove_file(dir.join("effects.sqlite3-shm"));
}

#[test]
fn a_deferred_outcome_lost_with_the_machine_is_reconciled_through_the_probe() {
    let dir = tempfile::tempdir().unwrap();
    let answered = run_worker(dir.path(), "probe");
    lose_the_outcome(dir.path());
    let ledger = reopen(dir.path());
    assert_eq!(
        ledger.get(ID).unwrap().unwrap().status,
        EffectStatus::Dispatched,
        "the durable claim, without its outcome"
    );
    let provider = provider(dir.path());
    let sweeper = Sweeper::new(executor(&ledger)).register(contract("probe", &provider));
    let report = sweeper.sweep().unwrap();
    assert_eq!((report.examined, report.confirmed), (1, 1), "{report:?}");
    let record = ledger.get(ID).unwrap().unwrap();
    assert_eq!(record.status, EffectStatus::Confirmed);
    assert_eq!(
        record.output,
        Some(answered),
        "the probe found the same effect"
    );
    assert_eq!(provider.commits(), ["capture:INV-88"], "exactly one effect");
}

#[test]
fn a_deferred_outcome_lost_with_the_machine_is_retried_under_its_guaranteed_key() {
    let dir = tempfile::tempdir().unwrap();
    let answered = run_worker(dir.path(), "key");
    lose_the_outcome(dir.path());
    let ledger = reopen(dir.path());
    assert_eq!(
        ledger.get(ID).unwrap().unwrap().status,
        EffectStatus::Dispatched
    );
    let provider = provider(dir.path());
    let retry = provider.clone();
    // The provider honours the key: a retry under it commits nothing new.
    let result = executor(&ledger)
        .execute(
            &contract("key", &provider),
            &args(),
            move |_, key| -> Result<Value, HandlerError> {
                Ok(retry.capture_once(&key.into_provider_key().unwrap_or_default()))
            },
        )
        .unwrap();
    assert!(result.is_confirmed(), "{result:?}");
    assert_eq!(result.output, Some(answered));
    assert_eq!(provider.commits(), ["capture:INV-88"], "exactly one effect");
}
