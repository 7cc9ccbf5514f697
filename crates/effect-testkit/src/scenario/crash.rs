//! Crash-after-commit across a real process boundary.
//!
//! The in-process [`PerformFault::Crash`](super::PerformFault::Crash) cuts a
//! worker off from the ledger; this module kills a real one. A parent spawns a
//! worker process (any binary that calls [`run_worker`] in a hidden mode, such
//! as `agent-effect`), and the worker runs the payment capture through the
//! executor on a durable ledger with a file-backed
//! [`FakePaymentProvider`]. Right after the provider committed, the worker
//! calls [`std::process::abort`]: no unwinding, no last ledger write. The
//! parent, in [`run_parent`], waits for the worker's dispatch lease to run
//! out, then executes the same operation with a new executor: the lease has
//! expired, so the dispatch is recorded as interrupted and reconciled through
//! the contract's probe or guaranteed key. It reports what the provider file
//! shows.
//!
//! Both sides need a ledger that survives the process, so the caller opens it
//! (a SQLite file, say): this crate never depends on a store.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use effect_core::unix_seconds;
use effect_core::{Clock, EffectLedger, EffectStatus, LedgerError, SystemClock};
use effect_exec::{EffectExecutor, ExecutorOptions, HandlerContext, HandlerError};
use serde_json::Value;

use super::harness::Faulted;
use super::{
    ContractVariant, FaultPoint, FaultSchedule, Observed, Scenario, ScenarioError, ScenarioReport,
};
use crate::provider::FakePaymentProvider;

/// The worker's dispatch lease: short, so the parent's wait for it is short.
pub const WORKER_LEASE: Duration = Duration::from_millis(200);

/// Where the two processes keep what they share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashFiles {
    /// The ledger file (the caller's store decides its format).
    pub ledger: PathBuf,
    /// The provider's JSON-lines file of commits.
    pub provider: PathBuf,
    /// One line per handler call, in any process.
    pub handler_calls: PathBuf,
}

impl CrashFiles {
    /// `ledger.sqlite3`, `provider.jsonl` and `handler-calls.log` in `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        CrashFiles {
            ledger: dir.join("ledger.sqlite3"),
            provider: dir.join("provider.jsonl"),
            handler_calls: dir.join("handler-calls.log"),
        }
    }
}

/// What the parent saw.
#[derive(Debug, Clone)]
pub struct CrashRun {
    /// The scenario report, counted from the provider file.
    pub report: ScenarioReport,
    /// How the worker process ended (killed by `SIGABRT` on Unix).
    pub worker_status: ExitStatus,
}

/// The worker side: captures through the executor on `ledger` and aborts the
/// process right after the provider commits. It returns only when something
/// went wrong before the commit.
///
/// # Errors
///
/// Always, when it returns: why the worker did not reach the crash point.
pub fn run_worker(
    ledger: Arc<dyn EffectLedger>,
    files: &CrashFiles,
    variant: ContractVariant,
) -> Result<(), ScenarioError> {
    let scenario = scenario(variant);
    let faulted = open_provider(&scenario, files)?;
    let contract = scenario.build_contract(&faulted)?;
    let executor = EffectExecutor::with_options(
        ledger,
        ExecutorOptions::default().dispatch_lease(WORKER_LEASE),
    );
    let calls = files.handler_calls.clone();
    let handler = move |args: Value, ctx: HandlerContext| -> Result<Value, HandlerError> {
        log_call(&calls)?;
        faulted
            .perform(&args, ctx.provider_key())
            .map_err(HandlerError::unknown)?;
        // The provider's commit is on disk; the process dies before the
        // executor can record anything about it.
        std::process::abort()
    };
    let result = executor
        .execute(&contract, scenario.args(), handler)
        .map_err(|source| ScenarioError::Execution {
            scenario: scenario.name().to_owned(),
            source,
        })?;
    Err(harness_error(format!(
        "the worker finished without crashing: status {}, error {:?}",
        result.status, result.error
    )))
}

/// The parent side: runs `worker` to its death, waits for its lease to expire,
/// then executes the operation again on the ledger `open_ledger` returns (the
/// same file the worker used) and reports. The naive baseline beside it is the
/// in-process one: without a ledger there is nothing to carry across processes.
///
/// # Errors
///
/// The worker exited normally or never dispatched; the ledger or the provider
/// file could not be read.
pub fn run_parent(
    worker: &mut Command,
    open_ledger: &dyn Fn() -> Result<Arc<dyn EffectLedger>, LedgerError>,
    files: &CrashFiles,
    variant: ContractVariant,
) -> Result<CrashRun, ScenarioError> {
    let scenario = scenario(variant);
    let name = scenario.name().to_owned();
    let ledger_error = |source| ScenarioError::Ledger {
        scenario: name.clone(),
        source,
    };
    let worker_status = worker
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|err| harness_error(format!("could not start the worker process: {err}")))?;
    if worker_status.success() {
        return Err(harness_error(
            "the worker exited normally instead of dying after the commit".to_owned(),
        ));
    }
    let ledger = open_ledger().map_err(ledger_error)?;
    let faulted = open_provider(&scenario, files)?;
    let contract = scenario.build_contract(&faulted)?;
    let operation_id = contract
        .operation_id(scenario.args())
        .map_err(|err| harness_error(format!("no operation id: {err}")))?;
    let record = ledger
        .get(&operation_id)
        .map_err(ledger_error)?
        .filter(|record| record.status == EffectStatus::Dispatched)
        .ok_or_else(|| {
            harness_error(format!(
                "the worker died without leaving a dispatch of {operation_id:?} ({worker_status})"
            ))
        })?;
    wait_for_lease_expiry(record.lease_until);

    let executor = EffectExecutor::new(Arc::clone(&ledger));
    let calls = files.handler_calls.clone();
    let handler_provider = Arc::clone(&faulted);
    let handler = move |args: Value, ctx: HandlerContext| -> Result<Value, HandlerError> {
        log_call(&calls)?;
        handler_provider
            .perform(&args, ctx.provider_key())
            .map_err(HandlerError::unknown)
    };
    let mut executions = 1;
    for _ in 0..=scenario.resume_count() {
        let status = ledger
            .get(&operation_id)
            .map_err(ledger_error)?
            .map(|record| record.status);
        if status.is_some_and(EffectStatus::is_terminal) {
            break;
        }
        executor
            .execute(&contract, scenario.args(), handler.clone())
            .map_err(|source| ScenarioError::Execution {
                scenario: name.clone(),
                source,
            })?;
        executions += 1;
    }
    let record = ledger
        .get(&operation_id)
        .map_err(ledger_error)?
        .ok_or_else(|| harness_error(format!("operation {operation_id:?} vanished")))?;
    let events = ledger.events(&operation_id).map_err(ledger_error)?;
    let committed = faulted
        .inner()
        .committed_effects()
        .map_err(|err| harness_error(format!("could not count committed effects: {err}")))?;
    let handler_calls = std::fs::read_to_string(&files.handler_calls)
        .map_err(|err| harness_error(format!("could not read the handler-call log: {err}")))?
        .lines()
        .count();
    let mut report = scenario.report(Observed {
        record,
        events,
        executions,
        in_progress_callers: 0,
        handler_calls,
        probe_calls: faulted.look_up_calls(),
        committed,
        claimed: true,
    });
    report.naive_baseline = Some(scenario.run_naive()?);
    Ok(CrashRun {
        report,
        worker_status,
    })
}

/// The built-in payment scenario both sides run.
fn scenario(variant: ContractVariant) -> Scenario {
    Scenario::payment(FaultPoint::CrashAfterCommit, variant)
}

/// The file-backed provider, behind an empty schedule (for the call counts).
fn open_provider(scenario: &Scenario, files: &CrashFiles) -> Result<Arc<Faulted>, ScenarioError> {
    let provider =
        FakePaymentProvider::open(&files.provider).map_err(|err| ScenarioError::Harness {
            scenario: scenario.name().to_owned(),
            message: format!("{err}: {}", source_text(&err)),
        })?;
    let faulted = Arc::new(Faulted::new(Arc::new(provider), FaultSchedule::new()));
    faulted.gate.open();
    faulted.late.open();
    Ok(faulted)
}

/// Sleeps until `lease_until` (seconds since the epoch) has passed by the
/// system clock, at most 10 s.
fn wait_for_lease_expiry(lease_until: Option<f64>) {
    let Some(until) = lease_until else {
        return;
    };
    let remaining = until - unix_seconds(SystemClock.now());
    if remaining > 0.0 {
        let wait = Duration::from_secs_f64(remaining.min(10.0)) + Duration::from_millis(20);
        std::thread::sleep(wait);
    }
}

/// Appends one line per handler call, synced, so a count survives an abort.
fn log_call(path: &Path) -> Result<(), HandlerError> {
    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
    file.write_all(format!("handler call by process {}\n", std::process::id()).as_bytes())?;
    file.sync_all()?;
    Ok(())
}

fn source_text(err: &dyn std::error::Error) -> String {
    err.source().map_or_else(String::new, ToString::to_string)
}

fn harness_error(message: String) -> ScenarioError {
    ScenarioError::Harness {
        scenario: FaultPoint::CrashAfterCommit.as_str().to_owned(),
        message,
    }
}
