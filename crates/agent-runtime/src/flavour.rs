//! The one seam between the run logic, written once as async code, and its
//! two flavours: how user code is called (the planner, a tool handler, the
//! effect executor), how a retry waits, and where a store is called.
//!
//! [`Blocking`] runs everything on the calling thread and returns futures
//! that are already complete, so the synchronous runtime drives the run with
//! a trivial `block_on`; the tokio flavour (feature `tokio`,
//! `flavour/on_tokio.rs`) awaits the same run on tokio.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::error::{PlannerError, StoreError, ToolError};
use crate::future::StepFuture;
use crate::invocation::thread::attempt_blocking;
use crate::planner::{Action, PlanContext, Planner};
use crate::resilience::{Sleeper, ThreadSleeper};
use crate::tool::ToolDefinition;

#[cfg(feature = "tokio")]
pub(crate) mod on_tokio;

/// How a run calls user code, waits and reaches its stores.
pub(crate) trait Flavour: Sync {
    /// The planner this flavour asks for actions.
    type Planner: ?Sized + Sync;

    /// The planner's next action.
    fn next_action<'a>(
        &'a self,
        planner: &'a Self::Planner,
        context: &'a PlanContext<'a>,
    ) -> StepFuture<'a, Result<Action, PlannerError>>;

    /// One attempt of a plain tool, under the per-call timeout.
    fn attempt<'a>(
        &'a self,
        definition: &'a ToolDefinition,
        arguments: &'a Value,
        timeout: Option<Duration>,
    ) -> StepFuture<'a, Result<Value, ToolError>>;

    /// The wait before a retry: through the injected sleeper, or (`None`)
    /// the flavour's own timer.
    fn sleep<'a>(
        &'a self,
        sleeper: Option<&'a Arc<dyn Sleeper>>,
        delay: Duration,
    ) -> StepFuture<'a, ()>;

    /// An effect-backed tool, through the effect executor, under the
    /// identity it derived when the call was prepared.
    #[cfg(feature = "effects")]
    fn execute_effect<'a>(
        &'a self,
        effects: &'a effect_exec::EffectExecutor,
        prepared: &'a effect_exec::PreparedEffect,
        definition: &'a ToolDefinition,
    ) -> StepFuture<'a, Result<effect_core::EffectResult, effect_exec::ExecError>>;

    /// A call of a trace, audit or checkpoint store, which may block (a
    /// SQLite commit): where it cannot stall an async runtime's worker.
    fn store<T, Op>(&self, op: Op) -> StepFuture<'static, Result<T, StoreError>>
    where
        T: Send + 'static,
        Op: FnOnce() -> Result<T, StoreError> + Send + 'static;
}

/// The synchronous flavour: everything runs on the calling thread, and every
/// future it returns is already complete.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Blocking;

impl Flavour for Blocking {
    type Planner = dyn Planner;

    fn next_action<'a>(
        &'a self,
        planner: &'a dyn Planner,
        context: &'a PlanContext<'a>,
    ) -> StepFuture<'a, Result<Action, PlannerError>> {
        Box::pin(std::future::ready(planner.next_action(context)))
    }

    fn attempt<'a>(
        &'a self,
        definition: &'a ToolDefinition,
        arguments: &'a Value,
        timeout: Option<Duration>,
    ) -> StepFuture<'a, Result<Value, ToolError>> {
        Box::pin(std::future::ready(attempt_blocking(
            definition, arguments, timeout,
        )))
    }

    fn sleep<'a>(
        &'a self,
        sleeper: Option<&'a Arc<dyn Sleeper>>,
        delay: Duration,
    ) -> StepFuture<'a, ()> {
        match sleeper {
            Some(sleeper) => sleeper.sleep(delay),
            None => ThreadSleeper.sleep(delay),
        }
        Box::pin(std::future::ready(()))
    }

    #[cfg(feature = "effects")]
    fn execute_effect<'a>(
        &'a self,
        effects: &'a effect_exec::EffectExecutor,
        prepared: &'a effect_exec::PreparedEffect,
        definition: &'a ToolDefinition,
    ) -> StepFuture<'a, Result<effect_core::EffectResult, effect_exec::ExecError>> {
        Box::pin(std::future::ready(crate::invocation::dispatch::execute(
            effects, prepared, definition,
        )))
    }

    fn store<T, Op>(&self, op: Op) -> StepFuture<'static, Result<T, StoreError>>
    where
        T: Send + 'static,
        Op: FnOnce() -> Result<T, StoreError> + Send + 'static,
    {
        Box::pin(std::future::ready(op()))
    }
}
