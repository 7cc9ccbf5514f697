//! A compensation under kill -9 (docs/compensation.md): a process captures a
//! payment (confirmed) and dies while compensating it, before the refund's
//! acknowledgement is recorded, or before the compensation starts at all.
//! After the restart the compensation completes exactly once: the refund
//! provider holds one refund, the capture provider one capture.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use effect_test_support::time::past_every_lease;
use production_agent_systems::effect_core::compensation;
use production_agent_systems::recovery::RecoveryWorker;
use production_agent_systems::{
    EffectContract, EffectExecutor, EffectLedger, EffectStatus, ExecutorOptions, HandlerContext,
    HandlerError, SqliteLedger, SqliteOptions,
};
use serde_json::{Value, json};

use crate::provider::{FileProvider, forbidden_handler};

const CHILD_ENV: &str = "PAS_COMP_CHILD_DIR";
/// `in_refund`: die after the refund committed, before its acknowledgement;
/// `before_compensation`: die once the capture is confirmed.
const DEATH_ENV: &str = "PAS_COMP_DEATH";
const LEASE: Duration = Duration::from_millis(400);
const CAPTURE: &str = "invoice:INV-77:capture";
const REFUND: &str = "invoice:INV-77:capture:compensation";
const REFUND_KEY: &str = "refund:invoice:INV-77:capture";

struct Files {
    db: PathBuf,
    captures: FileProvider,
    refunds: FileProvider,
}

fn files(dir: &Path) -> Files {
    Files {
        db: dir.join("effects.sqlite3"),
        captures: FileProvider::new(&dir.join("captures.log")),
        refunds: FileProvider::new(&dir.join("refunds.log")),
    }
}

/// The capture (probe by key) compensated by a refund with its own key and
/// a probe that looks the refund up by that key.
fn contract(files: &Files) -> EffectContract {
    let refunds = files.refunds.clone();
    let refund = EffectContract::builder("refund_payment", compensation::operation_id)
        .provider_idempotency_key(|args| {
            Ok(args[compensation::ARGUMENT]
                .as_str()
                .map(|original| format!("refund:{original}")))
        })
        .outcome_probe(move |_args, key| Ok(refunds.lookup(key.ok_or("missing key")?)))
        .build()
        .unwrap();
    let captures = files.captures.clone();
    effect_test_support::contracts::capture_payment()
        .outcome_probe(move |_args, key| Ok(captures.lookup(key.ok_or("missing key")?)))
        .compensation(refund, |original| {
            Ok(json!({"payment_id": original.output["payment_id"]}))
        })
        .build()
        .unwrap()
}

fn refund_handler(
    refunds: &FileProvider,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
    let refunds = refunds.clone();
    move |_args, ctx| Ok(refunds.capture(ctx.provider_key().unwrap_or_default()))
}

/// The child role: capture, then die as `DEATH_ENV` says. Run directly
/// (without the environment variable) it has nothing to do.
#[test]
fn compensation_kill_role() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let files = files(Path::new(&dir));
    let ledger =
        SqliteLedger::open(&files.db, SqliteOptions::default().busy_timeout(LEASE / 3)).unwrap();
    let executor = EffectExecutor::with_options(
        Arc::new(ledger),
        ExecutorOptions::default().dispatch_lease(LEASE),
    );
    let contract = contract(&files);
    let captures = files.captures.clone();
    let captured = executor
        .execute(
            &contract,
            &json!({"invoice_id": "INV-77", "amount_cents": 990}),
            move |_args: Value, ctx: HandlerContext| {
                Ok::<_, HandlerError>(captures.capture(ctx.provider_key().unwrap_or_default()))
            },
        )
        .unwrap();
    assert!(captured.is_confirmed());
    if std::env::var(DEATH_ENV).unwrap() == "before_compensation" {
        std::process::abort();
    }
    let refunds = files.refunds.clone();
    let _ = executor.compensate(
        &contract,
        CAPTURE,
        move |_args, ctx| -> Result<Value, HandlerError> {
            refunds.capture(ctx.provider_key().unwrap_or_default());
            std::process::abort();
        },
    );
    unreachable!("the child aborts inside the refund");
}

fn run_child(dir: &Path, death: &str) -> Files {
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "compensation_kill::compensation_kill_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .env(DEATH_ENV, death)
        .status()
        .unwrap();
    assert!(!status.success(), "the child must die by abort");
    files(dir)
}

/// The ledger as a process started after the child opens it, past the dead
/// child's lease.
fn restarted(files: &Files) -> (Arc<dyn EffectLedger>, EffectExecutor) {
    let options = SqliteOptions::default()
        .busy_timeout(LEASE / 3)
        .clock(past_every_lease(LEASE));
    let ledger: Arc<dyn EffectLedger> = Arc::new(SqliteLedger::open(&files.db, options).unwrap());
    let executor = EffectExecutor::with_options(
        Arc::clone(&ledger),
        ExecutorOptions::default().dispatch_lease(LEASE),
    );
    (ledger, executor)
}

#[test]
fn a_refund_whose_process_died_after_the_provider_committed_is_reconciled_once_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let files = run_child(dir.path(), "in_refund");
    assert_eq!(files.captures.commits(), ["capture:INV-77"]);
    assert_eq!(
        files.refunds.commits(),
        [REFUND_KEY],
        "the refund committed before the death"
    );
    let (ledger, executor) = restarted(&files);
    let left = ledger.get(REFUND).unwrap().unwrap();
    assert_eq!(
        left.status,
        EffectStatus::Dispatched,
        "the claim was durable"
    );
    assert_eq!(
        ledger
            .get(CAPTURE)
            .unwrap()
            .unwrap()
            .compensation()
            .unwrap()
            .state,
        "started"
    );

    // The service's recovery worker finishes it: the probe finds the refund,
    // the refund handler never runs again.
    let worker = RecoveryWorker::new(executor.clone())
        .register_compensation(contract(&files), forbidden_handler)
        .unwrap();
    let report = worker.run_once().unwrap();
    assert_eq!((report.compensated, report.failed), (1, 0), "{report:?}");
    assert_eq!(files.refunds.commits(), [REFUND_KEY], "exactly one refund");
    assert_eq!(
        files.captures.commits(),
        ["capture:INV-77"],
        "exactly one capture"
    );
    let original = ledger.get(CAPTURE).unwrap().unwrap();
    assert_eq!(original.status, EffectStatus::Confirmed);
    assert_eq!(original.compensation().unwrap().state, "confirmed");
    // A caller compensating again replays the settled refund.
    let again = executor
        .compensate(&contract(&files), CAPTURE, forbidden_handler)
        .unwrap();
    assert!(again.duplicate_suppressed, "{again:?}");
    assert_eq!(files.refunds.commits(), [REFUND_KEY]);
}

#[test]
fn a_compensation_asked_for_after_the_process_died_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let files = run_child(dir.path(), "before_compensation");
    assert_eq!(files.captures.commits(), ["capture:INV-77"]);
    assert!(files.refunds.commits().is_empty());
    let (ledger, executor) = restarted(&files);
    assert!(ledger.get(REFUND).unwrap().is_none());
    let first = executor
        .compensate(&contract(&files), CAPTURE, refund_handler(&files.refunds))
        .unwrap();
    assert!(first.is_confirmed(), "{first:?}");
    let again = executor
        .compensate(&contract(&files), CAPTURE, refund_handler(&files.refunds))
        .unwrap();
    assert!(again.duplicate_suppressed);
    assert_eq!(files.refunds.commits(), [REFUND_KEY], "exactly one refund");
    assert_eq!(
        files.captures.commits(),
        ["capture:INV-77"],
        "exactly one capture"
    );
}
