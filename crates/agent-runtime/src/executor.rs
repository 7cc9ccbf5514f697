//! [`ToolExecutor`]: runs one tool invocation, after validation, through the
//! right path: retry policy and circuit breaker for plain tools, the effect
//! executor for tools with an effect contract.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use effect_core::{Clock, EffectStatus, SystemClock};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ToolError, ToolErrorKind};
use crate::future::{StepFuture, block_on};
use crate::resilience::{
    CircuitBreakerPolicy, CircuitBreakers, CircuitState, RetryPolicy, Sleeper, ThreadSleeper,
};
use crate::tool::{RegisteredTool, ToolDefinition, ToolInput, ToolRegistry};

/// Why an invocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureKind {
    /// No tool has this name.
    UnknownTool,
    /// The arguments do not match the tool's schema; the handler never ran.
    InvalidArguments,
    /// The dependency's circuit is open; the handler never ran.
    CircuitOpen,
    /// The handler timed out on every attempt.
    Timeout,
    /// The handler failed.
    Failed,
    /// The handler (or the effect's provider) refused definitively.
    Rejected,
    /// The effect executor could not do its job (a ledger failure, a
    /// conflicting operation identity, a contract callback error).
    EffectExecutor,
    /// The tool has an effect contract but no effect executor is available.
    EffectsUnavailable,
}

impl FailureKind {
    /// The snake_case name used in traces.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::UnknownTool => "unknown_tool",
            FailureKind::InvalidArguments => "invalid_arguments",
            FailureKind::CircuitOpen => "circuit_open",
            FailureKind::Timeout => "timeout",
            FailureKind::Failed => "failed",
            FailureKind::Rejected => "rejected",
            FailureKind::EffectExecutor => "effect_executor",
            FailureKind::EffectsUnavailable => "effects_unavailable",
        }
    }

    fn of(kind: ToolErrorKind) -> Self {
        match kind {
            ToolErrorKind::Timeout => FailureKind::Timeout,
            ToolErrorKind::Rejected => FailureKind::Rejected,
            ToolErrorKind::Failed => FailureKind::Failed,
        }
    }
}

/// A failed invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvocationFailure {
    /// Why.
    pub kind: FailureKind,
    /// What happened.
    pub message: String,
}

impl InvocationFailure {
    fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        InvocationFailure {
            kind,
            message: message.into(),
        }
    }
}

/// What an invocation ended with.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum InvocationOutcome {
    /// The tool returned this output (or the effect is confirmed with it).
    Succeeded {
        /// The output.
        output: Value,
    },
    /// The invocation failed and left nothing uncertain behind.
    Failed(InvocationFailure),
    /// The effect's outcome is uncertain (`outcome_unknown`, `quarantined`,
    /// a dispatch in progress elsewhere, or a retry authorized but not yet made).
    Uncertain {
        /// The effect's status in the ledger.
        status: EffectStatus,
        /// The ledger's last error.
        error: Option<String>,
    },
}

/// One retry of a plain tool.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryNote {
    /// The attempt that failed (1-based).
    pub attempt: u32,
    /// The delay before the next attempt.
    pub delay: Duration,
    /// The error.
    pub error: String,
}

/// What [`ToolExecutor::invoke`] reports.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InvocationReport {
    /// The outcome.
    pub outcome: InvocationOutcome,
    /// Handler attempts made (for effect-backed tools: the effect's attempts).
    pub attempts: u32,
    /// Retries of a plain tool, in order.
    pub retries: Vec<RetryNote>,
    /// The effect operation id, for effect-backed tools.
    pub operation_id: Option<String>,
}

impl InvocationReport {
    pub(crate) fn failed(kind: FailureKind, message: impl Into<String>) -> Self {
        InvocationReport {
            outcome: InvocationOutcome::Failed(InvocationFailure::new(kind, message)),
            attempts: 0,
            retries: Vec::new(),
            operation_id: None,
        }
    }
}

/// The default per-call timeout of plain tools, as in the Python package.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs tool invocations.
///
/// Every invocation is validated against the tool's schema first; invalid
/// arguments never reach a handler and never count against a circuit.
/// Plain tools run under a per-call timeout, are retried on the retry
/// policy's error kinds (default `timeout`) with bounded exponential backoff,
/// and are guarded by a per-dependency circuit breaker consulted before every
/// attempt. Tools with an effect contract go to the effect executor instead
/// and bypass all three.
///
/// ```
/// use agent_runtime::{EffectKind, InvocationOutcome, ToolDefinition, ToolExecutor, ToolRegistry};
/// use serde_json::json;
///
/// let mut registry = ToolRegistry::new();
/// registry.register(ToolDefinition::new(
///     "echo",
///     "Echoes its text",
///     json!({"type": "object", "properties": {"text": {"type": "string"}}}),
///     EffectKind::Read,
///     |input| Ok(input.arguments["text"].clone()),
/// ))?;
/// let tools = ToolExecutor::new(registry);
/// let report = tools.invoke("echo", &json!({"text": "hi"}));
/// assert_eq!(report.outcome, InvocationOutcome::Succeeded { output: json!("hi") });
/// let invalid = tools.invoke("echo", &json!({"text": 1}));
/// assert!(matches!(invalid.outcome, InvocationOutcome::Failed(_)));
/// # Ok::<(), agent_runtime::RegistryError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ToolExecutor {
    registry: Arc<ToolRegistry>,
    retry: RetryPolicy,
    breaker_policy: CircuitBreakerPolicy,
    breakers: CircuitBreakers,
    sleeper: Arc<dyn Sleeper>,
    timeout: Option<Duration>,
    #[cfg(feature = "effects")]
    effects: Option<effect_exec::EffectExecutor>,
}

impl ToolExecutor {
    /// An executor with default retry and circuit-breaker policies, sleeping
    /// on the current thread, and no effect executor.
    pub fn new(registry: ToolRegistry) -> Self {
        let breaker_policy = CircuitBreakerPolicy::default();
        ToolExecutor {
            registry: Arc::new(registry),
            retry: RetryPolicy::default(),
            breaker_policy,
            breakers: CircuitBreakers::new(breaker_policy, Arc::new(SystemClock)),
            sleeper: Arc::new(ThreadSleeper),
            timeout: Some(DEFAULT_TOOL_TIMEOUT),
            #[cfg(feature = "effects")]
            effects: None,
        }
    }

    /// Sets the retry policy of plain tools.
    #[must_use]
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Sets the circuit-breaker policy and the clock it reads (resets all circuits).
    #[must_use]
    pub fn circuit_breaker(mut self, policy: CircuitBreakerPolicy, clock: Arc<dyn Clock>) -> Self {
        self.breaker_policy = policy;
        self.breakers = CircuitBreakers::new(policy, clock);
        self
    }

    /// Sets the per-call timeout of plain tools (default 2 s; `None`: wait
    /// for ever). A handler past it counts as a `timeout` error, retried per
    /// the retry policy. Effect-backed tools ignore it: they keep their own
    /// deadline ([`ToolDefinition::deadline`](crate::ToolDefinition::deadline))
    /// or the effect executor's default.
    #[must_use]
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets what waits between retries.
    #[must_use]
    pub fn sleeper(mut self, sleeper: Arc<dyn Sleeper>) -> Self {
        self.sleeper = sleeper;
        self
    }

    /// Runs tools with an effect contract through `executor`.
    #[cfg(feature = "effects")]
    #[cfg_attr(docsrs, doc(cfg(feature = "effects")))]
    #[must_use]
    pub fn effect_executor(mut self, executor: effect_exec::EffectExecutor) -> Self {
        self.effects = Some(executor);
        self
    }

    /// The registry.
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// The state of a dependency's circuit.
    pub fn circuit_state(&self, dependency: &str) -> CircuitState {
        self.breakers.state(dependency)
    }

    /// True when effect-backed tools can run.
    pub fn has_effect_executor(&self) -> bool {
        #[cfg(feature = "effects")]
        {
            self.effects.is_some()
        }
        #[cfg(not(feature = "effects"))]
        {
            false
        }
    }

    /// Looks the tool up and validates the arguments, without running anything.
    ///
    /// # Errors
    ///
    /// [`FailureKind::UnknownTool`] or [`FailureKind::InvalidArguments`].
    pub fn check(
        &self,
        tool: &str,
        arguments: &Value,
    ) -> Result<&RegisteredTool, InvocationFailure> {
        let registered = self.registry.get(tool).ok_or_else(|| {
            InvocationFailure::new(FailureKind::UnknownTool, format!("no tool named {tool:?}"))
        })?;
        registered.schema().validate(arguments).map_err(|errors| {
            InvocationFailure::new(
                FailureKind::InvalidArguments,
                format!(
                    "arguments of {tool:?} do not match its input schema: {}",
                    errors.join("; ")
                ),
            )
        })?;
        Ok(registered)
    }

    /// The effect operation id the tool's contract derives from the arguments,
    /// or `None` for a plain tool.
    ///
    /// # Errors
    ///
    /// The contract callback's error, as a message.
    pub fn operation_id(&self, tool: &str, arguments: &Value) -> Result<Option<String>, String> {
        self.registry.get(tool).map_or(Ok(None), |registered| {
            derive_operation_id(registered, arguments)
        })
    }

    /// Looks the tool up, validates the arguments and derives the effect
    /// operation id, once; [`ToolExecutor::invoke_prepared`] then runs it.
    ///
    /// # Errors
    ///
    /// [`FailureKind::UnknownTool`] or [`FailureKind::InvalidArguments`]. A
    /// contract that cannot derive its operation id is not an error here: the
    /// call carries it (see [`PreparedCall::operation_id`]).
    pub fn prepare<'a>(
        &'a self,
        tool: &str,
        arguments: &'a Value,
    ) -> Result<PreparedCall<'a>, InvocationFailure> {
        let registered = self.check(tool, arguments)?;
        Ok(PreparedCall {
            tool: registered,
            arguments,
            operation_id: derive_operation_id(registered, arguments),
        })
    }

    /// Validates and runs one invocation.
    ///
    /// An effect-backed tool goes to the effect executor, which reconciles an
    /// operation left uncertain (after a crash, or an earlier uncertain
    /// outcome) through its contract before anything is dispatched, and
    /// dispatches only where the ledger and the contract make that safe.
    pub fn invoke(&self, tool: &str, arguments: &Value) -> InvocationReport {
        match self.prepare(tool, arguments) {
            Ok(call) => self.invoke_prepared(&call),
            Err(failure) => InvocationReport::failed(failure.kind, failure.message),
        }
    }

    /// Runs a call made by [`ToolExecutor::prepare`].
    pub fn invoke_prepared(&self, call: &PreparedCall<'_>) -> InvocationReport {
        block_on(self.invoke_with(call, &Blocking))
    }

    /// The one implementation of an invocation; `flavour` says how user code
    /// is called and how retries wait (on this thread, or on tokio).
    pub(crate) async fn invoke_with<F: Flavour>(
        &self,
        call: &PreparedCall<'_>,
        flavour: &F,
    ) -> InvocationReport {
        if call.tool.definition().contract().is_some() {
            self.invoke_effect(call, flavour).await
        } else {
            self.invoke_plain(call.tool, call.arguments, flavour).await
        }
    }

    async fn invoke_plain<F: Flavour>(
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
                flavour.sleep(&self.sleeper, delay).await;
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

    #[cfg(not(feature = "effects"))]
    async fn invoke_effect<F: Flavour>(&self, call: &PreparedCall<'_>, _: &F) -> InvocationReport {
        InvocationReport::failed(
            FailureKind::EffectsUnavailable,
            format!(
                "tool {:?} has an effect contract but the `effects` feature is off",
                call.tool.definition().name()
            ),
        )
    }

    #[cfg(feature = "effects")]
    async fn invoke_effect<F: Flavour>(
        &self,
        call: &PreparedCall<'_>,
        flavour: &F,
    ) -> InvocationReport {
        let definition = call.tool.definition();
        let (Some(effects), Some(contract)) = (&self.effects, definition.contract()) else {
            return InvocationReport::failed(
                FailureKind::EffectsUnavailable,
                format!(
                    "tool {:?} has an effect contract but no effect executor is set",
                    definition.name()
                ),
            );
        };
        let operation_id = match &call.operation_id {
            Ok(id) => id.clone(),
            Err(message) => {
                return InvocationReport::failed(FailureKind::EffectExecutor, message.clone());
            }
        };
        let executed = flavour
            .execute_effect(effects, contract, definition, call.arguments)
            .await;
        let mut report = match executed {
            Ok(result) => effect_path::report(result),
            Err(message) => InvocationReport::failed(FailureKind::EffectExecutor, message),
        };
        report.operation_id = operation_id;
        report
    }
}

/// How an invocation calls user code and waits between retries: the one
/// implementation of the invocation logic is written over it.
pub(crate) trait Flavour: Sync {
    /// One attempt of a plain tool.
    fn attempt<'a>(
        &'a self,
        definition: &'a ToolDefinition,
        arguments: &'a Value,
        timeout: Option<Duration>,
    ) -> StepFuture<'a, Result<Value, ToolError>>;

    /// The wait before a retry.
    fn sleep<'a>(&'a self, sleeper: &'a Arc<dyn Sleeper>, delay: Duration) -> StepFuture<'a, ()>;

    /// An effect-backed tool, through the effect executor.
    #[cfg(feature = "effects")]
    fn execute_effect<'a>(
        &'a self,
        effects: &'a effect_exec::EffectExecutor,
        contract: &'a effect_core::EffectContract,
        definition: &'a ToolDefinition,
        arguments: &'a Value,
    ) -> StepFuture<'a, Result<effect_core::EffectResult, String>>;
}

/// The synchronous flavour: everything runs on the calling thread, and every
/// future it returns is already complete.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Blocking;

impl Flavour for Blocking {
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

    fn sleep<'a>(&'a self, sleeper: &'a Arc<dyn Sleeper>, delay: Duration) -> StepFuture<'a, ()> {
        sleeper.sleep(delay);
        Box::pin(std::future::ready(()))
    }

    #[cfg(feature = "effects")]
    fn execute_effect<'a>(
        &'a self,
        effects: &'a effect_exec::EffectExecutor,
        contract: &'a effect_core::EffectContract,
        definition: &'a ToolDefinition,
        arguments: &'a Value,
    ) -> StepFuture<'a, Result<effect_core::EffectResult, String>> {
        let executed = effect_path::execute(effects, contract, definition, arguments)
            .map_err(|err| error_chain(&err));
        Box::pin(std::future::ready(executed))
    }
}

/// One call of a plain tool's handler on this thread, or, under a timeout, on
/// a thread of its own. A handler past its timeout is not stopped (a thread
/// cannot be): it keeps running detached and its late answer is dropped.
pub(crate) fn attempt_blocking(
    definition: &ToolDefinition,
    arguments: &Value,
    timeout: Option<Duration>,
) -> Result<Value, ToolError> {
    let handler = Arc::clone(definition.handler());
    let input = ToolInput {
        arguments: arguments.clone(),
        provider_key: None,
        effect: None,
    };
    let call = move || {
        catch_unwind(AssertUnwindSafe(|| handler(input)))
            .unwrap_or_else(|_| Err(ToolError::failed("the handler panicked")))
    };
    let Some(timeout) = timeout else {
        return call();
    };
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
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
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(ToolError::timeout(format!(
            "tool {:?} did not answer within {} ms",
            definition.name(),
            timeout.as_millis()
        ))),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(ToolError::failed(
            "the handler thread ended without an answer",
        )),
    }
}

/// A tool invocation that passed validation, with its effect operation id
/// derived once: made by [`ToolExecutor::prepare`].
#[derive(Debug, Clone)]
pub struct PreparedCall<'a> {
    tool: &'a RegisteredTool,
    arguments: &'a Value,
    operation_id: Result<Option<String>, String>,
}

impl PreparedCall<'_> {
    /// The tool.
    pub fn tool(&self) -> &RegisteredTool {
        self.tool
    }

    /// The validated arguments.
    pub fn arguments(&self) -> &Value {
        self.arguments
    }

    /// The effect operation id (`None` for a plain tool).
    ///
    /// # Errors
    ///
    /// The contract callback's error, as a message.
    pub fn operation_id(&self) -> Result<Option<&str>, &str> {
        match &self.operation_id {
            Ok(id) => Ok(id.as_deref()),
            Err(message) => Err(message),
        }
    }
}

/// The operation id `tool`'s contract derives from `arguments`, or `None` for
/// a plain tool; a panicking callback is an error.
fn derive_operation_id(tool: &RegisteredTool, arguments: &Value) -> Result<Option<String>, String> {
    let Some(contract) = tool.definition().contract() else {
        return Ok(None);
    };
    catch_unwind(AssertUnwindSafe(|| contract.operation_id(arguments)))
        .map_err(|_| "the operation id callback panicked".to_owned())?
        .map(Some)
        .map_err(|err| err.to_string())
}

#[cfg(feature = "effects")]
pub(crate) mod effect_path {
    use effect_core::{EffectContract, EffectResult, EffectStatus};
    use effect_exec::{CallOptions, EffectExecutor, ExecError, HandlerContext, HandlerError};
    use serde_json::Value;

    use super::{FailureKind, InvocationFailure, InvocationOutcome, InvocationReport};
    use crate::error::{ToolError, ToolErrorKind};
    use crate::tool::{ToolDefinition, ToolInput};

    /// Dispatches through the executor's deadline path (synchronous
    /// handler). The executor itself reconciles an operation left uncertain
    /// before any dispatch.
    pub(crate) fn execute(
        effects: &EffectExecutor,
        contract: &EffectContract,
        definition: &ToolDefinition,
        arguments: &Value,
    ) -> Result<EffectResult, ExecError> {
        let handler = definition.handler().clone();
        effects.execute_with(
            contract,
            arguments,
            options(definition),
            move |arguments, context: HandlerContext| {
                handler(ToolInput {
                    arguments,
                    provider_key: context.provider_key().map(str::to_owned),
                    effect: Some(context),
                })
                .map_err(handler_error)
            },
        )
    }

    /// The call options of an effect-backed tool: its own deadline, if any.
    pub(crate) fn options(definition: &ToolDefinition) -> CallOptions {
        definition
            .handler_deadline()
            .map(CallOptions::deadline)
            .unwrap_or_default()
    }

    /// A tool error as the effect executor sees it: only `rejected` is definitive.
    pub(crate) fn handler_error(err: ToolError) -> HandlerError {
        match err.kind {
            ToolErrorKind::Rejected => HandlerError::rejected(err.message),
            _ => HandlerError::unknown(err.to_string()),
        }
    }

    pub(super) fn report(result: EffectResult) -> InvocationReport {
        let outcome = match result.status {
            EffectStatus::Confirmed if !result.in_progress => InvocationOutcome::Succeeded {
                output: result.output.unwrap_or(Value::Null),
            },
            EffectStatus::Rejected => InvocationOutcome::Failed(InvocationFailure {
                kind: FailureKind::Rejected,
                message: result
                    .error
                    .unwrap_or_else(|| "the provider rejected the effect".to_owned()),
            }),
            status => InvocationOutcome::Uncertain {
                status,
                error: result.error,
            },
        };
        InvocationReport {
            outcome,
            attempts: result.attempts,
            retries: Vec::new(),
            operation_id: Some(result.operation_id),
        }
    }
}

/// An error and its sources, `: `-separated, for traces.
#[cfg_attr(not(feature = "effects"), allow(dead_code))]
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
