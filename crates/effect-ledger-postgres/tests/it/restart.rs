//! The server restarted, or crashed, under load: 16 threads execute
//! operations through one executor and one ledger (a pool of 16
//! connections) against testkit's `FakePaymentProvider`, set to ignore
//! idempotency keys so that a second dispatch would be a second effect.
//! Each thread captures invoices of its own one after another, calling again
//! after an error or an `in_progress` answer until it is told `confirmed`.
//! The server is a throwaway cluster of the test's own (`cluster.rs`), so
//! the shared test server is never stopped.
//!
//! Properties, for a clean stop (`pg_ctl stop -m fast`) and a crash
//! (`-m immediate`):
//! - while the server is down every call ends in a ledger error of kind
//!   `Unavailable` or with a definitive status, never with a confirmation
//!   that is not durable: every output a caller was told `confirmed` is the
//!   stored one afterwards;
//! - once the server is back, the same ledger (its pool) confirms new
//!   operations again, with no new process and no new ledger;
//! - the next calls (and an operator, for what the rules quarantine: a claim
//!   whose answer was lost, the provider showing no effect) converge every
//!   operation to confirmed, with exactly one effect each: the provider's
//!   count is the confirmations callers were told plus those settled after.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use effect_core::OutcomeProbeResult;
use effect_core::{EffectContract, EffectLedger, EffectStatus, LedgerErrorKind};
use effect_exec::{
    Audit, EffectExecutor, ExecError, ExecutorOptions, HandlerContext, HandlerError,
};
use effect_ledger_postgres::PostgresLedger;
use effect_testkit::provider::FakePaymentProvider;
use serde_json::{Value, json};

use crate::cluster::{Cluster, Stop};
use crate::support::{TestResult, TestSchema};

const WORKERS: usize = 16;
/// Confirmations to see before the stop, and again after the start.
const CONFIRMATIONS: usize = 48;
/// Short, so an operation whose claim's answer was lost settles quickly.
const LEASE: Duration = Duration::from_secs(1);
/// Long enough for a loaded machine; a test that hangs fails here instead.
const PHASE_LIMIT: Duration = Duration::from_secs(180);

#[test]
fn a_server_restart_under_load_confirms_nothing_falsely_and_dispatches_nothing_twice() -> TestResult
{
    restart_under_load(
        "a_server_restart_under_load_confirms_nothing_falsely_and_dispatches_nothing_twice",
        Stop::Fast,
    )
}

#[test]
fn a_server_crash_under_load_confirms_nothing_falsely_and_dispatches_nothing_twice() -> TestResult {
    restart_under_load(
        "a_server_crash_under_load_confirms_nothing_falsely_and_dispatches_nothing_twice",
        Stop::Immediate,
    )
}

/// What the callers were told, across all threads.
#[derive(Debug, Default)]
struct Told {
    /// The outputs callers were told were confirmed, by invoice.
    confirmed: BTreeMap<String, Value>,
    /// Every invoice a caller started.
    attempted: BTreeSet<String>,
    /// Errors, by kind (all must be `Unavailable`).
    errors: BTreeMap<String, usize>,
    /// Other answers: `in_progress`, quarantined, ...
    other: BTreeMap<String, usize>,
    /// Answers that break a property.
    violations: Vec<String>,
}

/// The shared state of one run.
struct Load {
    executor: EffectExecutor,
    contract: EffectContract,
    provider: Arc<FakePaymentProvider>,
    stop: AtomicBool,
    confirmations: AtomicUsize,
    errors: AtomicUsize,
    told: Mutex<Told>,
}

impl Load {
    fn told(&self) -> std::sync::MutexGuard<'_, Told> {
        self.told.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One caller: invoices `R<worker>-<n>`, each called until confirmed.
    fn run(&self, worker: usize) {
        let mut n = 0;
        while !self.stop.load(Ordering::SeqCst) {
            let invoice = format!("R{worker:02}-{n:05}");
            n += 1;
            self.told().attempted.insert(invoice.clone());
            while !self.stop.load(Ordering::SeqCst) {
                if self.call(&invoice) {
                    break;
                }
                // Not settled yet (the server is down, or a lease runs):
                // call again shortly, as a caller would.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// One call; `true` when the invoice needs no further call by this
    /// thread.
    fn call(&self, invoice: &str) -> bool {
        let result = self
            .executor
            .execute(&self.contract, &args(invoice), handler(&self.provider));
        let mut told = self.told();
        match result {
            Ok(result) if result.status == EffectStatus::Confirmed => {
                let output = result.output.unwrap_or(Value::Null);
                if let Some(earlier) = told.confirmed.insert(invoice.to_owned(), output.clone())
                    && earlier != output
                {
                    told.violations.push(format!(
                        "{invoice} confirmed twice with different outputs: {earlier} then {output}"
                    ));
                }
                self.confirmations.fetch_add(1, Ordering::SeqCst);
                true
            }
            Ok(result) if result.in_progress => {
                *told.other.entry("in progress".into()).or_default() += 1;
                false
            }
            Ok(result) => {
                // Definitive but not confirmed (quarantined): left to the
                // operator below.
                *told.other.entry(result.status.as_str().into()).or_default() += 1;
                true
            }
            Err(ExecError::Ledger { source, .. }) => {
                let kind = source.kind();
                *told.errors.entry(format!("{kind:?}")).or_default() += 1;
                if kind != LedgerErrorKind::Unavailable {
                    told.violations.push(format!(
                        "{invoice}: a ledger error of kind {kind:?}: {source}"
                    ));
                }
                self.errors.fetch_add(1, Ordering::SeqCst);
                false
            }
            Err(other) => {
                told.violations
                    .push(format!("{invoice}: not a ledger error: {other}"));
                true
            }
        }
    }

    /// Waits until `counter` reaches `target`.
    fn wait_for(&self, counter: &AtomicUsize, target: usize, what: &str) -> Result<(), String> {
        let start = Instant::now();
        while counter.load(Ordering::SeqCst) < target {
            if start.elapsed() > PHASE_LIMIT {
                return Err(format!(
                    "{what}: {} of {target} after {PHASE_LIMIT:?}; told so far: {:?}",
                    counter.load(Ordering::SeqCst),
                    self.told()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }
}

fn restart_under_load(test: &str, stop: Stop) -> TestResult {
    let Some(cluster) = Cluster::start(test)? else {
        return Ok(());
    };
    let schema = TestSchema::new(&cluster.url, test)?;
    let ledger = PostgresLedger::connect(
        &cluster.url,
        schema
            .options()
            .pool_size(WORKERS as u32)
            // A call while the server is down waits this long for a
            // connection, then fails as unavailable.
            .connect_timeout(Duration::from_secs(2)),
    )?;
    let provider = Arc::new(FakePaymentProvider::new().honour_idempotency_keys(false));
    let load = Arc::new(Load {
        executor: EffectExecutor::with_options(
            Arc::new(ledger.clone()),
            ExecutorOptions::default().dispatch_lease(LEASE),
        ),
        contract: contract(&provider)?,
        provider: Arc::clone(&provider),
        stop: AtomicBool::new(false),
        confirmations: AtomicUsize::new(0),
        errors: AtomicUsize::new(0),
        told: Mutex::default(),
    });
    let threads: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let load = Arc::clone(&load);
            std::thread::spawn(move || load.run(worker))
        })
        .collect();

    let phases = (|| -> Result<usize, Box<dyn std::error::Error>> {
        load.wait_for(
            &load.confirmations,
            CONFIRMATIONS,
            "confirmations before the stop",
        )?;
        cluster.stop(stop)?;
        let before = load.confirmations.load(Ordering::SeqCst);
        // Every caller meets the server down at least once, on average.
        load.wait_for(&load.errors, WORKERS, "errors while the server is down")?;
        cluster.start_again()?;
        let restarted = load.confirmations.load(Ordering::SeqCst);
        load.wait_for(
            &load.confirmations,
            restarted + CONFIRMATIONS,
            "confirmations after the start",
        )?;
        Ok(before)
    })();
    load.stop.store(true, Ordering::SeqCst);
    for thread in threads {
        thread
            .join()
            .map_err(|_| "a caller thread panicked".to_owned())?;
    }
    let before = phases?;
    let told = std::mem::take(&mut *load.told());
    assert!(told.violations.is_empty(), "{:#?}", told.violations);
    assert!(
        told.errors.get("Unavailable").copied().unwrap_or(0) >= WORKERS,
        "{told:?}"
    );

    // The callers have stopped: the next calls settle what they left, and
    // an operator (knowing no handler runs any more) authorizes a retry of
    // what the rules quarantined, the provider showing no effect.
    let mut settled_later = 0;
    let mut retried = 0;
    for invoice in &told.attempted {
        let id = format!("invoice:{invoice}:capture");
        let start = Instant::now();
        let mut authorized = 0;
        let result = loop {
            let result =
                load.executor
                    .execute(&load.contract, &args(invoice), handler(&provider))?;
            if result.status == EffectStatus::Quarantined {
                assert!(
                    provider.lookup_by_invoice(invoice)?.is_empty(),
                    "{invoice} quarantined although the provider committed it: {result:?}"
                );
                assert!(authorized == 0, "{invoice} quarantined again after a retry");
                load.executor
                    .operator()
                    .authorize_retry_handler_stopped(&id, audit())?;
                authorized += 1;
                retried += 1;
                continue;
            }
            if !result.in_progress {
                break result;
            }
            assert!(start.elapsed() < PHASE_LIMIT, "{invoice} never settled");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(
            result.status,
            EffectStatus::Confirmed,
            "{invoice}: {result:?}"
        );
        let stored = ledger.get(&id)?.ok_or("no record")?;
        assert_eq!(stored.status, EffectStatus::Confirmed, "{invoice}");
        match told.confirmed.get(invoice) {
            // Told confirmed: durable, with the output the caller got.
            Some(output) => assert_eq!(stored.output.as_ref(), Some(output), "{invoice}"),
            None => settled_later += 1,
        }
        assert_eq!(
            provider.lookup_by_invoice(invoice)?.len(),
            1,
            "{invoice}: exactly one effect"
        );
    }
    let effects = provider.committed_count()?;
    assert_eq!(effects, told.attempted.len(), "one effect per operation");
    assert_eq!(effects, told.confirmed.len() + settled_later);
    println!(
        "{test}: {} operations by {WORKERS} callers, {before} confirmed before the {stop:?} \
         stop, {} told confirmed in all, {settled_later} settled afterwards ({retried} retried \
         by an operator); errors {:?}; other answers {:?}; {effects} effects",
        told.attempted.len(),
        told.confirmed.len(),
        told.errors,
        told.other,
    );
    drop(schema);
    Ok(())
}

fn args(invoice: &str) -> Value {
    json!({"invoice_id": invoice, "amount_cents": 1250})
}

/// The capture contract; its probe asks the provider by invoice.
fn contract(
    provider: &Arc<FakePaymentProvider>,
) -> Result<EffectContract, Box<dyn std::error::Error>> {
    let provider = Arc::clone(provider);
    Ok(effect_test_support::contracts::capture_payment()
        .outcome_probe(move |args, _key| {
            let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
            let found = provider
                .lookup_by_invoice(invoice)
                .map_err(|e| e.to_string())?;
            Ok(match found.first() {
                Some(capture) => OutcomeProbeResult::committed(
                    serde_json::to_value(capture).map_err(|e| e.to_string())?,
                ),
                None => OutcomeProbeResult::not_committed(),
            })
        })
        .build()?)
}

fn handler(
    provider: &Arc<FakePaymentProvider>,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
    let provider = Arc::clone(provider);
    move |args, ctx| {
        let invoice = args["invoice_id"].as_str().unwrap_or_default();
        let capture = provider.capture(invoice, 1250, ctx.provider_key())?;
        serde_json::to_value(capture).map_err(HandlerError::from_error)
    }
}

fn audit() -> Audit {
    Audit::new(
        "restart test",
        "the callers have stopped and the provider shows no capture",
        "provider records",
    )
}
