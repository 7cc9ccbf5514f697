//! Certification of a user's contract: the fault matrix run against *your*
//! handler and probe, on your provider (a sandbox, a loopback fake, any
//! endpoint), counted at the provider.
//!
//! A [`Certification`] takes an [`EffectContract`] (with its probe and its
//! declared guarantees), the handler that performs the effect, and a way to
//! count the provider's effects. For each [`CertifyFault`] it runs one
//! operation through an [`EffectExecutor`] on a fresh in-memory ledger,
//! wrapping the handler so that its first dispatch meets the fault; then,
//! as a deployment does after trouble, it lets a held request land, starts a
//! new executor if the worker died, and resumes the operation up to twice.
//! Last it asks the counter how many effects the provider holds for the
//! cell's arguments and the contract's probe what it now says, and judges
//! the cell ([`CertifyCell`]): at most one effect, no blind retry, the
//! probe agreeing with the count, and a declared guaranteed key that never
//! produced two effects.
//!
//! # A conflicting provider
//!
//! [`CertifyFault::ConflictingProvider`] needs one more thing from you: an
//! effect that contradicts the request, made at the provider under the same
//! business identity ([`conflicting`](Certification::conflicting): capture
//! the cell's invoice with another amount, as another client would). The
//! cell plants it, then fails the first request before it is sent. The
//! contract passes when the operation is not confirmed (the effect is not
//! its own), nothing new reaches the provider beside it, and its probe, if
//! it has one, answers `conflict` (the library then quarantines the
//! operation for an operator). Without [`conflicting`](Certification::conflicting)
//! the cell is not run, and the report lists it in
//! [`not_run`](CertificationReport::not_run).
//!
//! # How effects are counted, and the limits
//!
//! The library cannot see inside your provider. It counts through
//! [`count_effects`](Certification::count_effects), a function you write:
//! given a cell's arguments, how many effects the provider holds for them
//! (a sandbox's list endpoint filtered by your reference or metadata, a
//! fake's own count). Count by the business identity in the arguments,
//! never by idempotency key: a provider that ignores keys files a duplicate
//! under the same key, or under none. The certification is as good as that
//! count. Without a counter, cells that show nothing wrong are
//! [`Verdict::Unverified`], not passed: a probe says whether an effect
//! exists, not how many, so a duplicate behind a guaranteed key goes unseen.
//!
//! Each fault runs with its own arguments ([`arguments`](Certification::arguments)
//! is called with the fault) so that the cells do not share an operation or a
//! key at the provider; two faults deriving the same operation id are refused.
//! A crash is simulated in one process (the dead worker's ledger calls fail,
//! a new executor takes over once its lease has passed on the ledger's
//! clock); the provider's side is real. A timeout uses the certification's
//! [`deadline`](Certification::deadline), real time on your handler.
//!
//! ```
//! use std::sync::Arc;
//! use effect_core::EffectContract;
//! use effect_testkit::certify::{Certification, Verdict};
//! use effect_testkit::provider::FakePaymentProvider;
//! use serde_json::json;
//!
//! let provider = Arc::new(FakePaymentProvider::new());
//! let contract = EffectContract::builder("capture_payment", |args| {
//!     Ok(format!("invoice:{}:capture", args["invoice_id"].as_str().ok_or("missing invoice_id")?))
//! })
//! .provider_idempotency_key(|args| Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}"))))
//! .provider_idempotency_guaranteed(true)
//! .build()?;
//! let capture = Arc::clone(&provider);
//! let count = Arc::clone(&provider);
//! let report = Certification::new(contract, move |args, ctx| {
//!     let invoice = args["invoice_id"].as_str().unwrap_or_default();
//!     let charge = capture.capture(invoice, 1250, ctx.provider_key())?;
//!     Ok(json!({"payment_id": charge.payment_id}))
//! })
//! .arguments(|fault| json!({"invoice_id": format!("INV-{fault}")}))
//! .count_effects(move |args| {
//!     Ok(count.lookup_by_invoice(args["invoice_id"].as_str().unwrap_or_default())?.len())
//! })
//! .run()?;
//! assert!(report.certified, "{}", report.to_table());
//! assert!(report.cells.iter().all(|c| c.verdict == Verdict::Pass && c.committed_effects == Some(1)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod fault;
mod report;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use effect_core::{
    BoxError, Clock, EffectContract, EffectLedger, EffectStatus, ManualClock, MemoryLedger,
};
use effect_exec::secrets::{FingerprintKey, Keyring};
use effect_exec::{CallOptions, EffectExecutor, ExecutorOptions, HandlerContext, HandlerError};
use serde_json::Value;

pub use error::CertifyError;
pub use fault::{CertifyFault, CertifyHandler, UnknownCertifyFault};
use fault::{CrashHook, Injector};
use report::Observed;
pub use report::{CertificationReport, CertifyCell, Declared, KeyGuarantee, ProbeAnswer, Verdict};

use crate::scenario::harness::ProcessLedger;
use crate::scenario::{has_blind_retry, scenario_start};

/// The handler deadline of the timeout faults, by default.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(200);

type ArgumentsFn = Arc<dyn Fn(CertifyFault) -> Value + Send + Sync>;
type CounterFn = Arc<dyn Fn(&Value) -> Result<usize, BoxError> + Send + Sync>;
type PlantFn = Arc<dyn Fn(&Value) -> Result<(), BoxError> + Send + Sync>;

/// A user's contract, handler and effect counter, to be run against the
/// faults. See the [module docs](self).
#[derive(Clone)]
pub struct Certification {
    contract: EffectContract,
    handler: CertifyHandler,
    arguments: ArgumentsFn,
    counter: Option<CounterFn>,
    conflicting: Option<PlantFn>,
    on_crash: Option<CrashHook>,
    faults: Vec<CertifyFault>,
    deadline: Duration,
    resumes: usize,
    options: ExecutorOptions,
    keyring: Option<Keyring>,
    fingerprint_key: Option<FingerprintKey>,
}

impl std::fmt::Debug for Certification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certification")
            .field("contract", &self.contract.name())
            .field("counts_effects", &self.counter.is_some())
            .field("plants_conflict", &self.conflicting.is_some())
            .field("faults", &self.faults)
            .field("deadline", &self.deadline)
            .field("resumes", &self.resumes)
            .field(
                "keyring",
                &self.keyring.as_ref().map(Keyring::current_key_id),
            )
            .field("fingerprint_key", &self.fingerprint_key.is_some())
            .finish_non_exhaustive()
    }
}

impl Certification {
    /// A certification of `contract` with `handler`, against every fault,
    /// with empty arguments (set [`arguments`](Self::arguments)) and no
    /// counter (set [`count_effects`](Self::count_effects)).
    pub fn new<H>(contract: EffectContract, handler: H) -> Self
    where
        H: Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static,
    {
        Certification {
            contract,
            handler: Arc::new(handler),
            arguments: Arc::new(|_| Value::Object(serde_json::Map::new())),
            counter: None,
            conflicting: None,
            on_crash: None,
            faults: CertifyFault::ALL.to_vec(),
            deadline: DEFAULT_DEADLINE,
            resumes: 2,
            options: ExecutorOptions::default(),
            keyring: None,
            fingerprint_key: None,
        }
    }

    /// The arguments of each fault's operation. Give each fault its own
    /// business identity (an invoice id with the fault's name in it), so that
    /// the cells do not meet at the provider.
    #[must_use]
    pub fn arguments<F>(mut self, arguments: F) -> Self
    where
        F: Fn(CertifyFault) -> Value + Send + Sync + 'static,
    {
        self.arguments = Arc::new(arguments);
        self
    }

    /// Counts the effects the provider holds for a cell's arguments. See
    /// the [module docs](self#how-effects-are-counted-and-the-limits).
    #[must_use]
    pub fn count_effects<F>(mut self, counter: F) -> Self
    where
        F: Fn(&Value) -> Result<usize, BoxError> + Send + Sync + 'static,
    {
        self.counter = Some(Arc::new(counter));
        self
    }

    /// Makes, at the provider, an effect that contradicts a cell's
    /// arguments under the same business identity (the same invoice with
    /// another amount), as another client would: without the operation's
    /// provider key. [`CertifyFault::ConflictingProvider`] runs only with
    /// one. See the [module docs](self#a-conflicting-provider).
    #[must_use]
    pub fn conflicting<F>(mut self, plant: F) -> Self
    where
        F: Fn(&Value) -> Result<(), BoxError> + Send + Sync + 'static,
    {
        self.conflicting = Some(Arc::new(plant));
        self
    }

    /// Called when [`CertifyFault::CrashAfterCommit`] kills the worker,
    /// right after the provider committed: whatever dies with a worker
    /// process dies here (the CLI kills the MCP server it spawned over
    /// stdio, whose pipes a dead worker would close).
    #[must_use]
    pub fn on_crash<F>(mut self, hook: F) -> Self
    where
        F: Fn() + Send + Sync + 'static,
    {
        self.on_crash = Some(Arc::new(hook));
        self
    }

    /// The faults to run, in this order (default [`CertifyFault::ALL`];
    /// [`CertifyFault::ConflictingProvider`] is not run, and is listed in
    /// the report's [`not_run`](CertificationReport::not_run), without
    /// [`conflicting`](Self::conflicting)).
    #[must_use]
    pub fn faults(mut self, faults: impl IntoIterator<Item = CertifyFault>) -> Self {
        self.faults = faults.into_iter().collect();
        self
    }

    /// The caller's deadline in the timeout faults (default
    /// [`DEFAULT_DEADLINE`]). The held request waits for the caller to give
    /// up, not for a duration, so this only bounds how long each such cell
    /// takes.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// How many times an unsettled operation is resumed (default 2).
    #[must_use]
    pub fn resumes(mut self, resumes: usize) -> Self {
        self.resumes = resumes;
        self
    }

    /// The executor options (lease length, ...).
    #[must_use]
    pub fn executor_options(mut self, options: ExecutorOptions) -> Self {
        self.options = options;
        self
    }

    /// Seals stored intent with `keyring`, as the deployment's executor
    /// does (`EffectExecutor::with_keyring`): a contract that stores its
    /// intent and has secret arguments is certified only with one.
    #[must_use]
    pub fn keyring(mut self, keyring: Keyring) -> Self {
        self.keyring = Some(keyring);
        self
    }

    /// Fingerprints secret arguments with `key`, as the deployment's
    /// executor does (`EffectExecutor::with_fingerprint_key`).
    #[must_use]
    pub fn fingerprint_key(mut self, key: FingerprintKey) -> Self {
        self.fingerprint_key = Some(key);
        self
    }

    /// An executor on `ledger` with this certification's options and keys.
    fn executor(&self, ledger: Arc<dyn EffectLedger>, clock: &Arc<ManualClock>) -> EffectExecutor {
        let mut executor = EffectExecutor::with_clock(ledger, self.options.clone(), clock.clone());
        if let Some(keyring) = &self.keyring {
            executor = executor.with_keyring(keyring.clone());
        }
        if let Some(key) = &self.fingerprint_key {
            executor = executor.with_fingerprint_key(key.clone());
        }
        executor
    }

    /// Runs every fault and judges each cell.
    ///
    /// # Errors
    ///
    /// [`CertifyError`] when a cell could not run: the contract cannot derive
    /// an operation id from a fault's arguments, two faults share one, the
    /// executor or the ledger failed (not an uncertain outcome: that is a
    /// cell), the counter failed, the conflicting effect could not be made
    /// or was not counted, or a held request never finished.
    pub fn run(&self) -> Result<CertificationReport, CertifyError> {
        let (faults, not_run): (Vec<CertifyFault>, Vec<CertifyFault>) =
            self.faults.iter().partition(|&&fault| {
                fault != CertifyFault::ConflictingProvider || self.conflicting.is_some()
            });
        let mut seen: Vec<(CertifyFault, String)> = Vec::new();
        for &fault in &faults {
            let id = self.operation_id(fault, &(self.arguments)(fault))?;
            if let Some((other, _)) = seen.iter().find(|(_, seen)| *seen == id) {
                return Err(CertifyError::SharedOperation {
                    fault,
                    other: *other,
                    operation_id: id,
                });
            }
            seen.push((fault, id));
        }
        let declared = self.declared()?;
        let cells = faults
            .iter()
            .map(|&fault| {
                self.run_cell(fault)
                    .map(|o| CertifyCell::judge(o, declared))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CertificationReport::new(
            self.contract.name().to_owned(),
            declared,
            self.counter.is_some(),
            cells,
            not_run,
        ))
    }

    fn declared(&self) -> Result<Declared, CertifyError> {
        let fault = self.faults.first().copied().unwrap_or(CertifyFault::None);
        let key = self
            .contract
            .provider_idempotency_key(&(self.arguments)(fault))
            .map_err(|cause| CertifyError::Contract { fault, cause })?;
        Ok(Declared {
            provider_key: key.is_some(),
            key_guaranteed: self.contract.provider_idempotency_guaranteed(),
            probe: self.contract.has_probe(),
        })
    }

    fn operation_id(&self, fault: CertifyFault, arguments: &Value) -> Result<String, CertifyError> {
        self.contract
            .operation_id(arguments)
            .map_err(|cause| CertifyError::Contract { fault, cause })
    }

    fn run_cell(&self, fault: CertifyFault) -> Result<Observed, CertifyError> {
        let arguments = (self.arguments)(fault);
        let operation_id = self.operation_id(fault, &arguments)?;
        let ledger_error = |cause| CertifyError::Ledger { fault, cause };
        let exec_error = |cause| CertifyError::Execution { fault, cause };
        // What the provider already holds for these arguments: a cell whose
        // operation the provider has seen (an earlier run with the same
        // arguments) dispatches nothing new to fault, and must not pass.
        let before = self.count(fault, &arguments)?;
        let conflicting = self.plant(fault, &arguments, before)?;
        let clock = Arc::new(ManualClock::new(scenario_start()));
        let store: Arc<dyn EffectLedger> =
            Arc::new(MemoryLedger::with_clock(clock.clone() as Arc<dyn Clock>));
        let injector = Arc::new(Injector::new(
            Arc::clone(&self.handler),
            fault,
            self.on_crash.clone(),
        ));
        let worker_ledger: Arc<dyn EffectLedger> = Arc::new(ProcessLedger {
            inner: Arc::clone(&store),
            crashed: Arc::clone(&injector.crashed),
        });
        let worker = self.executor(worker_ledger, &clock);
        let first_call = if fault.needs_deadline() {
            CallOptions::deadline(self.deadline)
        } else {
            CallOptions::default()
        };
        let first = worker.execute_with(&self.contract, &arguments, first_call, handler(&injector));
        // The caller has returned: a held request may land now.
        injector.late.open();
        let crashed = injector.crashed.load(Ordering::SeqCst);
        match first {
            Ok(_) => {}
            // The dead worker's last write never reached the ledger.
            Err(_) if crashed => {}
            Err(source) => return Err(exec_error(source)),
        }
        let idle = |injector: &Injector| {
            if injector.wait_idle() {
                Ok(())
            } else {
                Err(CertifyError::Harness {
                    fault,
                    message: "a request to the provider never finished".to_owned(),
                })
            }
        };
        idle(&injector)?;
        let executor = if crashed {
            // A new process, after the dead one's lease has run out.
            clock.advance(self.options.dispatch_lease + Duration::from_secs(1));
            self.executor(Arc::clone(&store), &clock)
        } else {
            worker
        };
        for _ in 0..self.resumes {
            let status = status_of(&store, &operation_id).map_err(ledger_error)?;
            if status.is_none_or(EffectStatus::is_terminal) {
                break;
            }
            executor
                .execute_with(
                    &self.contract,
                    &arguments,
                    CallOptions::default(),
                    handler(&injector),
                )
                .map_err(exec_error)?;
            idle(&injector)?;
        }
        let record = store
            .get(&operation_id)
            .map_err(ledger_error)?
            .ok_or_else(|| CertifyError::Harness {
                fault,
                message: format!("operation {operation_id:?} was never recorded"),
            })?;
        let events = store.events(&operation_id).map_err(ledger_error)?;
        // The cell's own effects: what the provider holds beyond the
        // conflicting effect it was given.
        let committed = self
            .count(fault, &arguments)?
            .map(|n| n.saturating_sub(conflicting.unwrap_or(0)));
        Ok(Observed {
            fault,
            operation_id,
            fault_fired: injector.fired(),
            status: record.status,
            attempts: record.attempts,
            handler_calls: injector.calls(),
            committed,
            conflicting,
            before: before.unwrap_or(0),
            blind_retry: has_blind_retry(&events),
            probe_after: self.probe_after(fault, &arguments)?,
        })
    }

    /// The effects the provider holds for `arguments`, by the user's
    /// counter; `None` without one.
    fn count(&self, fault: CertifyFault, arguments: &Value) -> Result<Option<usize>, CertifyError> {
        self.counter
            .as_ref()
            .map(|count| count(arguments).map_err(|cause| CertifyError::Counter { fault, cause }))
            .transpose()
    }

    /// For [`CertifyFault::ConflictingProvider`], makes the conflicting
    /// effect and counts it (`None` without a counter, or for another fault).
    fn plant(
        &self,
        fault: CertifyFault,
        arguments: &Value,
        before: Option<usize>,
    ) -> Result<Option<usize>, CertifyError> {
        let Some(plant) = self
            .conflicting
            .as_ref()
            .filter(|_| fault == CertifyFault::ConflictingProvider)
        else {
            return Ok(None);
        };
        plant(arguments).map_err(|cause| CertifyError::Conflicting { fault, cause })?;
        let Some(after) = self.count(fault, arguments)? else {
            return Ok(None);
        };
        let planted = after.saturating_sub(before.unwrap_or(0));
        if planted == 0 {
            return Err(CertifyError::Harness {
                fault,
                message: "the conflicting effect is not counted: after `conflicting` ran, the counter finds nothing more for the cell's arguments; make it under the same business identity (the same invoice)".to_owned(),
            });
        }
        Ok(Some(planted))
    }

    /// The contract's (sync) probe, asked once more.
    fn probe_after(
        &self,
        fault: CertifyFault,
        arguments: &Value,
    ) -> Result<Option<ProbeAnswer>, CertifyError> {
        let Some(probe) = self.contract.outcome_probe() else {
            return Ok(None);
        };
        let key = self
            .contract
            .provider_idempotency_key(arguments)
            .map_err(|cause| CertifyError::Contract { fault, cause })?;
        Ok(Some(match probe(arguments, key.as_deref()) {
            Ok(answer) => ProbeAnswer::of(answer.status),
            Err(_) => ProbeAnswer::Error,
        }))
    }
}

fn status_of(
    store: &Arc<dyn EffectLedger>,
    operation_id: &str,
) -> Result<Option<EffectStatus>, effect_core::LedgerError> {
    Ok(store.get(operation_id)?.map(|record| record.status))
}

/// The executor's handler: one dispatch through the injector.
fn handler(
    injector: &Arc<Injector>,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
    let injector = Arc::clone(injector);
    move |arguments, context| injector.call(arguments, context)
}
