//! A call of a tool whose contract requires approval (docs/approval.md):
//! the server answers with the non-error notice it uses for uncertain
//! outcomes, nothing is dispatched, and the call runs once approved.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use effect_core::{Approval, Clock as _, EffectLedger, MemoryLedger, SystemClock};
use effect_exec::{EffectExecutor, TypedContract};
use effect_mcp::{EffectServer, ServedTool, meta};
use effect_testkit::provider::{Capture, FakePaymentProvider};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::fixture::{CaptureArgs, committed, connect};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_awaiting_approval_gets_a_notice_and_runs_once_approved() {
    let provider = Arc::new(FakePaymentProvider::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let contract = TypedContract::<CaptureArgs, Capture>::builder("capture_payment", |args| {
        Ok(format!("invoice:{}:capture", args.invoice_id))
    })
    .provider_idempotency_key(|args| Ok(Some(format!("capture:{}", args.invoice_id))))
    .requires_approval(true)
    .build()
    .expect("the contract is well formed");
    let (p, c) = (Arc::clone(&provider), Arc::clone(&calls));
    let handler = move |args: CaptureArgs, call: effect_mcp::EffectCall| {
        let (provider, calls) = (Arc::clone(&p), Arc::clone(&c));
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            let key = call.provider_idempotency_key.as_deref();
            let capture = provider.capture(&args.invoice_id, args.amount_cents, key)?;
            Ok::<_, effect_exec::HandlerError>(capture)
        }
    };
    let tool = ServedTool::new("capture_payment", "Capture a payment", contract, handler);
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let executor = EffectExecutor::new(Arc::clone(&ledger));
    let server = EffectServer::new(executor.clone())
        .tool(tool)
        .expect("the tool registers");
    let client = connect(server).await;
    let call = || async {
        let Value::Object(arguments) = json!({"invoice_id": "INV-1", "amount_cents": 1250}) else {
            unreachable!("an object literal");
        };
        let params = CallToolRequestParams::new("capture_payment").with_arguments(arguments);
        client
            .peer()
            .call_tool(params)
            .await
            .expect("the server answers")
    };

    let waiting = call().await;
    assert_ne!(
        waiting.is_error,
        Some(true),
        "not an error result: {waiting:?}"
    );
    let notice = waiting.structured_content.clone().unwrap_or(Value::Null);
    assert_eq!(notice["outcome"], "awaiting_approval");
    assert_eq!(notice["status"], "awaiting_approval");
    assert_eq!(notice["retry"], false);
    assert_eq!(notice["operation_id"], "invoice:INV-1:capture");
    let effect = waiting
        .meta
        .as_ref()
        .and_then(|m| m.get(meta::EFFECT))
        .cloned();
    assert_eq!(effect.unwrap_or(Value::Null)["status"], "awaiting_approval");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing dispatched");

    let record = ledger.get("invoice:INV-1:capture").unwrap().unwrap();
    executor
        .operator()
        .approve(
            "invoice:INV-1:capture",
            Approval {
                request_fingerprint: record.request_fingerprint,
                actor: "lead@example.com".into(),
                reason: "invoice checked".into(),
                expires_at: SystemClock.now() + Duration::from_secs(3600),
            },
        )
        .unwrap();
    let done = call().await;
    assert_ne!(done.is_error, Some(true), "{done:?}");
    let output = done.structured_content.clone().unwrap_or(Value::Null);
    assert_eq!(output["invoice_id"], "INV-1", "{output}");
    let again = call().await;
    assert_eq!(
        again.structured_content, done.structured_content,
        "replayed"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(committed(&provider), 1);
}
