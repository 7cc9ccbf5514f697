//! [`Run`]: one call of [`AgentRuntime::run`], stepping through the plan:
//! policy, validation and confirmation, the invocation, and a checkpoint
//! after every step.

use serde_json::Value;

use crate::checkpoint::{Checkpoint, PendingStage, PendingStep, invocation_id};
use crate::error::{RunError, StoreError};
use crate::executor::{FailureKind, InvocationOutcome, InvocationReport};
use crate::planner::{Action, Observation, PlanContext};
use crate::policy::PolicyDecision;
use crate::runtime::{AgentRuntime, RunOptions, RunReport};
use crate::status::RunStatus;
use crate::tool::EffectKind;
use crate::trace::{AuditKind, AuditRecord, ToolResultStatus, TraceEvent, TraceEventKind};
use effect_core::clock::format_timestamp;

/// How a step ended.
pub(crate) enum StepEnd {
    /// The step completed; the run goes on.
    Continue,
    /// The run stopped (waiting, failed, completed); state already saved.
    Stop,
}

/// One call of `run`: the state and where it goes.
pub(crate) struct Run<'a> {
    runtime: &'a AgentRuntime,
    options: &'a RunOptions,
    pub(crate) state: Checkpoint,
    next_event: u64,
    next_audit: u64,
    pub(crate) resumed_from: Option<RunStatus>,
    steps_this_call: u32,
}

impl<'a> Run<'a> {
    pub(crate) fn new(
        runtime: &'a AgentRuntime,
        state: Checkpoint,
        options: &'a RunOptions,
    ) -> Result<Self, RunError> {
        let run_id = state.run_id.clone();
        let store_error = |source| RunError::Store {
            run_id: run_id.clone(),
            source,
        };
        // Events written after the last checkpoint (by a process that then
        // stopped) keep their sequence numbers; continue after them.
        let last_event = runtime
            .events
            .last_sequence(&run_id)
            .map_err(store_error)?
            .max(state.last_event_sequence);
        let last_audit = runtime
            .audit
            .last_sequence(&run_id)
            .map_err(store_error)?
            .max(state.last_audit_sequence);
        Ok(Run {
            runtime,
            options,
            state,
            next_event: last_event + 1,
            next_audit: last_audit + 1,
            resumed_from: None,
            steps_this_call: 0,
        })
    }

    pub(crate) fn drive(mut self) -> Result<RunReport, RunError> {
        loop {
            if self
                .options
                .stop_after_steps
                .is_some_and(|limit| self.steps_this_call >= limit)
            {
                self.state.error = None;
                self.transition(RunStatus::Paused, "stop_after_steps reached")?;
                self.checkpoint()?;
                return Ok(RunReport::of(&self.state));
            }
            let end = match self.state.pending.clone() {
                Some(pending) => self.resume_pending(pending)?,
                None => self.plan_and_act()?,
            };
            match end {
                StepEnd::Continue => {
                    self.steps_this_call += 1;
                    self.checkpoint()?;
                }
                StepEnd::Stop => return Ok(RunReport::of(&self.state)),
            }
        }
    }

    fn plan_and_act(&mut self) -> Result<StepEnd, RunError> {
        let context = PlanContext {
            task: &self.state.task,
            step: self.state.step,
            observations: &self.state.observations,
        };
        let action = match self.runtime.planner.next_action(&context) {
            Ok(action) => action,
            Err(err) => return self.fail(err.to_string()),
        };
        self.emit(TraceEventKind::Decision {
            action: action.clone(),
        })?;
        match action {
            Action::Finish { output } => {
                self.state.output = Some(output);
                self.state.error = None;
                self.transition(RunStatus::Completed, "the planner finished")?;
                self.emit(TraceEventKind::Termination {
                    status: RunStatus::Completed,
                    reason: "the planner finished".into(),
                })?;
                self.checkpoint()?;
                Ok(StepEnd::Stop)
            }
            Action::CallTool {
                tool,
                arguments,
                idempotency_key,
            } => {
                let step = self.state.step;
                if let Some(output) = idempotency_key
                    .as_ref()
                    .and_then(|key| self.state.results_by_key.get(key))
                    .cloned()
                {
                    return self.reuse(tool, arguments, output);
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
            }
        }
    }

    /// A repeated action idempotency key: the first result, no tool call.
    fn reuse(
        &mut self,
        tool: String,
        arguments: Value,
        output: Value,
    ) -> Result<StepEnd, RunError> {
        let invocation_id = invocation_id(&self.state.run_id, self.state.step, &tool, &arguments);
        self.emit(TraceEventKind::ToolResult {
            tool: tool.clone(),
            invocation_id,
            result: ToolResultStatus::Reused,
            output: Some(output.clone()),
            error_kind: None,
            error: None,
            operation_id: None,
            attempts: 0,
        })?;
        self.complete_step(tool, output, true);
        Ok(StepEnd::Continue)
    }

    /// Policy, validation and confirmation, then the invocation.
    fn authorize_and_invoke(&mut self, mut pending: PendingStep) -> Result<StepEnd, RunError> {
        let tool = pending.tool.clone();
        let invocation = pending.invocation_id.clone();
        let policy = &self.runtime.policy;
        if !policy.is_allowed(&tool) {
            self.emit(TraceEventKind::PolicyDecision {
                tool: tool.clone(),
                invocation_id: invocation.clone(),
                decision: PolicyDecision::Denied,
            })?;
            let detail = format!("tool {tool:?} is not allowed by the permission policy");
            self.audit(&pending, AuditKind::PermissionDenied, None, detail.clone())?;
            self.state.pending = None;
            return self.fail(detail);
        }
        let kind = match self.runtime.tools.check(&tool, &pending.arguments) {
            Ok(registered) => registered.definition().effect_kind(),
            Err(failure) => {
                // Invalid input never reaches a handler or a circuit breaker.
                self.emit(TraceEventKind::ToolResult {
                    tool: tool.clone(),
                    invocation_id: invocation,
                    result: ToolResultStatus::Failed,
                    output: None,
                    error_kind: Some(failure.kind.as_str().into()),
                    error: Some(failure.message.clone()),
                    operation_id: None,
                    attempts: 0,
                })?;
                self.state.pending = None;
                return self.fail(failure.message);
            }
        };
        let confirmed = self.options.confirmed_mutations.contains(&invocation);
        let decision = policy.decide(&tool, kind, confirmed);
        self.emit(TraceEventKind::PolicyDecision {
            tool: tool.clone(),
            invocation_id: invocation.clone(),
            decision,
        })?;
        if decision == PolicyDecision::ConfirmationRequired {
            let detail =
                format!("mutation {tool:?} waits for a confirmation of invocation {invocation:?}");
            self.audit(
                &pending,
                AuditKind::ConfirmationRequired,
                None,
                detail.clone(),
            )?;
            pending.stage = PendingStage::AwaitingConfirmation;
            self.state.pending = Some(pending);
            return self.wait(detail);
        }
        if kind == EffectKind::Mutation {
            let detail = if confirmed {
                "confirmed by the trusted outer layer for this invocation"
            } else {
                "the permission policy does not require confirmation"
            };
            self.audit(&pending, AuditKind::MutationAuthorized, None, detail.into())?;
        }
        let operation_id = match self.runtime.tools.operation_id(&tool, &pending.arguments) {
            Ok(id) => id,
            Err(message) => {
                self.state.pending = None;
                return self.fail(format!(
                    "tool {tool:?} could not derive its operation id: {message}"
                ));
            }
        };
        self.emit(TraceEventKind::ToolRequest {
            tool: tool.clone(),
            invocation_id: invocation,
            effect_backed: operation_id.is_some(),
        })?;
        if let Some(operation_id) = operation_id {
            // Recorded before dispatch: if the process stops during the call,
            // a resume reconciles this operation instead of planning afresh.
            pending.stage = PendingStage::EffectDispatching { operation_id };
            self.state.pending = Some(pending.clone());
            self.checkpoint()?;
        }
        let report = self.runtime.tools.invoke(&tool, &pending.arguments);
        self.finish_invocation(pending, kind, report)
    }

    /// A resumed step that had started.
    fn resume_pending(&mut self, pending: PendingStep) -> Result<StepEnd, RunError> {
        let operation_id = match &pending.stage {
            PendingStage::AwaitingConfirmation => return self.authorize_and_invoke(pending),
            PendingStage::EffectDispatching { operation_id }
            | PendingStage::EffectUncertain { operation_id, .. } => operation_id.clone(),
        };
        let report = self
            .runtime
            .tools
            .recover(&pending.tool, &pending.arguments);
        let effect_status = match &report.outcome {
            InvocationOutcome::Succeeded { .. } => Some(effect_core::EffectStatus::Confirmed),
            InvocationOutcome::Uncertain { status, .. } => Some(*status),
            InvocationOutcome::Failed(_) => None,
        };
        self.emit_recovery(Some(operation_id), effect_status)?;
        let kind = self
            .runtime
            .tools
            .registry()
            .get(&pending.tool)
            .map_or(EffectKind::Mutation, |t| t.definition().effect_kind());
        self.finish_invocation(pending, kind, report)
    }

    fn finish_invocation(
        &mut self,
        mut pending: PendingStep,
        kind: EffectKind,
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
            })?;
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
                self.emit(result)?;
                if kind == EffectKind::Mutation {
                    self.audit(
                        &pending,
                        AuditKind::MutationFinished,
                        operation_id,
                        "succeeded".into(),
                    )?;
                }
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
                self.emit(result)?;
                // An effect that may have been dispatched stays pending unless
                // it was definitively rejected, so a resume of the failed run
                // reconciles it rather than re-planning.
                let keep_pending = pending.stage != PendingStage::AwaitingConfirmation
                    && failure.kind != FailureKind::Rejected;
                if kind == EffectKind::Mutation {
                    let detail = format!("failed ({}): {}", failure.kind.as_str(), failure.message);
                    self.audit(&pending, AuditKind::MutationFinished, operation_id, detail)?;
                }
                if !keep_pending {
                    self.state.pending = None;
                }
                self.fail(format!("tool {tool:?} failed: {}", failure.message))
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
                self.emit(result)?;
                let operation = operation_id.unwrap_or_default();
                let detail =
                    format!("effect {operation:?} is {status}; the run waits for reconciliation");
                self.audit(
                    &pending,
                    AuditKind::EffectUncertain,
                    Some(operation.clone()),
                    detail.clone(),
                )?;
                pending.stage = PendingStage::EffectUncertain {
                    operation_id: operation,
                    status,
                    error,
                };
                self.state.pending = Some(pending);
                self.wait(detail)
            }
        }
    }

    fn complete_step(&mut self, tool: String, output: Value, reused: bool) {
        self.state.observations.push(Observation {
            step: self.state.step,
            tool,
            output,
            reused,
        });
        self.state.step += 1;
    }

    fn wait(&mut self, reason: String) -> Result<StepEnd, RunError> {
        self.state.error = Some(reason.clone());
        self.transition(RunStatus::Waiting, &reason)?;
        self.checkpoint()?;
        Ok(StepEnd::Stop)
    }

    fn fail(&mut self, reason: String) -> Result<StepEnd, RunError> {
        self.state.error = Some(reason.clone());
        self.transition(RunStatus::Failed, &reason)?;
        self.emit(TraceEventKind::Termination {
            status: RunStatus::Failed,
            reason,
        })?;
        self.checkpoint()?;
        Ok(StepEnd::Stop)
    }

    pub(crate) fn transition(&mut self, to: RunStatus, reason: &str) -> Result<(), RunError> {
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
        })?;
        self.state.status = to;
        Ok(())
    }

    pub(crate) fn emit_recovery(
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
    }

    fn checkpoint(&mut self) -> Result<(), RunError> {
        self.state.revision += 1;
        self.emit(TraceEventKind::Checkpoint {
            revision: self.state.revision,
        })?;
        let saved = self.runtime.checkpoints.save(&self.state);
        saved.map_err(|source| self.store_error(source))
    }

    pub(crate) fn emit(&mut self, kind: TraceEventKind) -> Result<(), RunError> {
        let event = TraceEvent {
            run_id: self.state.run_id.clone(),
            sequence: self.next_event,
            step: self.state.step,
            timestamp: format_timestamp(self.runtime.clock.now()),
            kind,
        };
        self.runtime
            .events
            .append(&event)
            .map_err(|source| self.store_error(source))?;
        self.state.last_event_sequence = self.next_event;
        self.next_event += 1;
        Ok(())
    }

    fn audit(
        &mut self,
        pending: &PendingStep,
        kind: AuditKind,
        operation_id: Option<String>,
        detail: String,
    ) -> Result<(), RunError> {
        let record = AuditRecord {
            run_id: self.state.run_id.clone(),
            sequence: self.next_audit,
            step: pending.step,
            timestamp: format_timestamp(self.runtime.clock.now()),
            tool: pending.tool.clone(),
            invocation_id: pending.invocation_id.clone(),
            kind,
            operation_id,
            detail,
        };
        self.runtime
            .audit
            .append(&record)
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
