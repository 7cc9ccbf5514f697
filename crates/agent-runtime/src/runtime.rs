//! [`AgentRuntime`]: runs a planner's actions against the tools, with the
//! run-status machine, traces, audit records and a checkpoint after every step.

use std::sync::Arc;
use std::time::Duration;

use effect_core::{Clock, SystemClock};

use crate::error::RunError;
use crate::flavour::Blocking;
use crate::future::block_on;
use crate::invocation::ToolExecutor;
use crate::planner::{Planner, Task};
use crate::policy::PermissionPolicy;
use crate::resilience::{CircuitBreakerPolicy, RetryPolicy, Sleeper};
use crate::run::{Engine, Run, RunOptions, RunReport};
use crate::store::{
    AuditStore, CheckpointStore, EventStore, MemoryAuditStore, MemoryCheckpointStore,
    MemoryEventStore,
};
use crate::tool::ToolRegistry;

/// Runs tasks: a planner chooses actions, the policy vets them, the tool
/// executor runs them, and every step is traced and checkpointed.
///
/// Built with [`AgentRuntime::builder`]; see the crate docs for an example.
#[derive(Debug, Clone)]
pub struct AgentRuntime {
    engine: Engine,
    planner: Arc<dyn Planner>,
}

/// Builds an [`AgentRuntime`] (or, over an async planner, an
/// `AsyncAgentRuntime`: feature `tokio`).
#[derive(Debug)]
pub struct AgentRuntimeBuilder<P: ?Sized = dyn Planner> {
    tools: ToolExecutor,
    breaker: CircuitBreakerPolicy,
    policy: PermissionPolicy,
    planner: Arc<P>,
    events: Arc<dyn EventStore>,
    audit: Arc<dyn AuditStore>,
    checkpoints: Arc<dyn CheckpointStore>,
    clock: Arc<dyn Clock>,
}

impl AgentRuntime {
    /// Starts a runtime over `registry` and `planner`, with a deny-all policy
    /// and in-memory stores.
    pub fn builder(registry: ToolRegistry, planner: impl Planner + 'static) -> AgentRuntimeBuilder {
        AgentRuntimeBuilder::over(registry, Arc::new(planner))
    }

    /// What every run of this runtime shares.
    #[cfg(feature = "effects")]
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

    /// Runs `task` until it completes, fails, waits or pauses.
    ///
    /// With `options.resume` it continues from the task's checkpoint: a step
    /// awaiting confirmation is decided again with this call's confirmations;
    /// an effect whose outcome was uncertain is reconciled under the same
    /// operation id, and dispatched again only if its contract makes that safe.
    /// A checkpoint still saying `running` was left by a process that stopped
    /// mid-step; it is recorded as `running → failed → running`. Only one
    /// process may drive a run at a time: the runtime does not lease runs
    /// (effects are still protected by the ledger's dispatch lease).
    ///
    /// # Errors
    ///
    /// [`RunError::AlreadyExists`] / [`RunError::NoCheckpoint`] for a start or
    /// resume that does not match the stored state; [`RunError::TaskMismatch`];
    /// [`RunError::InvalidTransition`] (resuming a completed run);
    /// [`RunError::Store`]. A run that fails or waits is not an error.
    pub fn run(&self, task: Task, options: RunOptions) -> Result<RunReport, RunError> {
        #[cfg_attr(not(feature = "effects"), allow(unused_mut))]
        let mut report = block_on(async {
            Run::open(
                &self.engine,
                &Blocking,
                self.planner.as_ref(),
                task,
                &options,
            )
            .await?
            .drive()
            .await
        })?;
        #[cfg(feature = "effects")]
        if report.status == crate::RunStatus::Failed
            && options.compensation == crate::CompensationPolicy::OnFailure
        {
            report.compensation = Some(self.compensate_run(&report.run_id)?);
        }
        Ok(report)
    }

    /// Compensates the confirmed effects of run `run_id`, newest first
    /// (docs/compensation.md): each through the compensation its tool's
    /// contract names and the tool's
    /// [`compensation_handler`](crate::ToolDefinition::compensation_handler),
    /// durably, by the effect executor's rules. For a failed run (what
    /// [`CompensationPolicy::OnFailure`](crate::CompensationPolicy) does), or
    /// one its caller cancels: a waiting or paused run it will not resume.
    /// The run's status and checkpoint are left as they are. Calling it again
    /// replays what was done, compensating nothing twice.
    ///
    /// # Errors
    ///
    /// [`RunError::Store`] when the run's trace cannot be read. What could not
    /// be undone is in the report, not an error.
    #[cfg(feature = "effects")]
    #[cfg_attr(docsrs, doc(cfg(feature = "effects")))]
    pub fn compensate_run(
        &self,
        run_id: &str,
    ) -> Result<crate::compensation::RunCompensation, RunError> {
        crate::run::compensate::compensate_run(&self.engine, run_id)
    }
}

impl<P: ?Sized> AgentRuntimeBuilder<P> {
    /// A builder over `registry` and `planner`, with a deny-all policy and
    /// in-memory stores.
    pub(crate) fn over(registry: ToolRegistry, planner: Arc<P>) -> Self {
        AgentRuntimeBuilder {
            tools: ToolExecutor::new(registry),
            breaker: CircuitBreakerPolicy::default(),
            policy: PermissionPolicy::deny_all(),
            planner,
            events: Arc::new(MemoryEventStore::new()),
            audit: Arc::new(MemoryAuditStore::new()),
            checkpoints: Arc::new(MemoryCheckpointStore::new()),
            clock: Arc::new(SystemClock),
        }
    }

    /// Sets the permission policy (default: deny all).
    #[must_use]
    pub fn policy(mut self, policy: PermissionPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets the trace store.
    #[must_use]
    pub fn event_store(mut self, store: Arc<dyn EventStore>) -> Self {
        self.events = store;
        self
    }

    /// Sets the audit store.
    #[must_use]
    pub fn audit_store(mut self, store: Arc<dyn AuditStore>) -> Self {
        self.audit = store;
        self
    }

    /// Sets the checkpoint store.
    #[must_use]
    pub fn checkpoint_store(mut self, store: Arc<dyn CheckpointStore>) -> Self {
        self.checkpoints = store;
        self
    }

    /// Sets the retry policy of plain tools.
    #[must_use]
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.tools = self.tools.retry_policy(policy);
        self
    }

    /// Sets the circuit-breaker policy of plain tools.
    #[must_use]
    pub fn circuit_breaker(mut self, policy: CircuitBreakerPolicy) -> Self {
        self.breaker = policy;
        self
    }

    /// Sets the per-call timeout of plain tools (default
    /// [`DEFAULT_TOOL_TIMEOUT`](crate::invocation::DEFAULT_TOOL_TIMEOUT), 2 s; `None`:
    /// wait for ever). A handler past it counts as a `timeout` error and is
    /// retried per the retry policy; it is not stopped, only no longer waited
    /// for. Effect-backed tools keep their own deadline.
    #[must_use]
    pub fn tool_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.tools = self.tools.timeout(timeout);
        self
    }

    /// Sets what waits between retries of plain tools (tests inject one that
    /// does not sleep). Without one the synchronous runtime sleeps the thread
    /// and the async runtime waits on tokio's timer; with one, both call it,
    /// the async runtime on tokio's blocking pool.
    #[must_use]
    pub fn sleeper(mut self, sleeper: Arc<dyn Sleeper>) -> Self {
        self.tools = self.tools.sleeper(sleeper);
        self
    }

    /// Sets the clock for timestamps and circuit breakers.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Runs effect-backed tools through `executor`.
    #[cfg(feature = "effects")]
    #[cfg_attr(docsrs, doc(cfg(feature = "effects")))]
    #[must_use]
    pub fn effect_executor(mut self, executor: effect_exec::EffectExecutor) -> Self {
        self.tools = self.tools.effect_executor(executor);
        self
    }

    /// The shared parts and the planner, checked.
    pub(crate) fn into_parts(self) -> Result<(Engine, Arc<P>), RunError> {
        if !self.tools.has_effect_executor()
            && let Some(tool) = self
                .tools
                .registry()
                .tools()
                .find(|t| t.definition().contract().is_some())
        {
            return Err(RunError::NoEffectExecutor {
                tool: tool.definition().name().to_owned(),
            });
        }
        // The policy's approval rule, by tool and risk: only an effect
        // operation can wait for a ledger approval.
        let mut approval = std::collections::BTreeSet::new();
        for tool in self.tools.registry().tools() {
            let definition = tool.definition();
            if self
                .policy
                .requires_approval(definition.name(), definition.risk_level())
            {
                if definition.contract().is_none() {
                    return Err(RunError::ApprovalNeedsEffectContract {
                        tool: definition.name().to_owned(),
                    });
                }
                approval.insert(definition.name().to_owned());
            }
        }
        #[cfg(feature = "effects")]
        let tools = self.tools.approval_required(approval);
        #[cfg(not(feature = "effects"))]
        let tools = {
            // Without effects every effect-backed tool was refused above.
            debug_assert!(approval.is_empty());
            self.tools
        };
        let engine = Engine {
            tools: tools.circuit_breaker(self.breaker, Arc::clone(&self.clock)),
            policy: self.policy,
            events: self.events,
            audit: self.audit,
            checkpoints: self.checkpoints,
            clock: self.clock,
        };
        Ok((engine, self.planner))
    }
}

impl AgentRuntimeBuilder {
    /// Builds the runtime.
    ///
    /// # Errors
    ///
    /// [`RunError::NoEffectExecutor`] when a tool has an effect contract but
    /// no effect executor was given; [`RunError::ApprovalNeedsEffectContract`]
    /// when the policy requires approval of a tool without one;
    /// [`RunError::AsyncToolInSyncRuntime`] when a tool has an async handler.
    pub fn build(self) -> Result<AgentRuntime, RunError> {
        if let Some(tool) = self
            .tools
            .registry()
            .tools()
            .find(|t| t.definition().is_async())
        {
            return Err(RunError::AsyncToolInSyncRuntime {
                tool: tool.definition().name().to_owned(),
            });
        }
        let (engine, planner) = self.into_parts()?;
        Ok(AgentRuntime { engine, planner })
    }
}
