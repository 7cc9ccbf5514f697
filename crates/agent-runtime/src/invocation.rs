//! Tool invocations: [`ToolExecutor`] runs one, after validation, through
//! the right path, and reports it as an [`InvocationReport`].
//!
//! The concerns live apart: preparation (lookup, schema check, the effect
//! executor's one derivation of the operation id) in `prepare.rs`, the
//! retry and circuit-breaker loop of plain tools in `plain.rs`, a handler
//! call under a thread timeout in `thread.rs`, and the effect executor's
//! path in `effect.rs` (its call, as both flavours make it, in
//! `dispatch.rs`). How user code is called and how a retry waits is the
//! flavour's (`flavour.rs`), the one seam between the sync and async runtimes.

use std::sync::Arc;
use std::time::Duration;

use effect_core::{Clock, EffectStatus, SystemClock};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ToolErrorKind;
use crate::flavour::{Blocking, Flavour};
use crate::future::block_on;
use crate::resilience::{
    CircuitBreakerPolicy, CircuitBreakers, CircuitState, RetryPolicy, Sleeper,
};
use crate::tool::ToolRegistry;

#[cfg(feature = "effects")]
pub(crate) mod dispatch;
#[cfg(feature = "effects")]
pub(crate) mod effect;
mod plain;
mod prepare;
pub(crate) mod thread;

pub(crate) use prepare::PreparedCall;

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

    pub(crate) fn of(kind: ToolErrorKind) -> Self {
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
    pub(crate) fn new(kind: FailureKind, message: impl Into<String>) -> Self {
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
    /// The effect operation id, for effect-backed tools: the one the effect
    /// executor derived for this call.
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
/// use agent_runtime::invocation::{InvocationOutcome, ToolExecutor};
/// use agent_runtime::{EffectKind, ToolDefinition, ToolRegistry};
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
    /// What waits between retries; `None`: the flavour's own timer.
    sleeper: Option<Arc<dyn Sleeper>>,
    timeout: Option<Duration>,
    #[cfg(feature = "effects")]
    effects: Option<effect_exec::EffectExecutor>,
    /// Tools whose effect operations the permission policy makes wait for
    /// a human approval.
    #[cfg(feature = "effects")]
    approval_required: std::collections::BTreeSet<String>,
}

impl ToolExecutor {
    /// An executor with default retry and circuit-breaker policies, waiting
    /// between retries on the runtime's own timer (the thread sleeps, or
    /// tokio's timer), and no effect executor.
    pub fn new(registry: ToolRegistry) -> Self {
        let breaker_policy = CircuitBreakerPolicy::default();
        ToolExecutor {
            registry: Arc::new(registry),
            retry: RetryPolicy::default(),
            breaker_policy,
            breakers: CircuitBreakers::new(breaker_policy, Arc::new(SystemClock)),
            sleeper: None,
            timeout: Some(DEFAULT_TOOL_TIMEOUT),
            #[cfg(feature = "effects")]
            effects: None,
            #[cfg(feature = "effects")]
            approval_required: std::collections::BTreeSet::new(),
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

    /// Sets what waits between retries, in both runtimes: the synchronous
    /// one calls it on the calling thread, the async one on tokio's blocking
    /// pool (tests inject one that records the delays without sleeping).
    #[must_use]
    pub fn sleeper(mut self, sleeper: Arc<dyn Sleeper>) -> Self {
        self.sleeper = Some(sleeper);
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

    /// The effect executor, if one is set.
    #[cfg(feature = "effects")]
    pub(crate) fn effects(&self) -> Option<&effect_exec::EffectExecutor> {
        self.effects.as_ref()
    }

    /// Makes every call of these effect-backed tools wait for a human
    /// approval (the permission policy's rule, applied by the runtime).
    #[cfg(feature = "effects")]
    #[must_use]
    pub(crate) fn approval_required(mut self, tools: std::collections::BTreeSet<String>) -> Self {
        self.approval_required = tools;
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

    /// Validates and runs one invocation.
    ///
    /// An effect-backed tool goes to the effect executor, which reconciles an
    /// operation left uncertain (after a crash, or an earlier uncertain
    /// outcome) through its contract before anything is dispatched, and
    /// dispatches only where the ledger and the contract make that safe.
    pub fn invoke(&self, tool: &str, arguments: &Value) -> InvocationReport {
        match self.prepare(tool, arguments) {
            Ok(call) => block_on(self.invoke_with(&call, &Blocking)),
            Err(failure) => InvocationReport::failed(failure.kind, failure.message),
        }
    }

    /// The one implementation of an invocation; `flavour` says how user code
    /// is called and how retries wait (on this thread, or on tokio).
    pub(crate) async fn invoke_with<F: Flavour>(
        &self,
        call: &PreparedCall<'_>,
        flavour: &F,
    ) -> InvocationReport {
        if call.tool().definition().contract().is_some() {
            self.invoke_effect(call, flavour).await
        } else {
            self.invoke_plain(call.tool(), call.arguments(), flavour)
                .await
        }
    }
}

#[cfg(not(feature = "effects"))]
impl ToolExecutor {
    /// Without the `effects` feature no effect-backed tool can run.
    async fn invoke_effect<F: Flavour>(&self, call: &PreparedCall<'_>, _: &F) -> InvocationReport {
        InvocationReport::failed(
            FailureKind::EffectsUnavailable,
            format!(
                "tool {:?} has an effect contract but the `effects` feature is off",
                call.tool().definition().name()
            ),
        )
    }
}
