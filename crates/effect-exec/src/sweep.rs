//! [`Sweeper`]: find every stuck operation of the registered contracts and
//! reconcile it, without waiting for the same call to come back.
//!
//! An operation is stuck when it is `dispatched` under an expired lease (its
//! worker died) or `outcome_unknown`. Each is reconciled through the same
//! rules as [`EffectExecutor::execute`] (probe, guaranteed provider key,
//! unknown-outcome policy); no handler is ever called. A retry the rules
//! authorize leaves the operation `prepared`, for the next execution of the
//! same call to dispatch.
//!
//! A probe needs the operation's arguments, which the ledger does not store.
//! A contract is registered in one of two ways:
//!
//! - [`Sweeper::register`]: its probe works from the stored provider key
//!   alone. The sweep calls the probe (and the postcondition) with
//!   `Value::Null` as the arguments.
//! - [`Sweeper::register_with_arguments`]: the service looks the arguments up
//!   in its own records (by operation id). The sweep checks that they derive
//!   the same operation id and match the stored request fingerprint before
//!   using them, and skips the operation when they do not.
//!
//! Operations of contracts not registered (by name and version) are counted
//! and logged, never touched. One whose registered contract weakens the
//! safety terms stored with it (docs/spec.md §3.1) is not reconciled: it is
//! counted, and recorded once as a `recovery_blocked` event, as the
//! recovery worker does.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use effect_core::{
    CallbackError, EffectContract, EffectRecord, EffectStatus, ListQuery, MAX_LIST_LIMIT, event,
};
use serde::Serialize;
use serde_json::Value;

use crate::blocked;
use crate::error::ExecError;
use crate::executor::EffectExecutor;
use crate::identity::{Identity, identify};
use crate::pages::{DEFAULT_PAGE_SIZE, Pages};
use crate::periodic::Periodic;
use crate::recovery::{CountsFailures, next_or_fail};

/// Looks up the arguments of a stored operation; `None` when unknown.
pub type ArgumentLookup =
    Arc<dyn Fn(&EffectRecord) -> Result<Option<Value>, CallbackError> + Send + Sync>;

/// Reconciles the stuck operations of registered contracts.
///
/// ```
/// use std::sync::Arc;
/// use effect_core::{EffectContract, EffectLedger, MemoryLedger, OutcomeProbeResult};
/// use effect_exec::{EffectExecutor, Sweeper};
/// use serde_json::json;
///
/// let contract = EffectContract::builder("capture", |args| {
///     Ok(format!("capture:{}", args["invoice"].as_str().ok_or("missing invoice")?))
/// })
/// .provider_idempotency_key(|args| Ok(args["invoice"].as_str().map(str::to_owned)))
/// // The probe works from the provider key alone.
/// .outcome_probe(|_args, key| {
///     Ok(OutcomeProbeResult::committed(json!({"captured": key})))
/// })
/// .build()?;
/// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
/// let report = Sweeper::new(executor).register(contract).sweep()?;
/// assert_eq!(report.examined, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Sweeper {
    executor: EffectExecutor,
    contracts: HashMap<(String, String), Registered>,
    page_size: usize,
}

#[derive(Clone)]
struct Registered {
    contract: EffectContract,
    arguments: Option<ArgumentLookup>,
}

impl fmt::Debug for Sweeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut contracts: Vec<String> = self
            .contracts
            .keys()
            .map(|(name, version)| format!("{name}@{version}"))
            .collect();
        contracts.sort_unstable();
        f.debug_struct("Sweeper")
            .field("contracts", &contracts)
            .finish_non_exhaustive()
    }
}

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SweepReport {
    /// Stuck operations found: stale dispatches and `outcome_unknown` ones.
    pub examined: u64,
    /// Reconciled to `confirmed`.
    pub confirmed: u64,
    /// A retry was authorized: the operation is `prepared` again, for the next
    /// execution of the same call to dispatch.
    pub retried: u64,
    /// Quarantined for an operator.
    pub quarantined: u64,
    /// Still `outcome_unknown` (the policy keeps them so).
    pub still_unknown: u64,
    /// Not touched: an unregistered contract, no arguments available, a lease
    /// renewed meanwhile, or a failing store (see `failed`).
    pub skipped: u64,
    /// Of the skipped, those whose contract is not registered.
    pub unregistered: u64,
    /// Of the skipped, those whose registered contract weakens the safety
    /// terms stored with them (docs/spec.md §3.1): nothing probed or
    /// written but, once, a `recovery_blocked` event that
    /// [`waiting`](crate::waiting) lists. Tried again at the next sweep.
    pub contract_weakened: u64,
    /// Of the skipped, those whose reconciliation failed (a store error);
    /// a page of operations that could not be read counts once here (and
    /// in `skipped`), and its listing waits for the next sweep.
    pub failed: u64,
    /// Pages of operations the sweep read ([`Sweeper::page_size`]).
    pub pages: u64,
}

/// Stops a sweeper started with [`Sweeper::spawn`].
#[derive(Debug)]
pub struct SweepHandle {
    running: Periodic<SweepReport>,
}

impl SweepHandle {
    /// Stops the sweeper after its current sweep and returns the reports of
    /// every sweep it ran.
    ///
    /// # Panics
    ///
    /// When the sweeper thread panicked (the panic is resumed here).
    pub fn stop(self) -> Vec<SweepReport> {
        self.running.stop()
    }
}

impl Sweeper {
    /// A sweeper with no contracts yet, over the executor's ledger. Which
    /// leases have expired is judged by the ledger's clock, as for any
    /// transition.
    pub fn new(executor: EffectExecutor) -> Self {
        Sweeper {
            executor,
            contracts: HashMap::new(),
            page_size: DEFAULT_PAGE_SIZE,
        }
    }

    /// How many operations a sweep reads at once from each listing (default
    /// [`DEFAULT_PAGE_SIZE`], at most [`MAX_LIST_LIMIT`]): a sweep holds a
    /// page of each, never the whole ledger.
    #[must_use]
    pub fn page_size(mut self, page_size: usize) -> Self {
        self.page_size = page_size.clamp(1, MAX_LIST_LIMIT);
        self
    }

    /// Registers a contract whose probe works from the stored provider key
    /// alone: the sweep calls the probe and the postcondition with
    /// `Value::Null` as the arguments. A later registration of the same name
    /// and version replaces this one.
    #[must_use]
    pub fn register(mut self, contract: EffectContract) -> Self {
        self.insert(contract, None);
        self
    }

    /// Registers a contract whose arguments the service can look up from the
    /// stored record (by `operation_id`). Arguments that derive another
    /// operation id or do not match the stored request fingerprint are not
    /// used: the operation is skipped, and so is one the lookup does not know.
    #[must_use]
    pub fn register_with_arguments<F>(mut self, contract: EffectContract, lookup: F) -> Self
    where
        F: Fn(&EffectRecord) -> Result<Option<Value>, CallbackError> + Send + Sync + 'static,
    {
        self.insert(contract, Some(Arc::new(lookup)));
        self
    }

    /// Finds every stale dispatch and every `outcome_unknown` operation and
    /// reconciles those of registered contracts, reading them page by page
    /// (each found when the sweep began is reconciled once; one the sweep
    /// itself leaves `outcome_unknown` waits for the next sweep). An error on
    /// one operation is logged and counted in `failed`; the sweep goes on
    /// with the others.
    ///
    /// # Errors
    ///
    /// [`ExecError::Ledger`] when the ledger cannot list the first page of
    /// operations.
    pub fn sweep(&self) -> Result<SweepReport, ExecError> {
        let span = tracing::info_span!("effect.sweep");
        let _entered = span.enter();
        let mut report = SweepReport::default();
        // The first page of both listings is read before anything is
        // touched, and each is read on page by page (`Pages`): a stale
        // dispatch this sweep leaves `outcome_unknown` is not swept twice.
        let ledger = self.executor.ledger().as_ref();
        let mut stale = Pages::first(ledger, ListQuery::stale(self.page_size))?;
        let mut unknown = Pages::first(
            ledger,
            ListQuery::with_status(EffectStatus::OutcomeUnknown, self.page_size),
        )?;
        let mut stale_dispatches = 0;
        while let Some(record) = next_or_fail(&mut stale, &mut report) {
            stale_dispatches += 1;
            report.examined += 1;
            self.sweep_one(&record, &mut report);
        }
        crate::telemetry::stale_dispatches(stale_dispatches);
        while let Some(record) = next_or_fail(&mut unknown, &mut report) {
            report.examined += 1;
            self.sweep_one(&record, &mut report);
        }
        report.pages = stale.read + unknown.read;
        tracing::info!(
            examined = report.examined,
            confirmed = report.confirmed,
            retried = report.retried,
            quarantined = report.quarantined,
            still_unknown = report.still_unknown,
            skipped = report.skipped,
            unregistered = report.unregistered,
            contract_weakened = report.contract_weakened,
            failed = report.failed,
            "sweep finished"
        );
        Ok(report)
    }

    /// Runs [`sweep`](Self::sweep) now and then every `every` on a thread of
    /// its own, until the handle is stopped. A sweep whose listing fails is
    /// logged and tried again at the next tick. It pauses through the
    /// executor's [`Sleeper`](effect_core::Sleeper)
    /// ([`EffectExecutor::with_sleeper`]), and a stop ends the pause.
    pub fn spawn(self, every: Duration) -> SweepHandle {
        let sleeper = Arc::clone(self.executor.sleeper());
        SweepHandle {
            running: Periodic::spawn(sleeper, every, "sweep", move || self.sweep()),
        }
    }

    fn insert(&mut self, contract: EffectContract, arguments: Option<ArgumentLookup>) {
        let key = (contract.name().to_owned(), contract.version().to_owned());
        self.contracts.insert(
            key,
            Registered {
                contract,
                arguments,
            },
        );
    }

    fn sweep_one(&self, record: &EffectRecord, report: &mut SweepReport) {
        let id = record.operation_id.as_str();
        let key = (
            record.contract_name.clone(),
            record.contract_version.clone(),
        );
        let Some(registered) = self.contracts.get(&key) else {
            tracing::warn!(
                operation_id = id,
                contract = record.contract_name,
                version = record.contract_version,
                status = %record.status,
                "stuck operation of an unregistered contract left as it is"
            );
            report.skipped += 1;
            report.unregistered += 1;
            return;
        };
        let identity = match self.identity(registered, record) {
            Ok(Some(identity)) => identity,
            Ok(None) => {
                report.skipped += 1;
                return;
            }
            Err(err) => {
                tracing::warn!(operation_id = id, error = %err, "arguments lookup failed");
                report.skipped += 1;
                report.failed += 1;
                return;
            }
        };
        match self
            .executor
            .reconcile_identity(&registered.contract, &identity)
        {
            Ok(result) => match result.status {
                EffectStatus::Confirmed => report.confirmed += 1,
                // A retry of an approval-required operation waits for a new
                // approval: authorized all the same.
                EffectStatus::Prepared | EffectStatus::AwaitingApproval => report.retried += 1,
                EffectStatus::Quarantined => report.quarantined += 1,
                EffectStatus::OutcomeUnknown => report.still_unknown += 1,
                // A lease renewed meanwhile, or another caller settled it.
                EffectStatus::Dispatched | EffectStatus::Rejected => report.skipped += 1,
            },
            Err(err @ ExecError::ContractWeakened { .. }) => {
                // Nothing was probed or written: the stored terms forbid
                // what the registered contract allows. Recorded once, for
                // an operator, as the recovery worker does.
                report.skipped += 1;
                report.contract_weakened += 1;
                self.block_weakened(&registered.contract, record, &err);
            }
            Err(err) => {
                tracing::warn!(operation_id = id, error = %err, "reconciliation failed");
                report.skipped += 1;
                report.failed += 1;
            }
        }
    }

    /// Records that `contract` weakens the terms stored with `record` (a
    /// `recovery_blocked` event), unless its last event already says so.
    fn block_weakened(&self, contract: &EffectContract, record: &EffectRecord, err: &ExecError) {
        let id = record.operation_id.as_str();
        let events = match self.executor.ledger().events(id) {
            Ok(events) => events,
            Err(source) => {
                tracing::warn!(operation_id = id, error = %source, "events could not be read");
                return;
            }
        };
        let message = err.to_string();
        blocked::record(
            &self.executor,
            record,
            &events,
            &blocked::Block {
                reason: event::BLOCKED_CONTRACT_WEAKENED,
                recorded: &message,
                logged: &message,
                contract_version: contract.version(),
            },
        );
    }

    /// The identity to reconcile `record` under; `None` to skip it.
    fn identity(
        &self,
        registered: &Registered,
        record: &EffectRecord,
    ) -> Result<Option<Identity>, ExecError> {
        let id = record.operation_id.as_str();
        let Some(lookup) = &registered.arguments else {
            // The stored operation as it is: reconciliation never prepares,
            // so nothing but its id and the (absent) arguments is needed.
            return Ok(Some(Identity {
                operation_id: record.operation_id.clone(),
                arguments: Value::Null,
                redactor: None,
                redacted: None,
                budgets: Vec::new(),
            }));
        };
        let arguments = lookup(record).map_err(|source| ExecError::Contract {
            contract: record.contract_name.clone(),
            source,
        })?;
        let Some(arguments) = arguments else {
            tracing::warn!(operation_id = id, "no arguments for a stuck operation");
            return Ok(None);
        };
        let derived = identify(
            &registered.contract,
            &arguments,
            self.executor.options().fingerprint_form,
            &self.executor.keys,
        )?;
        if !derived.describes(record) {
            tracing::warn!(
                operation_id = id,
                derived = derived.identity.operation_id,
                "looked-up arguments do not describe the stored operation"
            );
            return Ok(None);
        }
        Ok(Some(derived.identity))
    }
}

impl CountsFailures for SweepReport {
    fn count_failure(&mut self) {
        self.skipped += 1;
        self.failed += 1;
    }
}
