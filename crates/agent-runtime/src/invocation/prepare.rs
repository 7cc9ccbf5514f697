//! Preparation: the tool looked up, the arguments checked against its
//! schema and, for an effect-backed tool, the call's identity derived once
//! by the effect executor.

use serde_json::Value;

use super::{FailureKind, InvocationFailure, ToolExecutor};
use crate::tool::RegisteredTool;

/// A tool invocation that passed validation, with the effect executor's
/// one derivation of its identity: made by [`ToolExecutor::prepare`].
#[derive(Debug, Clone)]
pub(crate) struct PreparedCall<'a> {
    tool: &'a RegisteredTool,
    arguments: &'a Value,
    /// The identity of an effect-backed call (or why it has none); `None`
    /// for a plain tool, or without an effect executor to derive it.
    #[cfg(feature = "effects")]
    effect: Option<Result<effect_exec::PreparedEffect, String>>,
}

impl<'a> PreparedCall<'a> {
    /// The tool.
    pub(crate) fn tool(&self) -> &'a RegisteredTool {
        self.tool
    }

    /// The validated arguments.
    pub(crate) fn arguments(&self) -> &'a Value {
        self.arguments
    }

    /// The effect operation id (`None` for a plain tool).
    ///
    /// # Errors
    ///
    /// Why the contract could not derive it, as a message.
    pub(crate) fn operation_id(&self) -> Result<Option<&str>, &str> {
        #[cfg(feature = "effects")]
        {
            match &self.effect {
                None => Ok(None),
                Some(Ok(prepared)) => Ok(Some(prepared.operation_id())),
                Some(Err(message)) => Err(message),
            }
        }
        #[cfg(not(feature = "effects"))]
        {
            Ok(None)
        }
    }

    /// Whether the call's effect operation waits for a human approval (its
    /// contract, or the permission policy's rule, requires one).
    pub(crate) fn requires_approval(&self) -> bool {
        #[cfg(feature = "effects")]
        {
            matches!(&self.effect, Some(Ok(prepared)) if prepared.requires_approval())
        }
        #[cfg(not(feature = "effects"))]
        {
            false
        }
    }

    /// The identity the effect executor derived, or why it could not.
    #[cfg(feature = "effects")]
    pub(crate) fn effect(&self) -> Option<&Result<effect_exec::PreparedEffect, String>> {
        self.effect.as_ref()
    }
}

impl ToolExecutor {
    /// Looks the tool up and validates the arguments, without running anything.
    ///
    /// # Errors
    ///
    /// [`FailureKind::UnknownTool`] or [`FailureKind::InvalidArguments`].
    pub fn check(
        &self,
        tool: &str,
        arguments: &Value,
    ) -> Result<&RegisteredTool, InvocationFailure> {
        let registered = self.registry.get(tool).ok_or_else(|| {
            InvocationFailure::new(FailureKind::UnknownTool, format!("no tool named {tool:?}"))
        })?;
        registered.schema().validate(arguments).map_err(|errors| {
            InvocationFailure::new(
                FailureKind::InvalidArguments,
                format!(
                    "arguments of {tool:?} do not match its input schema: {}",
                    errors.join("; ")
                ),
            )
        })?;
        Ok(registered)
    }

    /// Looks the tool up, validates the arguments and has the effect
    /// executor derive the call's identity, once; the run checkpoints the
    /// operation id before [`ToolExecutor::invoke_with`] runs the call.
    ///
    /// # Errors
    ///
    /// [`FailureKind::UnknownTool`] or [`FailureKind::InvalidArguments`]. A
    /// contract that cannot derive its operation id is not an error here: the
    /// call carries it (see [`PreparedCall::operation_id`]).
    pub(crate) fn prepare<'a>(
        &'a self,
        tool: &str,
        arguments: &'a Value,
    ) -> Result<PreparedCall<'a>, InvocationFailure> {
        let registered = self.check(tool, arguments)?;
        Ok(PreparedCall {
            tool: registered,
            arguments,
            #[cfg(feature = "effects")]
            effect: self.prepare_effect(registered, arguments),
        })
    }

    /// The effect executor's derivation of an effect-backed call's identity.
    #[cfg(feature = "effects")]
    fn prepare_effect(
        &self,
        tool: &RegisteredTool,
        arguments: &Value,
    ) -> Option<Result<effect_exec::PreparedEffect, String>> {
        let contract = tool.definition().contract()?;
        let effects = self.effects.as_ref()?;
        let approval = self.approval_required.contains(tool.definition().name());
        Some(
            effects
                .prepare(contract, arguments)
                // The policy's rule, on the operation before anything is recorded.
                .map(|prepared| {
                    if approval {
                        prepared.require_approval()
                    } else {
                        prepared
                    }
                })
                .map_err(|err| effect_core::error_chain(&err)),
        )
    }
}
