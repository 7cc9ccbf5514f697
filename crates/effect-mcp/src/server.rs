//! [`EffectServer`]: an MCP server whose tools run through the executor.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use effect_core::{
    BoxFuture, Clock as _, EffectLedger, EffectRecord, EffectStatus, SystemClock, unix_seconds,
};
use effect_exec::{
    CallOptions, EffectExecutor, ExecError, HandlerContext, HandlerError, TypedContract,
    TypedResult, UncertainOutcome,
};
use effect_schema::InputSchema;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, Implementation, JsonObject, ListToolsResult,
    MetaObject, PaginatedRequestParams, RequestMetaObject, ServerCapabilities, ServerConfig,
    TaskStatus, Tool, ToolAnnotations, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::EffectMcpError;
use crate::meta;
use crate::task::{self, TaskOptions};

/// An MCP [`ServerHandler`] serving effect-backed tools; serve it with
/// `rmcp::ServiceExt::serve` on any transport.
#[derive(Clone)]
pub struct EffectServer {
    executor: EffectExecutor,
    tools: BTreeMap<String, Arc<dyn Serve>>,
    info: Implementation,
    instructions: Option<String>,
    tasks: Option<TaskOptions>,
    /// The calls this process started as tasks that wait for approval, to
    /// run again once an elicited approval is recorded.
    waiting: Arc<Mutex<HashMap<String, Rerun>>>,
}

/// Runs a call again, in the background.
type Rerun = Arc<dyn Fn() -> BoxFuture<CallToolResult> + Send + Sync>;

/// One effect-backed tool: a name, a description, a contract over its
/// argument type `A` and output `O`, and an async handler.
pub struct ServedTool<A, O, H> {
    name: String,
    description: String,
    contract: TypedContract<A, O>,
    handler: Arc<H>,
    destructive: bool,
    options: CallOptions,
    output_schema: Option<Value>,
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
            tasks: None,
            waiting: Arc::default(),
        }
    }

    /// Serves MCP tasks (the `io.modelcontextprotocol/tasks` extension,
    /// SEP-2663) backed by the executor's ledger: a client that declares the
    /// extension gets a task for each `tools/call`, whose id is the
    /// operation id, and `tasks/get` reads the operation's record, so a
    /// server restarted on the same ledger answers for the tasks of a
    /// process that died. See docs/mcp.md for the statuses.
    #[must_use]
    pub fn with_tasks(mut self, options: TaskOptions) -> Self {
        self.tasks = Some(options);
        self
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
        let mut definition = Tool::new(tool.name.clone(), tool.description.clone(), input_schema)
            .annotate(annotations);
        if let Some(output_schema) = &tool.output_schema {
            match output_schema {
                Value::Object(object) if object.get("type") == Some(&json!("object")) => {
                    definition = definition.with_raw_output_schema(Arc::new(object.clone()));
                }
                _ => {
                    return Err(EffectMcpError::OutputSchema { tool: tool.name });
                }
            }
        }
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
            output_schema: None,
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

impl<A, O, H> ServedTool<A, O, H>
where
    O: JsonSchema,
{
    /// Declares the tool's `outputSchema`, derived from `O` (which must
    /// serialize to a JSON object). Every result that is not an error then
    /// carries the output as `structuredContent` conforming to it: an
    /// uncertain or approval notice goes as an error result's text (with the
    /// status in `_meta`), and a client with tasks gets a task instead.
    #[must_use]
    pub fn output_schema(mut self) -> Self {
        self.output_schema = Some(effect_schema::schema_for::<O>());
        self
    }
}

impl EffectServer {
    /// The registered tool whose contract recorded `record`.
    fn tool_of(&self, record: &EffectRecord) -> Option<&Arc<dyn Serve>> {
        self.tools
            .values()
            .find(|tool| tool.contract_name() == record.contract_name)
    }

    /// The record of task `task_id`, if one of this server's tools recorded it.
    async fn task_record(&self, task_id: &str) -> Result<EffectRecord, McpError> {
        let unknown = || McpError::invalid_params(format!("no task {task_id:?}"), None);
        let record = read(self.executor.ledger(), task_id)
            .await?
            .ok_or_else(unknown)?;
        if self.tool_of(&record).is_none() {
            return Err(unknown());
        }
        Ok(record)
    }
}

/// Reads one record from the ledger, off the async threads.
async fn read(
    ledger: &Arc<dyn EffectLedger>,
    operation_id: &str,
) -> Result<Option<EffectRecord>, McpError> {
    let (ledger, id) = (Arc::clone(ledger), operation_id.to_owned());
    tokio::task::spawn_blocking(move || ledger.get(&id))
        .await
        .map_err(|err| McpError::internal_error(format!("reading the ledger: {err}"), None))?
        .map_err(|err| {
            McpError::internal_error(
                format!(
                    "reading operation {operation_id:?} from the ledger: {}",
                    effect_core::error_chain(&err)
                ),
                None,
            )
        })
}

fn now() -> f64 {
    unix_seconds(SystemClock.now())
}

/// The result of a confirmed record, as a `tasks/get` `result`.
fn completed(record: &EffectRecord) -> JsonObject {
    let effect = json!({"operation_id": record.operation_id, "status": record.status});
    let result = with_effect(confirmed(record.output.clone()), effect);
    task::object(serde_json::to_value(result).unwrap_or(Value::Null))
}

impl ServerHandler for EffectServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.tasks.is_some() {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build()
        } else {
            ServerCapabilities::builder().enable_tools().build()
        };
        let config = ServerConfig::new(capabilities).with_server_info(self.info.clone());
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
        let client_has_tasks = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if let (Some(options), true) = (self.tasks, client_has_tasks) {
            let response = Arc::clone(tool)
                .start_task(
                    self.executor.clone(),
                    arguments.clone(),
                    client.clone(),
                    options,
                )
                .await;
            if let CallToolResponse::Task(created) = &response
                && created.task.status == TaskStatus::InputRequired
                && options.elicit_approvals.is_some()
            {
                let (tool, executor) = (Arc::clone(tool), self.executor.clone());
                let rerun: Rerun = Arc::new(move || {
                    Arc::clone(&tool).call(executor.clone(), arguments.clone(), client.clone())
                });
                if let Ok(mut waiting) = self.waiting.lock() {
                    waiting.insert(created.task.task_id.clone(), rerun);
                }
            }
            return Ok(response);
        }
        Ok(Arc::clone(tool)
            .call(self.executor.clone(), arguments, client)
            .await
            .into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let options = self.tasks.unwrap_or_default();
        let record = self.task_record(&request.task_id).await?;
        let ask = options.elicit_approvals.is_some()
            && context
                .client_capabilities()
                .is_some_and(|caps| caps.elicitation.is_some());
        Ok(GetTaskResult::new(task::detailed(
            &record,
            now(),
            || completed(&record),
            options,
            ask,
        )))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let Some(valid_for) = self.tasks.and_then(|options| options.elicit_approvals) else {
            return Err(McpError::invalid_params(
                "this server asks no input: approvals are given by operators",
                None,
            ));
        };
        let record = self.task_record(&request.task_id).await?;
        // Only the question asked about this exact request is answered;
        // other keys, or a question already answered, are ignored.
        let Some(answer) = request.input_responses.get(&task::approval_key(&record)) else {
            return Ok(());
        };
        if record.status != EffectStatus::AwaitingApproval || record.approval().is_some() {
            return Ok(());
        }
        let decision =
            task::decision(answer).map_err(|message| McpError::invalid_params(message, None))?;
        let id = record.operation_id.clone();
        let executor = self.executor.clone();
        let fingerprint = record.request_fingerprint.clone();
        let approved = matches!(decision, task::Decision::Approve { .. });
        let recorded = tokio::task::spawn_blocking(move || match decision {
            task::Decision::Approve { actor, reason } => executor
                .operator()
                .approve(
                    &id,
                    effect_core::Approval {
                        request_fingerprint: fingerprint,
                        actor,
                        reason,
                        expires_at: SystemClock.now() + valid_for,
                    },
                )
                .map(Some),
            task::Decision::Deny { actor, reason } => {
                executor.operator().deny(&id, &actor, &reason).map(Some)
            }
            task::Decision::None => Ok(None),
        })
        .await
        .map_err(|err| McpError::internal_error(format!("recording the answer: {err}"), None))?
        .map_err(|err| {
            McpError::invalid_request(
                format!(
                    "the answer to task {:?} could not be recorded: {}",
                    request.task_id,
                    effect_core::error_chain(&err)
                ),
                None,
            )
        })?;
        let rerun = self
            .waiting
            .lock()
            .ok()
            .and_then(|mut waiting| match recorded {
                Some(_) => waiting.remove(&record.operation_id),
                None => None,
            });
        // An approved call this process still holds runs now; otherwise its
        // next call (or a RecoveryWorker) dispatches it.
        if let (true, Some(rerun)) = (approved, rerun) {
            tokio::spawn(rerun());
        }
        Ok(())
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let record = self.task_record(&request.task_id).await?;
        let id = record.operation_id.clone();
        let data = Some(json!({"operation_id": id, "status": record.status}));
        if record.status.is_terminal() {
            return Err(McpError::invalid_params(
                format!("task {id:?} is already {}", record.status),
                data,
            ));
        }
        if record.status != EffectStatus::AwaitingApproval {
            return Err(McpError::invalid_request(
                format!(
                    "task {id:?} cannot be cancelled: operation `{id}` is {} and a request that \
                     may have reached the provider cannot be recalled; the task settles as the \
                     executor reconciles it",
                    record.status
                ),
                data,
            ));
        }
        // Nothing was sent: a denial makes it rejected, terminally, and a
        // concurrent claim of an approval either wins (and this fails) or
        // loses (and never dispatches).
        let executor = self.executor.clone();
        let denied = tokio::task::spawn_blocking(move || {
            executor
                .operator()
                .deny(&id, task::CANCEL_ACTOR, task::CANCEL_REASON)
        })
        .await
        .map_err(|err| McpError::internal_error(format!("cancelling: {err}"), None))?;
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.remove(&record.operation_id);
        }
        denied.map(drop).map_err(|err| {
            McpError::invalid_request(
                format!(
                    "task {:?} could not be cancelled: {}",
                    request.task_id,
                    effect_core::error_chain(&err)
                ),
                None,
            )
        })
    }
}

/// The type-erased form of a registered tool.
trait Serve: Send + Sync {
    fn definition(&self) -> &Tool;
    fn contract_name(&self) -> &str;
    fn call(
        self: Arc<Self>,
        executor: EffectExecutor,
        arguments: JsonObject,
        client: ClientMeta,
    ) -> BoxFuture<CallToolResult>;
    /// Records the call, runs it in the background and answers with its
    /// task once the record exists.
    fn start_task(
        self: Arc<Self>,
        executor: EffectExecutor,
        arguments: JsonObject,
        client: ClientMeta,
        options: TaskOptions,
    ) -> BoxFuture<CallToolResponse>;
}

/// Told once the executor hands the call to its handler: the operation is
/// recorded by then.
type Started = Arc<Mutex<Option<tokio::sync::oneshot::Sender<()>>>>;

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

impl<A, O, H, Fut> Registered<A, O, H>
where
    A: Serialize + DeserializeOwned + Send + Sync + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
    H: Fn(A, EffectCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, HandlerError>> + Send + 'static,
{
    /// The arguments, checked against the input schema, or the violations.
    fn arguments(&self, arguments: JsonObject) -> Result<A, Vec<String>> {
        let arguments = Value::Object(arguments);
        self.schema.validate(&arguments)?;
        A::deserialize(&arguments).map_err(|err| vec![err.to_string()])
    }

    async fn execute(
        &self,
        executor: EffectExecutor,
        args: A,
        client: ClientMeta,
        started: Option<Started>,
    ) -> Result<TypedResult<O>, ExecError> {
        let contract = &self.tool.contract;
        let handler = Arc::clone(&self.tool.handler);
        // The executor derives the operation id once and hands it over.
        let run = move |args: A, effect: HandlerContext| {
            if let Some(started) = &started
                && let Some(tell) = started.lock().ok().and_then(|mut s| s.take())
            {
                let _ = tell.send(());
            }
            let call = EffectCall {
                operation_id: effect.operation_id().to_owned(),
                provider_idempotency_key: effect.into_provider_key(),
                client_operation_id: client.operation_id.clone(),
                client_idempotency_key: client.idempotency_key.clone(),
            };
            handler(args, call)
        };
        executor
            .execute_typed_async(contract, &args, self.tool.options, run)
            .await
    }

    /// The answer for a call that `execute` ran.
    fn answer(&self, executed: Result<TypedResult<O>, ExecError>) -> CallToolResult {
        let name = &self.tool.name;
        match executed {
            Ok(typed) => answer(name, &typed.result, self.tool.output_schema.is_some()),
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

    fn contract_name(&self) -> &str {
        self.tool.contract.contract().name()
    }

    fn call(
        self: Arc<Self>,
        executor: EffectExecutor,
        arguments: JsonObject,
        client: ClientMeta,
    ) -> BoxFuture<CallToolResult> {
        Box::pin(async move {
            let args = match self.arguments(arguments) {
                Ok(args) => args,
                Err(errors) => return invalid(errors),
            };
            let executed = self.execute(executor, args, client, None).await;
            self.answer(executed)
        })
    }

    fn start_task(
        self: Arc<Self>,
        executor: EffectExecutor,
        arguments: JsonObject,
        client: ClientMeta,
        options: TaskOptions,
    ) -> BoxFuture<CallToolResponse> {
        Box::pin(async move {
            let args = match self.arguments(arguments) {
                Ok(args) => args,
                Err(errors) => return invalid(errors).into(),
            };
            let operation_id = match self.tool.contract.operation_id(&args) {
                Ok(id) => id,
                Err(err) => return invalid(vec![effect_core::error_chain(&err)]).into(),
            };
            let ledger = Arc::clone(executor.ledger());
            let (tell, started) = tokio::sync::oneshot::channel();
            let tell: Started = Arc::new(Mutex::new(Some(tell)));
            let this = Arc::clone(&self);
            let name = self.tool.name.clone();
            let mut run = tokio::spawn(async move {
                let executed = this.execute(executor, args, client, Some(tell)).await;
                if let Err(err) = &executed {
                    tracing::warn!(
                        tool = %name,
                        error = %effect_core::error_chain(err),
                        "a task's call could not run through the executor"
                    );
                }
                executed
            });
            // The task exists once its record does: when the handler starts,
            // or when the execution ends without one (a replay, a call
            // waiting for approval, one in progress elsewhere); the sender
            // is dropped with the handler.
            let _ = started.await;
            let record = match read(&ledger, &operation_id).await {
                Ok(Some(record)) => record,
                Ok(None) => {
                    // Nothing was recorded: the executor failed before it
                    // wrote anything, and its answer says why.
                    let executed = (&mut run).await.unwrap_or_else(|err| {
                        Err(ExecError::Runtime {
                            operation_id: operation_id.clone(),
                            message: err.to_string(),
                        })
                    });
                    return self.answer(executed).into();
                }
                Err(err) => {
                    return CallToolResult::error(vec![ContentBlock::text(format!(
                        "tool `{}`: {}",
                        self.tool.name, err.message
                    ))])
                    .into();
                }
            };
            let seed = task::detailed(&record, now(), JsonObject::new, options, false).task;
            let effect = json!({"operation_id": record.operation_id, "status": record.status});
            let mut object = JsonObject::new();
            object.insert(meta::EFFECT.to_owned(), effect);
            CallToolResponse::Task(CreateTaskResult::new(seed).with_meta(MetaObject(object)))
        })
    }
}

/// The answer for an executed call; with `typed_output` (the tool declares
/// an `outputSchema`), `structuredContent` holds only outputs.
fn answer(tool: &str, result: &effect_core::EffectResult, typed_output: bool) -> CallToolResult {
    let effect = json!({"operation_id": result.operation_id, "status": result.status});
    let answer = if let Some(notice) = UncertainOutcome::from_result(tool, result) {
        let notice = serde_json::to_value(notice).unwrap_or(Value::Null);
        if typed_output {
            // Not an output: the notice goes as an error result's text, and
            // `_meta` says the effect is not settled.
            CallToolResult::error(vec![ContentBlock::text(notice.to_string())])
        } else {
            CallToolResult::structured(notice)
        }
    } else if result.status == EffectStatus::Confirmed {
        confirmed(result.output.clone())
    } else {
        let reason = result.error.as_deref().unwrap_or("no reason given");
        CallToolResult::error(vec![ContentBlock::text(format!(
            "`{tool}` was refused by the provider: {reason}"
        ))])
    };
    with_effect(answer, effect)
}

/// The result of a confirmed effect with `output`.
fn confirmed(output: Option<Value>) -> CallToolResult {
    match output.unwrap_or(Value::Null) {
        object @ Value::Object(_) => CallToolResult::structured(object),
        // `structuredContent` is an object; other outputs go as JSON text.
        other => CallToolResult::success(vec![ContentBlock::text(other.to_string())]),
    }
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
            .field("tasks", &self.tasks)
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
