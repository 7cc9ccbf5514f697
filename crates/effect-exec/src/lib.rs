//! The recovery executor of production-agent-systems.
//!
//! [`EffectExecutor`] runs an agent's side effect (a payment capture, an email)
//! so that it is recorded durably *before* dispatch, under the stable operation
//! id of its [`EffectContract`](effect_core::EffectContract), and never
//! dispatched twice unless the provider's contract makes that safe:
//!
//! - a confirmed operation replays its stored output;
//! - a live dispatch elsewhere returns `in_progress` (or, optionally, waits for it);
//! - an uncertain outcome (failure after dispatch, missed deadline, expired
//!   lease) is reconciled through the contract's outcome probe or a guaranteed
//!   provider idempotency key, and otherwise quarantined for an operator
//!   ([`Operator::resolve`], through [`EffectExecutor::operator`]).
//!
//! It depends on `effect-core` only and takes the ledger as
//! `Arc<dyn EffectLedger>`; it names no store. A timeout, a crash or a model's
//! answer is never taken as proof that an effect did or did not happen.
//!
//! # Feature flags
//!
//! - `tokio`: [`EffectExecutor::execute_async`] and
//!   [`EffectExecutor::execute_typed_async`], with async handlers and probes.
//! - `metrics`: counters and timings through the `metrics` facade, under the
//!   names of [`metric`] (`effect_executions_total{contract,status}`,
//!   `effect_reconciliations_total{probe_status}`, `effect_quarantined_total{reason}`,
//!   handler and execution durations, …), and the gauge
//!   `effect_stale_dispatches` (set by each sweep).
//! - `anyhow` (default): `?` on an `anyhow::Error` inside a handler converts it
//!   into [`HandlerError::Unknown`] with its context chain.
//!
//! # Observing
//!
//! An [`EffectObserver`] (given to one executor with
//! [`EffectExecutor::observer`], or to all with [`set_global_observer`]) is
//! told what executions do, as events for metrics and as one
//! [`ExecutionTrace`] per execution; effect-otel implements it for
//! OpenTelemetry. [`metric`] names the instruments once for every exporter.
//!
//! # Typed effects
//!
//! [`TypedContract`] and [`EffectExecutor::execute_typed`] take the caller's own
//! serde types for arguments and output, over the same `Value` API.
//!
//! ```
//! use std::sync::Arc;
//! use effect_core::{EffectContract, MemoryLedger, OutcomeProbeResult};
//! use effect_exec::{EffectExecutor, HandlerError};
//! use serde_json::{json, Value};
//!
//! let contract = EffectContract::builder("capture_payment", |args| {
//!     Ok(format!("invoice:{}:capture", args["invoice_id"].as_str().ok_or("missing invoice_id")?))
//! })
//! .provider_idempotency_key(|args| Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}"))))
//! .outcome_probe(|_args, _key| Ok(OutcomeProbeResult::committed(json!({"payment_id": "pay-1"}))))
//! .build()?;
//!
//! let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
//! // The provider commits, but the acknowledgement is lost.
//! let result = executor.execute(&contract, &json!({"invoice_id": "INV-1"}), |_args: Value, _ctx| {
//!     Err::<Value, _>(HandlerError::unknown("timed out waiting for the response"))
//! })?;
//! // The probe finds the commit: confirmed, without a second capture.
//! assert!(result.is_confirmed());
//! assert_eq!(result.output, Some(json!({"payment_id": "pay-1"})));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod approval;
#[cfg(feature = "tokio")]
mod asynchronous;
mod blocked;
mod call;
mod compensation;
mod context;
mod dispatch;
mod error;
mod executor;
mod heartbeat;
mod identity;
pub mod metric;
mod notice;
mod observe;
mod operator;
mod options;
mod pages;
mod periodic;
mod prepared;
mod reconcile;
mod recovery;
mod retention;
mod retry_basis;
mod round;
pub mod secrets;
mod sweep;
mod telemetry;
mod token;
mod typed;

pub use context::HandlerContext;
pub use effect_core::Audit;
pub use error::{CompensationRefusal, ExecError, HandlerError};
pub use executor::EffectExecutor;
pub use notice::UncertainOutcome;
pub use observe::{
    ContractRef, EffectEvent, EffectObserver, ExecutionStart, ExecutionTrace, GlobalObserverSet,
    ScopeGuard, Step, StepScope, global_observer, set_global_observer,
};
pub use operator::Operator;
pub use options::{CallOptions, ExecutorOptions};
pub use pages::DEFAULT_PAGE_SIZE;
pub use prepared::PreparedEffect;
pub use recovery::{
    DEFAULT_MIN_AGE, RecoveryHandle, RecoveryReport, RecoveryWorker, Waiting, WaitingFor, waiting,
};
pub use retention::{DEFAULT_BATCHES_PER_PASS, DEFAULT_RETENTION_EVERY, Retention};
pub use sweep::{ArgumentLookup, SweepHandle, SweepReport, Sweeper};
pub use typed::{TypedContract, TypedContractBuilder, TypedProbe, TypedResult};
