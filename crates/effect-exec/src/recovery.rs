//! [`RecoveryWorker`]: finish the operations whose caller never comes back.
//!
//! A contract built with
//! [`store_intent(true)`](effect_core::EffectContractBuilder::store_intent)
//! records its arguments with the operation. A recovery worker holds durable
//! handlers, registered by contract name and version, and dispatches every
//! operation that was left behind: `prepared` (a retry an operator or a
//! reconciliation authorized), `outcome_unknown`, `dispatched` under an
//! expired lease (its caller died), or `awaiting_approval` once a human
//! approved it (docs/approval.md; never before). It does so through
//! [`EffectExecutor::execute`] with the stored arguments, so every rule of a
//! live call holds: the dispatch lease is claimed exclusively (several workers,
//! on several processes or hosts, never dispatch one operation twice), an
//! uncertain outcome is reconciled through the probe or a guaranteed key
//! before any retry, and `handler_may_still_be_running` alone never
//! authorizes one.
//!
//! Operations without stored intent (their contract does not store it, or
//! another writer created them) are counted as *waiting for their caller*
//! and never touched; [`waiting`] lists both kinds with their age, for alerts.
//!
//! ```
//! use std::sync::Arc;
//! use effect_core::{EffectContract, EffectLedger, MemoryLedger, OutcomeProbeResult};
//! use effect_exec::{EffectExecutor, HandlerContext, HandlerError, RecoveryWorker};
//! use serde_json::{json, Value};
//!
//! let contract = EffectContract::builder("capture_payment", |args| {
//!     Ok(format!("invoice:{}:capture", args["invoice_id"].as_str().ok_or("missing invoice_id")?))
//! })
//! .provider_idempotency_key(|args| Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}"))))
//! .outcome_probe(|_args, _key| Ok(OutcomeProbeResult::not_committed()))
//! .store_intent(true)
//! .build()?;
//! let ledger = Arc::new(MemoryLedger::new());
//! let executor = EffectExecutor::new(ledger.clone());
//!
//! // The caller's dispatch never leaves the process, and the caller gives up.
//! let first = executor.execute(&contract, &json!({"invoice_id": "INV-1"}), |_args: Value, _ctx| {
//!     Err::<Value, _>(HandlerError::not_sent("the agent was stopped before sending"))
//! });
//! # let _ = first;
//!
//! // Another process registers the durable handler and finishes the work.
//! let worker = RecoveryWorker::new(executor.clone())
//!     .register(contract, |args: Value, ctx: HandlerContext| {
//!         Ok::<_, HandlerError>(json!({"captured": args["invoice_id"], "key": ctx.provider_key()}))
//!     })?
//!     .min_age(std::time::Duration::ZERO);
//! let report = worker.run_once()?;
//! assert_eq!(report.confirmed, 1);
//! let record = ledger.get("invoice:INV-1:capture")?.ok_or("not recorded")?;
//! assert_eq!(record.output, Some(json!({"captured": "INV-1", "key": "capture:INV-1"})));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use effect_core::evidence::PROBE_STATUS;
use effect_core::{
    EffectContract, EffectLedger, EffectRecord, EffectResult, EffectStatus, ListQuery,
    MAX_LIST_LIMIT, RetentionReport, intent,
};
use effect_core::{LedgerEvent, event};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::blocked::{self, blocked};
use crate::context::HandlerContext;
use crate::error::{ExecError, HandlerError};
use crate::executor::EffectExecutor;
use crate::identity::Identified;
use crate::observe::{self, ContractRef, EffectEvent};
use crate::options::CallOptions;
use crate::pages::{DEFAULT_PAGE_SIZE, Pages};
use crate::periodic::Periodic;
use crate::retention::Retention;
use crate::typed::TypedContract;

/// A durable handler, over JSON values.
type DurableHandler =
    Arc<dyn Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync>;

/// Runs one operation from its stored arguments (opened, not yet decoded);
/// `Err` with the reason when they cannot be used for the stored record
/// (they derive another id or fingerprint, do not decode as the contract's
/// argument type, or an earlier version's migration refuses them).
type Run = Arc<
    dyn Fn(
            &EffectExecutor,
            &EffectRecord,
            &Value,
        ) -> Result<Result<EffectResult, ExecError>, Unreadable>
        + Send
        + Sync,
>;

/// Why a registered handler cannot use an operation's stored intent.
struct Unreadable {
    /// What the ledger records (docs/spec.md §5c): never the arguments.
    recorded: String,
    /// What the log says: the error itself too.
    logged: String,
}

impl Unreadable {
    fn new(recorded: impl Into<String>, error: impl fmt::Display) -> Self {
        let recorded = recorded.into();
        Unreadable {
            logged: format!("{recorded}: {error}"),
            recorded,
        }
    }
}

#[derive(Clone)]
struct Durable {
    contract: EffectContract,
    run: Run,
}

/// Runs the compensation of one confirmed original, by its operation id.
type Compensate =
    Arc<dyn Fn(&EffectExecutor, &str) -> Result<EffectResult, ExecError> + Send + Sync>;

/// The compensations a worker runs: by the original's contract, and the
/// original's contract by the compensation's.
#[derive(Clone, Default)]
struct Compensations {
    by_original: HashMap<(String, String), Compensate>,
    original_of: HashMap<(String, String), (String, String)>,
}

/// Dispatches the operations whose caller is gone, from their stored intent;
/// see docs/recovering-work.md.
#[derive(Clone)]
pub struct RecoveryWorker {
    executor: EffectExecutor,
    handlers: HashMap<(String, String), Durable>,
    compensations: Compensations,
    min_age: Duration,
    page_size: usize,
    retention: Option<Retention>,
}

impl fmt::Debug for RecoveryWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut contracts: Vec<String> = self
            .handlers
            .keys()
            .map(|(name, version)| format!("{name}@{version}"))
            .collect();
        contracts.sort_unstable();
        f.debug_struct("RecoveryWorker")
            .field("contracts", &contracts)
            .field("min_age", &self.min_age)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

/// What one pass of a [`RecoveryWorker`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Operations found left behind: `prepared`, `outcome_unknown`,
    /// `awaiting_approval`, or `dispatched` under an expired lease.
    pub examined: u64,
    /// Now confirmed (dispatched by this pass, or found committed by the probe).
    pub confirmed: u64,
    /// Now rejected by the provider.
    pub rejected: u64,
    /// Quarantined for an operator: nothing made a retry safe.
    pub quarantined: u64,
    /// Still uncertain, or dispatched (or confirmed) by another caller or
    /// worker meanwhile.
    pub unsettled: u64,
    /// Left for their caller: no stored intent.
    pub waiting_for_caller: u64,
    /// Not touched: no durable handler is registered for their contract.
    pub unregistered: u64,
    /// Not touched yet: changed less than [`RecoveryWorker::min_age`] ago, so
    /// a live caller may still finish it.
    pub too_recent: u64,
    /// Not touched: the stored intent no longer derives this operation (its
    /// id or fingerprint differ), could not be read, or no registered
    /// version of its contract reads its version's intent. Recorded once
    /// as a `recovery_blocked` event and listed by [`waiting`].
    pub unusable_intent: u64,
    /// Not dispatched: the registered version of its contract weakens the
    /// terms stored with it (docs/spec.md §3.1); recorded once as a
    /// `recovery_blocked` event and listed by [`waiting`]. Tried again at
    /// the next pass, writing nothing more.
    pub contract_weakened: u64,
    /// Failed on a store error; tried again at the next pass.
    pub failed: u64,
    /// Not dispatched: deferred by a budget that has no room yet
    /// (docs/approval.md#budgets); tried again at the next pass, within the
    /// deferral's bound. Writes nothing while it stays so. One whose bound
    /// passed is rejected by the pass and counted as `rejected`.
    pub deferred: u64,
    /// Not touched: waiting for a human's approval (docs/approval.md). An
    /// approved operation is dispatched like a `prepared` one, and counted
    /// by its outcome.
    pub awaiting_approval: u64,
    /// Compensations confirmed by this pass (docs/compensation.md): requested
    /// by an operator, or left unsettled by their caller. A compensation
    /// rejected, quarantined or still uncertain is counted as such.
    pub compensated: u64,
    /// Terminal operations the worker's retention policy deleted this pass
    /// ([`RecoveryWorker::retention`]), each archived first.
    pub pruned: u64,
    /// What the retention policy pruned this pass, rule by rule; `None` when
    /// it was not due (or the worker has none, or it failed: logged, and
    /// tried again at the next pass).
    pub retention: Option<RetentionReport>,
    /// Pages of operations the pass read ([`RecoveryWorker::page_size`]).
    pub pages: u64,
}

/// Stops a worker started with [`RecoveryWorker::spawn`].
#[derive(Debug)]
pub struct RecoveryHandle {
    running: Periodic<RecoveryReport>,
}

impl RecoveryHandle {
    /// Stops the worker after its current pass and returns the report of
    /// every pass it ran.
    ///
    /// # Panics
    ///
    /// When the worker thread panicked (the panic is resumed here).
    pub fn stop(self) -> Vec<RecoveryReport> {
        self.running.stop()
    }
}

/// The default of [`RecoveryWorker::min_age`].
pub const DEFAULT_MIN_AGE: Duration = Duration::from_secs(5);

impl RecoveryWorker {
    /// A worker with no handlers yet, over the executor's ledger and options.
    pub fn new(executor: EffectExecutor) -> Self {
        RecoveryWorker {
            executor,
            handlers: HashMap::new(),
            compensations: Compensations::default(),
            min_age: DEFAULT_MIN_AGE,
            page_size: DEFAULT_PAGE_SIZE,
            retention: None,
        }
    }

    /// How long a `prepared` operation must have been left as it is before
    /// the worker dispatches it (default 5 s), so that a live caller whose
    /// retry was just authorized claims it itself. Uncertain operations and
    /// expired dispatches are taken at once: their caller is gone or their
    /// reconciliation is guarded anyway. Either way only one dispatch
    /// happens: the claim is exclusive.
    #[must_use]
    pub fn min_age(mut self, min_age: Duration) -> Self {
        self.min_age = min_age;
        self
    }

    /// How many operations a pass reads at once from each listing (default
    /// [`DEFAULT_PAGE_SIZE`], at most [`MAX_LIST_LIMIT`]): a pass holds a
    /// page of each, never the whole ledger.
    #[must_use]
    pub fn page_size(mut self, page_size: usize) -> Self {
        self.page_size = page_size.clamp(1, MAX_LIST_LIMIT);
        self
    }

    /// Applies a retention policy at the end of its passes, on the
    /// [`Retention`]'s schedule and a bounded share per pass; what it
    /// deleted is counted in [`RecoveryReport::pruned`]. Unresolved and
    /// active operations are never pruned (docs/operations.md#retention).
    #[must_use]
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = Some(retention);
        self
    }

    /// Registers the durable handler of `contract` (by name and version; a
    /// later registration replaces it).
    ///
    /// # Errors
    ///
    /// [`ExecError::IntentNotStored`] when the contract does not store its
    /// intent: the worker would have no arguments to dispatch it with.
    pub fn register<O, H>(mut self, contract: EffectContract, handler: H) -> Result<Self, ExecError>
    where
        O: Serialize + 'static,
        H: Fn(Value, HandlerContext) -> Result<O, HandlerError> + Send + Sync + 'static,
    {
        if !contract.stores_intent() {
            return Err(ExecError::IntentNotStored {
                contract: contract.name().to_owned(),
            });
        }
        let handler: DurableHandler =
            Arc::new(move |args, context| output_json(handler(args, context)?));
        self.insert::<Value>(contract, handler);
        Ok(self)
    }

    /// Registers `handler` for operations whose stored arguments decode as
    /// `A`: identified and executed as `A`, as the original caller did, so
    /// that secrets fingerprint as they did then.
    fn insert<A>(&mut self, contract: EffectContract, handler: DurableHandler)
    where
        A: Serialize + DeserializeOwned + 'static,
    {
        let key = (contract.name().to_owned(), contract.version().to_owned());
        let running = contract.clone();
        let run: Run = Arc::new(move |executor, record, stored| {
            let (arguments, earlier) = read_intent(executor, &running, record, stored)?;
            let arguments = A::deserialize(&arguments).map_err(|err| {
                Unreadable::new(
                    format!(
                        "the stored arguments do not decode as {}",
                        std::any::type_name::<A>()
                    ),
                    err,
                )
            })?;
            // The identity is derived once, here, and the execution runs
            // under it: the contract's callbacks run once per operation.
            let known_id = earlier.is_some().then_some(record.operation_id.as_str());
            let mut derived = executor
                .identity_of_recorded(&running, &arguments, known_id)
                .map_err(|err| Unreadable::new("the stored arguments cannot be identified", err))?;
            let operation = match earlier {
                Some(earlier) => {
                    // The earlier version's secrets are scrubbed from what
                    // is written when this version's arguments mark none.
                    if derived.identity.redactor.is_none() {
                        derived.identity.redactor = earlier.identity.redactor;
                    }
                    earlier.operation
                }
                None if derived.describes(record) => derived.operation,
                None => {
                    return Err(Unreadable::new(
                        "the stored arguments derive another operation id or request fingerprint",
                        format_args!("derived {:?}", derived.identity.operation_id),
                    ));
                }
            };
            let handler = Arc::clone(&handler);
            Ok(executor.execute_identity(
                &running,
                &derived.identity,
                operation,
                CallOptions::default(),
                move |args, context| handler(args, context),
            ))
        });
        self.handlers.insert(key, Durable { contract, run });
    }

    /// The registered handler that reads `record`'s intent: its own
    /// contract's, or else one of a version of that contract that declares
    /// it reads `record`'s version's intent
    /// ([`EffectContractBuilder::reads_intent_of`](effect_core::EffectContractBuilder::reads_intent_of)),
    /// the latest such version first.
    fn handler_for(&self, record: &EffectRecord) -> Option<&Durable> {
        let key = (
            record.contract_name.clone(),
            record.contract_version.clone(),
        );
        if let Some(durable) = self.handlers.get(&key) {
            return Some(durable);
        }
        self.handlers
            .iter()
            .filter(|((name, _), durable)| {
                *name == record.contract_name
                    && durable
                        .contract
                        .intent_migration(&record.contract_version)
                        .is_some()
            })
            .max_by(|((_, a), _), ((_, b), _)| alphanumeric_sort::compare_str(a, b))
            .map(|(_, durable)| durable)
    }

    /// Registers the handler of the compensation `contract` names
    /// (docs/compensation.md), by the original's contract name and version.
    /// Each pass then runs, through
    /// [`EffectExecutor::compensate`], the compensation of every confirmed
    /// operation of that contract an operator asked to compensate
    /// ([`Operator::request_compensation`](crate::Operator::request_compensation), `agent-effect-ops
    /// compensate`), and finishes every compensation of it left behind
    /// (`prepared` past [`min_age`](Self::min_age), `outcome_unknown`, or
    /// dispatched under an expired lease), with the arguments derived again
    /// from the original: the compensation's contract need not store its
    /// intent.
    ///
    /// # Errors
    ///
    /// [`ExecError::NoCompensation`] when the contract names none.
    pub fn register_compensation<O, H>(
        mut self,
        contract: EffectContract,
        handler: H,
    ) -> Result<Self, ExecError>
    where
        O: Serialize + Send + 'static,
        H: Fn(Value, HandlerContext) -> Result<O, HandlerError> + Send + Sync + 'static,
    {
        let Some(compensation) = contract.compensation() else {
            return Err(ExecError::NoCompensation {
                contract: contract.name().to_owned(),
            });
        };
        let undo = compensation.contract();
        let original = (contract.name().to_owned(), contract.version().to_owned());
        self.compensations.original_of.insert(
            (undo.name().to_owned(), undo.version().to_owned()),
            original.clone(),
        );
        let handler = Arc::new(handler);
        let compensate: Compensate = Arc::new(move |executor, operation_id| {
            let handler = Arc::clone(&handler);
            executor.compensate(&contract, operation_id, move |args, context| {
                handler(args, context)
            })
        });
        self.compensations.by_original.insert(original, compensate);
        Ok(self)
    }

    /// [`register`](Self::register) for a typed contract and handler.
    ///
    /// # Errors
    ///
    /// As [`register`](Self::register).
    pub fn register_typed<A, O, H>(
        self,
        contract: &TypedContract<A, O>,
        handler: H,
    ) -> Result<Self, ExecError>
    where
        A: Serialize + DeserializeOwned + 'static,
        O: Serialize + DeserializeOwned + 'static,
        H: Fn(A, HandlerContext) -> Result<O, HandlerError> + Send + Sync + 'static,
    {
        let inner = contract.contract().clone();
        if !inner.stores_intent() {
            return Err(ExecError::IntentNotStored {
                contract: inner.name().to_owned(),
            });
        }
        let handler: DurableHandler = Arc::new(move |args: Value, context| {
            let args = A::deserialize(&args).map_err(|err| {
                HandlerError::rejected(format!(
                    "stored arguments do not decode as {}, nothing was sent: {err}",
                    std::any::type_name::<A>()
                ))
            })?;
            output_json(handler(args, context)?)
        });
        let mut worker = self;
        worker.insert::<A>(inner, handler);
        Ok(worker)
    }

    /// One pass: reads, page by page, every operation left behind, and
    /// dispatches (or reconciles) each whose contract has a durable handler and whose intent
    /// is stored. An error on one operation is logged and counted; the pass
    /// goes on with the others. Each operation left behind when the pass
    /// began is worked on once; one the pass itself leaves behind waits for
    /// the next pass.
    ///
    /// # Errors
    ///
    /// [`ExecError::Ledger`] when the ledger cannot list the first page of
    /// operations (a later page that cannot be read is logged, counted in
    /// [`RecoveryReport::failed`], and ends its listing for this pass), or
    /// [`ExecError::LeaseTooShort`] for a lease the ledger cannot keep.
    pub fn run_once(&self) -> Result<RecoveryReport, ExecError> {
        let span = tracing::info_span!("effect.recover");
        let _entered = span.enter();
        self.executor.check_lease()?;
        let ledger: &dyn EffectLedger = self.executor.ledger().as_ref();
        // The first page of every listing is read before anything is
        // touched, and each is read on page by page (`Pages`): an operation
        // this pass moves into a listing is not worked on twice.
        let page = self.page_size;
        let mut candidates = vec![Pages::first(ledger, ListQuery::stale(page))?];
        for status in [
            EffectStatus::OutcomeUnknown,
            EffectStatus::Prepared,
            EffectStatus::AwaitingApproval,
        ] {
            candidates.push(Pages::first(ledger, ListQuery::with_status(status, page))?);
        }
        let mut report = RecoveryReport::default();
        // The originals whose compensation this pass ran: a compensation
        // listed as left behind is not run twice.
        let mut compensated = std::collections::HashSet::new();
        if !self.compensations.by_original.is_empty() {
            let mut confirmed = Pages::first(
                ledger,
                ListQuery::with_status(EffectStatus::Confirmed, page),
            )?;
            while let Some(record) = next_or_fail(&mut confirmed, &mut report) {
                let requested = record.compensation_request().is_some()
                    && !record.compensation().is_some_and(|link| link.is_finished());
                if requested {
                    report.examined += 1;
                    compensated.insert(record.operation_id.clone());
                    self.compensate_one(&record.operation_id, &record, &mut report);
                }
            }
            report.pages += confirmed.read;
        }
        for mut listing in candidates {
            while let Some(record) = next_or_fail(&mut listing, &mut report) {
                self.candidate(&record, &mut compensated, &mut report);
            }
            report.pages += listing.read;
        }
        if let Some(retention) = &self.retention {
            match retention.run_if_due(self.executor.clock().as_ref()) {
                Some(Ok(pruned)) => {
                    report.pruned = pruned.operations();
                    report.retention = Some(pruned);
                }
                Some(Err(err)) => {
                    tracing::warn!(error = %err, "retention failed; tried again at the next pass");
                }
                None => {}
            }
        }
        tracing::info!(
            examined = report.examined,
            confirmed = report.confirmed,
            quarantined = report.quarantined,
            waiting_for_caller = report.waiting_for_caller,
            unregistered = report.unregistered,
            unusable_intent = report.unusable_intent,
            contract_weakened = report.contract_weakened,
            deferred = report.deferred,
            failed = report.failed,
            pruned = report.pruned,
            "recovery pass finished"
        );
        Ok(report)
    }

    /// Runs [`run_once`](Self::run_once) now and then every `every` on a
    /// thread of its own, until the handle is stopped: one loop for a
    /// service's `main`. A pass whose listing fails is logged and tried
    /// again at the next tick. It pauses through the executor's
    /// [`Sleeper`](effect_core::Sleeper) ([`EffectExecutor::with_sleeper`]),
    /// and a stop ends the pause.
    pub fn spawn(self, every: Duration) -> RecoveryHandle {
        let sleeper = Arc::clone(self.executor.sleeper());
        RecoveryHandle {
            running: Periodic::spawn(sleeper, every, "recovery pass", move || self.run_once()),
        }
    }

    /// [`run_once`](Self::run_once) on tokio's blocking pool, for an async
    /// service: the ledger's commits never stall the runtime's workers.
    ///
    /// # Errors
    ///
    /// As [`run_once`](Self::run_once), plus [`ExecError::Runtime`] when the
    /// blocking task cannot run.
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn run_once_async(&self) -> Result<RecoveryReport, ExecError> {
        let worker = self.clone();
        tokio::task::spawn_blocking(move || worker.run_once())
            .await
            .map_err(|err| ExecError::Runtime {
                operation_id: "(recovery pass)".to_owned(),
                message: err.to_string(),
            })?
    }

    /// Runs [`run_once_async`](Self::run_once_async) every `every` until
    /// `shutdown` completes, then returns the reports of every pass. A pass
    /// that fails is logged and tried again at the next tick. It pauses
    /// through the executor's [`Sleeper`](effect_core::Sleeper) on tokio's
    /// blocking pool, and the shutdown ends the pause.
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn run_async(
        self,
        every: Duration,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Vec<RecoveryReport> {
        let mut reports = Vec::new();
        let sleeper = Arc::clone(self.executor.sleeper());
        let stop = effect_core::StopSignal::new();
        tokio::pin!(shutdown);
        loop {
            match self.run_once_async().await {
                Ok(report) => reports.push(report),
                Err(err) => tracing::warn!(error = %err, "recovery pass failed"),
            }
            // The pause goes through the executor's sleeper (so a test's
            // clock drives it), on the blocking pool; the shutdown raises the
            // stop, which ends the pause at once.
            let pause = {
                let (sleeper, stop) = (Arc::clone(&sleeper), stop.clone());
                tokio::task::spawn_blocking(move || sleeper.sleep_unless_stopped(every, &stop))
            };
            tokio::select! {
                () = &mut shutdown => {
                    stop.stop();
                    return reports;
                }
                paused = pause => {
                    if paused.is_err() {
                        tracing::warn!("the recovery worker's pause could not run; stopping");
                        return reports;
                    }
                }
            }
        }
    }

    /// Works on one operation a listing found left behind.
    fn candidate(
        &self,
        record: &EffectRecord,
        compensated: &mut std::collections::HashSet<String>,
        report: &mut RecoveryReport,
    ) {
        report.examined += 1;
        // Only an approval makes a waiting operation dispatchable; the
        // claim checks it again (and consumes it) in the store.
        if record.status == EffectStatus::AwaitingApproval && record.approval().is_none() {
            report.awaiting_approval += 1;
            return;
        }
        if matches!(
            record.status,
            EffectStatus::Prepared | EffectStatus::AwaitingApproval
        ) && !self.executor.older_than(&record.updated_at, self.min_age)
        {
            report.too_recent += 1;
            return;
        }
        if let Some(original) = record.compensates() {
            let key = (
                record.contract_name.clone(),
                record.contract_version.clone(),
            );
            if self.compensations.original_of.contains_key(&key) {
                if compensated.insert(original.to_owned()) {
                    self.compensate_one(original, record, report);
                } else {
                    report.unsettled += 1;
                }
                return;
            }
        }
        self.recover_one(record, report);
    }

    /// Runs the compensation of `original` (the operation `record` is, or
    /// the one it compensates) through its registered handler, and counts
    /// the compensation's result.
    fn compensate_one(&self, original: &str, record: &EffectRecord, report: &mut RecoveryReport) {
        let key = match self.compensations.original_of.get(&(
            record.contract_name.clone(),
            record.contract_version.clone(),
        )) {
            Some(original_contract) => original_contract.clone(),
            None => (
                record.contract_name.clone(),
                record.contract_version.clone(),
            ),
        };
        let Some(compensate) = self.compensations.by_original.get(&key) else {
            report.unregistered += 1;
            return;
        };
        match compensate(&self.executor, original) {
            Ok(result) => match result.status {
                EffectStatus::Confirmed
                    if result.duplicate_suppressed
                        && !result.evidence.contains_key(PROBE_STATUS) =>
                {
                    // Already confirmed by another caller: the original's
                    // trail was brought up to date, nothing was dispatched.
                    report.unsettled += 1;
                }
                EffectStatus::Confirmed => report.compensated += 1,
                EffectStatus::Rejected => report.rejected += 1,
                EffectStatus::Quarantined => report.quarantined += 1,
                EffectStatus::AwaitingApproval => report.awaiting_approval += 1,
                EffectStatus::OutcomeUnknown
                | EffectStatus::Dispatched
                | EffectStatus::Prepared => report.unsettled += 1,
            },
            Err(err) if err.is_budget_deferred() => report.deferred += 1,
            Err(err) if err.is_budget_exceeded() => report.rejected += 1,
            Err(err) => {
                tracing::warn!(
                    operation_id = original,
                    compensation = record.operation_id,
                    error = %err,
                    "compensation failed"
                );
                report.failed += 1;
            }
        }
    }

    /// Records why the worker cannot dispatch `record` (a `recovery_blocked`
    /// event, docs/spec.md §5c), unless its last event already says so: once
    /// per reason, not once per pass. The record itself does not change.
    fn block(
        &self,
        record: &EffectRecord,
        events: &[LedgerEvent],
        reason: &'static str,
        recorded: &str,
        logged: &str,
    ) {
        let version = self
            .handlers
            .keys()
            .filter(|(name, _)| *name == record.contract_name)
            .map(|(_, version)| version.as_str())
            .max_by(|a, b| alphanumeric_sort::compare_str(a, b))
            .unwrap_or(record.contract_version.as_str());
        blocked::record(
            &self.executor,
            record,
            events,
            &blocked::Block {
                reason,
                recorded,
                logged,
                contract_version: version,
            },
        );
    }

    fn recover_one(&self, record: &EffectRecord, report: &mut RecoveryReport) {
        let id = record.operation_id.as_str();
        let durable = self.handler_for(record);
        // A worker that holds no version of the contract leaves the
        // operation to one that does; one that holds another version which
        // does not read this version's intent records why (below).
        let knows_name = durable.is_some()
            || self
                .handlers
                .keys()
                .any(|(name, _)| *name == record.contract_name);
        if !knows_name {
            tracing::warn!(
                operation_id = id,
                contract = record.contract_name,
                version = record.contract_version,
                status = %record.status,
                "operation left behind by an unregistered contract; left as it is"
            );
            report.unregistered += 1;
            return;
        }
        let events = match self.executor.ledger().events(id) {
            Ok(events) => events,
            Err(err) => {
                tracing::warn!(operation_id = id, error = %err, "events could not be read");
                report.failed += 1;
                return;
            }
        };
        let Some(arguments) = intent::stored(&events) else {
            tracing::info!(operation_id = id, status = %record.status, "no stored intent; waiting for its caller");
            report.waiting_for_caller += 1;
            return;
        };
        let Some(durable) = durable else {
            let recorded = format!(
                "no registered version reads the intent of version {:?}",
                record.contract_version
            );
            report.unusable_intent += 1;
            self.block(
                record,
                &events,
                event::BLOCKED_INTENT_UNREADABLE,
                &recorded,
                &recorded,
            );
            return;
        };
        let arguments = match self.executor.open_intent(id, arguments) {
            Ok(arguments) => arguments,
            Err(err) => {
                tracing::warn!(operation_id = id, error = %err, "stored intent cannot be opened");
                report.unusable_intent += 1;
                return;
            }
        };
        // Traced as a recovery, linked to the trace that created the operation.
        let linked = effect_core::trace::stored(&events);
        let executed =
            match observe::recovering(linked, || (durable.run)(&self.executor, record, &arguments))
            {
                Ok(executed) => executed,
                Err(unreadable) => {
                    report.unusable_intent += 1;
                    self.block(
                        record,
                        &events,
                        event::BLOCKED_INTENT_UNREADABLE,
                        &unreadable.recorded,
                        &unreadable.logged,
                    );
                    return;
                }
            };
        let counted = |outcome: &'static str| {
            self.executor.emit(&EffectEvent::RecoveryDispatched {
                contract: ContractRef {
                    name: &record.contract_name,
                    version: &record.contract_version,
                },
                outcome,
            });
        };
        match executed {
            // Another caller or worker confirmed it meanwhile: a replay,
            // not this pass's work. A confirmation this pass's probe found
            // carries the probe's verdict instead.
            Ok(result)
                if result.status == EffectStatus::Confirmed
                    && result.duplicate_suppressed
                    && !result.evidence.contains_key(PROBE_STATUS) =>
            {
                report.unsettled += 1;
                counted("unsettled");
            }
            Ok(result) => {
                let outcome = match result.status {
                    EffectStatus::Confirmed => {
                        report.confirmed += 1;
                        "confirmed"
                    }
                    EffectStatus::Rejected => {
                        report.rejected += 1;
                        "rejected"
                    }
                    EffectStatus::Quarantined => {
                        report.quarantined += 1;
                        "quarantined"
                    }
                    EffectStatus::AwaitingApproval => {
                        report.awaiting_approval += 1;
                        "awaiting_approval"
                    }
                    EffectStatus::OutcomeUnknown
                    | EffectStatus::Dispatched
                    | EffectStatus::Prepared => {
                        report.unsettled += 1;
                        "unsettled"
                    }
                };
                counted(outcome);
            }
            // A budget's answer is not a failure: deferred, it waits for
            // room (nothing written); refused, the pass rejected it.
            Err(err) if err.is_budget_deferred() => {
                tracing::info!(operation_id = id, error = %err, "deferred by a budget");
                report.deferred += 1;
                counted("deferred");
            }
            Err(err) if err.is_budget_exceeded() => {
                tracing::info!(operation_id = id, error = %err, "rejected by a budget");
                report.rejected += 1;
                counted("rejected");
            }
            Err(err @ ExecError::ContractWeakened { .. }) => {
                // Nothing was written or sent: the stored terms forbid what
                // the running contract allows. Recorded once, for an operator.
                report.contract_weakened += 1;
                counted("contract_weakened");
                let message = err.to_string();
                self.block(
                    record,
                    &events,
                    event::BLOCKED_CONTRACT_WEAKENED,
                    &message,
                    &message,
                );
            }
            Err(err) => {
                tracing::warn!(operation_id = id, error = %err, "recovery of an operation failed");
                report.failed += 1;
                counted("failed");
            }
        }
    }
}

/// A durable handler's output as JSON: one that cannot be is an unknown
/// outcome, as for any handler.
fn output_json<O: Serialize>(output: O) -> Result<Value, HandlerError> {
    effect_core::canonical::to_json_value(&output).map_err(|err| {
        HandlerError::unknown(format!("handler output cannot be stored as JSON: {err}"))
    })
}

/// The arguments `running`'s handler receives for `record`, from its stored
/// intent (opened), and, for an operation an earlier version of the
/// contract claimed, the operation as that version recorded it: the stored
/// arguments must derive its id and request fingerprint under the earlier
/// version (docs/spec.md §5c), and are then migrated.
fn read_intent(
    executor: &EffectExecutor,
    running: &EffectContract,
    record: &EffectRecord,
    stored: &Value,
) -> Result<(Value, Option<Identified>), Unreadable> {
    if record.contract_version == running.version() {
        return Ok((stored.clone(), None));
    }
    let version = &record.contract_version;
    let Some(migration) = running.intent_migration(version) else {
        let recorded = format!("no registered version reads the intent of version {version:?}");
        return Err(Unreadable {
            logged: recorded.clone(),
            recorded,
        });
    };
    let unidentified = |err: &dyn fmt::Display| {
        Unreadable::new(
            format!("the stored arguments cannot be identified under version {version:?}"),
            err,
        )
    };
    // Arguments whose callers passed secrets were fingerprinted with a
    // keyed digest of each: the migration says which fields they were.
    let earlier = match migration.mark_secrets(stored) {
        None => executor.identity_of_recorded(migration.earlier(), stored, None),
        Some(Ok(marked)) => executor.identity_of_marked(migration.earlier(), stored, &marked),
        Some(Err(err)) => return Err(unidentified(&err)),
    }
    .map_err(|err| unidentified(&err))?;
    if !earlier.describes(record) {
        return Err(Unreadable::new(
            format!(
                "the stored arguments derive another operation id or request fingerprint under version {version:?}"
            ),
            format_args!("derived {:?}", earlier.identity.operation_id),
        ));
    }
    let migrated = migration.migrate(stored).map_err(|err| {
        Unreadable::new(
            format!(
                "version {:?}'s migration refuses the intent of version {version:?}",
                running.version()
            ),
            err,
        )
    })?;
    Ok((migrated, Some(earlier)))
}

/// Why an operation waits ([`waiting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WaitingFor {
    /// No stored intent: only its caller, calling again, can dispatch it.
    Caller,
    /// Its intent is stored: a recovery worker with its handler dispatches it.
    RecoveryWorker,
    /// Deferred by a budget (docs/approval.md#budgets): its caller or a
    /// recovery worker dispatches it once the budget has room, until the
    /// deferral's bound ([`Waiting::deferred_until`]), after which a claim
    /// rejects it.
    Budget,
    /// A recovery worker holds its contract but no registered version reads
    /// its stored intent (no migration from its version, or one that
    /// refuses it, or intent that does not derive the operation;
    /// docs/spec.md §5c): an operator, or a deploy that reads it. The
    /// reason is in [`Waiting::reason`].
    UnreadableIntent,
    /// The recovery worker's version of its contract weakens the terms
    /// stored with it (docs/spec.md §3.1): an operator, or a deploy that
    /// restores them. The terms are in [`Waiting::reason`].
    ContractWeakened,
}

/// An operation that nobody is dispatching right now: `prepared`, or one
/// a recovery worker found blocked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Waiting {
    /// The operation id.
    pub operation_id: String,
    /// The contract's name.
    pub contract_name: String,
    /// The contract's version.
    pub contract_version: String,
    /// Who can dispatch it.
    pub waiting_for: WaitingFor,
    /// Its status: `prepared`, or for one a worker found blocked, the
    /// status it was left in (`outcome_unknown`, `dispatched`, or
    /// `awaiting_approval` for an approved one).
    pub status: EffectStatus,
    /// Why a recovery worker cannot dispatch it, as recorded
    /// ([`WaitingFor::UnreadableIntent`], [`WaitingFor::ContractWeakened`]).
    pub reason: Option<String>,
    /// Since when it waits: its last status change (ISO-8601 UTC).
    pub since: String,
    /// For an operation deferred by a budget: the bound of its deferral
    /// (ISO-8601 UTC), `None` for one without a bound.
    pub deferred_until: Option<String>,
}

/// Every `prepared` operation of the ledger, and every `outcome_unknown`,
/// expired `dispatched` or `awaiting_approval` one a recovery worker or a
/// sweep found blocked (its last event `recovery_blocked`), oldest first,
/// with who it waits for, so that an operator can alert on work that nobody
/// will do. An `awaiting_approval` operation nobody found blocked waits for
/// a human and is not listed. Reads only.
///
/// # Errors
///
/// [`ExecError::Ledger`] when the ledger cannot list or read operations.
pub fn waiting(ledger: &dyn EffectLedger) -> Result<Vec<Waiting>, ExecError> {
    let mut listed = list_all(
        ledger,
        ListQuery::with_status(EffectStatus::Prepared, MAX_LIST_LIMIT),
    )?;
    let prepared = listed.len();
    listed.extend(list_all(
        ledger,
        ListQuery::with_status(EffectStatus::OutcomeUnknown, MAX_LIST_LIMIT),
    )?);
    listed.extend(list_all(ledger, ListQuery::stale(MAX_LIST_LIMIT))?);
    // An approved operation a worker found blocked still awaits its
    // dispatch; one without a `recovery_blocked` event awaits a human and
    // has its own listing (`list --status awaiting_approval`).
    listed.extend(list_all(
        ledger,
        ListQuery::with_status(EffectStatus::AwaitingApproval, MAX_LIST_LIMIT),
    )?);
    let mut waiting = Vec::with_capacity(prepared);
    for record in listed {
        let events = ledger
            .events(&record.operation_id)
            .map_err(|source| ExecError::ledger(&record.operation_id, source))?;
        let blocked = blocked(&events);
        if blocked.is_none() && record.status != EffectStatus::Prepared {
            continue;
        }
        let reason = blocked.as_ref().map(|b| b.error.to_owned());
        let deferral = record.evidence.get(effect_core::evidence::BUDGET_DEFERRAL);
        let waiting_for = if let Some(blocked) = &blocked {
            if blocked.reason == event::BLOCKED_CONTRACT_WEAKENED {
                WaitingFor::ContractWeakened
            } else {
                WaitingFor::UnreadableIntent
            }
        } else if deferral.is_some() {
            WaitingFor::Budget
        } else if intent::is_stored(&events) {
            WaitingFor::RecoveryWorker
        } else {
            WaitingFor::Caller
        };
        let deferred_until = deferral
            .and_then(|d| d.get("deferred_until"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        waiting.push(Waiting {
            operation_id: record.operation_id,
            contract_name: record.contract_name,
            contract_version: record.contract_version,
            waiting_for,
            status: record.status,
            reason,
            since: record.updated_at,
            deferred_until,
        });
    }
    waiting.sort_by(|a, b| a.since.cmp(&b.since));
    Ok(waiting)
}

/// The next operation of `pages`; a page that cannot be read is logged and
/// counted as failed, and ends that listing for this pass.
pub(crate) fn next_or_fail<R: CountsFailures>(
    pages: &mut Pages<'_>,
    report: &mut R,
) -> Option<EffectRecord> {
    match pages.next_record() {
        Ok(record) => record,
        Err(err) => {
            tracing::warn!(error = %err, "a page of operations could not be read; the rest waits for the next pass");
            report.count_failure();
            None
        }
    }
}

/// A pass's report, which counts a page that could not be read as a failure.
pub(crate) trait CountsFailures {
    fn count_failure(&mut self);
}

impl CountsFailures for RecoveryReport {
    fn count_failure(&mut self) {
        self.failed += 1;
    }
}

/// Every operation the query selects, page by page.
pub(crate) fn list_all(
    ledger: &dyn EffectLedger,
    query: ListQuery,
) -> Result<Vec<EffectRecord>, ExecError> {
    let mut all: Vec<EffectRecord> = Vec::new();
    loop {
        let query = match all.last() {
            Some(last) => query.clone().after(last.operation_id.clone()),
            None => query.clone(),
        };
        let page = ledger
            .list(&query)
            .map_err(|source| ExecError::ledger("(listing operations)", source))?;
        let full = page.len() == query.limit;
        all.extend(page);
        if !full {
            return Ok(all);
        }
    }
}
