//! The agent runtime of production-agent-systems (docs/spec.md §11).
//!
//! An [`AgentRuntime`] runs a [`Planner`]'s actions (call a tool, finish)
//! against a [`ToolRegistry`]:
//!
//! - every call is vetted by a [`PermissionPolicy`] before any handler runs: a
//!   tool that is not allowed fails the run (audited); a mutation without a
//!   confirmation of its exact invocation from the trusted outer layer
//!   ([`RunOptions::confirmed_mutations`], never the task or the planner)
//!   makes the run wait (audited); the policy can also require a human
//!   approval of every call of named tools or of tools from a [`Risk`] up
//!   ([`PermissionPolicy::require_approval_for`],
//!   [`PermissionPolicy::require_approval_at_risk`]): the call's effect
//!   operation is recorded `awaiting_approval`, nothing is dispatched, the
//!   run waits ([`RunReport::awaiting_approval`]), and
//!   `AgentRuntime::resume_when_approved` (feature `effects`) resumes it once
//!   a person approved that exact request (docs/approval.md);
//! - arguments are validated fail-closed against the tool's JSON Schema
//!   ([`InputSchema`]); invalid input never reaches a handler and never counts
//!   as a dependency failure;
//! - tools with an [`EffectContract`](effect_core::EffectContract) run through
//!   `effect-exec`'s recovery executor: recorded before dispatch under a
//!   stable operation id, and an uncertain or quarantined outcome moves the run
//!   to `waiting`, so a resume reconciles the same operation instead of
//!   dispatching it again;
//! - plain tools get a per-call timeout (default 2 s), a [`RetryPolicy`]
//!   (retryable error kinds configurable, default `timeout`; bounded
//!   exponential backoff) and a per-dependency circuit breaker consulted
//!   before every attempt. They have no ledger, so a plain step interrupted
//!   by a crash runs again on resume: give a tool an effect contract when its
//!   side effect must not repeat;
//! - each run follows the [`RunStatus`] machine, writes ordered
//!   [`TraceEvent`](trace::TraceEvent)s and, separately,
//!   [`AuditRecord`](trace::AuditRecord)s (every invocation: requested, then
//!   succeeded or failed), checkpoints after every step with its working
//!   data, and resumes from its [`Checkpoint`](checkpoint::Checkpoint);
//! - [`ReplaySummary`] reads a run back from its trace.
//!
//! The root holds what a runtime's user names; the rest is in its module:
//! [`invocation`] ([`ToolExecutor`](invocation::ToolExecutor), the
//! invocation reports), [`checkpoint`] (a run's saved state and pending
//! step), [`trace`] (trace events and audit records), [`store`] (the store
//! traits and in-memory stores), [`resilience`], [`tool`], [`planner`],
//! [`policy`], [`replay`], [`status`] and [`error`].
//!
//! It depends on `effect-core` and (feature `effects`) `effect-exec`, and on
//! no effect ledger store: the caller hands the executor a ledger. Its only
//! storage of its own is the optional SQLite *checkpoint* store.
//!
//! ```
//! # #[cfg(feature = "effects")] {
//! use std::sync::Arc;
//! use agent_runtime::{
//!     Action, AgentRuntime, DeterministicPlanner, EffectKind, PermissionPolicy, RunOptions,
//!     RunStatus, Task, ToolDefinition, ToolRegistry,
//! };
//! use effect_core::{EffectContract, MemoryLedger};
//! use effect_exec::EffectExecutor;
//! use serde_json::json;
//!
//! let capture = EffectContract::builder("capture_payment", |args| {
//!     Ok(format!("invoice:{}:capture", args["invoice_id"].as_str().ok_or("missing invoice_id")?))
//! })
//! .build()?;
//! let mut tools = ToolRegistry::new();
//! tools.register(
//!     ToolDefinition::new(
//!         "capture_payment",
//!         "Captures an invoice's payment",
//!         json!({"type": "object", "properties": {"invoice_id": {"type": "string"}}, "required": ["invoice_id"]}),
//!         EffectKind::Mutation,
//!         |input| Ok(json!({"payment_id": format!("pay-{}", input.arguments["invoice_id"].as_str().unwrap_or(""))})),
//!     )
//!     .effect_contract(capture),
//! )?;
//! let planner = DeterministicPlanner::new([
//!     Action::call("capture_payment", json!({"invoice_id": "INV-1"})),
//!     Action::finish(json!("captured")),
//! ]);
//! let runtime = AgentRuntime::builder(tools, planner)
//!     .policy(PermissionPolicy::allow(["capture_payment"]))
//!     .effect_executor(EffectExecutor::new(Arc::new(MemoryLedger::new())))
//!     .build()?;
//!
//! let task = Task::new("run-1", json!("capture INV-1"));
//! // The mutation needs a confirmation from the trusted outer layer: the run waits.
//! let first = runtime.run(task.clone(), RunOptions::start())?;
//! assert_eq!(first.status, RunStatus::Waiting);
//! let invocation = first.awaiting_confirmation().expect("waits for a confirmation").to_owned();
//! // The outer layer confirms that exact invocation and resumes.
//! let done = runtime.run(task, RunOptions::resume().confirm(invocation))?;
//! assert_eq!(done.status, RunStatus::Completed);
//! assert_eq!(done.output, Some(json!("captured")));
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Feature flags
//!
//! - `effects` (default): tools with an effect contract run through
//!   `effect-exec` ([`AgentRuntimeBuilder::effect_executor`]). Without it, a
//!   registry holding such a tool is refused by [`AgentRuntimeBuilder::build`].
//! - `sqlite-checkpoints` (default): [`SqliteCheckpointStore`], durable run
//!   checkpoints in a SQLite file (bundled SQLite via rusqlite).
//! - `schemars`: `InputSchema::for_type`, a tool's input schema derived from
//!   its argument type.
//! - `tokio`: `AsyncAgentRuntime`, the same runs with an async planner
//!   (`AsyncPlanner`) and async tool handlers (`ToolDefinition::new_async`);
//!   effect-backed tools go through `EffectExecutor::execute_prepared_async`,
//!   and stores, synchronous handlers and an injected `Sleeper` run on
//!   tokio's blocking pool.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "effects")]
mod approval;
#[cfg(feature = "tokio")]
mod asynchronous;
pub mod checkpoint;
#[cfg(feature = "effects")]
mod compensation;
pub mod error;
mod flavour;
mod future;
pub mod invocation;
pub mod planner;
pub mod policy;
pub mod replay;
pub mod resilience;
mod run;
mod runtime;
#[cfg(feature = "sqlite-checkpoints")]
mod sqlite;
pub mod status;
pub mod store;
pub mod tool;
pub mod trace;

#[cfg(feature = "tokio")]
pub use asynchronous::AsyncAgentRuntime;
pub use checkpoint::invocation_id;
#[cfg(feature = "effects")]
pub use compensation::{
    CompensatedEffect, CompensationOutcome, CompensationPolicy, RunCompensation,
};
pub use effect_schema::InputSchema;
pub use error::{PlannerError, RegistryError, RunError, ToolError, ToolErrorKind};
pub use future::StepFuture;
#[cfg(feature = "tokio")]
pub use planner::AsyncPlanner;
pub use planner::{Action, DeterministicPlanner, PlanContext, Planner, Task};
pub use policy::PermissionPolicy;
pub use replay::ReplaySummary;
pub use resilience::{CircuitBreakerPolicy, RetryPolicy};
pub use run::{RunOptions, RunReport};
pub use runtime::{AgentRuntime, AgentRuntimeBuilder};
#[cfg(feature = "sqlite-checkpoints")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite-checkpoints")))]
pub use sqlite::SqliteCheckpointStore;
pub use status::RunStatus;
pub use store::CheckpointStore;
pub use tool::{EffectKind, Risk, ToolDefinition, ToolInput, ToolRegistry};
