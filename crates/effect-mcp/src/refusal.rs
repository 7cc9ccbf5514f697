//! Refusals of servers that report no effect status: error results that
//! mean the tool did not run, for [`RemoteTool::refusal_when`](crate::RemoteTool::refusal_when).
//!
//! The MCP specification lets a server answer a refused call either with a
//! JSON-RPC error or with a result whose `isError` is true, and the result
//! form is also how a tool reports a failure after it acted. A
//! [`RemoteTool`](crate::RemoteTool) therefore treats every error result of
//! such a server as an uncertain outcome, unless a predicate that knows the
//! server says otherwise.

use rmcp::model::CallToolResult;

/// The official Python SDK's refusals (`mcp` 2.3, `MCPServer`): a call of a
/// tool it does not have (`Unknown tool: NAME`) and arguments that fail the
/// tool's input schema (`Error executing tool NAME: N validation error(s)
/// for ...`, pydantic's message). Both come as an `isError` result, not a
/// JSON-RPC error, and in both the tool function never ran.
///
/// Any other error result, including a `ToolError` the tool raised itself
/// (`Error executing tool NAME: <its message>`), is not recognized: the tool
/// may have acted before it raised.
///
/// ```
/// use rmcp::model::{CallToolResult, ContentBlock};
/// use effect_mcp::refusal::python_sdk;
///
/// let error = |text: &str| CallToolResult::error(vec![ContentBlock::text(text)]);
/// assert!(python_sdk(&error("Unknown tool: capture_payment")));
/// assert!(python_sdk(&error(
///     "Error executing tool capture_payment: 1 validation error for capture_paymentArguments\n\
///      amount_cents\n  Input should be greater than 0"
/// )));
/// assert!(!python_sdk(&error("Error executing tool capture_payment: card declined")));
/// ```
pub fn python_sdk(result: &CallToolResult) -> bool {
    let Some(text) = result
        .content
        .first()
        .and_then(|block| block.as_text())
        .map(|text| text.text.as_str())
    else {
        return false;
    };
    if result.is_error != Some(true) || result.content.len() != 1 {
        return false;
    }
    if text
        .strip_prefix("Unknown tool: ")
        .is_some_and(|name| !name.is_empty() && !name.contains('\n'))
    {
        return true;
    }
    let Some(rest) = text.strip_prefix("Error executing tool ") else {
        return false;
    };
    let Some((_tool, message)) = rest.split_once(": ") else {
        return false;
    };
    is_pydantic_validation(message)
}

/// Pydantic's `ValidationError` text: `1 validation error for MODEL` or
/// `N validation errors for MODEL`.
fn is_pydantic_validation(message: &str) -> bool {
    let digits = message.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return false;
    }
    let rest = &message[digits..];
    rest.starts_with(" validation error for ") || rest.starts_with(" validation errors for ")
}
