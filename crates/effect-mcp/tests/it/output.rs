//! A tool that declares an `outputSchema`: every result that is not an
//! error carries an output conforming to it, for a plain client (the
//! uncertain notice goes as an error result's text) and for a client with
//! tasks (the notice becomes the task's status); a refusal is a failed task.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use effect_core::{EffectLedger, EffectStatus, MemoryLedger};
use effect_exec::{EffectExecutor, HandlerError, TypedContract};
use effect_mcp::{EffectServer, ServedTool, TaskOptions, meta, task};
use effect_schema::InputSchema;
use effect_testkit::provider::FakePaymentProvider;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, TaskPayload, TaskStatus,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::{ServerHandler, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::fixture::{CaptureArgs, committed};

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Captured {
    payment_id: String,
    invoice_id: String,
    amount_cents: u64,
}

struct Served {
    server: EffectServer,
    ledger: Arc<dyn EffectLedger>,
    provider: Arc<FakePaymentProvider>,
    calls: Arc<AtomicUsize>,
}

/// A capture tool with an `outputSchema`: an invoice starting `LOST` loses
/// its acknowledgement after the provider committed, `DECLINED` is refused.
fn served() -> Served {
    let provider = Arc::new(FakePaymentProvider::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let contract = TypedContract::<CaptureArgs, Captured>::builder("capture_payment", |args| {
        Ok(format!("invoice:{}:capture", args.invoice_id))
    })
    .provider_idempotency_key(|args| Ok(Some(format!("capture:{}", args.invoice_id))))
    .build()
    .expect("the contract is well formed");
    let (p, c) = (Arc::clone(&provider), Arc::clone(&calls));
    let handler = move |args: CaptureArgs, call: effect_mcp::EffectCall| {
        let (provider, calls) = (Arc::clone(&p), Arc::clone(&c));
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            if args.invoice_id.starts_with("DECLINED") {
                return Err(HandlerError::rejected("card declined"));
            }
            let key = call.provider_idempotency_key.as_deref();
            let capture = provider.capture(&args.invoice_id, args.amount_cents, key)?;
            if args.invoice_id.starts_with("LOST") {
                return Err(HandlerError::unknown("timed out waiting for the provider"));
            }
            Ok(Captured {
                payment_id: capture.payment_id,
                invoice_id: capture.invoice_id,
                amount_cents: capture.amount_cents,
            })
        }
    };
    let tool =
        ServedTool::new("capture_payment", "Capture a payment", contract, handler).output_schema();
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let server = EffectServer::new(EffectExecutor::new(Arc::clone(&ledger)))
        .with_tasks(TaskOptions::default().poll_interval(Duration::from_millis(20)))
        .tool(tool)
        .expect("the tool registers");
    Served {
        server,
        ledger,
        provider,
        calls,
    }
}

async fn connect_as<S, C>(server: S, client: C) -> RunningService<RoleClient, C>
where
    S: ServerHandler,
    C: rmcp::service::Service<RoleClient>,
{
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    client.serve(client_io).await.expect("the client connects")
}

fn params(invoice: &str) -> CallToolRequestParams {
    let Value::Object(arguments) = json!({"invoice_id": invoice, "amount_cents": 1250}) else {
        unreachable!("an object literal");
    };
    CallToolRequestParams::new("capture_payment").with_arguments(arguments)
}

fn effect_status(result: &CallToolResult) -> Option<String> {
    let effect = result.meta.as_ref()?.get(meta::EFFECT)?;
    Some(effect.get("status")?.as_str()?.to_owned())
}

/// A result conforms: an error, or structured output valid under `schema`.
fn assert_conforms(schema: &InputSchema, result: &CallToolResult) {
    if result.is_error == Some(true) {
        assert_eq!(result.structured_content, None, "{result:?}");
        return;
    }
    let output = result
        .structured_content
        .clone()
        .expect("a result with an outputSchema is structured");
    assert_eq!(schema.validate(&output), Ok(()), "{output}");
}

/// Waits until the ledger holds `operation_id` in one of `statuses`.
async fn until_status(
    ledger: &Arc<dyn EffectLedger>,
    operation_id: &str,
    statuses: &[EffectStatus],
) {
    for _ in 0..6000 {
        let status = ledger
            .get(operation_id)
            .expect("the ledger reads")
            .map(|r| r.status);
        if status.is_some_and(|s| statuses.contains(&s)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{operation_id} never reached {statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_result_of_a_tool_with_an_output_schema_conforms_with_or_without_tasks() {
    let served = served();
    let plain = connect_as(served.server.clone(), ()).await;
    let tools = plain
        .peer()
        .list_all_tools()
        .await
        .expect("tools/list answers");
    let declared = tools[0].output_schema.clone().expect("an outputSchema");
    assert_eq!(declared.get("type"), Some(&json!("object")));
    let schema = InputSchema::new(Value::Object((*declared).clone())).expect("usable");

    // A plain client: complete results only.
    let lost = plain
        .peer()
        .call_tool(params("LOST-1"))
        .await
        .expect("answers");
    assert_conforms(&schema, &lost);
    assert_eq!(lost.is_error, Some(true), "the notice is not an output");
    let status = effect_status(&lost).unwrap_or_default();
    assert!(
        status == "outcome_unknown" || status == "quarantined",
        "{status}"
    );
    let text = lost.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .unwrap_or_default();
    let notice: Value = serde_json::from_str(&text).expect("the notice as JSON text");
    assert_eq!(notice["retry"], false);
    assert_eq!(notice["operation_id"], "invoice:LOST-1:capture");

    let confirmed = plain
        .peer()
        .call_tool(params("INV-2"))
        .await
        .expect("answers");
    assert_conforms(&schema, &confirmed);
    assert_eq!(effect_status(&confirmed).as_deref(), Some("confirmed"));
    let declined = plain
        .peer()
        .call_tool(params("DECLINED-1"))
        .await
        .expect("answers");
    assert_conforms(&schema, &declined);
    assert_eq!(effect_status(&declined).as_deref(), Some("rejected"));

    // A client with tasks: the notice is the task's status.
    let config = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("effect-mcp-output-test", "0"),
    );
    let tasks = connect_as(served.server.clone(), config).await;
    let get = |id: &'static str| {
        let peer = tasks.peer().clone();
        async move {
            peer.get_task(GetTaskParams::new(id))
                .await
                .expect("tasks/get answers")
                .task
        }
    };
    for invoice in ["LOST-2", "DECLINED-2", "INV-4"] {
        let response = tasks
            .call_tool_once(params(invoice))
            .await
            .expect("answers");
        assert!(
            matches!(response, CallToolResponse::Task(_)),
            "{response:?}"
        );
    }
    until_status(
        &served.ledger,
        "invoice:LOST-2:capture",
        &[EffectStatus::OutcomeUnknown, EffectStatus::Quarantined],
    )
    .await;
    let lost = get("invoice:LOST-2:capture").await;
    let record = served
        .ledger
        .get("invoice:LOST-2:capture")
        .unwrap()
        .unwrap();
    let expected = if record.status == EffectStatus::Quarantined {
        TaskStatus::InputRequired
    } else {
        TaskStatus::Working
    };
    assert_eq!(lost.status(), expected, "{lost:?}");

    until_status(
        &served.ledger,
        "invoice:DECLINED-2:capture",
        &[EffectStatus::Rejected],
    )
    .await;
    let declined = get("invoice:DECLINED-2:capture").await;
    let TaskPayload::Failed { error } = &declined.payload else {
        panic!("a refusal is a failed task: {declined:?}");
    };
    assert_eq!(error["code"], json!(task::REJECTED_ERROR_CODE));
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("card declined")
    );

    until_status(
        &served.ledger,
        "invoice:INV-4:capture",
        &[EffectStatus::Confirmed],
    )
    .await;
    let done = get("invoice:INV-4:capture").await;
    let TaskPayload::Completed { result } = &done.payload else {
        panic!("a confirmed effect completes: {done:?}");
    };
    let result: CallToolResult =
        serde_json::from_value(Value::Object(result.clone())).expect("a tools/call result");
    assert_conforms(&schema, &result);
    assert_eq!(result.is_error, Some(false));
    assert_eq!(effect_status(&result).as_deref(), Some("confirmed"));

    assert_eq!(served.calls.load(Ordering::SeqCst), 6, "each call ran once");
    assert_eq!(
        committed(&served.provider),
        4,
        "LOST-1, INV-2, LOST-2, INV-4"
    );
}
