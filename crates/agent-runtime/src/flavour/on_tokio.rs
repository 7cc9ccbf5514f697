//! The tokio flavour (feature `tokio`): the planner and async handlers are
//! awaited, synchronous handlers, injected sleepers and every store call run
//! on tokio's blocking pool, so nothing the run calls stalls a worker.

use std::panic::resume_unwind;
use std::sync::Arc;
use std::time::Duration;

use effect_core::EffectResult;
use effect_exec::{EffectExecutor, ExecError, HandlerContext, PreparedEffect};
use serde_json::Value;
use tokio::task::{JoinError, JoinHandle};
use tracing::Instrument;

use super::Flavour;
use crate::error::{PlannerError, StoreError, ToolError};
use crate::future::StepFuture;
use crate::invocation::dispatch as effect;
use crate::invocation::thread::attempt_blocking;
use crate::planner::{Action, AsyncPlanner, PlanContext};
use crate::resilience::Sleeper;
use crate::tool::{ToolDefinition, ToolInput};

/// The tokio flavour: async handlers are awaited as tasks of their own (a
/// panic is contained), synchronous ones run on the blocking pool, retries
/// wait on tokio's timer unless a sleeper was injected.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tokio;

impl Flavour for Tokio {
    type Planner = dyn AsyncPlanner;

    fn next_action<'a>(
        &'a self,
        planner: &'a dyn AsyncPlanner,
        context: &'a PlanContext<'a>,
    ) -> StepFuture<'a, Result<Action, PlannerError>> {
        planner.next_action(context)
    }

    fn attempt<'a>(
        &'a self,
        definition: &'a ToolDefinition,
        arguments: &'a Value,
        timeout: Option<Duration>,
    ) -> StepFuture<'a, Result<Value, ToolError>> {
        let name = definition.name().to_owned();
        let task = match definition.async_handler() {
            Some(handler) => tokio::spawn(
                handler(ToolInput {
                    arguments: arguments.clone(),
                    provider_key: None,
                    effect: None,
                })
                .in_current_span(),
            ),
            None => {
                let definition = definition.clone();
                let arguments = arguments.clone();
                // The handler's logs stay in the caller's span.
                let span = tracing::Span::current();
                tokio::task::spawn_blocking(move || {
                    let _entered = span.enter();
                    attempt_blocking(&definition, &arguments, None)
                })
            }
        };
        Box::pin(within(timeout, task, name))
    }

    fn sleep<'a>(
        &'a self,
        sleeper: Option<&'a Arc<dyn Sleeper>>,
        delay: Duration,
    ) -> StepFuture<'a, ()> {
        let Some(sleeper) = sleeper else {
            return Box::pin(tokio::time::sleep(delay));
        };
        // A `Sleeper` blocks the thread it is called on.
        let sleeper = Arc::clone(sleeper);
        Box::pin(async move {
            if let Err(err) = tokio::task::spawn_blocking(move || sleeper.sleep(delay)).await {
                // Cancelled: the runtime is shutting down, and the run with it.
                let _cancelled = propagate_panic(err);
            }
        })
    }

    fn execute_effect<'a>(
        &'a self,
        effects: &'a EffectExecutor,
        prepared: &'a PreparedEffect,
        definition: &'a ToolDefinition,
    ) -> StepFuture<'a, Result<EffectResult, ExecError>> {
        let options = effect::options(definition);
        match definition.async_handler() {
            Some(handler) => {
                let handler = Arc::clone(handler);
                Box::pin(effects.execute_prepared_async(
                    prepared,
                    options,
                    move |arguments, context: HandlerContext| {
                        let future = handler(effect::input(arguments, context));
                        async move { future.await.map_err(effect::handler_error) }
                    },
                ))
            }
            None => {
                // A synchronous handler: the executor's own blocking path, off
                // the runtime's workers.
                let (effects, prepared) = (effects.clone(), prepared.clone());
                let definition = definition.clone();
                Box::pin(async move {
                    let operation_id = prepared.operation_id().to_owned();
                    tokio::task::spawn_blocking(move || {
                        effect::execute(&effects, &prepared, &definition)
                    })
                    .await
                    .unwrap_or_else(|err| {
                        Err(ExecError::Runtime {
                            operation_id,
                            message: err.to_string(),
                        })
                    })
                })
            }
        }
    }

    fn store<T, Op>(&self, op: Op) -> StepFuture<'static, Result<T, StoreError>>
    where
        T: Send + 'static,
        Op: FnOnce() -> Result<T, StoreError> + Send + 'static,
    {
        Box::pin(async move {
            match tokio::task::spawn_blocking(op).await {
                Ok(result) => result,
                Err(err) => Err(StoreError::backend(
                    "run on tokio's blocking pool",
                    propagate_panic(err),
                )),
            }
        })
    }
}

/// A panic in code the run called goes on unwinding here, as it would in
/// the synchronous runtime; any other join error is returned.
fn propagate_panic(err: JoinError) -> JoinError {
    match err.try_into_panic() {
        Ok(panic) => resume_unwind(panic),
        Err(err) => err,
    }
}

/// Awaits a handler task for at most `timeout`. A task past it is aborted
/// (a blocking one cannot be, and runs on detached) and counts as a timeout.
async fn within(
    timeout: Option<Duration>,
    task: JoinHandle<Result<Value, ToolError>>,
    name: String,
) -> Result<Value, ToolError> {
    let abort = task.abort_handle();
    let joined = match timeout {
        None => task.await,
        Some(timeout) => match tokio::time::timeout(timeout, task).await {
            Ok(joined) => joined,
            Err(_) => {
                abort.abort();
                return Err(ToolError::timeout(format!(
                    "tool {name:?} did not answer within {} ms",
                    timeout.as_millis()
                )));
            }
        },
    };
    joined.unwrap_or_else(|err| {
        Err(ToolError::failed(if err.is_panic() {
            "the handler panicked".to_owned()
        } else {
            format!("the handler task failed: {err}")
        }))
    })
}
