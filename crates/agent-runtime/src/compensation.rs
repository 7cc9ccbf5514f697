//! Undoing a run's confirmed effects (docs/compensation.md): newest first,
//! each through the compensation its tool's effect contract names and the
//! tool's [`compensation_handler`](crate::ToolDefinition::compensation_handler),
//! by the effect executor's rules (`EffectExecutor::compensate`). An effect
//! whose outcome is uncertain is never "undone": it is reported as such.

use std::collections::HashSet;
use std::sync::Arc;

use effect_core::EffectStatus;
use effect_exec::{ExecError, HandlerContext, HandlerError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::RunError;
use crate::run::Engine;
use crate::trace::TraceEventKind;

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

/// Compensates the effects of run `run_id`, newest first.
pub(crate) fn compensate_run(engine: &Engine, run_id: &str) -> Result<RunCompensation, RunError> {
    let store = |source| RunError::Store {
        run_id: run_id.to_owned(),
        source,
    };
    let events = engine.events.events(run_id).map_err(store)?;
    let mut seen = HashSet::new();
    let mut calls = Vec::new();
    for event in &events {
        if let TraceEventKind::ToolResult {
            tool,
            operation_id: Some(operation_id),
            ..
        } = &event.kind
            && seen.insert(operation_id.clone())
        {
            calls.push((tool.clone(), operation_id.clone()));
        }
    }
    let effects = calls
        .into_iter()
        .rev()
        .map(|(tool, operation_id)| compensate_one(engine, tool, operation_id))
        .collect();
    Ok(RunCompensation {
        run_id: run_id.to_owned(),
        effects,
    })
}

fn compensate_one(engine: &Engine, tool: String, operation_id: String) -> CompensatedEffect {
    let mut effect = CompensatedEffect {
        tool,
        operation_id,
        outcome: CompensationOutcome::NoCompensation,
        compensation_operation_id: None,
        compensation_status: None,
        detail: None,
    };
    let registered = engine.tools.registry().get(&effect.tool);
    let definition = registered.map(crate::tool::RegisteredTool::definition);
    let (Some(executor), Some(contract)) = (
        engine.tools.effects(),
        definition.and_then(crate::ToolDefinition::contract),
    ) else {
        effect.detail = Some("the tool has no effect contract".into());
        return effect;
    };
    // An uncertain effect is reported as such, whether or not it could be
    // compensated once settled.
    if let Ok(Some(record)) = executor.ledger().get(&effect.operation_id)
        && (record.status.is_uncertain() || record.status == EffectStatus::Dispatched)
    {
        effect.outcome = CompensationOutcome::Uncertain;
        effect.detail = Some(format!(
            "its outcome is uncertain ({}); it is never undone before it is settled",
            record.status
        ));
        return effect;
    }
    let Some(handler) = definition.and_then(crate::ToolDefinition::compensation) else {
        effect.detail = Some("the tool has no compensation handler".into());
        return effect;
    };
    let handler = Arc::clone(handler);
    match executor.compensate(contract, &effect.operation_id, move |args, ctx| {
        handler(args, ctx)
    }) {
        Ok(result) => {
            effect.compensation_operation_id = Some(result.operation_id.clone());
            effect.compensation_status = Some(result.status);
            if result.status == EffectStatus::Confirmed {
                effect.outcome = CompensationOutcome::Undone;
            } else {
                effect.outcome = CompensationOutcome::NotUndone;
                effect.detail = Some(
                    result
                        .error
                        .unwrap_or_else(|| format!("the compensation is {}", result.status)),
                );
            }
        }
        Err(ExecError::CompensationRefused { refusal, .. }) => {
            use effect_exec::CompensationRefusal as R;
            effect.outcome = match refusal {
                R::Uncertain { .. } | R::InFlight => CompensationOutcome::Uncertain,
                R::Rejected | R::NeverDispatched { .. } => CompensationOutcome::NothingToUndo,
                _ => CompensationOutcome::NoCompensation,
            };
            effect.detail = Some(refusal.to_string());
        }
        Err(err) => {
            effect.outcome = CompensationOutcome::NotUndone;
            effect.detail = Some(effect_core::error_chain(&err));
        }
    }
    effect
}
