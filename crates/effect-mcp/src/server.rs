//! [`EffectServer`]: an MCP server whose tools run through the executor.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use effect_core::{BoxFuture, EffectStatus};
use effect_exec::{
    CallOptions, EffectExecutor, ExecError, HandlerContext, HandlerError, TypedContract,
    UncertainOutcome,
};
use effect_schema::InputSchema;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, MetaObject, PaginatedRequestParams, RequestMetaObject,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::EffectMcpError;
use crate::meta;

/// An MCP [`ServerHandler`] serving effect-backed tools; serve it with
/// `rmcp::ServiceExt::serve` on any transport.
#[derive(Clone)]
pub struct EffectServer {
    executor: EffectExecutor,
    tools: BTreeMap<String, Arc<dyn Serve>>,
    info: Implementation,
    instructions: Option<String>,
}

/// One effect-backed tool: a name, a description, a contract over its
/// argument type `A` and output `O`, and an async handler.
pub struct ServedTool<A, O, H> {
    name: String,
    description: String,
    contract: TypedContract<A, O>,
    handler: Arc<H>,
    destructive: bool,
    options: CallOptions,
}

/// What a served tool's handler receives beside its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EffectCall {
    /// The operation id this server's contract derived.
    pub operation_id: String,
    /// The key to forward to the provider, when the contract derives one.
    pub provider_idempotency_key: Option<String>,
    /// The calling client's operation id, from [`meta::OPERATION_ID`].
    pub client_operation_id: Option<String>,
    /// The calling client's idempotency key, from [`meta::IDEMPOTENCY_KEY`].
    pub client_idempotency_key: Option<String>,
}

impl EffectServer {
    /// A server with no tools yet, running calls through `executor`. It
    /// names itself `effect-mcp` with this crate's version in `serverInfo`
    /// until [`with_server_info`](Self::with_server_info) names your server.
    pub fn new(executor: EffectExecutor) -> Self {
        EffectServer {
            executor,
            tools: BTreeMap::new(),
            info: Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")),
            instructions: None,
        }
    }

    /// The `serverInfo` the server sends in its `initialize` answer: your
    /// server's name and version (and, on `Implementation`, a title, a
    /// description, a website), which hosts show to their users.
    #[must_use]
    pub fn with_server_info(mut self, info: Implementation) -> Self {
        self.info = info;
        self
    }

    /// The `instructions` the server sends in its `initialize` answer, which
    /// a host may hand to its model (how to use the tools, say).
    #[must_use]
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// Adds a tool. Its input schema is derived from `A` and enforced
    /// fail-closed: a call with an unknown field is refused before anything
    /// is recorded.
    ///
    /// # Errors
    ///
    /// [`EffectMcpError::Schema`] when `A`'s schema is not an object schema;
    /// [`EffectMcpError::DuplicateTool`] for a name already served.
    pub fn tool<A, O, H, Fut>(mut self, tool: ServedTool<A, O, H>) -> Result<Self, EffectMcpError>
    where
        A: Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static,
        O: Serialize + DeserializeOwned + Send + 'static,
        H: Fn(A, EffectCall) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, HandlerError>> + Send + 'static,
    {
        if self.tools.contains_key(&tool.name) {
            return Err(EffectMcpError::DuplicateTool { tool: tool.name });
        }
        let declared = effect_schema::schema_for::<A>();
        let schema =
            InputSchema::new(declared.clone()).map_err(|source| EffectMcpError::Schema {
                tool: tool.name.clone(),
                source,
            })?;
        let Value::Object(input_schema) = declared else {
            return Err(EffectMcpError::Schema {
                tool: tool.name,
                source: effect_schema::SchemaError::NotAnObjectSchema,
            });
        };
        // The executor replays a repeated call and dispatches each operation
        // at most once, so a repeated call has no additional effect.
        let annotations = ToolAnnotations::new()
            .read_only(false)
            .destructive(tool.destructive)
            .idempotent(true)
            .open_world(true);
        let definition = Tool::new(tool.name.clone(), tool.description.clone(), input_schema)
            .annotate(annotations);
        let name = tool.name.clone();
        self.tools.insert(
            name,
            Arc::new(Registered {
                tool,
                schema,
                definition,
            }),
        );
        Ok(self)
    }

    /// The definitions of the served tools, as `tools/list` returns them.
    pub fn definitions(&self) -> Vec<Tool> {
        self.tools
            .values()
            .map(|t| t.definition().clone())
            .collect()
    }
}

impl<A, O, H, Fut> ServedTool<A, O, H>
where
    H: Fn(A, EffectCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, HandlerError>> + Send + 'static,
{
    /// A tool named `name` running `handler` under `contract`.
    ///
    /// The handler's errors follow [`HandlerError`]: only a deliberate
    /// [`HandlerError::rejected`] is a refusal; any other error leaves the
    /// outcome unknown.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        contract: TypedContract<A, O>,
        handler: H,
    ) -> Self {
        ServedTool {
            name: name.into(),
            description: description.into(),
            contract,
            handler: Arc::new(handler),
            destructive: true,
            options: CallOptions::default(),
        }
    }

    /// Declares whether the tool may destroy or overwrite state (`true`, the
    /// MCP default) or only adds to it (`false`): its `destructiveHint`.
    #[must_use]
    pub fn destructive(mut self, destructive: bool) -> Self {
        self.destructive = destructive;
        self
    }

    /// Sets the per-call options (a deadline, say).
    #[must_use]
    pub fn with_options(mut self, options: CallOptions) -> Self {
        self.options = options;
        self
    }
}

impl ServerHandler for EffectServer {
    fn get_info(&self) -> ServerConfig {
        let config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(self.info.clone());
        match &self.instructions {
            Some(instructions) => config.with_instructions(instructions.clone()),
            None => config,
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.definitions()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.get(name).map(|t| t.definition().clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(tool) = self.tools.get(request.name.as_ref()) else {
            return Err(McpError::invalid_params(
                format!("no tool named {:?}", request.name),
                None,
            ));
        };
        let client = ClientMeta::read(request.meta.as_ref(), &context.meta);
        let arguments = request.arguments.unwrap_or_default();
        Ok(Arc::clone(tool)
            .call(self.executor.clone(), arguments, client)
            .await
            .into())
    }
}

/// The type-erased form of a registered tool.
trait Serve: Send + Sync {
    fn definition(&self) -> &Tool;
    fn call(
        self: Arc<Self>,
        executor: EffectExecutor,
        arguments: JsonObject,
        client: ClientMeta,
    ) -> BoxFuture<CallToolResult>;
}

struct Registered<A, O, H> {
    tool: ServedTool<A, O, H>,
    schema: InputSchema,
    definition: Tool,
}

/// The client's identity for a call, from the request's `_meta`.
#[derive(Debug, Clone, Default)]
struct ClientMeta {
    operation_id: Option<String>,
    idempotency_key: Option<String>,
}

impl ClientMeta {
    fn read(params: Option<&RequestMetaObject>, context: &RequestMetaObject) -> Self {
        let get = |key: &str| {
            params
                .and_then(|m| m.get(key))
                .or_else(|| context.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        ClientMeta {
            operation_id: get(meta::OPERATION_ID),
            idempotency_key: get(meta::IDEMPOTENCY_KEY),
        }
    }
}

impl<A, O, H, Fut> Serve for Registered<A, O, H>
where
    A: Serialize + DeserializeOwned + Send + Sync + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
    H: Fn(A, EffectCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, HandlerError>> + Send + 'static,
{
    fn definition(&self) -> &Tool {
        &self.definition
    }

    fn call(
        self: Arc<Self>,
        executor: EffectExecutor,
        arguments: JsonObject,
        client: ClientMeta,
    ) -> BoxFuture<CallToolResult> {
        Box::pin(async move {
            let arguments = Value::Object(arguments);
            if let Err(errors) = self.schema.validate(&arguments) {
                return invalid(errors);
            }
            let args: A = match A::deserialize(&arguments) {
                Ok(args) => args,
                Err(err) => return invalid(vec![err.to_string()]),
            };
            let contract = &self.tool.contract;
            let handler = Arc::clone(&self.tool.handler);
            // The executor derives the operation id once and hands it over.
            let run = move |args: A, effect: HandlerContext| {
                let call = EffectCall {
                    operation_id: effect.operation_id().to_owned(),
                    provider_idempotency_key: effect.into_provider_key(),
                    client_operation_id: client.operation_id.clone(),
                    client_idempotency_key: client.idempotency_key.clone(),
                };
                handler(args, call)
            };
            let name = &self.tool.name;
            match executor
                .execute_typed_async(contract, &args, self.tool.options, run)
                .await
            {
                Ok(typed) => answer(name, &typed.result),
                // The contract could not derive the operation's identity from
                // these arguments: nothing was recorded or sent.
                Err(ExecError::Contract { source, .. }) => invalid(vec![format!("{source:#}")]),
                // The executor could not do its job; nothing in the answer
                // claims a status, so a client treats the outcome as unknown.
                Err(err) => CallToolResult::error(vec![ContentBlock::text(format!(
                    "tool `{name}` could not run through the executor: {}",
                    effect_core::error_chain(&err)
                ))]),
            }
        })
    }
}

/// The answer for an executed call.
fn answer(tool: &str, result: &effect_core::EffectResult) -> CallToolResult {
    let effect = json!({"operation_id": result.operation_id, "status": result.status});
    let answer = if let Some(notice) = UncertainOutcome::from_result(tool, result) {
        let notice = serde_json::to_value(notice).unwrap_or(Value::Null);
        CallToolResult::structured(notice)
    } else if result.status == EffectStatus::Confirmed {
        match result.output.clone().unwrap_or(Value::Null) {
            object @ Value::Object(_) => CallToolResult::structured(object),
            // `structuredContent` is an object; other outputs go as JSON text.
            other => CallToolResult::success(vec![ContentBlock::text(other.to_string())]),
        }
    } else {
        let reason = result.error.as_deref().unwrap_or("no reason given");
        CallToolResult::error(vec![ContentBlock::text(format!(
            "`{tool}` was refused by the provider: {reason}"
        ))])
    };
    with_effect(answer, effect)
}

fn invalid(errors: Vec<String>) -> CallToolResult {
    let text = format!("invalid arguments, nothing was done: {}", errors.join("; "));
    with_effect(
        CallToolResult::error(vec![ContentBlock::text(text)]),
        json!({"status": meta::INVALID_ARGUMENTS}),
    )
}

fn with_effect(result: CallToolResult, effect: Value) -> CallToolResult {
    let mut object = JsonObject::new();
    object.insert(meta::EFFECT.to_owned(), effect);
    result.with_meta(Some(MetaObject(object)))
}

impl std::fmt::Debug for EffectServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EffectServer")
            .field("server_info", &self.info)
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<A, O, H> std::fmt::Debug for ServedTool<A, O, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedTool")
            .field("name", &self.name)
            .field("contract", &self.contract)
            .field("destructive", &self.destructive)
            .finish_non_exhaustive()
    }
}
