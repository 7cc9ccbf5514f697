//! [`EffectTool`]: a rig tool whose calls go through the executor.

use std::sync::Arc;

use effect_core::EffectStatus;
use effect_exec::{
    CallOptions, EffectExecutor, HandlerContext, HandlerError, TypedContract, UncertainOutcome,
};
use rig_core::tool::{
    ContextValue, IntoToolOutput, Tool, ToolContext, ToolExecutionError, ToolOutput,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::EffectToolError;

/// A rig [`Tool`] run through an [`EffectExecutor`] under a contract.
///
/// It has the inner tool's name, description and parameters, so the model
/// sees the same tool. See the [crate docs](crate) for what each outcome
/// returns.
pub struct EffectTool<T: Tool> {
    tool: Arc<T>,
    contract: TypedContract<T::Args, T::Output>,
    executor: EffectExecutor,
    options: CallOptions,
}

/// What the inner tool finds in its [`ToolContext`] on every dispatch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectCall {
    /// The operation id of this call.
    pub operation_id: String,
    /// The key to forward to the provider, when the contract derives one.
    pub provider_idempotency_key: Option<String>,
}

impl ContextValue for EffectCall {
    const KEY: &'static str = "production_agent_systems.effect_call";
}

/// Host-only result metadata the adapter publishes on every call
/// (`ToolContext::result::<EffectReport>()`); the model never sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectReport {
    /// The operation id.
    pub operation_id: String,
    /// The status when the call returned.
    pub status: EffectStatus,
    /// True when a stored result was replayed instead of dispatching.
    pub duplicate_suppressed: bool,
    /// Dispatches claimed so far.
    pub attempts: u32,
}

impl ContextValue for EffectReport {
    const KEY: &'static str = "production_agent_systems.effect_report";
}

impl<T: Tool> EffectTool<T> {
    /// Wraps `tool` so that its calls run under `contract` through `executor`.
    pub fn new(
        tool: T,
        contract: TypedContract<T::Args, T::Output>,
        executor: EffectExecutor,
    ) -> Self {
        EffectTool {
            tool: Arc::new(tool),
            contract,
            executor,
            options: CallOptions::default(),
        }
    }

    /// Wraps `tool` under a `Value` [`EffectContract`](effect_core::EffectContract)
    /// over its arguments' JSON; outputs are still decoded as `T::Output`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use effect_core::{EffectContract, MemoryLedger};
    /// # use effect_exec::EffectExecutor;
    /// # use rig_core::tool::{Tool, ToolContext};
    /// # struct Echo;
    /// # impl Tool for Echo {
    /// #     const NAME: &'static str = "echo";
    /// #     type Args = String;
    /// #     type Output = String;
    /// #     type Error = std::io::Error;
    /// #     fn description(&self) -> String { "echo".into() }
    /// #     fn parameters(&self) -> serde_json::Value { serde_json::json!({"type": "string"}) }
    /// #     async fn call(&self, _: &mut ToolContext, args: String) -> Result<String, std::io::Error> { Ok(args) }
    /// # }
    /// let contract = EffectContract::builder("echo", |args| {
    ///     Ok(format!("echo:{}", args.as_str().ok_or("not a string")?))
    /// })
    /// .build()?;
    /// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    /// let tool = effect_rig::EffectTool::with_contract(Echo, contract, executor);
    /// assert_eq!(tool.contract().contract().name(), "echo");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_contract(
        tool: T,
        contract: effect_core::EffectContract,
        executor: EffectExecutor,
    ) -> Self
    where
        T::Args: Serialize + DeserializeOwned + 'static,
        T::Output: Serialize + DeserializeOwned + 'static,
    {
        EffectTool::new(tool, TypedContract::from_contract(contract), executor)
    }

    /// Sets the per-call options (a deadline, say) for every call.
    #[must_use]
    pub fn with_options(mut self, options: CallOptions) -> Self {
        self.options = options;
        self
    }

    /// The inner tool.
    pub fn inner(&self) -> &T {
        &self.tool
    }

    /// The contract.
    pub fn contract(&self) -> &TypedContract<T::Args, T::Output> {
        &self.contract
    }
}

impl<T> Tool for EffectTool<T>
where
    T: Tool + 'static,
    T::Args: Serialize + DeserializeOwned + Send + 'static,
    T::Output: Serialize + DeserializeOwned + Send + 'static,
{
    const NAME: &'static str = T::NAME;
    type Args = T::Args;
    type Output = ToolOutput;
    type Error = EffectToolError;

    fn description(&self) -> String {
        self.tool.description()
    }

    fn parameters(&self) -> serde_json::Value {
        self.tool.parameters()
    }

    /// A refusal stays a refusal; everything else is a non-retryable error.
    fn map_error(&self, error: EffectToolError) -> ToolExecutionError {
        match &error {
            EffectToolError::Rejected { reason, .. } => {
                let feedback = format!("`{}` was refused by the provider: {reason}", T::NAME);
                ToolExecutionError::refused(error.to_string()).with_model_feedback(feedback)
            }
            EffectToolError::Exec { .. } | EffectToolError::Output { .. } => {
                ToolExecutionError::from_error(error).with_retryable(false)
            }
        }
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        args: T::Args,
    ) -> Result<ToolOutput, EffectToolError> {
        let exec = |source| EffectToolError::Exec {
            tool: T::NAME,
            source,
        };
        let tool = Arc::clone(&self.tool);
        let dispatch = context.for_dispatch();
        // The executor derives the operation id once and hands it over.
        let handler = move |args: T::Args, effect: HandlerContext| {
            let tool = Arc::clone(&tool);
            let mut context = dispatch.clone();
            let call = EffectCall {
                operation_id: effect.operation_id().to_owned(),
                provider_idempotency_key: effect.into_provider_key(),
            };
            async move {
                context.insert(call).map_err(|err| {
                    HandlerError::rejected(format!("context not written, nothing was sent: {err}"))
                })?;
                match tool.call(&mut context, args).await {
                    Ok(output) => Ok(output),
                    Err(err) => Err(handler_error(tool.map_error(err))),
                }
            }
        };
        let result = self
            .executor
            .execute_typed_async(&self.contract, &args, self.options, handler)
            .await
            .map_err(exec)?;
        let operation_id = result.operation_id.clone();
        // The model never sees the report; a failure to write it loses only that.
        let _ = context.insert_result(EffectReport {
            operation_id: result.operation_id.clone(),
            status: result.status,
            duplicate_suppressed: result.duplicate_suppressed,
            attempts: result.attempts,
        });
        if let Some(notice) = UncertainOutcome::from_result(T::NAME, &result) {
            let notice = serde_json::to_value(notice).map_err(|err| EffectToolError::Output {
                tool: T::NAME,
                message: err.to_string(),
            })?;
            return Ok(ToolOutput::json(notice));
        }
        match (result.status, result.output) {
            (EffectStatus::Confirmed, Some(output)) => {
                output
                    .into_tool_output()
                    .map_err(|err| EffectToolError::Output {
                        tool: T::NAME,
                        message: err.message().to_owned(),
                    })
            }
            (EffectStatus::Confirmed, None) => Err(EffectToolError::Output {
                tool: T::NAME,
                message: format!("operation {operation_id:?} is confirmed without an output"),
            }),
            _ => Err(EffectToolError::Rejected {
                tool: T::NAME,
                operation_id,
                reason: result.result.error.unwrap_or_default(),
            }),
        }
    }
}

/// A refusal by the inner tool is a definitive rejection; any other error
/// leaves the outcome unknown.
fn handler_error(error: ToolExecutionError) -> HandlerError {
    if error.is_refusal() {
        HandlerError::rejected(error.message())
    } else {
        HandlerError::unknown(error.message())
    }
}

impl<T: Tool> std::fmt::Debug for EffectTool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EffectTool")
            .field("name", &T::NAME)
            .field("contract", &self.contract)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}
