//! What a run writes: status transitions, trace events, audit records and
//! checkpoints, each through the flavour's store call.

use std::sync::Arc;

use effect_core::format_timestamp;

use crate::checkpoint::PendingStep;
use crate::error::{RunError, StoreError};
use crate::flavour::Flavour;
use crate::status::RunStatus;
use crate::trace::{AuditKind, AuditRecord, TraceEvent, TraceEventKind};

use super::{Run, StepEnd};

impl<F: Flavour> Run<'_, F> {
    pub(super) async fn wait(&mut self, reason: String) -> Result<StepEnd, RunError> {
        self.state.error = Some(reason.clone());
        self.transition(RunStatus::Waiting, &reason).await?;
        self.checkpoint().await?;
        Ok(StepEnd::Stop)
    }

    pub(super) async fn fail(&mut self, reason: String) -> Result<StepEnd, RunError> {
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

    pub(super) async fn transition(&mut self, to: RunStatus, reason: &str) -> Result<(), RunError> {
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

    pub(super) async fn emit_recovery(
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

    pub(super) async fn checkpoint(&mut self) -> Result<(), RunError> {
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

    pub(super) async fn emit(&mut self, kind: TraceEventKind) -> Result<(), RunError> {
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

    pub(super) async fn audit(
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
    pub(super) async fn audit_at(
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

    pub(super) fn store_error(&self, source: StoreError) -> RunError {
        RunError::Store {
            run_id: self.state.run_id.clone(),
            source,
        }
    }
}
