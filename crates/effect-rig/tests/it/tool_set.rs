//! Calls through rig's `ToolSet`, as an agent runtime dispatches them.

use std::sync::atomic::Ordering;

use effect_core::EffectStatus;
use effect_rig::EffectReport;
use rig_agent::tool::ToolSet;
use rig_core::tool::{ToolContext, ToolResult};
use serde_json::{Value, json};

use crate::fixture::{Reconcile, committed, setup};

const ARGS: &str = r#"{"invoice_id": "INV-1", "amount_cents": 1250}"#;

async fn call(set: &ToolSet, args: &str) -> (ToolResult, Option<EffectReport>) {
    let mut context = ToolContext::new();
    let result = set.execute("capture_payment", args, &mut context).await;
    let report = context
        .result::<EffectReport>()
        .expect("the report decodes");
    (result, report)
}

fn json_of(result: &ToolResult) -> Value {
    result.output().as_json().cloned().unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_acknowledgement_is_confirmed_by_the_probe_and_returns_the_output() {
    let setup = setup(Reconcile::Probe, 1);
    let set = ToolSet::from_tools(vec![setup.tool]);
    let (result, report) = call(&set, ARGS).await;
    assert!(result.is_success(), "{result:?}");
    assert_eq!(json_of(&result)["payment_id"], "pay_000001");
    assert_eq!(report.map(|r| r.status), Some(EffectStatus::Confirmed));

    // The model calls again: the stored result is replayed, the tool is not run.
    let (again, report) = call(&set, ARGS).await;
    assert_eq!(json_of(&again), json_of(&result));
    assert_eq!(report.map(|r| r.duplicate_suppressed), Some(true));
    assert_eq!(setup.calls.load(Ordering::SeqCst), 1);
    assert_eq!(committed(&setup.provider), 1, "one committed effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreconcilable_loss_tells_the_model_the_outcome_is_unknown_and_not_to_retry() {
    let setup = setup(Reconcile::Nothing, 1);
    let set = ToolSet::from_tools(vec![setup.tool]);
    let (result, report) = call(&set, ARGS).await;
    // Not an error result: a model told "failed" retries.
    assert!(result.is_success(), "{result:?}");
    let notice = json_of(&result);
    assert_eq!(notice["outcome"], "unknown");
    assert_eq!(notice["retry"], false);
    assert_eq!(notice["operation_id"], "invoice:INV-1:capture");
    let message = notice["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Do not call `capture_payment` again"),
        "{message}"
    );
    assert!(!message.to_lowercase().contains("fail"), "{message}");
    assert!(report.is_some_and(|r| r.status.is_uncertain()));

    // The model retries anyway: the executor does not dispatch again.
    let (again, _) = call(&set, ARGS).await;
    assert_eq!(json_of(&again)["outcome"], "unknown");
    assert_eq!(setup.calls.load(Ordering::SeqCst), 1);
    assert_eq!(committed(&setup.provider), 1, "one committed effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_are_refused_before_anything_is_recorded() {
    let setup = setup(Reconcile::Probe, 0);
    let set = ToolSet::from_tools(vec![setup.tool]);
    let args = json!({"invoice_id": "INV-2", "amount_cents": 5, "currency": "EUR"}).to_string();
    let (result, report) = call(&set, &args).await;
    assert!(result.is_error(), "{result:?}");
    assert_eq!(report, None);
    assert_eq!(
        setup
            .executor
            .ledger()
            .get("invoice:INV-2:capture")
            .ok()
            .flatten(),
        None
    );
    assert_eq!(committed(&setup.provider), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_keeps_its_name_and_derived_schema() {
    let setup = setup(Reconcile::Probe, 0);
    let set = ToolSet::from_tools(vec![setup.tool]);
    let definitions = set.tool_definitions();
    let [definition] = definitions.as_slice() else {
        panic!("one tool: {definitions:?}");
    };
    assert_eq!(definition.name.as_str(), "capture_payment");
    assert_eq!(definition.parameters["additionalProperties"], false);
    assert_eq!(
        definition.parameters["required"],
        json!(["invoice_id", "amount_cents"])
    );
}
