//! A process killed mid-dispatch, after the provider committed: a new process
//! opens the same file, runs the reconciliation sweep, and the provider holds
//! exactly one effect. The provider is a file of committed keys, so it
//! survives the death of the process that wrote it.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use effect_core::{EffectContract, EffectLedger, EffectStatus, OutcomeProbeResult};
use effect_exec::{EffectExecutor, ExecutorOptions, HandlerError, Sweeper};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::{Value, json};

use crate::support::TestResult;

const CHILD_ENV: &str = "EFFECT_SQLITE_SWEEP_CHILD_DIR";
const LEASE: Duration = Duration::from_millis(300);
const ID: &str = "invoice:INV-9:capture";

fn commits(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("provider.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn contract(dir: &Path) -> Result<EffectContract, Box<dyn std::error::Error>> {
    let dir = dir.to_owned();
    Ok(effect_test_support::contracts::capture_payment()
        .outcome_probe(move |_args, key| {
            let key = key.ok_or("missing key")?;
            Ok(if commits(&dir).iter().any(|k| k == key) {
                OutcomeProbeResult::committed(json!({"payment_id": format!("pay-{key}")}))
                    .provider_operation_id(format!("pay-{key}"))
            } else {
                OutcomeProbeResult::not_committed()
            })
        })
        .build()?)
}

/// The worker role, run in a child process by the test below: the provider
/// commits durably and the process aborts before recording it. Run directly
/// (without the environment variable) it has nothing to do.
#[test]
fn sweep_worker_role() -> TestResult {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return Ok(());
    };
    let dir = Path::new(&dir).to_owned();
    let ledger = SqliteLedger::open(
        dir.join("effects.sqlite3"),
        SqliteOptions::default().busy_timeout(LEASE / 3),
    )?;
    let executor = EffectExecutor::with_options(
        Arc::new(ledger),
        ExecutorOptions::default().dispatch_lease(LEASE),
    );
    let log = dir.join("provider.log");
    let _ = executor.execute(
        &contract(&dir)?,
        &json!({"invoice_id": "INV-9"}),
        move |_, key| -> Result<Value, HandlerError> {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .map_err(|e| HandlerError::unknown(e.to_string()))?;
            writeln!(file, "{}", key.into_provider_key().unwrap_or_default())
                .and_then(|()| file.sync_all())
                .map_err(|e| HandlerError::unknown(e.to_string()))?;
            std::process::abort();
        },
    );
    Err("the worker aborts inside the handler".into())
}

#[test]
fn a_sweep_after_a_kill_mid_dispatch_leaves_exactly_one_effect() -> TestResult {
    let dir = tempfile::tempdir()?;
    let status = Command::new(std::env::current_exe()?)
        .args(["--exact", "sweep::sweep_worker_role", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .status()?;
    assert!(!status.success(), "the worker must die by abort");
    assert_eq!(commits(dir.path()), ["capture:INV-9"]);

    // The worker is dead: its lease is over on the new process's clock.
    let ledger: Arc<dyn EffectLedger> = Arc::new(SqliteLedger::open(
        dir.path().join("effects.sqlite3"),
        SqliteOptions::default()
            .busy_timeout(LEASE / 3)
            .clock(effect_test_support::time::past_every_lease(LEASE)),
    )?);
    assert_eq!(
        ledger.get(ID)?.map(|r| r.status),
        Some(EffectStatus::Dispatched),
        "the claim survived the kill"
    );
    let executor = EffectExecutor::new(Arc::clone(&ledger));
    let report = Sweeper::new(executor)
        .register(contract(dir.path())?)
        .sweep()?;
    assert_eq!((report.examined, report.confirmed), (1, 1), "{report:?}");
    assert_eq!(
        ledger.get(ID)?.map(|r| r.status),
        Some(EffectStatus::Confirmed)
    );
    assert_eq!(commits(dir.path()), ["capture:INV-9"], "exactly one effect");
    Ok(())
}
