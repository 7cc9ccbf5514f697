//! Errors of the rig adapter.

use effect_exec::ExecError;

/// Why an effect-backed rig tool call did not produce the tool's output.
///
/// An uncertain outcome is **not** an error: the model gets an
/// [`UncertainOutcome`](effect_exec::UncertainOutcome) notice as a successful
/// tool result instead. These are the cases where the executor could not do
/// its job, or the provider definitively refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EffectToolError {
    /// The executor could not run the call (a ledger failure, a conflicting
    /// operation id, an output that no longer decodes, ...).
    #[error("tool {tool:?} could not run through the executor")]
    Exec {
        /// The tool name.
        tool: &'static str,
        /// The executor's error.
        #[source]
        source: ExecError,
    },
    /// The provider refused the effect without applying it.
    #[error("tool {tool:?} was refused for operation {operation_id:?}: {reason}")]
    Rejected {
        /// The tool name.
        tool: &'static str,
        /// The operation id.
        operation_id: String,
        /// The refusal, as recorded.
        reason: String,
    },
    /// The confirmed output could not be shown to the model.
    #[error("output of tool {tool:?} cannot be presented to the model: {message}")]
    Output {
        /// The tool name.
        tool: &'static str,
        /// rig's conversion message.
        message: String,
    },
}
