//! [`RemoteTool`]: a tool of an MCP server, called through the executor.

use effect_core::EffectStatus;
use effect_exec::{
    CallOptions, EffectExecutor, HandlerContext, HandlerError, TypedContract, TypedResult,
};
use effect_schema::InputSchema;
use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorCode, RequestMetaObject};
use rmcp::service::{Peer, ServiceError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::EffectMcpError;
use crate::meta;

/// A tool of a remote MCP server whose calls are effects: recorded before
/// they are sent, never sent twice unless the contract makes that safe.
///
/// The operation id comes from the contract, over the arguments; it and the
/// provider idempotency key travel in the request's `_meta` ([`meta`]). A
/// lost response (a transport error, a timeout, an error result) is an
/// uncertain outcome: the contract's outcome probe, or a retry with the same
/// key when the contract says the server's key is guaranteed, settles it.
pub struct RemoteTool<A, O> {
    peer: Peer<RoleClient>,
    name: String,
    contract: TypedContract<A, O>,
    executor: EffectExecutor,
    schema: Option<InputSchema>,
    options: CallOptions,
}

impl<A, O> RemoteTool<A, O>
where
    A: Serialize + DeserializeOwned + Send + Sync + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
{
    /// The tool `name` of the server behind `peer`, without checking
    /// arguments against its schema (see [`discover`](Self::discover)).
    pub fn new(
        peer: Peer<RoleClient>,
        name: impl Into<String>,
        contract: TypedContract<A, O>,
        executor: EffectExecutor,
    ) -> Self {
        RemoteTool {
            peer,
            name: name.into(),
            contract,
            executor,
            schema: None,
            options: CallOptions::default(),
        }
    }

    /// The tool `name`, looked up in the server's tool list; its input schema
    /// (JSON Schema 2020-12 or draft-07) is enforced fail-closed on every call.
    ///
    /// # Errors
    ///
    /// [`EffectMcpError::ListTools`], [`EffectMcpError::UnknownTool`], or
    /// [`EffectMcpError::Schema`] when the server's schema cannot be enforced.
    pub async fn discover(
        peer: Peer<RoleClient>,
        name: impl Into<String>,
        contract: TypedContract<A, O>,
        executor: EffectExecutor,
    ) -> Result<Self, EffectMcpError> {
        let name = name.into();
        let tools = peer
            .list_all_tools()
            .await
            .map_err(|err| EffectMcpError::ListTools {
                message: err.to_string(),
            })?;
        let tool = tools
            .into_iter()
            .find(|tool| tool.name == name)
            .ok_or_else(|| EffectMcpError::UnknownTool { tool: name.clone() })?;
        let declared = Value::Object((*tool.input_schema).clone());
        let schema = InputSchema::new(declared).map_err(|source| EffectMcpError::Schema {
            tool: name.clone(),
            source,
        })?;
        let mut remote = RemoteTool::new(peer, name, contract, executor);
        remote.schema = Some(schema);
        Ok(remote)
    }

    /// Sets the per-call options (a deadline, say).
    #[must_use]
    pub fn with_options(mut self, options: CallOptions) -> Self {
        self.options = options;
        self
    }

    /// The tool name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Calls the tool with `arguments` through the executor.
    ///
    /// # Errors
    ///
    /// [`EffectMcpError::InvalidArguments`] before anything is recorded;
    /// [`EffectMcpError::Exec`] when the executor could not run the call or
    /// the output does not decode as `O`. An uncertain outcome is a result.
    pub async fn call(&self, arguments: &A) -> Result<TypedResult<O>, EffectMcpError> {
        let exec = |source| EffectMcpError::Exec {
            tool: self.name.clone(),
            source,
        };
        if let Some(schema) = &self.schema {
            let value = serde_json::to_value(arguments).map_err(|err| {
                EffectMcpError::InvalidArguments {
                    tool: self.name.clone(),
                    errors: vec![err.to_string()],
                }
            })?;
            schema
                .validate(&value)
                .map_err(|errors| EffectMcpError::InvalidArguments {
                    tool: self.name.clone(),
                    errors,
                })?;
        }
        let (peer, name) = (self.peer.clone(), self.name.clone());
        // The executor derives the operation id once and hands it over.
        let send = move |arguments: Value, effect: HandlerContext| {
            let (peer, name) = (peer.clone(), name.clone());
            async move {
                let id = effect.operation_id().to_owned();
                send(&peer, name, arguments, id, effect.into_provider_key()).await
            }
        };
        let result = self
            .executor
            .execute_async(self.contract.contract(), arguments, self.options, send)
            .await
            .map_err(exec)?;
        TypedResult::from_result(result).map_err(exec)
    }
}

/// Sends one `tools/call` and says what its answer proves.
async fn send(
    peer: &Peer<RoleClient>,
    name: String,
    arguments: Value,
    operation_id: String,
    key: Option<String>,
) -> Result<Value, HandlerError> {
    let Value::Object(arguments) = arguments else {
        return Err(HandlerError::rejected(
            "arguments are not a JSON object, nothing was sent",
        ));
    };
    let mut request_meta = RequestMetaObject::new();
    request_meta
        .0
        .insert(meta::OPERATION_ID.to_owned(), Value::String(operation_id));
    if let Some(key) = key {
        request_meta
            .0
            .insert(meta::IDEMPOTENCY_KEY.to_owned(), Value::String(key));
    }
    let mut params = CallToolRequestParams::new(name).with_arguments(arguments);
    params.meta = Some(request_meta);
    match peer.call_tool(params).await {
        // The server refused the request before running any tool.
        Err(ServiceError::McpError(err))
            if err.code == ErrorCode::INVALID_PARAMS || err.code == ErrorCode::METHOD_NOT_FOUND =>
        {
            Err(HandlerError::rejected(err.message.to_string()))
        }
        Err(err) => Err(HandlerError::unknown(format!("tools/call: {err}"))),
        Ok(result) => classify(result),
    }
}

/// A result from this crate's server carries its status; from another
/// server, only a successful result proves the effect.
fn classify(result: CallToolResult) -> Result<Value, HandlerError> {
    let status = result
        .meta
        .as_ref()
        .and_then(|m| m.get(meta::EFFECT))
        .and_then(|effect| effect.get("status"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let Some(status) = status else {
        return classify_foreign(result);
    };
    if status == meta::INVALID_ARGUMENTS {
        return Err(HandlerError::rejected(text_of(&result)));
    }
    match status.parse::<EffectStatus>() {
        Ok(EffectStatus::Confirmed) => Ok(output_of(result)),
        Ok(EffectStatus::Rejected) => Err(HandlerError::rejected(text_of(&result))),
        // Any other status, or one this version does not know, is uncertain.
        _ => Err(HandlerError::unknown(format!(
            "the server reports the outcome as {status}"
        ))),
    }
}

/// A result from a server that does not report an effect status: only a
/// successful result proves the effect.
fn classify_foreign(result: CallToolResult) -> Result<Value, HandlerError> {
    if result.is_error == Some(true) {
        return Err(HandlerError::unknown(format!(
            "the tool answered with an error: {}",
            text_of(&result)
        )));
    }
    Ok(output_of(result))
}

/// The structured content, else the text parsed as JSON, else the text.
fn output_of(result: CallToolResult) -> Value {
    if let Some(structured) = result.structured_content {
        return structured;
    }
    let text = text_of(&result);
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

impl<A, O> std::fmt::Debug for RemoteTool<A, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteTool")
            .field("name", &self.name)
            .field("contract", &self.contract)
            .field("checks_schema", &self.schema.is_some())
            .finish_non_exhaustive()
    }
}
