//! Evidence a handler records through its context reaches the ledger, under
//! the executor's own keys.

use effect_core::EffectContract;
use effect_core::evidence::{DISPATCH_INTERRUPTION, INTERRUPTED_BY_HANDLER_EXCEPTION, SOURCE};
use effect_exec::{HandlerContext, HandlerError};
use serde_json::{Value, json};

use crate::{executor, ledger};

fn contract() -> EffectContract {
    EffectContract::builder("send", |args| {
        Ok(args["id"].as_str().ok_or("missing id")?.to_owned())
    })
    .build()
    .unwrap()
}

#[test]
fn a_confirmation_keeps_the_handlers_evidence() {
    let ledger = ledger();
    let result = executor(&ledger)
        .execute(
            &contract(),
            &json!({"id": "a"}),
            |_args: Value, ctx: HandlerContext| {
                ctx.record_evidence("http_status", 200);
                ctx.record_evidence("http_idempotent_replayed", true);
                // A handler cannot pass for the executor's own keys.
                ctx.record_evidence(SOURCE, "forged");
                Ok::<_, HandlerError>(json!({"ok": true}))
            },
        )
        .unwrap();
    assert!(result.is_confirmed());
    let stored = ledger.get("a").unwrap().unwrap();
    assert_eq!(stored.evidence["http_status"], json!(200));
    assert_eq!(stored.evidence["http_idempotent_replayed"], json!(true));
    assert_eq!(stored.evidence[SOURCE], json!("handler_return"));
}

#[test]
fn an_unknown_outcome_keeps_the_handlers_evidence() {
    let ledger = ledger();
    let result = executor(&ledger)
        .execute(
            &contract(),
            &json!({"id": "b"}),
            |_args: Value, ctx: HandlerContext| {
                ctx.record_evidence("http_status", 502);
                ctx.record_evidence(DISPATCH_INTERRUPTION, "not_sent");
                Err::<Value, _>(HandlerError::unknown("bad gateway"))
            },
        )
        .unwrap();
    assert_eq!(result.status.as_str(), "quarantined");
    let stored = ledger.get("b").unwrap().unwrap();
    assert_eq!(stored.evidence["http_status"], json!(502));
    assert_eq!(
        stored.evidence[DISPATCH_INTERRUPTION],
        json!(INTERRUPTED_BY_HANDLER_EXCEPTION),
        "the handler's claim never replaces what the executor saw"
    );
    assert_eq!(stored.attempts, 1, "nothing authorized a second dispatch");
}
