//! [`AsyncAgentRuntime`] (feature `tokio`): the same runs as
//! [`AgentRuntime`](crate::AgentRuntime), with an async planner and async
//! tool handlers.
//!
//! It awaits the one implementation of the run logic (see `drive.rs`) with a
//! tokio driver: planner calls and async handlers are awaited, synchronous
//! handlers run on the blocking pool, retries wait on tokio's timer, and
//! effect-backed tools go through
//! [`EffectExecutor::execute_async`](effect_exec::EffectExecutor::execute_async).
//! Trace, audit and checkpoint stores are called as in the synchronous
//! runtime, on the calling task.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use effect_core::{EffectContract, EffectResult};
use effect_exec::{EffectExecutor, HandlerContext};
use serde_json::Value;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::drive::Driver;
use crate::error::{PlannerError, RunError, ToolError};
use crate::executor::{
    Flavour, InvocationReport, PreparedCall, ToolExecutor, attempt_blocking, effect_path,
    error_chain,
};
use crate::future::StepFuture;
use crate::planner::{Action, PlanContext, Planner, Task};
use crate::resilience::Sleeper;
use crate::run::{Engine, Run, RunOptions, RunReport};
use crate::runtime::AgentRuntimeBuilder;
use crate::tool::{ToolDefinition, ToolInput, ToolRegistry};

/// Chooses a run's next action, asynchronously (an LLM call, say). Like
/// [`Planner`], it must be a function of its context, so a resumed run
/// continues where it stopped. Every [`Planner`] is one.
pub trait AsyncPlanner: Send + Sync + fmt::Debug {
    /// The next action.
    ///
    /// # Errors
    ///
    /// [`PlannerError`] when no action can be chosen; the run then fails.
    fn next_action<'a>(
        &'a self,
        context: &'a PlanContext<'a>,
    ) -> StepFuture<'a, Result<Action, PlannerError>>;
}

impl<P: Planner> AsyncPlanner for P {
    fn next_action<'a>(
        &'a self,
        context: &'a PlanContext<'a>,
    ) -> StepFuture<'a, Result<Action, PlannerError>> {
        Box::pin(std::future::ready(Planner::next_action(self, context)))
    }
}

/// Runs tasks like [`AgentRuntime`](crate::AgentRuntime), on tokio: the same
/// run-status machine, policy, schema validation, checkpoints, trace and
/// audit records, from the same code.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use agent_runtime::{
///     Action, AsyncAgentRuntime, DeterministicPlanner, EffectKind, PermissionPolicy, RunOptions,
///     RunStatus, Task, ToolDefinition, ToolRegistry,
/// };
/// use serde_json::json;
///
/// let mut tools = ToolRegistry::new();
/// tools.register(ToolDefinition::new_async(
///     "lookup_invoice",
///     "Reads an invoice",
///     json!({"type": "object", "properties": {"invoice_id": {"type": "string"}}}),
///     EffectKind::Read,
///     |input| async move { Ok(json!({"amount_cents": 1200, "invoice_id": input.arguments["invoice_id"]})) },
/// ))?;
/// let planner = DeterministicPlanner::new([
///     Action::call("lookup_invoice", json!({"invoice_id": "INV-1"})),
///     Action::finish(json!("looked up")),
/// ]);
/// let runtime = AsyncAgentRuntime::builder(tools, planner)
///     .policy(PermissionPolicy::allow(["lookup_invoice"]))
///     .build()?;
/// let report = runtime.run(Task::new("run-1", json!("look INV-1 up")), RunOptions::start()).await?;
/// assert_eq!(report.status, RunStatus::Completed);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct AsyncAgentRuntime {
    engine: Engine,
    planner: Arc<dyn AsyncPlanner>,
}

impl AsyncAgentRuntime {
    /// Starts a runtime over `registry` and `planner`, with a deny-all policy
    /// and in-memory stores. The builder is [`AgentRuntime`](crate::AgentRuntime)'s.
    pub fn builder(
        registry: ToolRegistry,
        planner: impl AsyncPlanner + 'static,
    ) -> AgentRuntimeBuilder<dyn AsyncPlanner> {
        AgentRuntimeBuilder::over(registry, Arc::new(planner))
    }

    /// The tool executor.
    pub fn tools(&self) -> &ToolExecutor {
        &self.engine.tools
    }

    /// The trace store.
    pub fn events(&self) -> &Arc<dyn crate::EventStore> {
        &self.engine.events
    }

    /// The audit store.
    pub fn audit(&self) -> &Arc<dyn crate::AuditStore> {
        &self.engine.audit
    }

    /// The checkpoint store.
    pub fn checkpoints(&self) -> &Arc<dyn crate::CheckpointStore> {
        &self.engine.checkpoints
    }

    /// Runs `task` until it completes, fails, waits or pauses; the async form
    /// of [`AgentRuntime::run`](crate::AgentRuntime::run), with the same
    /// start, resume and error semantics. Must be awaited within a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`AgentRuntime::run`](crate::AgentRuntime::run).
    pub async fn run(&self, task: Task, options: RunOptions) -> Result<RunReport, RunError> {
        let driver = TokioDriver(self.planner.as_ref());
        Run::open(&self.engine, &driver, task, &options)?
            .drive()
            .await
    }
}

impl AgentRuntimeBuilder<dyn AsyncPlanner> {
    /// Builds the async runtime.
    ///
    /// # Errors
    ///
    /// [`RunError::NoEffectExecutor`] when a tool has an effect contract but
    /// no effect executor was given.
    pub fn build(self) -> Result<AsyncAgentRuntime, RunError> {
        let (engine, planner) = self.into_parts()?;
        Ok(AsyncAgentRuntime { engine, planner })
    }
}

/// The tokio driver: an async planner and the tokio flavour of invocations.
struct TokioDriver<'p>(&'p dyn AsyncPlanner);

impl Driver for TokioDriver<'_> {
    fn next_action<'a>(
        &'a self,
        context: &'a PlanContext<'a>,
    ) -> StepFuture<'a, Result<Action, PlannerError>> {
        self.0.next_action(context)
    }

    fn invoke<'a>(
        &'a self,
        tools: &'a ToolExecutor,
        call: &'a PreparedCall<'a>,
    ) -> StepFuture<'a, InvocationReport> {
        Box::pin(tools.invoke_with(call, &Tokio))
    }
}

/// The tokio flavour: async handlers are awaited as tasks of their own (a
/// panic is contained), synchronous ones run on the blocking pool, retries
/// wait on tokio's timer.
struct Tokio;

impl Flavour for Tokio {
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

    fn sleep<'a>(&'a self, _: &'a Arc<dyn Sleeper>, delay: Duration) -> StepFuture<'a, ()> {
        Box::pin(tokio::time::sleep(delay))
    }

    fn execute_effect<'a>(
        &'a self,
        effects: &'a EffectExecutor,
        contract: &'a EffectContract,
        definition: &'a ToolDefinition,
        arguments: &'a Value,
    ) -> StepFuture<'a, Result<EffectResult, String>> {
        let options = effect_path::options(definition);
        match definition.async_handler() {
            Some(handler) => {
                let handler = Arc::clone(handler);
                Box::pin(async move {
                    effects
                        .execute_async(
                            contract,
                            arguments,
                            options,
                            move |arguments, context: HandlerContext| {
                                let future = handler(ToolInput {
                                    arguments,
                                    provider_key: context.provider_key().map(str::to_owned),
                                    effect: Some(context),
                                });
                                async move { future.await.map_err(effect_path::handler_error) }
                            },
                        )
                        .await
                        .map_err(|err| error_chain(&err))
                })
            }
            None => {
                // A synchronous handler: the executor's own blocking path, off
                // the runtime's workers.
                let (effects, contract) = (effects.clone(), contract.clone());
                let (definition, arguments) = (definition.clone(), arguments.clone());
                Box::pin(async move {
                    tokio::task::spawn_blocking(move || {
                        effect_path::execute(&effects, &contract, &definition, &arguments)
                            .map_err(|err| error_chain(&err))
                    })
                    .await
                    .unwrap_or_else(|err| Err(format!("the effect task failed: {err}")))
                })
            }
        }
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
