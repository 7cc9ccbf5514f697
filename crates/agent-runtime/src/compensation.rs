//! Undoing a run's confirmed effects (docs/compensation.md): newest first,
//! each through the compensation its tool's effect contract names and the
//! tool's [`compensation_handler`](crate::ToolDefinition::compensation_handler),
//! by the effect executor's rules (`EffectExecutor::compensate`). An effect
//! whose outcome is uncertain is never "undone": it is reported as such.
//!
//! This module holds what a run's options and report name; the run's engine
//! does the undoing (`src/run/compensate.rs`).

use std::sync::Arc;

use effect_core::EffectStatus;
use effect_exec::{HandlerContext, HandlerError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The handler of a tool's compensation.
pub(crate) type CompensationHandler =
    Arc<dyn Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync>;

/// Whether a run undoes its confirmed effects ([`RunOptions::compensation`](crate::RunOptions)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompensationPolicy {
    /// Never: a failed run leaves its effects as they are (the default).
    #[default]
    Never,
    /// When the run fails, its confirmed effects are compensated, newest
    /// first, and the report says what was undone and what could not be.
    OnFailure,
}

/// What became of one effect of a run being compensated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompensationOutcome {
    /// Its compensation is confirmed.
    Undone,
    /// Its compensation was rejected, or is itself uncertain (reconciled
    /// later by its caller or a recovery worker), or failed: the effect stands
    /// for now.
    NotUndone,
    /// The effect's own outcome is uncertain: it may not have happened, so it
    /// is not undone; reconcile or resolve it first.
    Uncertain,
    /// The effect did not happen (rejected, never dispatched): nothing to undo.
    NothingToUndo,
    /// Its contract names no compensation, or its tool has no compensation
    /// handler.
    NoCompensation,
}

/// One effect of a run being compensated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompensatedEffect {
    /// The tool that made it.
    pub tool: String,
    /// Its operation id.
    pub operation_id: String,
    /// What became of it.
    pub outcome: CompensationOutcome,
    /// The compensation's operation id, once one was run.
    pub compensation_operation_id: Option<String>,
    /// The compensation's status, once one was run.
    pub compensation_status: Option<EffectStatus>,
    /// Why it was not undone, when it was not.
    pub detail: Option<String>,
}

/// What compensating a run did, newest effect first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunCompensation {
    /// The run.
    pub run_id: String,
    /// Its effect-backed calls, newest first, each once.
    pub effects: Vec<CompensatedEffect>,
}

impl RunCompensation {
    /// The effects undone.
    pub fn undone(&self) -> impl Iterator<Item = &CompensatedEffect> {
        self.effects
            .iter()
            .filter(|e| e.outcome == CompensationOutcome::Undone)
    }

    /// The effects that happened, or may have, and are not undone.
    pub fn not_undone(&self) -> impl Iterator<Item = &CompensatedEffect> {
        self.effects.iter().filter(|e| {
            matches!(
                e.outcome,
                CompensationOutcome::NotUndone
                    | CompensationOutcome::Uncertain
                    | CompensationOutcome::NoCompensation
            )
        })
    }
}
