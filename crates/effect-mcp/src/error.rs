//! Errors of the MCP adapter.

use effect_exec::ExecError;
use effect_schema::SchemaError;

/// Why an MCP tool could not be served or called.
///
/// An uncertain outcome is not an error: the server answers it with an
/// [`UncertainOutcome`](effect_exec::UncertainOutcome) notice, and the client
/// returns it as a result with status `outcome_unknown` or `quarantined`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EffectMcpError {
    /// The tool's input schema cannot be used (derived or sent by a server).
    #[error("input schema of tool {tool:?} cannot be used")]
    Schema {
        /// The tool name.
        tool: String,
        /// Why.
        #[source]
        source: SchemaError,
    },
    /// A tool's declared output type does not have an object schema, which
    /// an MCP `outputSchema` must be.
    #[error("output schema of tool {tool:?} is not an object schema")]
    OutputSchema {
        /// The tool name.
        tool: String,
    },
    /// Two tools with one name were added to a server.
    #[error("tool {tool:?} is already served")]
    DuplicateTool {
        /// The tool name.
        tool: String,
    },
    /// The server does not list the tool.
    #[error("the server offers no tool {tool:?}")]
    UnknownTool {
        /// The tool name.
        tool: String,
    },
    /// The connector could not open a connection to the server.
    #[error("connecting to the MCP server failed: {message}")]
    Connect {
        /// The connector's error, with its causes.
        message: String,
    },
    /// Listing the server's tools failed.
    #[error("listing the tools of the server failed: {message}")]
    ListTools {
        /// The SDK's message.
        message: String,
    },
    /// The arguments do not match the server's input schema; nothing was recorded.
    #[error("arguments of tool {tool:?} do not match its input schema: {}", errors.join("; "))]
    InvalidArguments {
        /// The tool name.
        tool: String,
        /// One message per violation, values masked.
        errors: Vec<String>,
    },
    /// The executor could not run the call.
    #[error("tool {tool:?} could not run through the executor")]
    Exec {
        /// The tool name.
        tool: String,
        /// The executor's error.
        #[source]
        source: ExecError,
    },
}
