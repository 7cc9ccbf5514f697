//! Scenarios: a provider, a fault schedule and a contract variant, run through
//! the recovery executor, counted at the provider.
//!
//! A [`Scenario`] runs one operation through an
//! [`effect_exec::EffectExecutor`] on a fresh ledger, with the
//! provider's calls going through a [`FaultSchedule`]. Then it does what a
//! real deployment does after trouble:
//!
//! 1. it waits until every request still in flight has landed (a late commit);
//! 2. if the worker "died" ([`PerformFault::Crash`]), it starts a new executor
//!    on the same ledger and moves the ledger's clock past the dispatch lease;
//! 3. it *resumes* the operation (executes it again, as an agent runtime does
//!    when it re-runs a waiting step) up to [`Scenario::resumes`] times while
//!    the operation is not confirmed or rejected. A resume goes through
//!    reconciliation; it is never a blind dispatch.
//!
//! The [`ScenarioReport`] counts what the provider committed, checks the
//! library's guarantee, and puts a naive baseline beside it: the same provider
//! and faults driven by plain retry-on-error without the ledger.
//!
//! To test your own integration, implement [`ScenarioProvider`] for a fake of
//! your provider (perform, look up, count):
//!
//! ```
//! use std::sync::Mutex;
//! use effect_core::BoxError;
//! use effect_testkit::scenario::{
//!     ContractVariant, FaultSchedule, Lookup, PerformFault, Scenario, ScenarioProvider,
//! };
//! use serde_json::{json, Value};
//!
//! /// A fake email API: sends are recorded under the caller's key.
//! #[derive(Debug, Default)]
//! struct FakeMailer {
//!     sent: Mutex<Vec<(Option<String>, Value)>>,
//! }
//!
//! impl ScenarioProvider for FakeMailer {
//!     fn perform(&self, args: &Value, key: Option<&str>) -> Result<Value, BoxError> {
//!         let mut sent = self.sent.lock().map_err(|_| "poisoned")?;
//!         if let Some(earlier) = sent.iter().position(|(k, _)| k.is_some() && k.as_deref() == key) {
//!             return Ok(json!({"message_id": format!("msg-{}", earlier + 1)}));
//!         }
//!         sent.push((key.map(str::to_owned), args.clone()));
//!         Ok(json!({"message_id": format!("msg-{}", sent.len())}))
//!     }
//!
//!     fn look_up(&self, _args: &Value, key: Option<&str>) -> Result<Lookup, BoxError> {
//!         let sent = self.sent.lock().map_err(|_| "poisoned")?;
//!         Ok(match sent.iter().position(|(k, _)| k.is_some() && k.as_deref() == key) {
//!             Some(i) => Lookup::Committed {
//!                 output: json!({"message_id": format!("msg-{}", i + 1)}),
//!                 provider_operation_id: Some(format!("msg-{}", i + 1)),
//!             },
//!             None => Lookup::NotCommitted,
//!         })
//!     }
//!
//!     fn committed_effects(&self) -> Result<usize, BoxError> {
//!         Ok(self.sent.lock().map_err(|_| "poisoned")?.len())
//!     }
//! }
//!
//! let report = Scenario::new("welcome-email-ack-lost", FakeMailer::default)
//!     .arguments(json!({"to": "ada@example.com", "template": "welcome"}))
//!     .operation_id(|args| Ok(format!("email:{}:welcome", args["to"].as_str().ok_or("missing to")?)))
//!     .provider_key(|args| Ok(args["to"].as_str().map(|to| format!("welcome:{to}"))))
//!     .contract(ContractVariant::ProbeOnly)
//!     .faults(FaultSchedule::new().on_perform(1, PerformFault::LoseAck))
//!     .expect_committed(1)
//!     .run()?;
//! assert!(report.passed);
//! assert_eq!(report.committed_effect_count, 1);
//! // Without the ledger, retrying on the lost acknowledgement sends it twice.
//! assert_eq!(report.naive_baseline.map(|n| n.committed_effect_count), Some(2));
//! # Ok::<(), effect_testkit::scenario::ScenarioError>(())
//! ```

pub mod crash;
mod error;
pub(crate) mod harness;
mod naive;
pub(crate) mod provider;
mod report;
mod schedule;
mod variant;

use std::fmt;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use effect_core::{
    CallbackError, Clock, EffectContract, EffectLedger, EffectRecord, EffectResult, EffectStatus,
    LedgerError, LedgerEvent, ManualClock, MemoryLedger, OutcomeProbeResult,
};
use effect_exec::{
    CallOptions, EffectExecutor, ExecError, ExecutorOptions, HandlerContext, HandlerError,
};
use serde_json::{Value, json};

pub use error::ScenarioError;
use harness::{Faulted, ProcessLedger};
pub use provider::{Lookup, ScenarioProvider};
pub use report::{GuaranteeCheck, NaiveReport, ScenarioReport, has_blind_retry};
pub use schedule::{
    CONCURRENT_CALLERS, CONFLICTING_LOOKUPS, FaultPoint, FaultSchedule, LATE_COMMIT_DEADLINE,
    LookupFault, PROBE_FAILURES, PerformFault, UnknownFaultPoint,
};
pub use variant::ContractVariant;

/// Builds a fresh provider for each run (the ledger run and the naive baseline).
pub type ProviderFactory = Arc<dyn Fn() -> Arc<dyn ScenarioProvider> + Send + Sync>;
/// Builds a fresh, empty ledger on the scenario's clock.
pub type LedgerFactory =
    Arc<dyn Fn(Arc<dyn Clock>) -> Result<Arc<dyn EffectLedger>, LedgerError> + Send + Sync>;
type IdFn = Arc<dyn Fn(&Value) -> Result<String, CallbackError> + Send + Sync>;
type KeyFn = Arc<dyn Fn(&Value) -> Result<Option<String>, CallbackError> + Send + Sync>;

/// Where the scenario clock starts: 2026-01-01T00:00:00Z. The clock moves only
/// when a crashed worker's lease has to expire.
pub const SCENARIO_START: Duration = Duration::from_secs(1_767_225_600);

/// A scenario: see the [module docs](self). Built with chained setters, run with [`run`](Self::run).
#[derive(Clone)]
pub struct Scenario {
    name: String,
    contract_name: String,
    provider: ProviderFactory,
    arguments: Value,
    operation_id: IdFn,
    provider_key: KeyFn,
    variant: ContractVariant,
    schedule: FaultSchedule,
    expected_committed: Option<usize>,
    expected_status: Option<EffectStatus>,
    resumes: usize,
    naive_attempts: Option<usize>,
    ledger: LedgerFactory,
    options: ExecutorOptions,
}

impl fmt::Debug for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scenario")
            .field("name", &self.name)
            .field("contract_name", &self.contract_name)
            .field("arguments", &self.arguments)
            .field("variant", &self.variant)
            .field("schedule", &self.schedule)
            .field("expected_committed", &self.expected_committed)
            .field("expected_status", &self.expected_status)
            .field("resumes", &self.resumes)
            .field("naive_attempts", &self.naive_attempts)
            .finish_non_exhaustive()
    }
}

impl Scenario {
    /// A scenario named `name` over providers made by `provider`, with the
    /// defaults: arguments `{}`, operation id `<name>:operation`, provider key
    /// `<name>:key`, contract [`ContractVariant::Both`], no faults, expecting a
    /// confirmed operation with exactly one effect, 2 resumes, a naive baseline
    /// of 3 attempts, a [`MemoryLedger`].
    pub fn new<P, F>(name: impl Into<String>, provider: F) -> Self
    where
        P: ScenarioProvider + 'static,
        F: Fn() -> P + Send + Sync + 'static,
    {
        let name = name.into();
        let id = format!("{name}:operation");
        let key = format!("{name}:key");
        Scenario {
            contract_name: name.clone(),
            name,
            provider: Arc::new(move || Arc::new(provider()) as Arc<dyn ScenarioProvider>),
            arguments: json!({}),
            operation_id: Arc::new(move |_| Ok(id.clone())),
            provider_key: Arc::new(move |_| Ok(Some(key.clone()))),
            variant: ContractVariant::Both,
            schedule: FaultSchedule::new(),
            expected_committed: Some(1),
            expected_status: Some(EffectStatus::Confirmed),
            resumes: 2,
            naive_attempts: Some(3),
            ledger: Arc::new(|clock| {
                Ok(Arc::new(MemoryLedger::with_clock(clock)) as Arc<dyn EffectLedger>)
            }),
            options: ExecutorOptions::default(),
        }
    }

    /// The built-in payment scenario of a fault point: a
    /// [`FakePaymentProvider`](crate::provider::FakePaymentProvider) capturing
    /// invoice `INV-1042` under contract `capture_payment` (operation id
    /// `invoice:INV-1042:capture`, key `capture:INV-1042`), with the fault
    /// point's schedule.
    /// With [`FaultPoint::ConflictingProvider`] and a probe, it expects the
    /// operation `quarantined`.
    pub fn payment(fault: FaultPoint, variant: ContractVariant) -> Self {
        let scenario = Scenario::new(fault.as_str(), crate::provider::FakePaymentProvider::new)
            .contract_name("capture_payment")
            .arguments(json!({"invoice_id": "INV-1042", "amount_cents": 1250}))
            .operation_id(|args| {
                let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
                Ok(format!("invoice:{invoice}:capture"))
            })
            .provider_key(|args| Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}"))))
            .contract(variant)
            .faults(fault.schedule());
        if fault == FaultPoint::ConflictingProvider && variant.has_probe() {
            // The probe finds a conflicting capture: an operator decides.
            scenario.expect_status(EffectStatus::Quarantined)
        } else {
            scenario
        }
    }

    /// The scenario's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The operation's arguments.
    pub(crate) fn args(&self) -> &Value {
        &self.arguments
    }

    /// How many resumes an unsettled operation gets.
    pub(crate) fn resume_count(&self) -> usize {
        self.resumes
    }

    /// The contract name (default: the scenario name).
    #[must_use]
    pub fn contract_name(mut self, name: impl Into<String>) -> Self {
        self.contract_name = name.into();
        self
    }

    /// The operation's arguments.
    #[must_use]
    pub fn arguments(mut self, arguments: Value) -> Self {
        self.arguments = arguments;
        self
    }

    /// Derives the operation id from the arguments.
    #[must_use]
    pub fn operation_id<F>(mut self, id: F) -> Self
    where
        F: Fn(&Value) -> Result<String, CallbackError> + Send + Sync + 'static,
    {
        self.operation_id = Arc::new(id);
        self
    }

    /// Derives the provider idempotency key from the arguments (used by every
    /// variant but [`ContractVariant::Neither`]).
    #[must_use]
    pub fn provider_key<F>(mut self, key: F) -> Self
    where
        F: Fn(&Value) -> Result<Option<String>, CallbackError> + Send + Sync + 'static,
    {
        self.provider_key = Arc::new(key);
        self
    }

    /// The contract variant.
    #[must_use]
    pub fn contract(mut self, variant: ContractVariant) -> Self {
        self.variant = variant;
        self
    }

    /// The fault schedule.
    #[must_use]
    pub fn faults(mut self, schedule: FaultSchedule) -> Self {
        self.schedule = schedule;
        self
    }

    /// Expects exactly `count` committed effects.
    #[must_use]
    pub fn expect_committed(mut self, count: usize) -> Self {
        self.expected_committed = Some(count);
        self
    }

    /// Expects the operation to end in `status`.
    #[must_use]
    pub fn expect_status(mut self, status: EffectStatus) -> Self {
        self.expected_status = Some(status);
        self
    }

    /// Expects nothing beyond the library's guarantee: `passed` then means
    /// "at most one effect and no blind retry" (where the guarantee is claimed).
    #[must_use]
    pub fn expect_only_the_guarantee(mut self) -> Self {
        self.expected_committed = None;
        self.expected_status = None;
        self
    }

    /// How many times an unsettled operation is resumed (default 2).
    #[must_use]
    pub fn resumes(mut self, resumes: usize) -> Self {
        self.resumes = resumes;
        self
    }

    /// The naive baseline's attempts per caller (default 3); `None` skips it.
    #[must_use]
    pub fn naive_baseline(mut self, attempts: Option<usize>) -> Self {
        self.naive_attempts = attempts.map(|a| a.max(1));
        self
    }

    /// The ledger to run on; it must honour the clock it is given (leases expire by it).
    #[must_use]
    pub fn ledger<F>(mut self, ledger: F) -> Self
    where
        F: Fn(Arc<dyn Clock>) -> Result<Arc<dyn EffectLedger>, LedgerError> + Send + Sync + 'static,
    {
        self.ledger = Arc::new(ledger);
        self
    }

    /// The executor options (lease length, ...).
    #[must_use]
    pub fn executor_options(mut self, options: ExecutorOptions) -> Self {
        self.options = options;
        self
    }

    /// Runs the scenario through the executor, and the naive baseline unless
    /// disabled.
    ///
    /// # Errors
    ///
    /// [`ScenarioError`] when the scenario could not run: an invalid contract,
    /// a failing ledger, a provider whose effects cannot be counted.
    pub fn run(&self) -> Result<ScenarioReport, ScenarioError> {
        let mut report = self.run_with_ledger()?;
        if self.naive_attempts.is_some() {
            report.naive_baseline = Some(self.run_naive()?);
        }
        Ok(report)
    }

    /// Runs only the naive baseline: the same provider and faults, plain
    /// retry-on-error, no ledger, no idempotency key.
    ///
    /// # Errors
    ///
    /// The provider's effects could not be counted.
    pub fn run_naive(&self) -> Result<NaiveReport, ScenarioError> {
        naive::run(
            (self.provider)(),
            self.schedule.clone(),
            &self.arguments,
            self.naive_attempts.unwrap_or(3),
        )
        .map_err(|message| self.harness_error(message))
    }

    fn run_with_ledger(&self) -> Result<ScenarioReport, ScenarioError> {
        let clock = Arc::new(ManualClock::new(UNIX_EPOCH + SCENARIO_START));
        let store =
            (self.ledger)(clock.clone() as Arc<dyn Clock>).map_err(|e| self.ledger_error(e))?;
        let faulted = Arc::new(Faulted::new((self.provider)(), self.schedule.clone()));
        faulted.open_gates_nobody_will_open();
        let contract = self.build_contract(&faulted)?;
        let operation_id = contract.operation_id(&self.arguments).map_err(|source| {
            self.exec_error(ExecError::Contract {
                contract: self.contract_name.clone(),
                source,
            })
        })?;
        let options = self
            .schedule
            .handler_deadline()
            .map_or_else(CallOptions::default, CallOptions::deadline);
        let worker_ledger: Arc<dyn EffectLedger> = Arc::new(ProcessLedger {
            inner: Arc::clone(&store),
            crashed: Arc::clone(&faulted.crashed),
        });
        let worker = EffectExecutor::with_clock(worker_ledger, self.options.clone(), clock.clone());
        let results = self.run_callers(&worker, &contract, &faulted, options)?;
        // Every caller has returned: late requests may land now.
        faulted.late.open();
        let crashed = faulted.crashed.load(std::sync::atomic::Ordering::SeqCst);
        let mut executions = results.len();
        let in_progress_callers = results
            .iter()
            .filter(|r| matches!(r, Ok(result) if result.in_progress))
            .count();
        for result in results {
            match result {
                Ok(_) => {}
                // The dead worker's last write never reached the ledger.
                Err(_) if crashed => {}
                Err(source) => return Err(self.exec_error(source)),
            }
        }
        if !faulted.wait_idle() {
            return Err(self.harness_error("a provider request never finished".into()));
        }
        let executor = if crashed {
            // A new process, after the dead one's lease has run out.
            clock.advance(self.options.dispatch_lease + Duration::from_secs(1));
            EffectExecutor::with_clock(Arc::clone(&store), self.options.clone(), clock.clone())
        } else {
            worker
        };
        for _ in 0..self.resumes {
            let status = self.status(&store, &operation_id)?;
            if status.is_terminal() {
                break;
            }
            executor
                .execute_with(&contract, &self.arguments, options, handler(&faulted))
                .map_err(|source| self.exec_error(source))?;
            executions += 1;
            if !faulted.wait_idle() {
                return Err(self.harness_error("a provider request never finished".into()));
            }
        }
        let record = store
            .get(&operation_id)
            .map_err(|e| self.ledger_error(e))?
            .ok_or_else(|| {
                self.harness_error(format!("operation {operation_id:?} was never recorded"))
            })?;
        let events = store
            .events(&operation_id)
            .map_err(|e| self.ledger_error(e))?;
        let committed = faulted.inner().committed_effects().map_err(|err| {
            self.harness_error(format!("could not count committed effects: {err}"))
        })?;
        Ok(self.report(Observed {
            record,
            events,
            executions,
            in_progress_callers,
            handler_calls: faulted.perform_calls(),
            probe_calls: faulted.look_up_calls(),
            committed,
            claimed: !(self.variant.guaranteed() && self.schedule.ignores_idempotency_keys()),
        }))
    }

    /// The report of what was observed, against this scenario's expectations.
    pub(crate) fn report(&self, observed: Observed) -> ScenarioReport {
        let Observed {
            record,
            events,
            executions,
            in_progress_callers,
            handler_calls,
            probe_calls,
            committed,
            claimed,
        } = observed;
        let guarantee = GuaranteeCheck::check(claimed, committed, &events);
        // Every caller has returned: a record still `dispatched` is a dispatch
        // nobody finalized.
        let in_progress = record.status == EffectStatus::Dispatched;
        let passed = guarantee.kept()
            && !in_progress
            && self.expected_committed.is_none_or(|n| n == committed)
            && self.expected_status.is_none_or(|s| s == record.status);
        ScenarioReport {
            scenario: self.name.clone(),
            contract: self.variant,
            operation_id: record.operation_id.clone(),
            status: record.status,
            confirmed: record.status == EffectStatus::Confirmed,
            in_progress,
            attempts: record.attempts,
            executions,
            in_progress_callers,
            handler_calls,
            probe_calls,
            committed_effect_count: committed,
            expected_committed_effects: self.expected_committed,
            expected_status: self.expected_status,
            duplicate_effect_detected: committed > 1,
            provider_result: record.output,
            event_types: events.into_iter().map(|e| e.event_type).collect(),
            guarantee,
            naive_baseline: None,
            passed,
        }
    }

    /// Runs every caller; with several, the first one's perform is held until
    /// the others have returned.
    fn run_callers(
        &self,
        executor: &EffectExecutor,
        contract: &EffectContract,
        faulted: &Arc<Faulted>,
        options: CallOptions,
    ) -> Result<Vec<Result<EffectResult, ExecError>>, ScenarioError> {
        let call = || executor.execute_with(contract, &self.arguments, options, handler(faulted));
        let callers = self.schedule.callers();
        if callers == 1 {
            return Ok(vec![call()]);
        }
        thread::scope(|scope| {
            let first = scope.spawn(call);
            faulted.gate.wait_entered();
            let others: Vec<_> = (1..callers).map(|_| scope.spawn(call)).collect();
            let mut results = Vec::with_capacity(callers);
            let mut panicked = false;
            let mut rest = Vec::new();
            for other in others {
                match other.join() {
                    Ok(result) => rest.push(result),
                    Err(_) => panicked = true,
                }
            }
            faulted.gate.open();
            match first.join() {
                Ok(result) => results.push(result),
                Err(_) => panicked = true,
            }
            results.extend(rest);
            if panicked {
                Err(self.harness_error("a caller thread panicked".into()))
            } else {
                Ok(results)
            }
        })
    }

    pub(crate) fn build_contract(
        &self,
        faulted: &Arc<Faulted>,
    ) -> Result<EffectContract, ScenarioError> {
        let id = Arc::clone(&self.operation_id);
        let mut builder = EffectContract::builder(self.contract_name.clone(), move |args| id(args));
        if self.variant.has_key() {
            let key = Arc::clone(&self.provider_key);
            builder = builder
                .provider_idempotency_key(move |args| key(args))
                .provider_idempotency_guaranteed(self.variant.guaranteed());
        }
        if self.variant.has_probe() {
            let faulted = Arc::clone(faulted);
            builder = builder.outcome_probe(move |args, key| probe(&faulted, args, key));
        }
        builder.build().map_err(|source| ScenarioError::Contract {
            scenario: self.name.clone(),
            source,
        })
    }

    fn status(
        &self,
        store: &Arc<dyn EffectLedger>,
        operation_id: &str,
    ) -> Result<EffectStatus, ScenarioError> {
        store
            .get(operation_id)
            .map_err(|e| self.ledger_error(e))?
            .map(|record| record.status)
            .ok_or_else(|| {
                self.harness_error(format!("operation {operation_id:?} was never recorded"))
            })
    }

    fn exec_error(&self, source: ExecError) -> ScenarioError {
        ScenarioError::Execution {
            scenario: self.name.clone(),
            source,
        }
    }

    fn ledger_error(&self, source: LedgerError) -> ScenarioError {
        ScenarioError::Ledger {
            scenario: self.name.clone(),
            source,
        }
    }

    fn harness_error(&self, message: String) -> ScenarioError {
        ScenarioError::Harness {
            scenario: self.name.clone(),
            message,
        }
    }
}

/// What a run left behind, to be judged by [`Scenario::report`].
pub(crate) struct Observed {
    pub(crate) record: EffectRecord,
    pub(crate) events: Vec<LedgerEvent>,
    pub(crate) executions: usize,
    pub(crate) in_progress_callers: usize,
    pub(crate) handler_calls: usize,
    pub(crate) probe_calls: usize,
    pub(crate) committed: usize,
    /// Whether the library claims its guarantee (see [`GuaranteeCheck::claimed`]).
    pub(crate) claimed: bool,
}

/// The handler: one provider request through the fault schedule.
fn handler(
    faulted: &Arc<Faulted>,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
    let faulted = Arc::clone(faulted);
    move |args, ctx: HandlerContext| {
        faulted
            .perform(&args, ctx.provider_key())
            .map_err(HandlerError::unknown)
    }
}

/// The outcome probe: one provider lookup through the fault schedule.
fn probe(
    faulted: &Faulted,
    arguments: &Value,
    key: Option<&str>,
) -> Result<OutcomeProbeResult, CallbackError> {
    let lookup = faulted
        .look_up(arguments, key)
        .map_err(CallbackError::new)?;
    Ok(probe_result(lookup))
}

/// A lookup's answer as the outcome probe's result.
pub(crate) fn probe_result(lookup: Lookup) -> OutcomeProbeResult {
    match lookup {
        Lookup::Committed {
            output,
            provider_operation_id,
        } => {
            let result =
                OutcomeProbeResult::committed(output).evidence("source", "provider_lookup");
            match provider_operation_id {
                Some(id) => result.provider_operation_id(id),
                None => result,
            }
        }
        Lookup::NotCommitted => {
            OutcomeProbeResult::not_committed().evidence("source", "provider_lookup")
        }
        Lookup::Pending => OutcomeProbeResult::pending(),
        Lookup::Unknown => OutcomeProbeResult::unknown(),
        Lookup::Conflict { held } => OutcomeProbeResult::conflict()
            .evidence("source", "provider_lookup")
            .evidence("held", held),
    }
}

/// The scenario clock's start as a time.
pub fn scenario_start() -> SystemTime {
    UNIX_EPOCH + SCENARIO_START
}
