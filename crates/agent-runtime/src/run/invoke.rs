//! One tool step of a run: the permission policy, validation and
//! confirmation, the invocation (or, on resume, the reconciliation of a
//! pending effect) and what its outcome does to the run.

use crate::checkpoint::{Checkpoint, PendingStage, PendingStep};
use crate::error::RunError;
use crate::flavour::Flavour;
use crate::invocation::{FailureKind, InvocationOutcome, InvocationReport};
use crate::policy::PolicyDecision;
use crate::tool::EffectKind;
use crate::trace::{AuditKind, ToolResultStatus, TraceEventKind};

use super::{Run, StepEnd};

impl<F: Flavour> Run<'_, F> {
    /// Policy, validation and confirmation, then the invocation.
    pub(super) async fn authorize_and_invoke(
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
        let detail = if call.requires_approval() {
            format!("{detail}, each dispatch approved by a person")
        } else {
            detail.to_owned()
        };
        self.audit(
            &pending,
            AuditKind::ToolRequested,
            operation_id.clone(),
            detail,
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

    /// Refuses to resume `checkpoint` when the tool of its pending effect no
    /// longer derives the operation id it recorded: the executor would
    /// otherwise settle, or dispatch, an operation other than the one the
    /// run waits on. Checked before anything is written for this call. A
    /// tool that cannot be prepared at all fails the step as usual.
    pub(super) fn check_pending_identity(&self, checkpoint: &Checkpoint) -> Result<(), RunError> {
        let Some(pending) = &checkpoint.pending else {
            return Ok(());
        };
        let checkpointed = match &pending.stage {
            PendingStage::AwaitingConfirmation => return Ok(()),
            PendingStage::EffectDispatching { operation_id }
            | PendingStage::EffectUncertain { operation_id, .. } => operation_id,
        };
        let Ok(call) = self
            .runtime
            .tools
            .prepare(&pending.tool, &pending.arguments)
        else {
            return Ok(());
        };
        match call.operation_id() {
            Ok(derived) if derived == Some(checkpointed.as_str()) => Ok(()),
            Ok(derived) => Err(RunError::OperationIdChanged {
                run_id: checkpoint.run_id.clone(),
                tool: pending.tool.clone(),
                checkpointed: checkpointed.clone(),
                derived: derived.map(str::to_owned),
            }),
            // A contract that cannot derive an id fails the step on resume.
            Err(_) => Ok(()),
        }
    }

    /// A resumed step that had started.
    pub(super) async fn resume_pending(
        &mut self,
        pending: PendingStep,
    ) -> Result<StepEnd, RunError> {
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

    pub(super) async fn finish_invocation(
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
}
