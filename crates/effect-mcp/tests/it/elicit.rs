//! A task waiting for approval asks its client through MCP elicitation:
//! the answer records an approval bound to the request fingerprint, with
//! the actor and reason given, used once; a denial fails the task.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use effect_core::{EffectLedger, EffectStatus, MemoryLedger};
use effect_exec::{EffectExecutor, HandlerError, TypedContract};
use effect_mcp::{EffectServer, ServedTool, TaskOptions, task};
use effect_testkit::provider::{Capture, FakePaymentProvider};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, DetailedTask,
    GetTaskParams, Implementation, InputResponses, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{Value, json};

use crate::fixture::{CaptureArgs, committed};

type Client = RunningService<RoleClient, ClientConfig>;

async fn connect(server: impl ServerHandler, elicitation: bool) -> Client {
    let mut capabilities = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    if elicitation {
        capabilities["elicitation"] = json!({"form": {}});
    }
    let capabilities: ClientCapabilities =
        serde_json::from_value(capabilities).expect("capabilities parse");
    let config = ClientConfig::new(capabilities, Implementation::new("elicit-test", "0"));
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    config.serve(client_io).await.expect("the client connects")
}

fn params(invoice: &str) -> CallToolRequestParams {
    let Value::Object(arguments) = json!({"invoice_id": invoice, "amount_cents": 1250}) else {
        unreachable!("an object literal");
    };
    CallToolRequestParams::new("capture_payment").with_arguments(arguments)
}

async fn get(client: &Client, id: &str) -> DetailedTask {
    client
        .peer()
        .get_task(GetTaskParams::new(id))
        .await
        .expect("tasks/get answers")
        .task
}

async fn answer(client: &Client, id: &str, key: &str, decision: &str) {
    let mut responses = InputResponses::new();
    responses.insert(
        key.to_owned(),
        json!({"action": "accept", "content": {"decision": decision, "actor": "lead@example.com", "reason": "invoice checked"}}),
    );
    client
        .peer()
        .update_task(UpdateTaskParams::new(id, responses))
        .await
        .expect("tasks/update answers");
}

async fn until_status(ledger: &Arc<dyn EffectLedger>, id: &str, status: EffectStatus) {
    for _ in 0..6000 {
        if ledger
            .get(id)
            .expect("reads")
            .is_some_and(|r| r.status == status)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} never became {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicited_approval_runs_the_call_once_and_a_denial_fails_it() {
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
            Ok::<_, HandlerError>(provider.capture(&args.invoice_id, args.amount_cents, key)?)
        }
    };
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let options = TaskOptions::default()
        .poll_interval(Duration::from_millis(20))
        .elicit_approvals(Duration::from_secs(3600));
    let server = EffectServer::new(EffectExecutor::new(Arc::clone(&ledger)))
        .with_tasks(options)
        .tool(ServedTool::new(
            "capture_payment",
            "Capture",
            contract,
            handler,
        ))
        .expect("the tool registers");
    let client = connect(server.clone(), true).await;
    let no_elicitation = connect(server, false).await;

    let id = "invoice:INV-1:capture";
    let created = client
        .call_tool_once(params("INV-1"))
        .await
        .expect("answers");
    let CallToolResponse::Task(created) = created else {
        panic!("expected a task: {created:?}");
    };
    assert_eq!(created.task.task_id, id);
    assert_eq!(created.task.status, TaskStatus::InputRequired);

    let fingerprint = ledger.get(id).unwrap().unwrap().request_fingerprint;
    let key = format!("{}{fingerprint}", task::APPROVAL_KEY_PREFIX);
    let waiting = get(&client, id).await;
    let TaskPayload::InputRequired { input_requests } = &waiting.payload else {
        panic!("waiting for input: {waiting:?}");
    };
    assert_eq!(input_requests.keys().collect::<Vec<_>>(), vec![&key]);
    let question = serde_json::to_value(&input_requests[&key]).expect("serializes");
    assert_eq!(question["method"], "elicitation/create");
    assert_eq!(question["params"]["mode"], "form");
    // A client that cannot answer an elicitation is not asked.
    let TaskPayload::InputRequired { input_requests } = get(&no_elicitation, id).await.payload
    else {
        panic!("still waiting for input");
    };
    assert!(input_requests.is_empty());

    // An answer to another request's question approves nothing.
    answer(&client, id, "approval:blake3:00", "approve").await;
    assert_eq!(get(&client, id).await.status(), TaskStatus::InputRequired);
    assert_eq!(ledger.get(id).unwrap().unwrap().approval(), None);

    answer(&client, id, &key, "approve").await;
    until_status(&ledger, id, EffectStatus::Confirmed).await;
    let done = get(&client, id).await;
    assert_eq!(done.status(), TaskStatus::Completed, "{done:?}");
    let events = ledger.events(id).expect("events read");
    let approved = events
        .iter()
        .find(|e| e.event_type == "approved")
        .expect("an approval event");
    let approved = approved.data.to_string();
    assert!(
        approved.contains("lead@example.com (via MCP elicitation)"),
        "{approved}"
    );
    assert!(approved.contains("invoice checked"), "{approved}");

    // The approval was used up: answering again dispatches nothing.
    answer(&client, id, &key, "approve").await;
    let again = client
        .call_tool_once(params("INV-1"))
        .await
        .expect("answers");
    assert!(matches!(again, CallToolResponse::Task(_)), "{again:?}");
    assert_eq!(get(&client, id).await.status(), TaskStatus::Completed);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(committed(&provider), 1, "one committed effect");

    // A denial fails the task and sends nothing.
    let denied_id = "invoice:INV-2:capture";
    client
        .call_tool_once(params("INV-2"))
        .await
        .expect("answers");
    let fingerprint = ledger.get(denied_id).unwrap().unwrap().request_fingerprint;
    let key = format!("{}{fingerprint}", task::APPROVAL_KEY_PREFIX);
    answer(&client, denied_id, &key, "deny").await;
    let denied = get(&client, denied_id).await;
    assert_eq!(denied.status(), TaskStatus::Failed, "{denied:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(committed(&provider), 1);
}
