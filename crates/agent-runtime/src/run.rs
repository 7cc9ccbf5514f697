//! [`Run`]: one call of [`AgentRuntime::run`](crate::AgentRuntime::run):
//! starting or resuming the run, then stepping through the plan. The parts
//! live apart: what a caller passes and gets back ([`RunOptions`],
//! [`RunReport`]) in `report.rs`; one tool step (policy, validation and
//! confirmation, the invocation and its outcome) in `invoke.rs`; what a run
//! writes (status transitions, trace events, audit records, checkpoints) in
//! `record.rs`. The runtime only holds the parts.

use std::sync::Arc;

use effect_core::Clock;
use serde_json::Value;

use crate::checkpoint::{Checkpoint, PendingStage, PendingStep, invocation_id};
use crate::error::RunError;
use crate::flavour::Flavour;
use crate::invocation::ToolExecutor;
use crate::planner::{Action, Observation, PlanContext, Task};
use crate::policy::PermissionPolicy;
use crate::status::RunStatus;
use crate::store::{AuditStore, CheckpointStore, EventStore};
use crate::trace::{AuditKind, ToolResultStatus, TraceEventKind};

#[cfg(feature = "effects")]
pub(crate) mod compensate;
mod invoke;
mod record;
mod report;

pub use report::{RunOptions, RunReport};

/// What every run of a runtime shares: the tools, the policy and the stores.
#[derive(Debug, Clone)]
pub(crate) struct Engine {
    pub(crate) tools: ToolExecutor,
    pub(crate) policy: PermissionPolicy,
    pub(crate) events: Arc<dyn EventStore>,
    pub(crate) audit: Arc<dyn AuditStore>,
    pub(crate) checkpoints: Arc<dyn CheckpointStore>,
    pub(crate) clock: Arc<dyn Clock>,
}

/// How a step ended.
pub(crate) enum StepEnd {
    /// The step completed; the run goes on.
    Continue,
    /// The run stopped (waiting, failed, completed); state already saved.
    Stop,
}

/// One call of `run`: the state and where it goes, in a flavour.
pub(crate) struct Run<'a, F: Flavour> {
    runtime: &'a Engine,
    flavour: &'a F,
    planner: &'a F::Planner,
    options: &'a RunOptions,
    state: Checkpoint,
    next_event: u64,
    next_audit: u64,
    resumed_from: Option<RunStatus>,
    steps_this_call: u32,
}

impl<'a, F: Flavour> Run<'a, F> {
    /// Starts `task` or, with `options.resume`, resumes it from its checkpoint.
    ///
    /// A resume decides a step awaiting confirmation again with this call's
    /// confirmations, and hands an effect whose outcome was uncertain back to
    /// the executor under the same operation id. A checkpoint still saying
    /// `running` was left by a process that stopped mid-step; it is recorded as
    /// `running → failed → running`.
    pub(crate) async fn open(
        runtime: &'a Engine,
        flavour: &'a F,
        planner: &'a F::Planner,
        task: Task,
        options: &'a RunOptions,
    ) -> Result<Self, RunError> {
        if task.id.trim().is_empty() {
            return Err(RunError::BlankRunId);
        }
        let run_id = task.id.clone();
        let checkpoints = Arc::clone(&runtime.checkpoints);
        let id = run_id.clone();
        let existing = flavour
            .store(move || checkpoints.load(&id))
            .await
            .map_err(|source| RunError::Store {
                run_id: run_id.clone(),
                source,
            })?;
        let run = Run {
            runtime,
            flavour,
            planner,
            options,
            state: Checkpoint::new(task),
            next_event: 1,
            next_audit: 1,
            resumed_from: None,
            steps_this_call: 0,
        };
        match (options.resume, existing) {
            (false, Some(_)) => Err(RunError::AlreadyExists { run_id }),
            (true, None) => Err(RunError::NoCheckpoint { run_id }),
            (false, None) => run.start().await,
            (true, Some(checkpoint)) => {
                if checkpoint.task != run.state.task {
                    return Err(RunError::TaskMismatch { run_id });
                }
                run.resume(checkpoint).await
            }
        }
    }

    /// Starts the fresh run `self` holds.
    async fn start(mut self) -> Result<Self, RunError> {
        self.continue_sequences().await?;
        let input = self.state.task.input.clone();
        self.emit(TraceEventKind::RunStarted { task: input })
            .await?;
        self.transition(RunStatus::Running, "run started").await?;
        Ok(self)
    }

    /// Resumes the run from `checkpoint`.
    async fn resume(mut self, checkpoint: Checkpoint) -> Result<Self, RunError> {
        let from = checkpoint.status;
        // A checkpoint taken mid-step says `running`: the process that
        // ran it stopped. That counts as a failure, which may resume.
        let interrupted = from == RunStatus::Running;
        let resumable = if interrupted { RunStatus::Failed } else { from };
        // Checked before anything is written for this call.
        resumable
            .transition(RunStatus::Running)
            .map_err(|source| RunError::InvalidTransition {
                run_id: checkpoint.run_id.clone(),
                source,
            })?;
        self.check_pending_identity(&checkpoint)?;
        self.state = checkpoint;
        self.continue_sequences().await?;
        self.resumed_from = Some(from);
        if interrupted {
            self.transition(
                RunStatus::Failed,
                "the process running this run stopped mid-step",
            )
            .await?;
        }
        self.transition(RunStatus::Running, "resumed from checkpoint")
            .await?;
        let effect_pending = self
            .state
            .pending
            .as_ref()
            .is_some_and(|p| p.stage != PendingStage::AwaitingConfirmation);
        if !effect_pending {
            // An uncertain effect gets its recovery event once reconciled.
            self.emit_recovery(None, None).await?;
        }
        Ok(self)
    }

    /// Continues the sequence numbers after the stored ones: events
    /// written after the last checkpoint (by a process that then stopped)
    /// keep theirs.
    async fn continue_sequences(&mut self) -> Result<(), RunError> {
        let (events, audit) = (
            Arc::clone(&self.runtime.events),
            Arc::clone(&self.runtime.audit),
        );
        let run_id = self.state.run_id.clone();
        let (last_event, last_audit) = self
            .flavour
            .store(move || {
                Ok((
                    events.last_sequence(&run_id)?,
                    audit.last_sequence(&run_id)?,
                ))
            })
            .await
            .map_err(|source| self.store_error(source))?;
        self.next_event = last_event.max(self.state.last_event_sequence) + 1;
        self.next_audit = last_audit.max(self.state.last_audit_sequence) + 1;
        Ok(())
    }

    pub(crate) async fn drive(mut self) -> Result<RunReport, RunError> {
        loop {
            if self
                .options
                .stop_after_steps
                .is_some_and(|limit| self.steps_this_call >= limit)
            {
                self.state.error = None;
                self.transition(RunStatus::Paused, "stop_after_steps reached")
                    .await?;
                self.checkpoint().await?;
                return Ok(RunReport::of(&self.state));
            }
            let end = match self.state.pending.clone() {
                Some(pending) => self.resume_pending(pending).await?,
                None => self.plan_and_act().await?,
            };
            match end {
                StepEnd::Continue => {
                    self.steps_this_call += 1;
                    self.checkpoint().await?;
                }
                StepEnd::Stop => return Ok(RunReport::of(&self.state)),
            }
        }
    }

    async fn plan_and_act(&mut self) -> Result<StepEnd, RunError> {
        let context = PlanContext {
            task: &self.state.task,
            step: self.state.step,
            observations: &self.state.observations,
            working: &self.state.working,
        };
        let action = match self.flavour.next_action(self.planner, &context).await {
            Ok(action) => action,
            Err(err) => return self.fail(err.to_string()).await,
        };
        self.emit(TraceEventKind::Decision {
            action: action.clone(),
        })
        .await?;
        match action {
            Action::Finish { output } => {
                self.state.output = Some(output);
                self.state.error = None;
                self.transition(RunStatus::Completed, "the planner finished")
                    .await?;
                self.emit(TraceEventKind::Termination {
                    status: RunStatus::Completed,
                    reason: "the planner finished".into(),
                })
                .await?;
                self.checkpoint().await?;
                Ok(StepEnd::Stop)
            }
            Action::CallTool {
                tool,
                arguments,
                idempotency_key,
            } => {
                let step = self.state.step;
                if let Some((key, output)) = idempotency_key.as_ref().and_then(|key| {
                    let output = self.state.results_by_key.get(key)?;
                    Some((key.clone(), output.clone()))
                }) {
                    return self.reuse(tool, arguments, key, output).await;
                }
                let invocation_id = invocation_id(&self.state.run_id, step, &tool, &arguments);
                self.authorize_and_invoke(PendingStep {
                    step,
                    tool,
                    arguments,
                    idempotency_key,
                    invocation_id,
                    stage: PendingStage::AwaitingConfirmation,
                })
                .await
            }
        }
    }

    /// A repeated action idempotency key: the first result, no tool call.
    async fn reuse(
        &mut self,
        tool: String,
        arguments: Value,
        key: String,
        output: Value,
    ) -> Result<StepEnd, RunError> {
        let invocation_id = invocation_id(&self.state.run_id, self.state.step, &tool, &arguments);
        self.emit(TraceEventKind::ToolResult {
            tool: tool.clone(),
            invocation_id: invocation_id.clone(),
            result: ToolResultStatus::Reused,
            output: Some(output.clone()),
            error_kind: None,
            error: None,
            operation_id: None,
            attempts: 0,
        })
        .await?;
        self.audit_at(
            (self.state.step, &tool, &invocation_id),
            AuditKind::ToolSucceeded,
            None,
            format!("reused the result of action idempotency key {key:?}"),
        )
        .await?;
        self.complete_step(tool, output, true);
        Ok(StepEnd::Continue)
    }

    fn complete_step(&mut self, tool: String, output: Value, reused: bool) {
        // The latest output of each tool, as the planner's working data.
        self.state.working.insert(tool.clone(), output.clone());
        self.state.observations.push(Observation {
            step: self.state.step,
            tool,
            output,
            reused,
        });
        self.state.step += 1;
    }
}
