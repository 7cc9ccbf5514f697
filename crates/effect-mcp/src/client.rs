//! [`RemoteTool`]: a tool of an MCP server, called through the executor.

use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};

use effect_core::{BoxFuture, EffectStatus};
use effect_exec::{
    CallOptions, EffectExecutor, HandlerContext, HandlerError, TypedContract, TypedResult,
};
use effect_schema::InputSchema;
use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorCode, RequestMetaObject};
use rmcp::service::{Peer, RunningService, Service, ServiceError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::Mutex;

use crate::error::EffectMcpError;
use crate::meta;

/// The error a connector returns.
pub type ConnectError = Box<dyn std::error::Error + Send + Sync>;

type Connector = Arc<dyn Fn() -> BoxFuture<Result<Connection, ConnectError>> + Send + Sync>;

/// Says whether an error result of a server that reports no effect status
/// is a refusal: the tool did not run.
type Refusal = Arc<dyn Fn(&CallToolResult) -> bool + Send + Sync>;

/// A connection to an MCP server that a [`RemoteTool`] owns: the running
/// client service, and whatever else must live as long as it (the child
/// process of a stdio server, say). Dropping it closes the connection.
pub struct Connection {
    peer: Peer<RoleClient>,
    /// The running service (its loop stops when it is dropped) and what the
    /// connector attached with [`holding`](Self::holding).
    held: Vec<Box<dyn Send>>,
}

impl Connection {
    /// The connection of a running client service.
    pub fn new<S: Service<RoleClient>>(service: RunningService<RoleClient, S>) -> Self {
        Connection {
            peer: service.peer().clone(),
            held: vec![Box::new(service)],
        }
    }

    /// Keeps `value` alive as long as the connection, e.g. the
    /// `tokio::process::Child` of a stdio server spawned with
    /// `kill_on_drop(true)`, so that a replaced connection ends its process.
    #[must_use]
    pub fn holding(mut self, value: impl Send + 'static) -> Self {
        self.held.push(Box::new(value));
        self
    }

    /// The peer requests go to.
    pub fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("transport_closed", &self.peer.is_transport_closed())
            .finish_non_exhaustive()
    }
}

/// A tool of a remote MCP server whose calls are effects: recorded before
/// they are sent, never sent twice unless the contract makes that safe.
///
/// The operation id comes from the contract, over the arguments; it and the
/// provider idempotency key travel in the request's `_meta` ([`meta`]). A
/// lost response (a transport error, a timeout, an error result) is an
/// uncertain outcome: the contract's outcome probe, or a retry with the same
/// key when the contract says the server's key is guaranteed, settles it.
///
/// A resend needs a live connection. With a connector
/// ([`with_connector`](Self::with_connector), [`connect`](Self::connect)) a
/// dispatch that finds the connection lost opens a new one first (spawns the
/// server again, reconnects the socket); without one, it sends nothing and
/// says so, and the operation stays uncertain until a call that can send.
pub struct RemoteTool<A, O> {
    link: Arc<Link>,
    name: String,
    contract: TypedContract<A, O>,
    executor: EffectExecutor,
    schema: Option<InputSchema>,
    refusal: Option<Refusal>,
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
            link: Arc::new(Link {
                current: Mutex::new(Current {
                    peer,
                    generation: 0,
                    lost: false,
                    _connection: None,
                }),
                connector: RwLock::new(None),
            }),
            name: name.into(),
            contract,
            executor,
            schema: None,
            refusal: None,
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
        let schema = schema_of(&peer, &name).await?;
        let mut remote = RemoteTool::new(peer, name, contract, executor);
        remote.schema = Some(schema);
        Ok(remote)
    }

    /// The tool `name` over a connection `connector` opens now, and opens
    /// again whenever a dispatch finds it lost. The tool is looked up as by
    /// [`discover`](Self::discover).
    ///
    /// The connector is called again when a dispatch finds the connection
    /// closed (a request failed on it with a transport error, or its service
    /// stopped), never for one still open.
    ///
    /// # Errors
    ///
    /// [`EffectMcpError::Connect`] when the connector fails, else as
    /// [`discover`](Self::discover).
    pub async fn connect<F, Fut, E>(
        connector: F,
        name: impl Into<String>,
        contract: TypedContract<A, O>,
        executor: EffectExecutor,
    ) -> Result<Self, EffectMcpError>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Connection, E>> + Send + 'static,
        E: Into<ConnectError>,
    {
        let name = name.into();
        let connector = boxed(connector);
        let connection = connector().await.map_err(|err| EffectMcpError::Connect {
            message: effect_core::error_chain(err.as_ref()),
        })?;
        let schema = schema_of(connection.peer(), &name).await?;
        let peer = connection.peer().clone();
        let link = Link {
            current: Mutex::new(Current {
                peer,
                generation: 0,
                lost: false,
                _connection: Some(connection),
            }),
            connector: RwLock::new(Some(connector)),
        };
        Ok(RemoteTool {
            link: Arc::new(link),
            name,
            contract,
            executor,
            schema: Some(schema),
            refusal: None,
            options: CallOptions::default(),
        })
    }

    /// Opens a new connection with `connector` when a dispatch finds the
    /// current one lost (see [`connect`](Self::connect)).
    #[must_use]
    pub fn with_connector<F, Fut, E>(self, connector: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Connection, E>> + Send + 'static,
        E: Into<ConnectError>,
    {
        *self
            .link
            .connector
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(boxed(connector));
        self
    }

    /// Sets the per-call options (a deadline, say).
    #[must_use]
    pub fn with_options(mut self, options: CallOptions) -> Self {
        self.options = options;
        self
    }

    /// Records an error result that `is_refusal` recognizes as a rejection
    /// (the tool did not run) instead of an uncertain outcome. It is asked
    /// only about `isError` results of servers that report no effect status
    /// (an `EffectServer` says what its results are); by default every such
    /// result is uncertain, since a server may answer an error after its
    /// tool acted. [`refusal::python_sdk`](crate::refusal::python_sdk)
    /// recognizes the official Python SDK's refusals.
    ///
    /// Say only what the server guarantees: a result taken for a refusal is
    /// never reconciled, and the effect, if it happened, is not retried or
    /// reported.
    #[must_use]
    pub fn refusal_when(
        mut self,
        is_refusal: impl Fn(&CallToolResult) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.refusal = Some(Arc::new(is_refusal));
        self
    }

    /// The tool name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The peer of the current connection (the one a connector opened last).
    pub async fn peer(&self) -> Peer<RoleClient> {
        self.link.current.lock().await.peer.clone()
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
        let (link, name) = (Arc::clone(&self.link), self.name.clone());
        let refusal = self.refusal.clone();
        // The executor derives the operation id once and hands it over.
        let send = move |arguments: Value, effect: HandlerContext| {
            let (link, name, refusal) = (Arc::clone(&link), name.clone(), refusal.clone());
            async move {
                let id = effect.operation_id().to_owned();
                let key = effect.into_provider_key();
                let result = send(&link, name, arguments, id, key).await?;
                classify(result, refusal.as_deref())
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

/// The connection a tool's calls go over, and how to open another.
struct Link {
    current: Mutex<Current>,
    connector: RwLock<Option<Connector>>,
}

struct Current {
    peer: Peer<RoleClient>,
    /// How many connections were opened before this one.
    generation: u64,
    /// A request on this connection failed with a transport error.
    lost: bool,
    /// The connection a connector opened; `None` for a peer the caller owns.
    _connection: Option<Connection>,
}

impl Link {
    /// The peer to send on: the current one while its transport is open,
    /// else a new connection's. Nothing is sent when there is none.
    async fn peer(&self) -> Result<(Peer<RoleClient>, u64), HandlerError> {
        let mut current = self.current.lock().await;
        if !current.lost && !current.peer.is_transport_closed() {
            return Ok((current.peer.clone(), current.generation));
        }
        let Some(connector) = self.connector() else {
            return Err(HandlerError::not_sent(
                "the connection to the MCP server is lost and this RemoteTool has no connector \
                 to open another",
            ));
        };
        let connection = connector().await.map_err(|err| {
            HandlerError::not_sent(format!(
                "the connection to the MCP server is lost and opening another failed: {}",
                effect_core::error_chain(err.as_ref())
            ))
        })?;
        let peer = connection.peer().clone();
        let generation = current.generation + 1;
        // The lost connection (and the process it held) is dropped here.
        *current = Current {
            peer: peer.clone(),
            generation,
            lost: false,
            _connection: Some(connection),
        };
        tracing::info!(generation, "reconnected to the MCP server");
        Ok((peer, generation))
    }

    /// Marks connection `generation` lost, unless it was replaced already.
    async fn lost(&self, generation: u64) {
        let mut current = self.current.lock().await;
        if current.generation == generation {
            current.lost = true;
        }
    }

    fn connector(&self) -> Option<Connector> {
        self.connector
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn reconnects(&self) -> bool {
        self.connector().is_some()
    }
}

fn boxed<F, Fut, E>(connector: F) -> Connector
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Connection, E>> + Send + 'static,
    E: Into<ConnectError>,
{
    Arc::new(move || {
        let future = connector();
        Box::pin(async move { future.await.map_err(Into::into) })
    })
}

/// The enforceable input schema of tool `name`, from the server's list.
async fn schema_of(peer: &Peer<RoleClient>, name: &str) -> Result<InputSchema, EffectMcpError> {
    let tools = peer
        .list_all_tools()
        .await
        .map_err(|err| EffectMcpError::ListTools {
            message: err.to_string(),
        })?;
    let tool = tools
        .into_iter()
        .find(|tool| tool.name == name)
        .ok_or_else(|| EffectMcpError::UnknownTool {
            tool: name.to_owned(),
        })?;
    let declared = Value::Object((*tool.input_schema).clone());
    InputSchema::new(declared).map_err(|source| EffectMcpError::Schema {
        tool: name.to_owned(),
        source,
    })
}

/// Sends one `tools/call`; an error says what a failed request proves.
async fn send(
    link: &Link,
    name: String,
    arguments: Value,
    operation_id: String,
    key: Option<String>,
) -> Result<CallToolResult, HandlerError> {
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
    let (peer, generation) = link.peer().await?;
    match peer.call_tool(params).await {
        // The server refused the request before running any tool.
        Err(ServiceError::McpError(err))
            if err.code == ErrorCode::INVALID_PARAMS || err.code == ErrorCode::METHOD_NOT_FOUND =>
        {
            Err(HandlerError::rejected(err.message.to_string()))
        }
        // The request may have reached the server: the tool may have run.
        Err(err @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
            link.lost(generation).await;
            let next = if link.reconnects() {
                "a resend, when the contract allows one, goes over a new connection"
            } else {
                "this RemoteTool has no connector, so it cannot send again"
            };
            Err(HandlerError::unknown(format!(
                "the connection to the MCP server was lost before the answer to tools/call \
                 arrived ({err}); the tool may have run; {next}"
            )))
        }
        Err(err) => Err(HandlerError::unknown(format!("tools/call: {err}"))),
        Ok(result) => Ok(result),
    }
}

/// A result from this crate's server carries its status; from another
/// server, only a successful result proves the effect, and only an error
/// result `refusal` recognizes is a rejection.
fn classify(
    result: CallToolResult,
    refusal: Option<&(dyn Fn(&CallToolResult) -> bool + Send + Sync)>,
) -> Result<Value, HandlerError> {
    let status = result
        .meta
        .as_ref()
        .and_then(|m| m.get(meta::EFFECT))
        .and_then(|effect| effect.get("status"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let Some(status) = status else {
        return classify_foreign(result, refusal);
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
fn classify_foreign(
    result: CallToolResult,
    refusal: Option<&(dyn Fn(&CallToolResult) -> bool + Send + Sync)>,
) -> Result<Value, HandlerError> {
    if result.is_error == Some(true) {
        if refusal.is_some_and(|is_refusal| is_refusal(&result)) {
            return Err(HandlerError::rejected(format!(
                "the server refused the call: {}",
                text_of(&result)
            )));
        }
        return Err(HandlerError::unknown(format!(
            "the tool answered with an error: {}",
            text_of(&result)
        )));
    }
    Ok(output_of(result))
}

/// A tool result's output as this crate reads it: the structured content,
/// else the text blocks parsed as JSON, else the text itself.
pub fn output_of(result: CallToolResult) -> Value {
    if let Some(structured) = result.structured_content {
        return structured;
    }
    let text = text_of(&result);
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// A tool result's text blocks, joined by newlines.
pub fn text_of(result: &CallToolResult) -> String {
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
            .field("reconnects", &self.link.reconnects())
            .field("contract", &self.contract)
            .field("checks_schema", &self.schema.is_some())
            .field("classifies_refusals", &self.refusal.is_some())
            .finish_non_exhaustive()
    }
}
