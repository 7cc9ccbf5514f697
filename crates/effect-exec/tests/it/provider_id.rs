//! A handler reports the provider's operation id through its context, sync,
//! async and typed alike; the confirmed record stores it.

use effect_core::{EffectContract, EffectLedger as _};
use effect_exec::{HandlerContext, HandlerError, TypedContract};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{executor, ledger};

fn contract() -> EffectContract {
    EffectContract::builder("send_email", |args| {
        Ok(format!(
            "email:{}",
            args["to"].as_str().ok_or("missing to")?
        ))
    })
    .build()
    .unwrap()
}

#[test]
fn a_sync_handler_reports_the_provider_operation_id() {
    let ledger = ledger();
    let result = executor(&ledger)
        .execute(
            &contract(),
            &json!({"to": "a"}),
            |_: Value, ctx: HandlerContext| {
                ctx.set_provider_operation_id("msg_a");
                Ok::<_, HandlerError>(json!({"queued": true}))
            },
        )
        .unwrap();
    assert_eq!(result.provider_operation_id.as_deref(), Some("msg_a"));
    let stored = ledger.get("email:a").unwrap().unwrap();
    assert_eq!(stored.provider_operation_id.as_deref(), Some("msg_a"));
}

#[derive(Debug, Serialize, Deserialize)]
struct Email {
    to: String,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Queued {
    queued: bool,
}

#[test]
fn a_typed_handler_reports_the_provider_operation_id() {
    let ledger = ledger();
    let typed = TypedContract::<Email, Queued>::builder("send_email", |email: &Email| {
        Ok(format!("email:{}", email.to))
    })
    .build()
    .unwrap();
    let result = executor(&ledger)
        .execute_typed(&typed, &Email { to: "b".into() }, |_, ctx| {
            ctx.set_provider_operation_id("msg_b");
            Ok(Queued { queued: true })
        })
        .unwrap();
    assert_eq!(result.provider_operation_id.as_deref(), Some("msg_b"));
    let stored = ledger.get("email:b").unwrap().unwrap();
    assert_eq!(stored.provider_operation_id.as_deref(), Some("msg_b"));
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn an_async_handler_reports_the_provider_operation_id() {
    let ledger = ledger();
    let result = executor(&ledger)
        .execute_async(
            &contract(),
            &json!({"to": "c"}),
            effect_exec::CallOptions::default(),
            |_: Value, ctx: HandlerContext| async move {
                ctx.set_provider_operation_id("msg_c");
                Ok::<_, HandlerError>(json!({"queued": true}))
            },
        )
        .await
        .unwrap();
    assert_eq!(result.provider_operation_id.as_deref(), Some("msg_c"));
    let stored = ledger.get("email:c").unwrap().unwrap();
    assert_eq!(stored.provider_operation_id.as_deref(), Some("msg_c"));
}
