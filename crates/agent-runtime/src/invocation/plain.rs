//! The retry and circuit-breaker loop of plain tools.

use serde_json::Value;

use super::{
    FailureKind, InvocationFailure, InvocationOutcome, InvocationReport, RetryNote, ToolExecutor,
};
use crate::error::ToolErrorKind;
use crate::flavour::Flavour;
use crate::tool::RegisteredTool;

impl ToolExecutor {
    /// Runs a plain tool: the dependency's circuit is consulted before every
    /// attempt, each attempt runs under the per-call timeout, and the retry
    /// policy's error kinds are retried with bounded exponential backoff.
    pub(super) async fn invoke_plain<F: Flavour>(
        &self,
        tool: &RegisteredTool,
        arguments: &Value,
        flavour: &F,
    ) -> InvocationReport {
        let definition = tool.definition();
        let dependency = definition.dependency_name();
        let mut retries = Vec::new();
        let mut attempt = 0;
        loop {
            // Consulted before every attempt, retries included.
            if !self.breakers.allows(dependency) {
                return InvocationReport {
                    attempts: attempt,
                    retries,
                    ..InvocationReport::failed(
                        FailureKind::CircuitOpen,
                        format!("the circuit of dependency {dependency:?} is open"),
                    )
                };
            }
            attempt += 1;
            let error = match flavour.attempt(definition, arguments, self.timeout).await {
                Ok(output) => {
                    self.breakers.record_success(dependency);
                    return InvocationReport {
                        outcome: InvocationOutcome::Succeeded { output },
                        attempts: attempt,
                        retries,
                        operation_id: None,
                    };
                }
                Err(error) => error,
            };
            // A definitive refusal says the dependency is up and answering.
            let opened =
                error.kind != ToolErrorKind::Rejected && self.breakers.record_failure(dependency);
            let retryable = self.retry.retries(error.kind) && attempt < self.retry.max_attempts;
            if retryable && !opened {
                let delay = self.retry.delay_after(attempt);
                tracing::warn!(
                    tool = definition.name(),
                    attempt,
                    delay_ms = delay.as_millis(),
                    error = %error.message,
                    "retrying a tool"
                );
                retries.push(RetryNote {
                    attempt,
                    delay,
                    error: error.message,
                });
                flavour.sleep(self.sleeper.as_ref(), delay).await;
                continue;
            }
            let message = if retryable {
                format!(
                    "{} (the circuit of dependency {dependency:?} opened; no further attempt)",
                    error.message
                )
            } else {
                error.message
            };
            return InvocationReport {
                outcome: InvocationOutcome::Failed(InvocationFailure::new(
                    FailureKind::of(error.kind),
                    message,
                )),
                attempts: attempt,
                retries,
                operation_id: None,
            };
        }
    }
}
