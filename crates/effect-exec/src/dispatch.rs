//! Running a handler: inline or on a thread with a deadline, with a lease
//! heartbeat while it runs.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use effect_core::canonical::{check_depth, to_json_value};
use effect_core::{CallbackError, CanonicalError, EffectContract, OutcomeProbeResult};
use serde::Serialize;
use serde_json::Value;

use crate::context::HandlerContext;
use crate::error::HandlerError;

/// What became of one handler invocation.
#[derive(Debug)]
pub(crate) enum HandlerOutcome {
    /// The handler returned; its output converted to JSON (or why it could not be).
    Returned(Result<Value, CanonicalError>),
    /// A definitive rejection.
    Rejected(String),
    /// A failure (including a panic) with an unknown outcome.
    Failed(String),
    /// A failure before anything left the process: nothing was sent.
    NotSent(String),
    /// The deadline passed; the handler may still be running.
    TimedOut,
}

impl HandlerOutcome {
    /// What the call came to, as a short code: `returned`, `rejected`,
    /// `failed`, `not_sent` or `timed_out`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            HandlerOutcome::Returned(_) => "returned",
            HandlerOutcome::Rejected(_) => "rejected",
            HandlerOutcome::Failed(_) => "failed",
            HandlerOutcome::NotSent(_) => "not_sent",
            HandlerOutcome::TimedOut => "timed_out",
        }
    }

    pub(crate) fn from_result<O: Serialize + 'static>(result: Result<O, HandlerError>) -> Self {
        match result {
            Ok(output) => HandlerOutcome::Returned(output_value(output)),
            Err(HandlerError::Rejected { reason }) => HandlerOutcome::Rejected(reason),
            Err(HandlerError::Unknown { message }) => HandlerOutcome::Failed(message),
            Err(HandlerError::NotSent { message }) => HandlerOutcome::NotSent(message),
        }
    }
}

/// The JSON of a handler's output, as [`to_json_value`] converts it. An
/// output that is a JSON value already is taken as it is when it passes the
/// depth check (a `Value` holds no non-finite number): converting it would
/// only copy it.
fn output_value<O: Serialize + 'static>(output: O) -> Result<Value, CanonicalError> {
    let mut slot = Some(output);
    let value = (&mut slot as &mut dyn Any)
        .downcast_mut::<Option<Value>>()
        .and_then(Option::take);
    match (value, slot) {
        (Some(value), _) => match check_depth(&value) {
            Ok(()) => Ok(value),
            // The error exactly as the conversion reports it.
            Err(_) => to_json_value(&value),
        },
        (None, Some(output)) => to_json_value(&output),
        // The slot is emptied only when it held a `Value`, taken above.
        (None, None) => Ok(Value::Null),
    }
}

/// How the executor calls user code: the sync and async APIs differ only here.
pub(crate) trait Invoke {
    /// Calls the handler with its own copy of the arguments.
    fn handler(
        &self,
        arguments: Value,
        context: HandlerContext,
        deadline: Option<Duration>,
    ) -> HandlerOutcome;

    /// Calls the contract's probe, if it has one.
    fn probe(
        &self,
        contract: &EffectContract,
        arguments: Value,
        key: Option<String>,
    ) -> Option<Result<OutcomeProbeResult, CallbackError>>;
}

/// A sync handler.
pub(crate) type SyncHandler<O> =
    Arc<dyn Fn(Value, HandlerContext) -> Result<O, HandlerError> + Send + Sync>;

/// Calls sync handlers and probes.
pub(crate) struct SyncInvoke<O> {
    pub(crate) handler: SyncHandler<O>,
}

impl<O: Serialize + Send + 'static> Invoke for SyncInvoke<O> {
    fn handler(
        &self,
        arguments: Value,
        context: HandlerContext,
        deadline: Option<Duration>,
    ) -> HandlerOutcome {
        let handler = Arc::clone(&self.handler);
        let run = move || {
            let _scope = context.enter_trace();
            match catch_unwind(AssertUnwindSafe(|| handler(arguments, context))) {
                Ok(result) => HandlerOutcome::from_result(result),
                Err(panic) => {
                    HandlerOutcome::Failed(format!("handler panicked: {}", panic_message(&*panic)))
                }
            }
        };
        let Some(deadline) = deadline else {
            return run();
        };
        let (tx, rx) = mpsc::sync_channel(1);
        let spawned = thread::Builder::new()
            .name("effect-handler".into())
            .spawn(move || {
                // The receiver may be gone after a timeout; the outcome is then
                // already recorded as unknown.
                let _ = tx.send(run());
            });
        if let Err(err) = spawned {
            return HandlerOutcome::Failed(format!("could not start the handler thread: {err}"));
        }
        match rx.recv_timeout(deadline) {
            Ok(outcome) => outcome,
            Err(RecvTimeoutError::Timeout) => HandlerOutcome::TimedOut,
            Err(RecvTimeoutError::Disconnected) => {
                HandlerOutcome::Failed("handler thread ended without an outcome".into())
            }
        }
    }

    fn probe(
        &self,
        contract: &EffectContract,
        arguments: Value,
        key: Option<String>,
    ) -> Option<Result<OutcomeProbeResult, CallbackError>> {
        let probe = contract.outcome_probe()?;
        Some(call_guarded(|| probe(&arguments, key.as_deref())))
    }
}

/// Calls a callback, turning a panic into its error.
pub(crate) fn call_guarded<T>(
    f: impl FnOnce() -> Result<T, CallbackError>,
) -> Result<T, CallbackError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        Err(CallbackError::new(format!(
            "callback panicked: {}",
            panic_message(&*panic)
        )))
    })
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests;
