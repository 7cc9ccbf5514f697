//! A worker host's process: caller threads executing captures through the
//! library on a `PostgresLedger` reached at the database's stable address,
//! and a `RecoveryWorker` finishing what callers (of any host) left behind.
//! `--settle` runs recovery alone until nothing is left unsettled.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Args;
use effect_core::{
    Budget, Clock, EffectContract, EffectLedger, EffectRecord, EffectStatus, ListQuery,
    OutcomeProbeResult, SystemClock,
};
use effect_exec::{EffectExecutor, ExecutorOptions, HandlerContext, HandlerError, RecoveryWorker};
use effect_ledger_postgres::{PostgresLedger, PostgresOptions, SslMode};
use serde_json::{Value, json};

use crate::history::{Event, Kind, Recorder};
use crate::provider::{Fault, Provider};

/// Captures each customer's budget allows. Most customers have one invoice;
/// one in ten has five (see [`customer_of`]), so a few calls are refused by
/// the budget, and end `rejected` with a `budget_exceeded` event: refused,
/// never sent.
pub(crate) const BUDGET: u64 = 3;
/// New invoice numbers per second of the run: callers work on the ones
/// around the current time, so every host contends for the same ones.
const INVOICES_PER_SECOND: u64 = 12;

/// Arguments of `effect-multihost worker`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// The ledger's URL (the database's stable address).
    #[arg(long)]
    url: String,
    #[arg(long)]
    schema: String,
    /// The provider file.
    #[arg(long)]
    provider: PathBuf,
    /// Where this process writes its history.
    #[arg(long)]
    dir: PathBuf,
    /// The worker host's name.
    #[arg(long)]
    name: String,
    #[arg(long)]
    seed: u64,
    /// Caller threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The callers stop once this file exists.
    #[arg(long)]
    stop_file: PathBuf,
    /// Holds this host's clock offset in milliseconds (re-read every 100 ms).
    #[arg(long)]
    clock_file: Option<PathBuf>,
    /// The run's start, in milliseconds since the epoch (the invoice numbers'
    /// origin).
    #[arg(long)]
    epoch_ms: u64,
    /// Dispatch lease, milliseconds.
    #[arg(long, default_value_t = 3000)]
    lease_ms: u64,
    /// Provider faults per thousand calls (half before, half after the commit).
    #[arg(long, default_value_t = 60)]
    provider_faults: u64,
    /// Recover until nothing is unsettled, then exit (no callers).
    #[arg(long)]
    settle: bool,
}

/// The worker's clock: the machine's, shifted by an offset the harness sets.
#[derive(Debug)]
struct OffsetClock {
    offset_ms: Arc<AtomicI64>,
}

impl Clock for OffsetClock {
    fn now(&self) -> SystemTime {
        let now = SystemClock.now();
        let offset = self.offset_ms.load(Ordering::SeqCst);
        let shift = Duration::from_millis(offset.unsigned_abs());
        if offset >= 0 {
            now + shift
        } else {
            now - shift
        }
    }
}

/// `effect-multihost worker`.
pub(crate) fn run(args: &WorkerArgs) -> anyhow::Result<()> {
    let provider = Arc::new(Provider::open(&args.provider)?);
    let options = PostgresOptions::default()
        .schema(args.schema.clone())
        .pool_size(u32::try_from(args.threads)? + 3)
        .connect_timeout(Duration::from_secs(3))
        .ssl_mode(SslMode::Disable);
    // The server may be down or cut off when this process starts.
    let ledger = connect(&args.url, &options)?;
    let timelines = ledger.clone();
    let ledger: Arc<dyn EffectLedger> = Arc::new(ledger);
    let offset_ms = Arc::new(AtomicI64::new(0));
    if let Some(path) = &args.clock_file {
        follow_offset(path.clone(), Arc::clone(&offset_ms));
    }
    let clock = Arc::new(OffsetClock { offset_ms });
    let executor = EffectExecutor::with_clock(
        Arc::clone(&ledger),
        ExecutorOptions::default().dispatch_lease(Duration::from_millis(args.lease_ms)),
        clock,
    );
    let faults = Arc::new(Mutex::new(fastrand::Rng::with_seed(args.seed)));
    let handler = capture_handler(
        Arc::clone(&provider),
        args.name.clone(),
        faults,
        args.provider_faults,
    );
    let contract = contract(Arc::clone(&provider))?;
    let recovery = RecoveryWorker::new(executor.clone())
        .register(contract.clone(), {
            let handler = handler.clone();
            move |a: Value, c: HandlerContext| handler(a, c)
        })?
        // A prepared operation is its caller's for a while first: a longer
        // age keeps the worker from racing live callers.
        .min_age(Duration::from_secs(20));
    if args.settle {
        return settle(&recovery, ledger.as_ref());
    }
    let recovering = recovery.spawn(Duration::from_millis(700));
    let recorder = Arc::new(Recorder::create(&args.dir.join(format!(
        "history-{}-{}.jsonl",
        args.name,
        std::process::id()
    )))?);
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let threads: Vec<_> = (0..args.threads)
        .map(|t| {
            let caller = Caller {
                seen: Arc::clone(&seen),
                executor: executor.clone(),
                contract: contract.clone(),
                recorder: Arc::clone(&recorder),
                prefix: format!("{}-{}-{t}", args.name, std::process::id()),
                rng: fastrand::Rng::with_seed(args.seed.wrapping_mul(31).wrapping_add(t as u64)),
                epoch_ms: args.epoch_ms,
                stop_file: args.stop_file.clone(),
            };
            let handler = handler.clone();
            thread::spawn(move || caller.run(handler))
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("a caller thread panicked"))??;
    }
    recovering.stop();
    println!(
        "{}",
        json!({
            "server_timeline": timelines.server_timeline(),
            "timeline_changes": timelines.timeline_changes(),
            "stale_servers_refused": timelines.stale_servers_refused(),
        })
    );
    Ok(())
}

/// The capture contract: operation id and provider key from the invoice,
/// an outcome probe that looks the key up at the provider, stored intent
/// for the recovery workers, and a budget of captures per customer.
pub(crate) fn contract(provider: Arc<Provider>) -> anyhow::Result<EffectContract> {
    let contract = EffectContract::builder("capture_payment", |args| {
        let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
        Ok(format!("invoice:{invoice}:capture"))
    })
    .provider_idempotency_key(|args| {
        Ok(args["invoice_id"]
            .as_str()
            .map(|invoice| format!("capture:{invoice}")))
    })
    .outcome_probe(move |args, key| {
        let key = key.ok_or("no provider key")?;
        let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
        match provider.lookup(key, invoice) {
            Ok(Some(output)) => Ok(OutcomeProbeResult::committed(output)),
            Ok(None) => Ok(OutcomeProbeResult::not_committed()),
            Err(err) => Err(format!("{err:#}").into()),
        }
    })
    .store_intent(true)
    .budget(
        Budget::total("captures")
            .scope(|args| Ok(args["customer"].as_str().unwrap_or_default().to_owned()))
            .max_count(BUDGET),
    )
    .build()?;
    Ok(contract)
}

type Handler = Arc<dyn Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync>;

fn capture_handler(
    provider: Arc<Provider>,
    worker: String,
    faults: Arc<Mutex<fastrand::Rng>>,
    permille: u64,
) -> Handler {
    Arc::new(move |args: Value, ctx: HandlerContext| {
        let fault = {
            let mut rng = faults.lock().unwrap_or_else(PoisonError::into_inner);
            match rng.u64(0..1000) {
                n if n < permille / 2 => Fault::BeforeCommit,
                n if n < permille => Fault::AfterCommit,
                _ => Fault::None,
            }
        };
        let key = ctx
            .provider_key()
            .ok_or_else(|| HandlerError::not_sent("no provider key"))?;
        let invoice = args["invoice_id"].as_str().unwrap_or_default();
        match provider.capture(invoice, key, &worker, fault) {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(no_answer)) => Err(HandlerError::unknown(no_answer.to_string())),
            Err(err) => Err(HandlerError::unknown(format!("{err:#}"))),
        }
    })
}

struct Caller {
    /// The operations this process saw confirmed: the ledger answering
    /// otherwise later went back in time.
    seen: Arc<Mutex<HashSet<String>>>,
    executor: EffectExecutor,
    contract: EffectContract,
    recorder: Arc<Recorder>,
    prefix: String,
    rng: fastrand::Rng,
    epoch_ms: u64,
    stop_file: PathBuf,
}

impl Caller {
    fn run(mut self, handler: Handler) -> anyhow::Result<()> {
        let mut n = 0_u64;
        while !self.stop_file.exists() {
            let elapsed = wall_ms().saturating_sub(self.epoch_ms);
            let number = elapsed * INVOICES_PER_SECOND / 1000 + self.rng.u64(0..8);
            let invoice = format!("INV-{number:07}");
            let customer = customer_of(number);
            let op = format!("invoice:{invoice}:capture");
            let call = format!("{}-{n}", self.prefix);
            n += 1;
            let event = |kind, output, detail| Event {
                call: call.clone(),
                op: op.clone(),
                kind,
                output,
                detail,
            };
            // Only a confirmation seen before this call began counts: one
            // another thread saw meanwhile may be this very call's.
            let seen_before = self.seen().contains(&op);
            self.recorder.record(&event(Kind::Invoke, None, None))?;
            let args = json!({"invoice_id": invoice, "customer": customer});
            let handler = Arc::clone(&handler);
            let result = self
                .executor
                .execute(&self.contract, &args, move |a, c| handler(a, c));
            let regressed = match &result {
                Ok(r) => !(r.status == EffectStatus::Confirmed && r.duplicate_suppressed),
                Err(err) => err.is_budget_exceeded(),
            } && seen_before;
            let regressed = regressed.then(|| REGRESSED.to_owned());
            let completed = match result {
                Ok(r) if r.status == EffectStatus::Confirmed => {
                    self.seen().insert(op.clone());
                    event(Kind::Ok, r.output, regressed)
                }
                Ok(r) if r.status == EffectStatus::Rejected => {
                    event(Kind::Fail, None, regressed.or(Some("rejected".into())))
                }
                Ok(r) => event(
                    Kind::Info,
                    None,
                    regressed.or(Some(format!(
                        "{} (in progress: {})",
                        r.status, r.in_progress
                    ))),
                ),
                Err(err) if err.is_budget_exceeded() => event(
                    Kind::Fail,
                    None,
                    regressed.or(Some("budget exceeded".into())),
                ),
                Err(err) => event(Kind::Info, None, Some(format!("{err}"))),
            };
            self.recorder.record(&completed)?;
        }
        Ok(())
    }
}

impl Caller {
    fn seen(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The detail of a call whose operation this process had seen confirmed
/// and the ledger answered as if it had not (a new dispatch, a refusal).
pub(crate) const REGRESSED: &str = "ledger went back in time";

/// Recovers until no operation is prepared, dispatched or outcome_unknown;
/// prints how many passes it took.
fn settle(recovery: &RecoveryWorker, ledger: &dyn EffectLedger) -> anyhow::Result<()> {
    for pass in 1..=240 {
        let report = recovery.run_once();
        let left = unsettled(ledger);
        if let (Ok(_), Ok(0)) = (&report, &left) {
            println!("{}", json!({"settled_after_passes": pass}));
            return Ok(());
        }
        thread::sleep(Duration::from_millis(500));
    }
    let left = unsettled(ledger)?;
    bail!("{left} operations were still unsettled after 240 recovery passes (2 minutes)")
}

fn unsettled(ledger: &dyn EffectLedger) -> anyhow::Result<usize> {
    let mut total = 0;
    for status in [
        EffectStatus::Prepared,
        EffectStatus::Dispatched,
        EffectStatus::OutcomeUnknown,
    ] {
        total += ledger
            .list(&ListQuery::with_status(status, 1000))
            .context("listing unsettled operations")?
            .iter()
            .filter(|record| !refused_by_budget(record))
            .count();
    }
    Ok(total)
}

/// An operation its budget refused: `rejected` by the refusal, nothing
/// sent (docs/approval.md#budgets).
pub(crate) fn refused_by_budget(record: &EffectRecord) -> bool {
    record.status == EffectStatus::Rejected
        && record
            .evidence
            .get(effect_core::evidence::RESOLUTION)
            .and_then(Value::as_str)
            == Some(effect_core::evidence::RESOLUTION_BUDGET_EXCEEDED)
}

/// The customer an invoice number bills: invoices 0 to 4 of every 50 share
/// one customer, every other invoice has a customer of its own.
pub(crate) fn customer_of(number: u64) -> String {
    if number % 50 < 5 {
        format!("C-{:06}", number / 50)
    } else {
        format!("C-{number:07}")
    }
}

fn connect(url: &str, options: &PostgresOptions) -> anyhow::Result<PostgresLedger> {
    let mut last = None;
    for _ in 0..60 {
        match PostgresLedger::connect(url, options.clone()) {
            Ok(ledger) => return Ok(ledger),
            Err(err) => last = Some(err),
        }
        thread::sleep(Duration::from_millis(500));
    }
    Err(last.map_or_else(|| anyhow::anyhow!("no attempt"), anyhow::Error::from))
        .context("connecting to the ledger")
}

fn follow_offset(path: PathBuf, offset_ms: Arc<AtomicI64>) {
    thread::spawn(move || {
        loop {
            if let Ok(text) = std::fs::read_to_string(&path)
                && let Ok(value) = text.trim().parse::<i64>()
            {
                offset_ms.store(value, Ordering::SeqCst);
            }
            thread::sleep(Duration::from_millis(100));
        }
    });
}

/// Milliseconds since the epoch on the machine's clock (not the offset one:
/// the invoice numbers are the run's, whatever this host believes).
pub(crate) fn wall_ms() -> u64 {
    let now = SystemClock.now();
    now.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
