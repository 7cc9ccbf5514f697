//! Observing executions: the seam a telemetry integration implements
//! (effect-otel's `OtelObserver` does, for OpenTelemetry).
//!
//! An [`EffectObserver`] is told two kinds of things:
//!
//! - [`EffectEvent`]s, for metrics: an execution ended, a handler returned, a
//!   reconciliation acted on an answer, an operation was quarantined, a
//!   budget refused a claim, a recovery worker dispatched an operation. Their
//!   fields are low-cardinality (contract name and version, a status, an
//!   answer) and never a value of the call;
//! - for traces, [`EffectObserver::execution`] opens an [`ExecutionTrace`] on
//!   the caller's thread (or task) before anything is written; the
//!   execution then reports its steps to it (each handler call, probe and
//!   ledger write) and finishes it with its answer.
//!
//! An executor uses its own observer ([`EffectExecutor::observer`](crate::EffectExecutor::observer))
//! or else the process's ([`set_global_observer`]); without either, nothing
//! here runs beyond one check per execution.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use effect_core::{EffectContract, MemoryLedger};
//! use effect_exec::{EffectEvent, EffectExecutor, EffectObserver, HandlerContext, HandlerError};
//! use serde_json::{json, Value};
//!
//! #[derive(Debug, Default)]
//! struct Statuses(Mutex<Vec<String>>);
//!
//! impl EffectObserver for Statuses {
//!     fn record(&self, event: &EffectEvent<'_>) {
//!         if let EffectEvent::Executed { result, .. } = event {
//!             self.0.lock().unwrap().push(result.status.to_string());
//!         }
//!     }
//! }
//!
//! let statuses = Arc::new(Statuses::default());
//! let executor = EffectExecutor::new(Arc::new(MemoryLedger::new())).observer(statuses.clone());
//! let contract = EffectContract::builder("send_email", |args| {
//!     Ok(format!("email:{}", args["to"].as_str().ok_or("missing to")?))
//! })
//! .build()?;
//! let send = |_: Value, _: HandlerContext| Ok::<_, HandlerError>(json!({"id": "msg-1"}));
//! executor.execute(&contract, &json!({"to": "ada@example.com"}), send)?;
//! assert_eq!(*statuses.0.lock().unwrap(), ["confirmed"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::any::Any;
use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use effect_core::EffectResult;
use serde_json::Value;

use crate::error::ExecError;
use crate::secrets::Redactor;

/// Receives what executions do, for metrics and traces.
pub trait EffectObserver: Send + Sync + fmt::Debug {
    /// Something countable happened. Called on the executing thread; keep it
    /// cheap (an observer that exports does so in the background).
    fn record(&self, event: &EffectEvent<'_>);

    /// An execution starts: a trace of it, or `None` (the default) to trace
    /// nothing. Called on the caller's thread (or task, for the async API)
    /// before anything is written, so a trace can join the caller's current
    /// one; the trace then follows the execution to wherever it runs.
    fn execution(&self, start: &ExecutionStart<'_>) -> Option<Box<dyn ExecutionTrace>> {
        let _ = start;
        None
    }
}

/// The trace of one execution, told its steps in order on one thread.
pub trait ExecutionTrace: Send {
    /// A compact, serialized trace context of this execution (a W3C
    /// `traceparent`), stored with an operation it creates so that a
    /// recovery worker's trace can link back to it
    /// ([`effect_core::trace`]). `None` (the default) stores nothing.
    fn trace_context(&self) -> Option<String> {
        None
    }

    /// A step starts. Steps end in the reverse order they started.
    fn step_started(&mut self, step: Step<'_>);

    /// The step started last ends; `failure` names its failure kind (a
    /// handler's outcome other than `returned`, `error` for a ledger write or
    /// a probe that failed), never a message.
    fn step_finished(&mut self, failure: Option<&'static str>);

    /// An event of this execution (as [`EffectObserver::record`] receives it).
    fn record(&mut self, event: &EffectEvent<'_>);

    /// The step started last, as a scope the handler's thread enters while
    /// the handler runs, so that what the handler traces (its own spans, the
    /// trace context it propagates to the provider, an effect it executes)
    /// joins that step. `None` (the default) enters nothing.
    fn step_scope(&self) -> Option<Arc<dyn StepScope>> {
        None
    }

    /// The execution answered (or failed with an executor error).
    fn finished(self: Box<Self>, answer: Result<&EffectResult, &ExecError>);
}

/// A step's trace context, made current on whichever thread runs the
/// handler: the caller's, the handler's own thread under a deadline, or a
/// runtime worker polling an async handler (entered on every poll).
pub trait StepScope: Send + Sync {
    /// Makes the step's context current on this thread until the returned
    /// guard is dropped.
    fn enter(&self) -> ScopeGuard;
}

/// Restores a thread's previous trace context when dropped (see
/// [`StepScope::enter`]).
#[must_use = "the scope ends when the guard is dropped"]
pub struct ScopeGuard(Option<Box<dyn Any>>);

impl ScopeGuard {
    /// A guard that restores the previous context when `guard` is dropped
    /// (for OpenTelemetry, the `ContextGuard` of `Context::attach`).
    pub fn new(guard: impl Any) -> Self {
        ScopeGuard(Some(Box::new(guard)))
    }

    /// A guard that entered nothing.
    pub fn none() -> Self {
        ScopeGuard(None)
    }
}

impl fmt::Debug for ScopeGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ScopeGuard")
            .field(&self.0.as_ref().map(|_| "entered"))
            .finish()
    }
}

/// A step of an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step<'a> {
    /// The handler is called for this dispatch attempt.
    Handler {
        /// The attempt (1 for the first dispatch).
        attempt: u32,
    },
    /// The contract's outcome probe is called.
    Probe,
    /// A ledger transition is written (`prepare and claim`, `mark confirmed`, …).
    LedgerWrite {
        /// The transition's name.
        transition: &'a str,
    },
}

/// A contract, by name and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContractRef<'a> {
    /// The contract's name.
    pub name: &'a str,
    /// The contract's version.
    pub version: &'a str,
}

/// Something countable an executor did. See [`crate::metric`] for the
/// instruments each feeds.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum EffectEvent<'a> {
    /// An execution answered.
    Executed {
        /// Its contract.
        contract: ContractRef<'a>,
        /// Its answer.
        result: &'a EffectResult,
        /// From the call to the answer, on the executor's clock.
        duration: Duration,
    },
    /// An execution failed with an executor error.
    Failed {
        /// Its contract.
        contract: ContractRef<'a>,
        /// The error.
        error: &'a ExecError,
        /// From the call to the error, on the executor's clock.
        duration: Duration,
    },
    /// A handler call ended.
    HandlerCalled {
        /// Its contract.
        contract: ContractRef<'a>,
        /// `returned`, `rejected`, `failed`, `not_sent` or `timed_out`.
        outcome: &'static str,
        /// How long it took, on the executor's clock.
        duration: Duration,
    },
    /// A reconciliation acted on `answer` (see [`crate::metric::RECONCILIATIONS`]).
    Reconciled {
        /// Its contract.
        contract: ContractRef<'a>,
        /// What it acted on.
        answer: &'static str,
    },
    /// This process quarantined an operation (see [`crate::metric::QUARANTINES`]).
    Quarantined {
        /// Its contract.
        contract: ContractRef<'a>,
        /// Why, as a short code.
        reason: &'static str,
    },
    /// A budget refused a claim.
    BudgetRefused {
        /// Its contract.
        contract: ContractRef<'a>,
    },
    /// A recovery worker dispatched an operation left behind.
    RecoveryDispatched {
        /// Its contract.
        contract: ContractRef<'a>,
        /// What the pass counted it as (`confirmed`, `unsettled`, `failed`, …).
        outcome: &'static str,
    },
}

/// What an observer knows of an execution as it starts.
#[derive(Debug)]
#[non_exhaustive]
pub struct ExecutionStart<'a> {
    /// Its contract.
    pub contract: ContractRef<'a>,
    /// The operation id (the tool call id).
    pub operation_id: &'a str,
    /// The recovery worker runs it, for an operation left behind.
    pub recovery: bool,
    /// The trace context stored with the operation by the execution that
    /// created it, when a recovery worker runs it.
    pub linked_trace: Option<&'a str>,
    pub(crate) arguments: &'a Value,
    pub(crate) redactor: Option<&'a Redactor>,
}

impl ExecutionStart<'_> {
    /// The call's arguments with every secret replaced by the redaction
    /// marker, as the ledger would write them: for an observer that opts in
    /// to recording arguments. Computed on each call.
    pub fn redacted_arguments(&self) -> Value {
        match self.redactor {
            Some(redactor) => redactor.scrub_value(self.arguments),
            None => self.arguments.clone(),
        }
    }
}

/// Error of [`set_global_observer`]: one was set already.
#[derive(Debug, thiserror::Error)]
#[error("a global effect observer is set already")]
#[non_exhaustive]
pub struct GlobalObserverSet;

/// Sets the observer of every executor that has none of its own, for the
/// life of the process (as `metrics::set_global_recorder` does).
///
/// # Errors
///
/// [`GlobalObserverSet`] when one was set already.
pub fn set_global_observer(observer: Arc<dyn EffectObserver>) -> Result<(), GlobalObserverSet> {
    GLOBAL.set(observer).map_err(|_| GlobalObserverSet)
}

/// The process's observer, when one was set.
pub fn global_observer() -> Option<&'static Arc<dyn EffectObserver>> {
    GLOBAL.get()
}

static GLOBAL: OnceLock<Arc<dyn EffectObserver>> = OnceLock::new();

thread_local! {
    /// The trace of the execution running on this thread.
    static CURRENT: RefCell<Option<Box<dyn ExecutionTrace>>> = const { RefCell::new(None) };
    /// The trace context a recovery worker found for the operation it is
    /// about to execute on this thread (`Some(None)`: none stored).
    static RECOVERING: RefCell<Option<Option<String>>> = const { RefCell::new(None) };
}

/// Makes `trace` the current one on this thread until the returned guard
/// is dropped; the guard hands it back (to finish it) and restores the one
/// it replaced (a handler that executes an effect nests executions).
pub(crate) fn enter(trace: Option<Box<dyn ExecutionTrace>>) -> Entered {
    let previous = CURRENT.with_borrow_mut(|current| std::mem::replace(current, trace));
    Entered { previous }
}

/// The current trace of a running execution, restored on drop.
pub(crate) struct Entered {
    previous: Option<Box<dyn ExecutionTrace>>,
}

impl Entered {
    /// Ends the scope, returning the trace that was current in it.
    pub(crate) fn exit(mut self) -> Option<Box<dyn ExecutionTrace>> {
        let previous = self.previous.take();
        CURRENT.with_borrow_mut(|current| std::mem::replace(current, previous))
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        // Only on an unwind past `exit`: put the outer trace back.
        if let Some(previous) = self.previous.take() {
            CURRENT.with_borrow_mut(|current| *current = Some(previous));
        }
    }
}

/// Tells the current trace, if any, that `step` starts.
pub(crate) fn step_started(step: Step<'_>) {
    CURRENT.with_borrow_mut(|current| {
        if let Some(trace) = current {
            trace.step_started(step);
        }
    });
}

/// The scope of the current trace's last step, if it has one.
pub(crate) fn step_scope() -> Option<Arc<dyn StepScope>> {
    CURRENT.with_borrow(|current| current.as_ref().and_then(|trace| trace.step_scope()))
}

/// Tells the current trace, if any, that its last step ended.
pub(crate) fn step_finished(failure: Option<&'static str>) {
    CURRENT.with_borrow_mut(|current| {
        if let Some(trace) = current {
            trace.step_finished(failure);
        }
    });
}

/// A ledger write as a step of the current trace.
pub(crate) fn ledger_write<T, E>(
    transition: &str,
    write: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    step_started(Step::LedgerWrite { transition });
    let written = write();
    step_finished(written.as_ref().err().map(|_| "error"));
    written
}

/// Tells the current trace, if any, about `event`.
pub(crate) fn trace_event(event: &EffectEvent<'_>) {
    CURRENT.with_borrow_mut(|current| {
        if let Some(trace) = current {
            trace.record(event);
        }
    });
}

/// Runs `execute` as a recovery of an operation whose stored trace context
/// is `linked`: an execution it starts on this thread is traced as one.
pub(crate) fn recovering<T>(linked: Option<&str>, execute: impl FnOnce() -> T) -> T {
    let previous = RECOVERING.with_borrow_mut(|slot| slot.replace(linked.map(str::to_owned)));
    let answer = execute();
    RECOVERING.with_borrow_mut(|slot| *slot = previous);
    answer
}

/// Takes the recovery mark [`recovering`] set for the next execution on
/// this thread: `None` for an ordinary call.
pub(crate) fn take_recovery() -> Option<Option<String>> {
    RECOVERING.with_borrow_mut(Option::take)
}
