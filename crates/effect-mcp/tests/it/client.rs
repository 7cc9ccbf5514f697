//! `RemoteTool` calling a fault-injecting MCP server that is not ours.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use effect_core::MemoryLedger;
use effect_exec::EffectExecutor;
use effect_mcp::{EffectMcpError, EffectServer, RemoteTool, ServedTool, meta};
use effect_testkit::provider::FakePaymentProvider;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::fixture::{CaptureArgs, Reconcile, args, committed, connect, contract};

/// A payment server that honours the idempotency key in `_meta`, offers a
/// draft-07 schema, and answers the first `lose` calls with an internal
/// error *after* the provider committed (a lost response).
#[derive(Clone)]
struct FaultyPaymentServer {
    provider: Arc<FakePaymentProvider>,
    lose: Arc<AtomicUsize>,
    keys: Arc<Mutex<Vec<Option<String>>>>,
}

impl ServerHandler for FaultyPaymentServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let Value::Object(schema) = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "invoice_id": {"type": "string"},
                "amount_cents": {"type": "integer", "minimum": 1}
            },
            "required": ["invoice_id", "amount_cents"]
        }) else {
            unreachable!("a literal object")
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "capture_payment",
            "Capture a payment",
            schema,
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let key = request
            .meta
            .as_ref()
            .and_then(|m| m.get(meta::IDEMPOTENCY_KEY))
            .or_else(|| context.meta.get(meta::IDEMPOTENCY_KEY))
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.keys
            .lock()
            .map_err(|_| McpError::internal_error("poisoned", None))?
            .push(key.clone());
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let args: CaptureArgs = serde_json::from_value(arguments)
            .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        let capture = self
            .provider
            .capture(&args.invoice_id, args.amount_cents, key.as_deref())
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        if self
            .lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(McpError::internal_error("upstream connection reset", None));
        }
        let output = serde_json::to_value(capture)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(CallToolResult::structured(output).into())
    }
}

struct Remote {
    tool: RemoteTool<CaptureArgs, effect_testkit::provider::Capture>,
    server: FaultyPaymentServer,
    executor: EffectExecutor,
    _client: rmcp::service::RunningService<rmcp::RoleClient, ()>,
}

async fn remote(reconcile: Reconcile, lose: usize) -> Remote {
    let server = FaultyPaymentServer {
        provider: Arc::new(FakePaymentProvider::new()),
        lose: Arc::new(AtomicUsize::new(lose)),
        keys: Arc::default(),
    };
    let client = connect(server.clone()).await;
    let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    let contract = contract(&server.provider, reconcile);
    let tool = RemoteTool::discover(
        client.peer().clone(),
        "capture_payment",
        contract,
        executor.clone(),
    )
    .await
    .expect("the tool is listed with a usable draft-07 schema");
    Remote {
        tool,
        server,
        executor,
        _client: client,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_response_is_resent_with_the_same_key_and_commits_once() {
    let remote = remote(Reconcile::GuaranteedKey, 1).await;
    let result = remote
        .tool
        .call(&args("INV-1"))
        .await
        .expect("the call runs");
    assert!(result.is_confirmed(), "{:?}", result.result);
    assert_eq!(
        result.output.as_ref().map(|c| c.payment_id.as_str()),
        Some("pay_000001")
    );
    let keys = remote.server.keys.lock().unwrap().clone();
    assert_eq!(
        keys,
        vec![Some("capture:INV-1".to_owned()); 2],
        "the key went with both sends"
    );
    assert_eq!(
        committed(&remote.server.provider),
        1,
        "one committed effect"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_response_without_a_way_to_settle_it_is_uncertain_and_never_resent() {
    let remote = remote(Reconcile::Nothing, 1).await;
    for _ in 0..2 {
        let result = remote
            .tool
            .call(&args("INV-2"))
            .await
            .expect("the call runs");
        assert!(result.is_uncertain(), "{:?}", result.status);
        assert_eq!(result.output, None);
        assert_eq!(result.operation_id, "invoice:INV-2:capture");
    }
    assert_eq!(remote.server.keys.lock().unwrap().len(), 1, "sent once");
    assert_eq!(
        committed(&remote.server.provider),
        1,
        "one committed effect"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_outside_the_draft_07_schema_are_refused_before_anything_is_recorded() {
    #[derive(Serialize, Deserialize)]
    struct Loose {
        invoice_id: String,
        amount_cents: u64,
        currency: String,
    }
    let remote = remote(Reconcile::Probe, 0).await;
    let contract = effect_exec::TypedContract::<Loose, Value>::builder("capture_payment", |a| {
        Ok(format!("invoice:{}:capture", a.invoice_id))
    })
    .build()
    .unwrap();
    let client = connect(remote.server.clone()).await;
    let loose = RemoteTool::discover(
        client.peer().clone(),
        "capture_payment",
        contract,
        remote.executor.clone(),
    )
    .await
    .unwrap();
    for (amount, currency) in [(5, "EUR"), (0, "")] {
        let args = Loose {
            invoice_id: "INV-3".into(),
            amount_cents: amount,
            currency: currency.into(),
        };
        let err = loose.call(&args).await.unwrap_err();
        assert!(
            matches!(err, EffectMcpError::InvalidArguments { .. }),
            "{err:?}"
        );
    }
    assert_eq!(
        remote
            .executor
            .ledger()
            .get("invoice:INV-3:capture")
            .unwrap(),
        None
    );
    assert!(remote.server.keys.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_and_an_effect_server_agree_on_an_uncertain_outcome() {
    // The server loses its provider's acknowledgement and cannot settle it;
    // the client is told so and records its own call as uncertain.
    let provider = Arc::new(FakePaymentProvider::new());
    let p = Arc::clone(&provider);
    let lost = Arc::new(AtomicUsize::new(1));
    let handler = move |args: CaptureArgs, call: effect_mcp::EffectCall| {
        let (provider, lost) = (Arc::clone(&p), Arc::clone(&lost));
        async move {
            let key = call
                .client_idempotency_key
                .or(call.provider_idempotency_key);
            let capture = provider.capture(&args.invoice_id, args.amount_cents, key.as_deref())?;
            if lost
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(effect_exec::HandlerError::unknown("timed out"));
            }
            Ok(capture)
        }
    };
    let served = ServedTool::new(
        "capture_payment",
        "Capture",
        contract(&provider, Reconcile::Nothing),
        handler,
    );
    let server = EffectServer::new(EffectExecutor::new(Arc::new(MemoryLedger::new())))
        .tool(served)
        .unwrap();
    let client = connect(server).await;
    let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    let tool = RemoteTool::discover(
        client.peer().clone(),
        "capture_payment",
        contract(&provider, Reconcile::Nothing),
        executor,
    )
    .await
    .unwrap();
    for _ in 0..2 {
        let result = tool.call(&args("INV-4")).await.unwrap();
        assert!(result.is_uncertain(), "{:?}", result.result);
        assert!(
            result
                .error
                .as_deref()
                .is_some_and(|e| e.contains("outcome")),
            "{:?}",
            result.error
        );
    }
    assert_eq!(committed(&provider), 1, "one committed effect");
}
