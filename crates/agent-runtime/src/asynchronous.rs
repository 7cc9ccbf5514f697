//! [`AsyncAgentRuntime`] (feature `tokio`): the same runs as
//! [`AgentRuntime`](crate::AgentRuntime), with an async planner and async
//! tool handlers.
//!
//! It awaits the one implementation of the run logic with the tokio flavour
//! (`flavour/on_tokio.rs`): planner calls and async handlers are awaited;
//! synchronous handlers, an injected sleeper and every trace, audit and
//! checkpoint store call run on the blocking pool; retries wait on tokio's
//! timer unless a sleeper was injected; effect-backed tools go through
//! [`EffectExecutor::execute_prepared_async`](effect_exec::EffectExecutor::execute_prepared_async),
//! whose ledger commits run on the blocking pool too.

use std::sync::Arc;

use crate::error::RunError;
use crate::flavour::on_tokio::Tokio;
use crate::invocation::ToolExecutor;
use crate::planner::{AsyncPlanner, Task};
use crate::run::{Engine, Run, RunOptions, RunReport};
use crate::runtime::AgentRuntimeBuilder;
use crate::store::{AuditStore, CheckpointStore, EventStore};
use crate::tool::ToolRegistry;

/// Runs tasks like [`AgentRuntime`](crate::AgentRuntime), on tokio: the same
/// run-status machine, policy, schema validation, checkpoints, trace and
/// audit records, from the same code.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use agent_runtime::{
///     Action, AsyncAgentRuntime, DeterministicPlanner, EffectKind, PermissionPolicy, RunOptions,
///     RunStatus, Task, ToolDefinition, ToolRegistry,
/// };
/// use serde_json::json;
///
/// let mut tools = ToolRegistry::new();
/// tools.register(ToolDefinition::new_async(
///     "lookup_invoice",
///     "Reads an invoice",
///     json!({"type": "object", "properties": {"invoice_id": {"type": "string"}}}),
///     EffectKind::Read,
///     |input| async move { Ok(json!({"amount_cents": 1200, "invoice_id": input.arguments["invoice_id"]})) },
/// ))?;
/// let planner = DeterministicPlanner::new([
///     Action::call("lookup_invoice", json!({"invoice_id": "INV-1"})),
///     Action::finish(json!("looked up")),
/// ]);
/// let runtime = AsyncAgentRuntime::builder(tools, planner)
///     .policy(PermissionPolicy::allow(["lookup_invoice"]))
///     .build()?;
/// let report = runtime.run(Task::new("run-1", json!("look INV-1 up")), RunOptions::start()).await?;
/// assert_eq!(report.status, RunStatus::Completed);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct AsyncAgentRuntime {
    engine: Engine,
    planner: Arc<dyn AsyncPlanner>,
}

impl AsyncAgentRuntime {
    /// Starts a runtime over `registry` and `planner`, with a deny-all policy
    /// and in-memory stores. The builder is [`AgentRuntime`](crate::AgentRuntime)'s.
    pub fn builder(
        registry: ToolRegistry,
        planner: impl AsyncPlanner + 'static,
    ) -> AgentRuntimeBuilder<dyn AsyncPlanner> {
        AgentRuntimeBuilder::over(registry, Arc::new(planner))
    }

    /// What every run of this runtime shares.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The tool executor.
    pub fn tools(&self) -> &ToolExecutor {
        &self.engine.tools
    }

    /// The trace store.
    pub fn events(&self) -> &Arc<dyn EventStore> {
        &self.engine.events
    }

    /// The audit store.
    pub fn audit(&self) -> &Arc<dyn AuditStore> {
        &self.engine.audit
    }

    /// The checkpoint store.
    pub fn checkpoints(&self) -> &Arc<dyn CheckpointStore> {
        &self.engine.checkpoints
    }

    /// Runs `task` until it completes, fails, waits or pauses; the async form
    /// of [`AgentRuntime::run`](crate::AgentRuntime::run), with the same
    /// start, resume and error semantics. Must be awaited within a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`AgentRuntime::run`](crate::AgentRuntime::run).
    pub async fn run(&self, task: Task, options: RunOptions) -> Result<RunReport, RunError> {
        let mut report = Run::open(&self.engine, &Tokio, self.planner.as_ref(), task, &options)
            .await?
            .drive()
            .await?;
        if report.status == crate::RunStatus::Failed
            && options.compensation == crate::CompensationPolicy::OnFailure
        {
            report.compensation = Some(self.compensate_run(&report.run_id).await?);
        }
        Ok(report)
    }

    /// [`AgentRuntime::compensate_run`](crate::AgentRuntime::compensate_run)
    /// on tokio's blocking pool: the compensation handlers are synchronous
    /// and the ledger's commits wait for the disk.
    ///
    /// # Errors
    ///
    /// As [`AgentRuntime::compensate_run`](crate::AgentRuntime::compensate_run).
    pub async fn compensate_run(
        &self,
        run_id: &str,
    ) -> Result<crate::compensation::RunCompensation, RunError> {
        let engine = self.engine.clone();
        let id = run_id.to_owned();
        tokio::task::spawn_blocking(move || crate::run::compensate::compensate_run(&engine, &id))
            .await
            .map_err(|err| RunError::Store {
                run_id: run_id.to_owned(),
                source: crate::error::StoreError::backend("run the compensation task", err),
            })?
    }
}

impl AgentRuntimeBuilder<dyn AsyncPlanner> {
    /// Builds the async runtime.
    ///
    /// # Errors
    ///
    /// [`RunError::NoEffectExecutor`] when a tool has an effect contract but
    /// no effect executor was given.
    pub fn build(self) -> Result<AsyncAgentRuntime, RunError> {
        let (engine, planner) = self.into_parts()?;
        Ok(AsyncAgentRuntime { engine, planner })
    }
}
