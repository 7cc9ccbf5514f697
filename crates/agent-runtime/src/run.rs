//! [`Run`]: one call of [`AgentRuntime::run`](crate::AgentRuntime::run):
//! starting or resuming the run, then stepping through the plan: policy,
//! validation and confirmation, the invocation, and a checkpoint after every
//! step. Everything a run does lives here; the runtime only holds the parts.

use std::collections::BTreeSet;
use std::sync::Arc;

use effect_core::Clock;
use effect_core::clock::format_timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::checkpoint::{Checkpoint, PendingStage, PendingStep, invocation_id};
use crate::error::{RunError, StoreError};
use crate::flavour::Flavour;
use crate::invocation::{FailureKind, InvocationOutcome, InvocationReport, ToolExecutor};
use crate::planner::{Action, Observation, PlanContext, Task};
use crate::policy::{PermissionPolicy, PolicyDecision};
use crate::status::RunStatus;
use crate::store::{AuditStore, CheckpointStore, EventStore};
use crate::tool::EffectKind;
use crate::trace::{AuditKind, AuditRecord, ToolResultStatus, TraceEvent, TraceEventKind};

/// How one call of [`AgentRuntime::run`](crate::AgentRuntime::run) behaves.
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
    /// Whether a failed run undoes its confirmed effects, newest first
    /// (docs/compensation.md); default never.
    #[cfg(feature = "effects")]
    pub compensation: crate::compensation::CompensationPolicy,
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

/// Where a run stands after a call of [`AgentRuntime::run`](crate::AgentRuntime::run).
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
    /// What a failed run undid under
    /// [`CompensationPolicy::OnFailure`](crate::CompensationPolicy).
    #[cfg(feature = "effects")]
    pub compensation: Option<crate::compensation::RunCompensation>,
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
            #[cfg(feature = "effects")]
            compensation: None,
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

    /// Policy, validation and confirmation, then the invocation.
    async fn authorize_and_invoke(
        &mut self,
        mut pending: PendingStep,
    ) -> Result<StepEnd, RunError> {
        let tool = pending.tool.clone();
        let invocation = pending.invocation_id.clone();
        let engine = self.runtime;
        let policy = &engine.policy;
        if !policy.is_allowed(&tool) {
            self.emit(TraceEventKind::PolicyDecision {
                tool: tool.clone(),
                invocation_id: invocation.clone(),
                decision: PolicyDecision::Denied,
            })
            .await?;
            let detail = format!("tool {tool:?} is not allowed by the permission policy");
            self.audit(&pending, AuditKind::PermissionDenied, None, detail.clone())
                .await?;
            self.state.pending = None;
            return self.fail(detail).await;
        }
        let arguments = pending.arguments.clone();
        let call = match engine.tools.prepare(&tool, &arguments) {
            Ok(call) => call,
            Err(failure) => {
                // Invalid input never reaches a handler or a circuit breaker.
                let detail = format!("refused ({}): {}", failure.kind.as_str(), failure.message);
                self.audit(&pending, AuditKind::ToolFailed, None, detail)
                    .await?;
                self.emit(TraceEventKind::ToolResult {
                    tool: tool.clone(),
                    invocation_id: invocation,
                    result: ToolResultStatus::Failed,
                    output: None,
                    error_kind: Some(failure.kind.as_str().into()),
                    error: Some(failure.message.clone()),
                    operation_id: None,
                    attempts: 0,
                })
                .await?;
                self.state.pending = None;
                return self.fail(failure.message).await;
            }
        };
        let kind = call.tool().definition().effect_kind();
        let confirmed = self.options.confirmed_mutations.contains(&invocation);
        let decision = policy.decide(&tool, kind, confirmed);
        self.emit(TraceEventKind::PolicyDecision {
            tool: tool.clone(),
            invocation_id: invocation.clone(),
            decision,
        })
        .await?;
        if decision == PolicyDecision::ConfirmationRequired {
            let detail =
                format!("mutation {tool:?} waits for a confirmation of invocation {invocation:?}");
            self.audit(
                &pending,
                AuditKind::ConfirmationRequired,
                None,
                detail.clone(),
            )
            .await?;
            pending.stage = PendingStage::AwaitingConfirmation;
            self.state.pending = Some(pending);
            return self.wait(detail).await;
        }
        if kind == EffectKind::Mutation {
            let detail = if confirmed {
                "confirmed by the trusted outer layer for this invocation"
            } else {
                "the permission policy does not require confirmation"
            };
            self.audit(&pending, AuditKind::MutationAuthorized, None, detail.into())
                .await?;
        }
        let operation_id = match call.operation_id() {
            Ok(id) => id.map(str::to_owned),
            Err(message) => {
                let detail =
                    format!("tool {tool:?} could not derive its operation identity: {message}");
                self.audit(&pending, AuditKind::ToolFailed, None, detail.clone())
                    .await?;
                self.state.pending = None;
                return self.fail(detail).await;
            }
        };
        self.emit(TraceEventKind::ToolRequest {
            tool: tool.clone(),
            invocation_id: invocation,
            effect_backed: operation_id.is_some(),
        })
        .await?;
        let detail = match (kind, &operation_id) {
            (EffectKind::Read, None) => "read",
            (EffectKind::Mutation, None) => "mutation",
            (EffectKind::Read, Some(_)) => "effect-backed read",
            (EffectKind::Mutation, Some(_)) => "effect-backed mutation",
        };
        self.audit(
            &pending,
            AuditKind::ToolRequested,
            operation_id.clone(),
            detail.into(),
        )
        .await?;
        if let Some(operation_id) = operation_id {
            // Recorded before dispatch: if the process stops during the call,
            // a resume reconciles this operation instead of planning afresh.
            pending.stage = PendingStage::EffectDispatching { operation_id };
            self.state.pending = Some(pending.clone());
            self.checkpoint().await?;
        }
        let report = engine.tools.invoke_with(&call, self.flavour).await;
        self.finish_invocation(pending, report).await
    }

    /// A resumed step that had started.
    async fn resume_pending(&mut self, pending: PendingStep) -> Result<StepEnd, RunError> {
        let operation_id = match &pending.stage {
            PendingStage::AwaitingConfirmation => return self.authorize_and_invoke(pending).await,
            PendingStage::EffectDispatching { operation_id }
            | PendingStage::EffectUncertain { operation_id, .. } => operation_id.clone(),
        };
        // The executor reconciles the operation before anything is dispatched
        // again, and dispatches only where the ledger and the contract allow.
        let engine = self.runtime;
        let report = match engine.tools.prepare(&pending.tool, &pending.arguments) {
            Ok(call) => engine.tools.invoke_with(&call, self.flavour).await,
            Err(failure) => InvocationReport::failed(failure.kind, failure.message),
        };
        let effect_status = match &report.outcome {
            InvocationOutcome::Succeeded { .. } => Some(effect_core::EffectStatus::Confirmed),
            InvocationOutcome::Uncertain { status, .. } => Some(*status),
            InvocationOutcome::Failed(_) => None,
        };
        self.emit_recovery(Some(operation_id), effect_status)
            .await?;
        self.finish_invocation(pending, report).await
    }

    async fn finish_invocation(
        &mut self,
        mut pending: PendingStep,
        report: InvocationReport,
    ) -> Result<StepEnd, RunError> {
        let tool = pending.tool.clone();
        for retry in &report.retries {
            self.emit(TraceEventKind::Retry {
                tool: tool.clone(),
                invocation_id: pending.invocation_id.clone(),
                attempt: retry.attempt,
                delay_ms: u64::try_from(retry.delay.as_millis()).unwrap_or(u64::MAX),
                error: retry.error.clone(),
            })
            .await?;
        }
        let operation_id = report.operation_id.clone();
        let mut result = TraceEventKind::ToolResult {
            tool: tool.clone(),
            invocation_id: pending.invocation_id.clone(),
            result: ToolResultStatus::Succeeded,
            output: None,
            error_kind: None,
            error: None,
            operation_id: operation_id.clone(),
            attempts: report.attempts,
        };
        match report.outcome {
            InvocationOutcome::Succeeded { output } => {
                if let TraceEventKind::ToolResult { output: o, .. } = &mut result {
                    *o = Some(output.clone());
                }
                self.emit(result).await?;
                self.audit(
                    &pending,
                    AuditKind::ToolSucceeded,
                    operation_id,
                    format!("succeeded after {} attempt(s)", report.attempts),
                )
                .await?;
                if let Some(key) = &pending.idempotency_key {
                    self.state
                        .results_by_key
                        .insert(key.clone(), output.clone());
                }
                self.state.pending = None;
                self.complete_step(tool, output, false);
                Ok(StepEnd::Continue)
            }
            InvocationOutcome::Failed(failure) => {
                if let TraceEventKind::ToolResult {
                    result: r,
                    error_kind,
                    error,
                    ..
                } = &mut result
                {
                    *r = ToolResultStatus::Failed;
                    *error_kind = Some(failure.kind.as_str().into());
                    *error = Some(failure.message.clone());
                }
                self.emit(result).await?;
                // An effect that may have been dispatched stays pending unless
                // it was definitively rejected, so a resume of the failed run
                // reconciles it rather than re-planning.
                let keep_pending = pending.stage != PendingStage::AwaitingConfirmation
                    && failure.kind != FailureKind::Rejected;
                let detail = format!("failed ({}): {}", failure.kind.as_str(), failure.message);
                self.audit(&pending, AuditKind::ToolFailed, operation_id, detail)
                    .await?;
                if !keep_pending {
                    self.state.pending = None;
                }
                self.fail(format!("tool {tool:?} failed: {}", failure.message))
                    .await
            }
            InvocationOutcome::Uncertain { status, error } => {
                if let TraceEventKind::ToolResult {
                    result: r,
                    error: e,
                    ..
                } = &mut result
                {
                    *r = ToolResultStatus::Uncertain;
                    e.clone_from(&error);
                }
                self.emit(result).await?;
                let operation = operation_id.unwrap_or_default();
                let detail = if status == effect_core::EffectStatus::AwaitingApproval {
                    format!("effect {operation:?} is {status}; the run waits for its approval")
                } else {
                    format!("effect {operation:?} is {status}; the run waits for reconciliation")
                };
                self.audit(
                    &pending,
                    AuditKind::EffectUncertain,
                    Some(operation.clone()),
                    detail.clone(),
                )
                .await?;
                pending.stage = PendingStage::EffectUncertain {
                    operation_id: operation,
                    status,
                    error,
                };
                self.state.pending = Some(pending);
                self.wait(detail).await
            }
        }
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

    async fn wait(&mut self, reason: String) -> Result<StepEnd, RunError> {
        self.state.error = Some(reason.clone());
        self.transition(RunStatus::Waiting, &reason).await?;
        self.checkpoint().await?;
        Ok(StepEnd::Stop)
    }

    async fn fail(&mut self, reason: String) -> Result<StepEnd, RunError> {
        self.state.error = Some(reason.clone());
        self.transition(RunStatus::Failed, &reason).await?;
        self.emit(TraceEventKind::Termination {
            status: RunStatus::Failed,
            reason,
        })
        .await?;
        self.checkpoint().await?;
        Ok(StepEnd::Stop)
    }

    async fn transition(&mut self, to: RunStatus, reason: &str) -> Result<(), RunError> {
        let from = self.state.status;
        from.transition(to)
            .map_err(|source| RunError::InvalidTransition {
                run_id: self.state.run_id.clone(),
                source,
            })?;
        tracing::info!(run_id = %self.state.run_id, %from, %to, reason, "run status changed");
        self.emit(TraceEventKind::StateTransition {
            from,
            to,
            reason: reason.to_owned(),
        })
        .await?;
        self.state.status = to;
        Ok(())
    }

    async fn emit_recovery(
        &mut self,
        operation_id: Option<String>,
        effect_status: Option<effect_core::EffectStatus>,
    ) -> Result<(), RunError> {
        let from = self.resumed_from.unwrap_or(self.state.status);
        self.emit(TraceEventKind::Recovery {
            from,
            resumed_step: self.state.step,
            operation_id,
            effect_status,
        })
        .await
    }

    async fn checkpoint(&mut self) -> Result<(), RunError> {
        self.state.revision += 1;
        self.emit(TraceEventKind::Checkpoint {
            revision: self.state.revision,
        })
        .await?;
        let (checkpoints, state) = (Arc::clone(&self.runtime.checkpoints), self.state.clone());
        self.flavour
            .store(move || checkpoints.save(&state))
            .await
            .map_err(|source| self.store_error(source))
    }

    async fn emit(&mut self, kind: TraceEventKind) -> Result<(), RunError> {
        let event = TraceEvent {
            run_id: self.state.run_id.clone(),
            sequence: self.next_event,
            step: self.state.step,
            timestamp: format_timestamp(self.runtime.clock.now()),
            kind,
        };
        let events = Arc::clone(&self.runtime.events);
        self.flavour
            .store(move || events.append(&event))
            .await
            .map_err(|source| self.store_error(source))?;
        self.state.last_event_sequence = self.next_event;
        self.next_event += 1;
        Ok(())
    }

    async fn audit(
        &mut self,
        pending: &PendingStep,
        kind: AuditKind,
        operation_id: Option<String>,
        detail: String,
    ) -> Result<(), RunError> {
        let at = (
            pending.step,
            pending.tool.as_str(),
            pending.invocation_id.as_str(),
        );
        self.audit_at(at, kind, operation_id, detail).await
    }

    /// Appends an audit record about the invocation `(step, tool, invocation_id)`.
    async fn audit_at(
        &mut self,
        (step, tool, invocation_id): (u32, &str, &str),
        kind: AuditKind,
        operation_id: Option<String>,
        detail: String,
    ) -> Result<(), RunError> {
        let record = AuditRecord {
            run_id: self.state.run_id.clone(),
            sequence: self.next_audit,
            step,
            timestamp: format_timestamp(self.runtime.clock.now()),
            tool: tool.to_owned(),
            invocation_id: invocation_id.to_owned(),
            kind,
            operation_id,
            detail,
        };
        let audit = Arc::clone(&self.runtime.audit);
        self.flavour
            .store(move || audit.append(&record))
            .await
            .map_err(|source| self.store_error(source))?;
        self.state.last_audit_sequence = self.next_audit;
        self.next_audit += 1;
        Ok(())
    }

    fn store_error(&self, source: StoreError) -> RunError {
        RunError::Store {
            run_id: self.state.run_id.clone(),
            source,
        }
    }
}
