//! What a caller of [`AgentRuntime::run`](crate::AgentRuntime::run) passes
//! ([`RunOptions`]) and gets back ([`RunReport`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::checkpoint::{Checkpoint, PendingStage, PendingStep};
use crate::status::RunStatus;

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

    /// `options` with [`resume`](Self::resume) set.
    #[cfg(feature = "effects")]
    pub(crate) fn resume_with(options: RunOptions) -> Self {
        RunOptions {
            resume: true,
            ..options
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

    /// The effect operation id whose human approval the run waits for
    /// (docs/approval.md): approve or deny it with `EffectExecutor::operator().approve`
    /// / `deny` or `agent-effect-ops`, then resume the run (or let
    /// `AgentRuntime::resume_when_approved` wait for it).
    pub fn awaiting_approval(&self) -> Option<&str> {
        match &self.pending.as_ref()?.stage {
            PendingStage::EffectUncertain {
                operation_id,
                status: effect_core::EffectStatus::AwaitingApproval,
                ..
            } => Some(operation_id.as_str()),
            _ => None,
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
