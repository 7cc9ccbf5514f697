//! The effect executor's call of an effect-backed tool, as both flavours
//! make it (`src/flavour.rs`, `src/flavour/on_tokio.rs`): the handler's input,
//! the call options and how a tool error reads to the executor.

use effect_core::EffectResult;
use effect_exec::{
    CallOptions, EffectExecutor, ExecError, HandlerContext, HandlerError, PreparedEffect,
};
use serde_json::Value;

use crate::error::{ToolError, ToolErrorKind};
use crate::tool::{ToolDefinition, ToolInput};

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
