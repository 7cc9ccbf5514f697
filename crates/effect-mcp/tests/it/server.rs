//! `EffectServer`, called by a plain rmcp client.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_core::MemoryLedger;
use effect_exec::{EffectExecutor, HandlerError};
use effect_mcp::{EffectServer, ServedTool, meta};
use effect_testkit::provider::FakePaymentProvider;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};

use crate::fixture::{CaptureArgs, Reconcile, committed, connect, contract};

struct Served {
    client: RunningService<RoleClient, ()>,
    provider: Arc<FakePaymentProvider>,
    calls: Arc<AtomicUsize>,
}

/// A server whose capture tool loses the first `lose` acknowledgements
/// after the provider committed.
async fn serve(reconcile: Reconcile, lose: usize) -> Served {
    let provider = Arc::new(FakePaymentProvider::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let lose = Arc::new(AtomicUsize::new(lose));
    let (p, c) = (Arc::clone(&provider), Arc::clone(&calls));
    let handler = move |args: CaptureArgs, call: effect_mcp::EffectCall| {
        let (provider, calls, lose) = (Arc::clone(&p), Arc::clone(&c), Arc::clone(&lose));
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            let key = call.provider_idempotency_key.as_deref();
            let capture = provider.capture(&args.invoice_id, args.amount_cents, key)?;
            if lose
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(HandlerError::unknown("timed out waiting for the provider"));
            }
            Ok(capture)
        }
    };
    let tool = ServedTool::new(
        "capture_payment",
        "Capture a payment for an invoice",
        contract(&provider, reconcile),
        handler,
    )
    .destructive(false);
    let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    let server = EffectServer::new(executor)
        .tool(tool)
        .expect("the tool registers");
    Served {
        client: connect(server).await,
        provider,
        calls,
    }
}

async fn call(served: &Served, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object");
    };
    let params = CallToolRequestParams::new("capture_payment").with_arguments(arguments);
    served
        .client
        .peer()
        .call_tool(params)
        .await
        .expect("the server answers")
}

fn effect_status(result: &CallToolResult) -> Option<String> {
    let effect = result.meta.as_ref()?.get(meta::EFFECT)?;
    Some(effect.get("status")?.as_str()?.to_owned())
}

const ARGS: fn() -> Value = || json!({"invoice_id": "INV-1", "amount_cents": 1250});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_acknowledgement_tells_the_client_the_outcome_is_unknown_not_failed() {
    let served = serve(Reconcile::Nothing, 1).await;
    for _ in 0..2 {
        let result = call(&served, ARGS()).await;
        assert_ne!(
            result.is_error,
            Some(true),
            "not an error result: {result:?}"
        );
        let notice = result.structured_content.clone().unwrap_or(Value::Null);
        assert_eq!(notice["outcome"], "unknown");
        assert_eq!(notice["retry"], false);
        assert_eq!(notice["operation_id"], "invoice:INV-1:capture");
        let message = notice["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("Do not call `capture_payment` again"),
            "{message}"
        );
        assert!(!message.to_lowercase().contains("fail"), "{message}");
        assert!(
            effect_status(&result).is_some_and(|s| s == "outcome_unknown" || s == "quarantined")
        );
    }
    assert_eq!(
        served.calls.load(Ordering::SeqCst),
        1,
        "the repeat was not dispatched"
    );
    assert_eq!(committed(&served.provider), 1, "one committed effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_acknowledgement_found_by_the_probe_returns_the_output() {
    let served = serve(Reconcile::Probe, 1).await;
    let result = call(&served, ARGS()).await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(effect_status(&result).as_deref(), Some("confirmed"));
    let output = result.structured_content.clone().unwrap_or(Value::Null);
    assert_eq!(output["payment_id"], "pay_000001");
    let again = call(&served, ARGS()).await;
    assert_eq!(again.structured_content, result.structured_content);
    assert_eq!(committed(&served.provider), 1, "one committed effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotations_say_what_the_executor_guarantees_and_the_schema_is_closed() {
    let served = serve(Reconcile::Probe, 0).await;
    let tools = served
        .client
        .peer()
        .list_all_tools()
        .await
        .expect("tools list");
    let [tool] = tools.as_slice() else {
        panic!("one tool: {tools:?}");
    };
    let annotations = tool.annotations.clone().expect("annotated");
    assert_eq!(annotations.idempotent_hint, Some(true));
    assert_eq!(annotations.destructive_hint, Some(false));
    assert_eq!(annotations.read_only_hint, Some(false));
    assert_eq!(
        tool.input_schema.get("additionalProperties"),
        Some(&Value::Bool(false))
    );

    let result = call(
        &served,
        json!({"invoice_id": "INV-2", "amount_cents": 5, "tip": 1}),
    )
    .await;
    assert_eq!(result.is_error, Some(true));
    assert_eq!(
        effect_status(&result).as_deref(),
        Some(meta::INVALID_ARGUMENTS)
    );
    assert_eq!(served.calls.load(Ordering::SeqCst), 0);
    assert_eq!(committed(&served.provider), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_info_and_instructions_are_the_servers_own() {
    let executor = || EffectExecutor::new(Arc::new(MemoryLedger::new()));
    let plain = connect(EffectServer::new(executor())).await;
    let info = plain
        .peer()
        .peer_info()
        .expect("the server answered initialize");
    let named = info.server_info.clone().expect("serverInfo is sent");
    assert_eq!(named.name, "effect-mcp", "not rmcp's own name");
    assert_eq!(info.instructions, None);

    let server = EffectServer::new(executor())
        .with_server_info(rmcp::model::Implementation::new("payments", "2.1.0"))
        .with_instructions("Capture each invoice once.");
    let client = connect(server).await;
    let info = client
        .peer()
        .peer_info()
        .expect("the server answered initialize");
    let named = info.server_info.clone().expect("serverInfo is sent");
    assert_eq!(
        (named.name.as_str(), named.version.as_str()),
        ("payments", "2.1.0")
    );
    assert_eq!(
        info.instructions.as_deref(),
        Some("Capture each invoice once.")
    );
}
