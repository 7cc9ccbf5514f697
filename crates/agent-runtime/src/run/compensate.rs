//! Undoing a run's confirmed effects, newest first (docs/compensation.md):
//! what [`AgentRuntime::compensate_run`](crate::AgentRuntime::compensate_run)
//! runs on the engine.

use std::collections::HashSet;
use std::sync::Arc;

use effect_core::EffectStatus;
use effect_exec::ExecError;

use super::Engine;
use crate::compensation::{CompensatedEffect, CompensationOutcome, RunCompensation};
use crate::error::RunError;
use crate::trace::TraceEventKind;

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
