//! Seeded chaos across processes: several workers execute the same operations
//! in different orders on one SQLite ledger, with slow probes (0-80 ms, and
//! `pending` now and then for a capture that happened),
//! failures before the provider commits, lost acknowledgements, workers that
//! abort inside their handler, and workers killed with SIGKILL at random
//! moments. Whatever happens, the provider never holds two effects for one
//! operation, and every caller ends with a result, a definitive status or
//! `in_progress`. After a recovery pass (and an operator's decision, from
//! the provider's records, where the rules left an operation uncertain),
//! every operation has exactly one effect.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use production_agent_systems::recovery::Audit;
use production_agent_systems::{
    EffectContract, EffectExecutor, EffectLedger, EffectStatus, ExecutorOptions, HandlerContext,
    HandlerError, OutcomeProbeResult, ProbeStatus, SqliteLedger, SqliteOptions,
};
use serde_json::{Value, json};

use crate::provider::FileProvider;

const DIR_ENV: &str = "PAS_CHAOS_DIR";
const SEED_ENV: &str = "PAS_CHAOS_SEED";
/// Few operations and many passes, so workers meet on the same operation.
const OPERATIONS: usize = 8;
const PASSES: usize = 6;
const WORKERS: usize = 4;
/// Workers started in all, replacements of dead ones included.
const SPAWNS: usize = 12;
const LEASE: Duration = Duration::from_millis(300);
/// How long one seed may run before its remaining workers are killed.
const BUDGET: Duration = Duration::from_secs(20);

fn files(dir: &Path) -> (PathBuf, FileProvider, PathBuf) {
    (
        dir.join("effects.sqlite3"),
        FileProvider::new(&dir.join("provider.log")),
        dir.join("non-answers.log"),
    )
}

fn invoice(i: usize) -> Value {
    json!({"invoice_id": format!("INV-{i:03}"), "amount_cents": 100 + i})
}

/// The capture contract, with a probe that takes 0-80 ms to answer.
fn slow_probe_contract(provider: &FileProvider) -> EffectContract {
    let provider = provider.clone();
    effect_test_support::contracts::capture_payment()
        .outcome_probe(move |_args, key| {
            let key = key.ok_or("missing key")?;
            // The answer is read first, then delivered late: a slow provider API.
            // A committed capture is sometimes still `pending` (honest, and not
            // authoritative): the record stays uncertain for the next caller.
            let mut answer = provider.lookup(key);
            if answer.status == ProbeStatus::Committed && fastrand::u32(0..10) < 3 {
                answer = OutcomeProbeResult::pending();
            }
            std::thread::sleep(Duration::from_millis(fastrand::u64(0..=80)));
            Ok(answer)
        })
        .build()
        .unwrap()
}

/// A handler that fails before the commit, loses the acknowledgement after
/// it, aborts the process before or after it, or succeeds, at random.
fn faulty_handler(
    provider: &FileProvider,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
    let provider = provider.clone();
    move |_args, key| {
        let key = key.into_provider_key().unwrap_or_default();
        std::thread::sleep(Duration::from_millis(fastrand::u64(0..=20)));
        match fastrand::u32(0..100) {
            0..20 => Err(HandlerError::unknown("connection reset before commit")),
            20..45 => {
                provider.capture(&key);
                Err(HandlerError::unknown(
                    "timed out waiting for the acknowledgement",
                ))
            }
            45..49 => std::process::abort(),
            49..53 => {
                provider.capture(&key);
                std::process::abort()
            }
            _ => Ok(provider.capture(&key)),
        }
    }
}

/// The worker role, run in child processes by the test below. Run directly
/// (without the environment variables) it has nothing to do.
#[test]
fn chaos_worker_role() {
    let (Some(dir), Some(seed)) = (std::env::var_os(DIR_ENV), std::env::var(SEED_ENV).ok()) else {
        return;
    };
    fastrand::seed(seed.parse().unwrap());
    let (db, provider, non_answers) = files(Path::new(&dir));
    let ledger = SqliteLedger::open(&db, SqliteOptions::default().busy_timeout(LEASE / 3)).unwrap();
    let options = ExecutorOptions::default().dispatch_lease(LEASE);
    let executor = EffectExecutor::with_options(Arc::new(ledger), options);
    let contract = slow_probe_contract(&provider);
    for _ in 0..PASSES {
        let mut order: Vec<usize> = (0..OPERATIONS).collect();
        fastrand::shuffle(&mut order);
        for i in order {
            let result = executor
                .execute(&contract, &invoice(i), faulty_handler(&provider))
                .unwrap();
            let non_answer = matches!(
                result.status,
                EffectStatus::Prepared | EffectStatus::Dispatched
            ) && !result.in_progress;
            if non_answer {
                let mut log = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&non_answers)
                    .unwrap();
                writeln!(log, "{} {} seed {seed}", result.operation_id, result.status).unwrap();
            }
        }
    }
}

fn spawn_worker(dir: &Path, seed: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "chaos::chaos_worker_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir)
        .env(SEED_ENV, seed.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Runs one seed: workers come and go until the spawn budget is used.
#[allow(clippy::disallowed_methods)] // The run's real-time budget.
fn run_seed(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let (db, provider, non_answers) = files(dir.path());
    // Create the ledger once, so workers do not race to create the schema.
    drop(SqliteLedger::open(&db, SqliteOptions::default().busy_timeout(LEASE / 3)).unwrap());
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut spawned = 0;
    let mut workers: Vec<Child> = Vec::new();
    let started = Instant::now();
    loop {
        workers.retain_mut(|w| w.try_wait().unwrap().is_none());
        while workers.len() < WORKERS && spawned < SPAWNS {
            workers.push(spawn_worker(dir.path(), seed * 1000 + spawned as u64));
            spawned += 1;
        }
        if workers.is_empty() {
            break;
        }
        if started.elapsed() > BUDGET {
            for worker in &mut workers {
                worker.kill().unwrap();
                worker.wait().unwrap();
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(rng.u64(20..200)));
        // Now and then, kill -9 a worker wherever it is.
        if rng.u32(0..3) == 0 {
            let victim = rng.usize(0..workers.len());
            workers[victim].kill().unwrap();
            workers[victim].wait().unwrap();
        }
    }

    let commits = provider.commits();
    let mut keys = commits.clone();
    keys.sort();
    keys.dedup();
    assert_eq!(
        keys.len(),
        commits.len(),
        "seed {seed}: an operation was committed twice: {commits:?}"
    );
    let non_answers = std::fs::read_to_string(&non_answers).unwrap_or_default();
    assert!(
        non_answers.is_empty(),
        "seed {seed}: callers ended without an answer:\n{non_answers}"
    );

    // Recovery: every worker is dead, so no handler is still running. A
    // healthy process reconciles what is left; what the rules quarantined
    // (an expired lease, a negative probe, no guaranteed key) an operator
    // retries, knowing that every worker has stopped. Their leases are over
    // on the clock of the healthy process.
    let ledger: Arc<dyn EffectLedger> = Arc::new(
        SqliteLedger::open(
            &db,
            SqliteOptions::default()
                .busy_timeout(LEASE / 3)
                .clock(effect_test_support::time::past_every_lease(LEASE)),
        )
        .unwrap(),
    );
    let options = ExecutorOptions::default().dispatch_lease(LEASE);
    let executor = EffectExecutor::with_options(Arc::clone(&ledger), options);
    let contract = slow_probe_contract(&provider);
    let healthy = {
        let provider = provider.clone();
        move |_: Value, ctx: HandlerContext| -> Result<Value, HandlerError> {
            Ok(provider.capture(&ctx.into_provider_key().unwrap_or_default()))
        }
    };
    for i in 0..OPERATIONS {
        let mut result = executor
            .execute(&contract, &invoice(i), healthy.clone())
            .unwrap();
        if result.status.is_uncertain() {
            // The operator looks the capture up at the provider (a probe may
            // have said `pending`): confirm what happened, retry what did not.
            let audit = Audit::new("chaos test", "every worker has stopped", "provider log");
            let key = format!("capture:INV-{i:03}");
            if provider.commits().contains(&key) {
                let output = json!({"payment_id": format!("pay-{key}"), "status": "captured"});
                executor
                    .operator()
                    .confirm_manually(&result.operation_id, output, None, audit)
                    .unwrap();
            } else {
                executor
                    .operator()
                    .authorize_retry_handler_stopped(&result.operation_id, audit)
                    .unwrap();
            }
            result = executor
                .execute(&contract, &invoice(i), healthy.clone())
                .unwrap();
        }
        assert_eq!(
            result.status,
            EffectStatus::Confirmed,
            "seed {seed}: {} after recovery: {result:?}",
            result.operation_id
        );
    }
    let commits = provider.commits();
    let mut keys = commits.clone();
    keys.sort();
    keys.dedup();
    assert_eq!(
        (keys.len(), commits.len()),
        (OPERATIONS, OPERATIONS),
        "seed {seed}: exactly one effect per operation: {commits:?}"
    );
}

#[test]
fn chaos_across_processes_commits_each_operation_once() {
    if !effect_test_support::slow::enabled("chaos_across_processes_commits_each_operation_once") {
        return;
    }
    for seed in [1, 2, 3] {
        run_seed(seed);
    }
}
