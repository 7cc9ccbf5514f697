//! Approval per call (docs/approval.md): a typed contract requires approval
//! by a rule over its arguments ("refunds above 50.00"); the decision and
//! what the approver is shown (secrets redacted) are recorded with the
//! operation, and a rule that fails or panics refuses the call before
//! anything is written. Every test counts the handler's calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_core::EffectStatus;
use effect_core::secret::Secret;
use effect_exec::{ExecError, HandlerContext, HandlerError, TypedContract};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{executor, ledger};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Refund {
    order: String,
    cents: u64,
    card: Secret<String>,
}

const SECRET: &str = "tok_PLANTED_4242_b7e1";

fn refund(order: &str, cents: u64) -> Refund {
    Refund {
        order: order.to_owned(),
        cents,
        card: Secret::new(SECRET.to_owned()),
    }
}

fn contract() -> TypedContract<Refund, serde_json::Value> {
    TypedContract::builder("refund", |r: &Refund| {
        Ok(format!("order:{}:refund", r.order))
    })
    .requires_approval_when(|r: &Refund| {
        assert!(r.order != "PANIC", "the rule panicked");
        Ok(r.cents > 5_000)
    })
    .build()
    .unwrap()
}

#[test]
fn a_typed_rule_decides_per_call_and_records_what_the_approver_sees() {
    let ledger = ledger();
    let exec = executor(&ledger);
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let calls = Arc::clone(&calls);
        move |r: Refund, _ctx: HandlerContext| {
            calls.fetch_add(1, Ordering::SeqCst);
            assert_eq!(r.card.expose(), SECRET);
            Ok::<_, HandlerError>(json!({"refunded": r.cents}))
        }
    };
    let small = exec
        .execute_typed(&contract(), &refund("A-2", 4_200), handler.clone())
        .unwrap();
    assert!(small.is_confirmed());
    let big = exec
        .execute_typed(&contract(), &refund("A-1", 8_000), handler)
        .unwrap();
    assert_eq!(big.result.status, EffectStatus::AwaitingApproval);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    let events = ledger.events("order:A-1:refund").unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, "prepared");
    assert_eq!(events[0].data["approval_required"], true);
    assert_eq!(
        events[0].data["redacted_arguments"],
        json!({"order": "A-1", "cents": 8_000, "card": "[redacted]"})
    );
    assert!(!format!("{events:?}").contains(SECRET));
    let sent = ledger.events("order:A-2:refund").unwrap();
    assert!(sent[0].data.get("redacted_arguments").is_none(), "{sent:?}");
    assert!(sent[0].data.get("approval_required").is_none(), "{sent:?}");
}

#[test]
fn a_rule_that_panics_refuses_the_call_and_writes_nothing() {
    let ledger = ledger();
    let exec = executor(&ledger);
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let calls = Arc::clone(&calls);
        move |_r: Refund, _ctx: HandlerContext| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, HandlerError>(json!({}))
        }
    };
    let refused = exec
        .execute_typed(&contract(), &refund("PANIC", 1), handler)
        .unwrap_err();
    assert!(matches!(refused, ExecError::Contract { .. }), "{refused:?}");
    assert!(refused.to_string().contains("refund"), "{refused}");
    assert!(ledger.get("order:PANIC:refund").unwrap().is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}
