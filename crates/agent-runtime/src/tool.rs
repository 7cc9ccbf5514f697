//! Tools: [`ToolDefinition`] and the [`ToolRegistry`] that holds them.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use effect_core::EffectContract;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{RegistryError, ToolError};
use effect_schema::InputSchema;

/// Whether a tool only reads or changes something outside the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectKind {
    /// No external side effect.
    Read,
    /// Changes the outside world; needs a confirmation from a trusted outer layer.
    Mutation,
}

/// How much harm a wrong call of a tool can do, as its author declares it
/// ([`ToolDefinition::risk`]); a [`PermissionPolicy`](crate::PermissionPolicy)
/// can require a human approval of every call from some level up
/// ([`PermissionPolicy::require_approval_at_risk`](crate::PermissionPolicy::require_approval_at_risk)).
/// Ordered: `Low < Medium < High < Critical`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// The default: nothing a person needs to look at.
    #[default]
    Low,
    /// Reversible or small.
    Medium,
    /// Moves money, deletes data, or reaches people outside.
    High,
    /// Irreversible and large.
    Critical,
}

/// What a handler receives.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolInput {
    /// The validated arguments, the handler's own copy.
    pub arguments: Value,
    /// The provider idempotency key of an effect-backed tool, derived by its
    /// contract and identical on every attempt. `None` for plain tools.
    pub provider_key: Option<String>,
    /// The dispatch an effect-backed tool performs: its operation id, attempt
    /// and provider key, as the effect executor tells every handler. `None`
    /// for plain tools.
    #[cfg(feature = "effects")]
    #[cfg_attr(docsrs, doc(cfg(feature = "effects")))]
    pub effect: Option<effect_exec::HandlerContext>,
}

/// A tool's handler.
pub type ToolHandler = Arc<dyn Fn(ToolInput) -> Result<Value, ToolError> + Send + Sync>;

/// A tool's async handler (feature `tokio`), run by
/// [`AsyncAgentRuntime`](crate::AsyncAgentRuntime).
#[cfg(feature = "tokio")]
pub type AsyncToolHandler = Arc<
    dyn Fn(
            ToolInput,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, ToolError>> + Send>>
        + Send
        + Sync,
>;

/// One tool the planner may call.
///
/// ```
/// use agent_runtime::{EffectKind, ToolDefinition};
/// use serde_json::json;
///
/// let lookup = ToolDefinition::new(
///     "lookup_invoice",
///     "Reads an invoice",
///     json!({"type": "object", "properties": {"invoice_id": {"type": "string"}}, "required": ["invoice_id"]}),
///     EffectKind::Read,
///     |input| Ok(json!({"invoice_id": input.arguments["invoice_id"], "amount_cents": 1200})),
/// );
/// assert_eq!(lookup.name(), "lookup_invoice");
/// ```
#[derive(Clone)]
pub struct ToolDefinition {
    name: String,
    description: String,
    input_schema: Value,
    effect_kind: EffectKind,
    risk: Risk,
    version: String,
    handler: ToolHandler,
    contract: Option<EffectContract>,
    dependency: Option<String>,
    deadline: Option<Duration>,
    #[cfg(feature = "effects")]
    compensation: Option<crate::compensation::CompensationHandler>,
    #[cfg(feature = "tokio")]
    async_handler: Option<AsyncToolHandler>,
}

impl fmt::Debug for ToolDefinition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolDefinition")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("effect_kind", &self.effect_kind)
            .field("risk", &self.risk)
            .field("contract", &self.contract)
            .field("dependency", &self.dependency_name())
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl ToolDefinition {
    /// A plain tool, version `"1"`.
    pub fn new<H>(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        effect_kind: EffectKind,
        handler: H,
    ) -> Self
    where
        H: Fn(ToolInput) -> Result<Value, ToolError> + Send + Sync + 'static,
    {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            input_schema,
            effect_kind,
            risk: Risk::Low,
            version: "1".to_owned(),
            handler: Arc::new(handler),
            contract: None,
            dependency: None,
            deadline: None,
            #[cfg(feature = "effects")]
            compensation: None,
            #[cfg(feature = "tokio")]
            async_handler: None,
        }
    }

    /// A plain tool with an async handler, version `"1"` (feature `tokio`).
    /// Only [`AsyncAgentRuntime`](crate::AsyncAgentRuntime) runs it; the
    /// synchronous runtime refuses a registry holding it.
    ///
    /// ```
    /// use agent_runtime::{EffectKind, ToolDefinition};
    /// use serde_json::json;
    ///
    /// let lookup = ToolDefinition::new_async(
    ///     "lookup_invoice",
    ///     "Reads an invoice",
    ///     json!({"type": "object", "properties": {"invoice_id": {"type": "string"}}}),
    ///     EffectKind::Read,
    ///     |input| async move { Ok(json!({"invoice_id": input.arguments["invoice_id"]})) },
    /// );
    /// assert!(lookup.async_handler().is_some());
    /// ```
    #[cfg(feature = "tokio")]
    pub fn new_async<H, F>(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        effect_kind: EffectKind,
        handler: H,
    ) -> Self
    where
        H: Fn(ToolInput) -> F + Send + Sync + 'static,
        F: std::future::Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        let name = name.into();
        let blocking_name = name.clone();
        let mut tool =
            ToolDefinition::new(name, description, input_schema, effect_kind, move |_| {
                Err(ToolError::failed(format!(
                    "tool {blocking_name:?} has an async handler: run it with AsyncAgentRuntime"
                )))
            });
        tool.async_handler = Some(Arc::new(move |input| Box::pin(handler(input))));
        tool
    }

    /// Sets the version.
    #[must_use]
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Declares the tool's risk (default [`Risk::Low`]). The permission
    /// policy reads it to decide whether each call needs a human approval.
    #[must_use]
    pub fn risk(mut self, risk: Risk) -> Self {
        self.risk = risk;
        self
    }

    /// Runs the tool through the effect executor under `contract`: recorded
    /// before dispatch, never dispatched twice unless the contract makes that
    /// safe, and an uncertain outcome makes the run wait. Such a tool bypasses
    /// the retry policy and the circuit breaker.
    #[must_use]
    pub fn effect_contract(mut self, contract: EffectContract) -> Self {
        self.contract = Some(contract);
        self
    }

    /// The handler of the compensation the tool's effect contract names
    /// (docs/compensation.md): with a run's
    /// [`CompensationPolicy::OnFailure`](crate::CompensationPolicy), or
    /// [`AgentRuntime::compensate_run`](crate::AgentRuntime::compensate_run),
    /// the runtime undoes the tool's confirmed effects through it.
    #[cfg(feature = "effects")]
    #[cfg_attr(docsrs, doc(cfg(feature = "effects")))]
    #[must_use]
    pub fn compensation_handler<H>(mut self, handler: H) -> Self
    where
        H: Fn(Value, effect_exec::HandlerContext) -> Result<Value, effect_exec::HandlerError>
            + Send
            + Sync
            + 'static,
    {
        self.compensation = Some(Arc::new(handler));
        self
    }

    /// The compensation handler, if one was given.
    #[cfg(feature = "effects")]
    pub(crate) fn compensation(&self) -> Option<&crate::compensation::CompensationHandler> {
        self.compensation.as_ref()
    }

    /// Names the dependency whose circuit breaker guards this tool (default:
    /// the tool name). Tools sharing a dependency share a breaker.
    #[must_use]
    pub fn dependency(mut self, dependency: impl Into<String>) -> Self {
        self.dependency = Some(dependency.into());
        self
    }

    /// The handler deadline of an effect-backed tool, passed to the effect
    /// executor. A deadline is not cancellation: the outcome becomes uncertain.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The description shown to the planner.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The declared input schema.
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    /// Read or mutation.
    pub fn effect_kind(&self) -> EffectKind {
        self.effect_kind
    }

    /// The declared risk.
    pub fn risk_level(&self) -> Risk {
        self.risk
    }

    /// The version.
    pub fn tool_version(&self) -> &str {
        &self.version
    }

    /// The handler.
    pub fn handler(&self) -> &ToolHandler {
        &self.handler
    }

    /// The effect contract, for effect-backed tools.
    pub fn contract(&self) -> Option<&EffectContract> {
        self.contract.as_ref()
    }

    /// The dependency guarded by a circuit breaker.
    pub fn dependency_name(&self) -> &str {
        self.dependency.as_deref().unwrap_or(&self.name)
    }

    /// The handler deadline of an effect-backed tool.
    pub fn handler_deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The async handler, for tools made by [`ToolDefinition::new_async`].
    #[cfg(feature = "tokio")]
    pub fn async_handler(&self) -> Option<&AsyncToolHandler> {
        self.async_handler.as_ref()
    }

    /// True for a tool only the async runtime can run.
    pub(crate) fn is_async(&self) -> bool {
        #[cfg(feature = "tokio")]
        {
            self.async_handler.is_some()
        }
        #[cfg(not(feature = "tokio"))]
        {
            false
        }
    }
}

/// A registered tool with its compiled schema.
#[derive(Debug, Clone)]
pub struct RegisteredTool {
    definition: ToolDefinition,
    schema: InputSchema,
}

impl RegisteredTool {
    /// The definition.
    pub fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    /// The compiled, fail-closed input schema.
    pub fn schema(&self) -> &InputSchema {
        &self.schema
    }
}

/// The tools a runtime can call, by unique name. Schemas are compiled here,
/// so a tool with an unusable schema never gets registered.
#[derive(Debug, Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, RegisteredTool>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        ToolRegistry::default()
    }

    /// Registers a tool.
    ///
    /// # Errors
    ///
    /// [`RegistryError::BlankName`], [`RegistryError::DuplicateTool`], or
    /// [`RegistryError::InvalidSchema`] when the input schema is unusable.
    pub fn register(&mut self, tool: ToolDefinition) -> Result<&mut Self, RegistryError> {
        if tool.name.trim().is_empty() {
            return Err(RegistryError::BlankName);
        }
        if self.tools.contains_key(&tool.name) {
            return Err(RegistryError::DuplicateTool { name: tool.name });
        }
        let schema = InputSchema::new(tool.input_schema.clone()).map_err(|source| {
            RegistryError::InvalidSchema {
                name: tool.name.clone(),
                source,
            }
        })?;
        self.tools.insert(
            tool.name.clone(),
            RegisteredTool {
                definition: tool,
                schema,
            },
        );
        Ok(self)
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    /// Registered tool names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// All registered tools, sorted by name.
    pub fn tools(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.values()
    }

    /// The number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// True when no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}
