//! The effect executor's path: an effect-backed tool runs under the identity
//! the executor derived when the call was prepared, and its result becomes
//! the invocation's report.

use effect_core::{EffectResult, EffectStatus, error_chain};
use serde_json::Value;

use super::{
    FailureKind, InvocationFailure, InvocationOutcome, InvocationReport, PreparedCall, ToolExecutor,
};
use crate::flavour::Flavour;

impl ToolExecutor {
    /// Runs an effect-backed tool through the effect executor, which
    /// reconciles an operation left uncertain before anything is dispatched.
    pub(super) async fn invoke_effect<F: Flavour>(
        &self,
        call: &PreparedCall<'_>,
        flavour: &F,
    ) -> InvocationReport {
        let definition = call.tool().definition();
        let (Some(effects), Some(prepared)) = (&self.effects, call.effect()) else {
            return InvocationReport::failed(
                FailureKind::EffectsUnavailable,
                format!(
                    "tool {:?} has an effect contract but no effect executor is set",
                    definition.name()
                ),
            );
        };
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(message) => {
                return InvocationReport::failed(FailureKind::EffectExecutor, message.clone());
            }
        };
        match flavour.execute_effect(effects, prepared, definition).await {
            Ok(result) => report(result),
            // The executor could not do its job; the id is still the one it derived.
            Err(err) => InvocationReport {
                operation_id: Some(prepared.operation_id().to_owned()),
                ..InvocationReport::failed(FailureKind::EffectExecutor, error_chain(&err))
            },
        }
    }
}

/// The report of an execution: its outcome, attempts and operation id.
fn report(result: EffectResult) -> InvocationReport {
    let outcome = match result.status {
        EffectStatus::Confirmed if !result.in_progress => InvocationOutcome::Succeeded {
            output: result.output.unwrap_or(Value::Null),
        },
        EffectStatus::Rejected => InvocationOutcome::Failed(InvocationFailure::new(
            FailureKind::Rejected,
            result
                .error
                .unwrap_or_else(|| "the provider rejected the effect".to_owned()),
        )),
        status => InvocationOutcome::Uncertain {
            status,
            error: result.error,
        },
    };
    InvocationReport {
        outcome,
        attempts: result.attempts,
        retries: Vec::new(),
        operation_id: Some(result.operation_id),
    }
}
