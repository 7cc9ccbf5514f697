//! The effect executor's path: an effect-backed tool runs under the identity
//! the executor derived when the call was prepared, and its result becomes
//! the invocation's report.

use effect_core::{EffectResult, EffectStatus, error_chain};
use effect_exec::{
    CallOptions, EffectExecutor, ExecError, HandlerContext, HandlerError, PreparedEffect,
};
use serde_json::Value;

use super::{
    FailureKind, InvocationFailure, InvocationOutcome, InvocationReport, PreparedCall, ToolExecutor,
};
use crate::error::{ToolError, ToolErrorKind};
use crate::flavour::Flavour;
use crate::tool::{ToolDefinition, ToolInput};

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

/// Dispatches a synchronous handler through the executor's deadline path.
pub(crate) fn execute(
    effects: &EffectExecutor,
    prepared: &PreparedEffect,
    definition: &ToolDefinition,
) -> Result<EffectResult, ExecError> {
    let handler = definition.handler().clone();
    effects.execute_prepared(
        prepared,
        options(definition),
        move |arguments, context: HandlerContext| {
            handler(input(arguments, context)).map_err(handler_error)
        },
    )
}

/// What an effect-backed tool's handler receives: the arguments and the
/// executor's context of this dispatch.
pub(crate) fn input(arguments: Value, context: HandlerContext) -> ToolInput {
    ToolInput {
        arguments,
        provider_key: context.provider_key().map(str::to_owned),
        effect: Some(context),
    }
}

/// The call options of an effect-backed tool: its own deadline, if any.
pub(crate) fn options(definition: &ToolDefinition) -> CallOptions {
    definition
        .handler_deadline()
        .map(CallOptions::deadline)
        .unwrap_or_default()
}

/// A tool error as the effect executor sees it: only `rejected` is definitive.
pub(crate) fn handler_error(err: ToolError) -> HandlerError {
    match err.kind {
        ToolErrorKind::Rejected => HandlerError::rejected(err.message),
        _ => HandlerError::unknown(err.to_string()),
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
