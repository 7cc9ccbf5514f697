//! [`AgentRuntime`]: runs a planner's actions against the tools, with the
//! run-status machine, traces, audit records and a checkpoint after every step.

use std::collections::BTreeSet;
use std::sync::Arc;

use effect_core::{Clock, SystemClock};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::checkpoint::{Checkpoint, PendingStage, PendingStep};
use crate::error::RunError;
use crate::executor::ToolExecutor;
use crate::planner::{Planner, Task};
use crate::policy::PermissionPolicy;
use crate::resilience::{CircuitBreakerPolicy, RetryPolicy, Sleeper};
use crate::run::Run;
use crate::status::RunStatus;
use crate::store::{
    AuditStore, CheckpointStore, EventStore, MemoryAuditStore, MemoryCheckpointStore,
    MemoryEventStore,
};
use crate::tool::ToolRegistry;
use crate::trace::TraceEventKind;

/// How one call of [`AgentRuntime::run`] behaves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Continue the run from its checkpoint instead of starting it.
    pub resume: bool,
    /// Pause after this many steps of this call.
    pub stop_after_steps: Option<u32>,
    /// Invocation ids (see [`invocation_id`](crate::invocation_id)) that the trusted outer layer
    /// confirmed for this call. Only mutations named here may run; the task
    /// and the planner can never add to it.
    pub confirmed_mutations: BTreeSet<String>,
}

impl RunOptions {
    /// Start a run.
    pub fn start() -> Self {
        RunOptions::default()
    }

    /// Resume a run from its checkpoint.
    pub fn resume() -> Self {
        RunOptions {
            resume: true,
            ..RunOptions::default()
        }
    }

    /// Pauses after `steps` steps.
    #[must_use]
    pub fn stop_after_steps(mut self, steps: u32) -> Self {
        self.stop_after_steps = Some(steps);
        self
    }

    /// Confirms one mutation invocation.
    #[must_use]
    pub fn confirm(mut self, invocation_id: impl Into<String>) -> Self {
        self.confirmed_mutations.insert(invocation_id.into());
        self
    }
}

/// Where a run stands after a call of [`AgentRuntime::run`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunReport {
    /// The run.
    pub run_id: String,
    /// Its status: `completed`, `failed`, `waiting` or `paused`.
    pub status: RunStatus,
    /// Completed steps.
    pub steps: u32,
    /// The answer of a completed run.
    pub output: Option<Value>,
    /// Why it failed or waits.
    pub error: Option<String>,
    /// The step it waits on: a mutation awaiting confirmation, or an
    /// uncertain effect awaiting reconciliation.
    pub pending: Option<PendingStep>,
}

impl RunReport {
    pub(crate) fn of(checkpoint: &Checkpoint) -> Self {
        RunReport {
            run_id: checkpoint.run_id.clone(),
            status: checkpoint.status,
            steps: checkpoint.step,
            output: checkpoint.output.clone(),
            error: checkpoint.error.clone(),
            pending: checkpoint.pending.clone(),
        }
    }

    /// The invocation id to confirm, when the run waits for a confirmation.
    pub fn awaiting_confirmation(&self) -> Option<&str> {
        self.pending
            .as_ref()
            .filter(|p| p.stage == PendingStage::AwaitingConfirmation)
            .map(|p| p.invocation_id.as_str())
    }
}

/// Runs tasks: a planner chooses actions, the policy vets them, the tool
/// executor runs them, and every step is traced and checkpointed.
///
/// Built with [`AgentRuntime::builder`]; see the crate docs for an example.
#[derive(Debug, Clone)]
pub struct AgentRuntime {
    pub(crate) tools: ToolExecutor,
    pub(crate) policy: PermissionPolicy,
    pub(crate) planner: Arc<dyn Planner>,
    pub(crate) events: Arc<dyn EventStore>,
    pub(crate) audit: Arc<dyn AuditStore>,
    pub(crate) checkpoints: Arc<dyn CheckpointStore>,
    pub(crate) clock: Arc<dyn Clock>,
}

/// Builds an [`AgentRuntime`].
#[derive(Debug)]
pub struct AgentRuntimeBuilder {
    tools: ToolExecutor,
    breaker: CircuitBreakerPolicy,
    policy: PermissionPolicy,
    planner: Arc<dyn Planner>,
    events: Arc<dyn EventStore>,
    audit: Arc<dyn AuditStore>,
    checkpoints: Arc<dyn CheckpointStore>,
    clock: Arc<dyn Clock>,
}

impl AgentRuntime {
    /// Starts a runtime over `registry` and `planner`, with a deny-all policy
    /// and in-memory stores.
    pub fn builder(registry: ToolRegistry, planner: impl Planner + 'static) -> AgentRuntimeBuilder {
        AgentRuntimeBuilder {
            tools: ToolExecutor::new(registry),
            breaker: CircuitBreakerPolicy::default(),
            policy: PermissionPolicy::deny_all(),
            planner: Arc::new(planner),
            events: Arc::new(MemoryEventStore::new()),
            audit: Arc::new(MemoryAuditStore::new()),
            checkpoints: Arc::new(MemoryCheckpointStore::new()),
            clock: Arc::new(SystemClock),
        }
    }

    /// The tool executor.
    pub fn tools(&self) -> &ToolExecutor {
        &self.tools
    }

    /// The trace store.
    pub fn events(&self) -> &Arc<dyn EventStore> {
        &self.events
    }

    /// The audit store.
    pub fn audit(&self) -> &Arc<dyn AuditStore> {
        &self.audit
    }

    /// The checkpoint store.
    pub fn checkpoints(&self) -> &Arc<dyn CheckpointStore> {
        &self.checkpoints
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
        if task.id.trim().is_empty() {
            return Err(RunError::BlankRunId);
        }
        let run_id = task.id.clone();
        let store_error = |source| RunError::Store {
            run_id: run_id.clone(),
            source,
        };
        let existing = self.checkpoints.load(&run_id).map_err(store_error)?;
        let run = match (options.resume, existing) {
            (false, Some(_)) => return Err(RunError::AlreadyExists { run_id }),
            (true, None) => return Err(RunError::NoCheckpoint { run_id }),
            (false, None) => {
                let mut run = Run::new(self, Checkpoint::new(task), &options)?;
                let input = run.state.task.input.clone();
                run.emit(TraceEventKind::RunStarted { task: input })?;
                run.transition(RunStatus::Running, "run started")?;
                run
            }
            (true, Some(checkpoint)) => {
                if checkpoint.task != task {
                    return Err(RunError::TaskMismatch { run_id });
                }
                let from = checkpoint.status;
                // A checkpoint taken mid-step says `running`: the process that
                // ran it stopped. That counts as a failure, which may resume.
                let interrupted = from == RunStatus::Running;
                let resumable = if interrupted { RunStatus::Failed } else { from };
                // Checked before anything is written for this call.
                resumable.transition(RunStatus::Running).map_err(|source| {
                    RunError::InvalidTransition {
                        run_id: run_id.clone(),
                        source,
                    }
                })?;
                let mut run = Run::new(self, checkpoint, &options)?;
                run.resumed_from = Some(from);
                if interrupted {
                    run.transition(
                        RunStatus::Failed,
                        "the process running this run stopped mid-step",
                    )?;
                }
                run.transition(RunStatus::Running, "resumed from checkpoint")?;
                let effect_pending = run
                    .state
                    .pending
                    .as_ref()
                    .is_some_and(|p| p.stage != PendingStage::AwaitingConfirmation);
                if !effect_pending {
                    // An uncertain effect gets its recovery event once reconciled.
                    run.emit_recovery(None, None)?;
                }
                run
            }
        };
        run.drive()
    }
}

impl AgentRuntimeBuilder {
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

    /// Sets what waits between retries (tests inject one that does not sleep).
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

    /// Builds the runtime.
    ///
    /// # Errors
    ///
    /// [`RunError::NoEffectExecutor`] when a tool has an effect contract but
    /// no effect executor was given.
    pub fn build(self) -> Result<AgentRuntime, RunError> {
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
        Ok(AgentRuntime {
            tools: self
                .tools
                .circuit_breaker(self.breaker, Arc::clone(&self.clock)),
            policy: self.policy,
            planner: self.planner,
            events: self.events,
            audit: self.audit,
            checkpoints: self.checkpoints,
            clock: self.clock,
        })
    }
}
