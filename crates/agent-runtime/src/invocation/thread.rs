//! One call of a synchronous handler, on the calling thread or, under a
//! timeout, on a thread of its own.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{RecvTimeoutError, sync_channel};
use std::time::Duration;

use serde_json::Value;

use crate::error::ToolError;
use crate::tool::{ToolDefinition, ToolInput};

/// One call of a plain tool's handler on this thread, or, under a timeout, on
/// a thread of its own. A handler past its timeout is not stopped (a thread
/// cannot be): it keeps running detached and its late answer is dropped. A
/// panic is a failure.
pub(crate) fn attempt_blocking(
    definition: &ToolDefinition,
    arguments: &Value,
    timeout: Option<Duration>,
) -> Result<Value, ToolError> {
    let handler = Arc::clone(definition.handler());
    let input = ToolInput {
        arguments: arguments.clone(),
        provider_key: None,
        #[cfg(feature = "effects")]
        effect: None,
    };
    let call = move || {
        catch_unwind(AssertUnwindSafe(|| handler(input)))
            .unwrap_or_else(|_| Err(ToolError::failed("the handler panicked")))
    };
    let Some(timeout) = timeout else {
        return call();
    };
    let (sender, receiver) = sync_channel(1);
    // The handler's logs stay in the caller's span.
    let span = tracing::Span::current();
    let spawned = std::thread::Builder::new()
        .name(format!("tool-{}", definition.name()))
        .spawn(move || {
            let _entered = span.enter();
            // The receiver is gone once the caller stopped waiting.
            let _ = sender.send(call());
        });
    if let Err(err) = spawned {
        return Err(ToolError::failed(format!(
            "cannot start the handler thread: {err}"
        )));
    }
    match receiver.recv_timeout(timeout) {
        Ok(result) => result,
        Err(RecvTimeoutError::Timeout) => Err(ToolError::timeout(format!(
            "tool {:?} did not answer within {} ms",
            definition.name(),
            timeout.as_millis()
        ))),
        Err(RecvTimeoutError::Disconnected) => Err(ToolError::failed(
            "the handler thread ended without an answer",
        )),
    }
}
