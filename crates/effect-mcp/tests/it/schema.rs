//! One argument type has one schema: the one effect-mcp serves is the one
//! effect-rig advertises to a model.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_core::MemoryLedger;
use effect_exec::{EffectExecutor, TypedContract};
use effect_mcp::{EffectServer, ServedTool};
use rmcp::model::CallToolRequestParams;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::fixture::connect;

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Line {
    sku: String,
    quantity: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
enum Delivery {
    Pickup { store: String },
    Ship { address: String, express: bool },
}

/// Nested objects, an optional object, a tagged enum and unsigned integers:
/// the shapes where the two derivations used to differ.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct PlaceOrder {
    order_id: String,
    total_cents: u64,
    lines: Vec<Line>,
    gift: Option<Line>,
    delivery: Delivery,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_type_gets_the_same_schema_under_rig_and_mcp() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let contract = TypedContract::<PlaceOrder, Value>::builder("place_order", |args| {
        Ok(format!("order:{}", args.order_id))
    })
    .build()
    .expect("the contract is well formed");
    let tool = ServedTool::new(
        "place_order",
        "Place an order",
        contract,
        move |args: PlaceOrder, _call| {
            let calls = Arc::clone(&counted);
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(json!({"placed": args.order_id}))
            }
        },
    );
    let server = EffectServer::new(EffectExecutor::new(Arc::new(MemoryLedger::new())))
        .tool(tool)
        .expect("the tool registers");
    let client = connect(server).await;
    let tools = client.peer().list_all_tools().await.expect("tools list");
    let [served] = tools.as_slice() else {
        panic!("one tool: {tools:?}");
    };

    let served_schema = Value::Object((*served.input_schema).clone());
    let rig_schema = effect_rig::parameters::<PlaceOrder>();
    assert_eq!(served_schema, rig_schema);
    // The shared schema is the closed one, without schemars' integer formats.
    assert_eq!(rig_schema["additionalProperties"], false);
    assert_eq!(
        rig_schema["properties"]["lines"]["items"]["additionalProperties"],
        false
    );
    assert_eq!(rig_schema["properties"]["total_cents"].get("format"), None);

    // What the schema accepts the served tool runs; what it refuses never runs.
    let order = json!({
        "order_id": "O-1", "total_cents": 500, "lines": [{"sku": "a", "quantity": 1}],
        "gift": null, "delivery": {"kind": "pickup", "store": "S-1"}
    });
    let mut misspelt = order.clone();
    misspelt["lines"][0]["quantiy"] = json!(1);
    for (arguments, runs) in [(misspelt, false), (order, true)] {
        let Value::Object(arguments) = arguments else {
            panic!("arguments are an object");
        };
        let params = CallToolRequestParams::new("place_order").with_arguments(arguments);
        let answer = client.peer().call_tool(params).await;
        assert_eq!(
            answer.as_ref().is_ok_and(|r| r.is_error != Some(true)),
            runs,
            "{answer:?}"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "only the valid call ran");
}
