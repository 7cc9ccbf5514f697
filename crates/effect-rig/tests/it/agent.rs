//! An agent loop over a scripted completion model (no network).

use std::sync::atomic::Ordering;

use rig_agent::agent::AgentBuilder;
use rig_agent::test_utils::{MockCompletionModel, MockTurn};
use rig_core::completion::CompletionRequest;
use rig_core::message::{Message, ToolResult, ToolResultContent, UserContent};
use serde_json::{Value, json};

use crate::fixture::{Reconcile, committed, setup};

/// Two calls of the same capture (the model retries), then an answer.
fn model() -> MockCompletionModel {
    let args = json!({"invoice_id": "INV-9", "amount_cents": 990});
    MockCompletionModel::from_turns([
        MockTurn::tool_call("call_1", "capture_payment", args.clone()),
        MockTurn::tool_call("call_2", "capture_payment", args),
        MockTurn::text("done"),
    ])
}

/// The tool result answering `call_id`, as the model received it.
fn answer<'a>(requests: &'a [CompletionRequest], call_id: &str) -> Option<&'a ToolResult> {
    requests
        .iter()
        .flat_map(|r| r.chat_history.iter())
        .find_map(|message| match message {
            Message::User { content } => content.iter().find_map(|item| match item {
                UserContent::ToolResult(result)
                    if result.call.provider().map(|id| id.as_str()) == Some(call_id) =>
                {
                    Some(result)
                }
                _ => None,
            }),
            _ => None,
        })
}

fn json_of(result: &ToolResult) -> Value {
    match result.content.as_slice() {
        [ToolResultContent::Json { value }] => value.clone(),
        [ToolResultContent::Text(text)] => serde_json::from_str(&text.text).unwrap_or(Value::Null),
        other => panic!("one content block, not {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_retries_an_uncertain_capture_commits_it_once_and_is_told_not_to_retry() {
    let setup = setup(Reconcile::Nothing, 1);
    let model = model();
    let recorded = model.clone();
    let agent = AgentBuilder::new(model).tool(setup.tool).build();
    let output = agent
        .prompt("capture invoice INV-9")
        .max_turns(5)
        .await
        .expect("the run completes");
    assert_eq!(output.output(), "done");

    let requests = recorded.requests();
    for call_id in ["call_1", "call_2"] {
        let result = answer(&requests, call_id).unwrap_or_else(|| panic!("{call_id} answered"));
        assert!(!result.is_error, "{call_id}: not presented as a failure");
        let notice = json_of(result);
        assert_eq!(notice["outcome"], "unknown", "{call_id}");
        assert_eq!(notice["retry"], false);
        assert_eq!(notice["operation_id"], "invoice:INV-9:capture");
    }
    assert_eq!(
        setup.calls.load(Ordering::SeqCst),
        1,
        "the retry never reached the tool"
    );
    assert_eq!(committed(&setup.provider), 1, "one committed effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_sees_the_output_the_probe_recovered_after_a_lost_response() {
    let setup = setup(Reconcile::Probe, 1);
    let model = model();
    let recorded = model.clone();
    let agent = AgentBuilder::new(model).tool(setup.tool).build();
    agent
        .prompt("capture invoice INV-9")
        .max_turns(5)
        .await
        .expect("the run completes");
    let requests = recorded.requests();
    for call_id in ["call_1", "call_2"] {
        let result = answer(&requests, call_id).unwrap_or_else(|| panic!("{call_id} answered"));
        assert!(!result.is_error);
        assert_eq!(json_of(result)["payment_id"], "pay_000001", "{call_id}");
    }
    assert_eq!(committed(&setup.provider), 1, "one committed effect");
}
