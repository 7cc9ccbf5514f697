//! `EffectExecutor::prepare`: a call's identity derived once, before anything
//! is written, then executed under that id.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_core::{EffectContract, EffectStatus, ListQuery};
use effect_exec::secrets::FingerprintKey;
use effect_exec::{CallOptions, ExecError, HandlerContext, HandlerError};
use serde_json::{Value, json};

use crate::{event_types, executor, ledger};

/// A capture contract that counts how often its identity function runs
/// (hand-built: the shared contract's identity function counts nothing).
fn counted_contract(derivations: &Arc<AtomicUsize>) -> EffectContract {
    let counter = Arc::clone(derivations);
    EffectContract::builder("capture_payment", move |args| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(format!(
            "invoice:{}:capture",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        ))
    })
    .provider_idempotency_key(|args| {
        Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
    })
    .build()
    .unwrap()
}

#[test]
fn a_prepared_call_runs_under_the_one_id_it_derived() {
    let ledger = ledger();
    let executor = executor(&ledger);
    let derivations = Arc::new(AtomicUsize::new(0));
    let contract = counted_contract(&derivations);
    let prepared = executor
        .prepare(&contract, &json!({"invoice_id": "INV-1"}))
        .unwrap();
    assert_eq!(prepared.operation_id(), "invoice:INV-1:capture");
    assert_eq!(prepared.provider_idempotency_key(), Some("capture:INV-1"));
    assert!(
        ledger.list(&ListQuery::new(10)).unwrap().is_empty(),
        "nothing written"
    );

    let commits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&commits);
    let handler = move |_args: Value, ctx: HandlerContext| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok::<_, HandlerError>(json!({"captured": ctx.operation_id()}))
    };
    let result = executor
        .execute_prepared(&prepared, CallOptions::default(), handler.clone())
        .unwrap();
    assert_eq!(result.status, EffectStatus::Confirmed);
    assert_eq!(result.operation_id, "invoice:INV-1:capture");
    assert_eq!(
        result.output,
        Some(json!({"captured": "invoice:INV-1:capture"}))
    );
    assert_eq!(derivations.load(Ordering::SeqCst), 1, "derived once");
    // The same prepared call again replays: no second commit.
    let again = executor
        .execute_prepared(&prepared, CallOptions::default(), handler)
        .unwrap();
    assert!(again.duplicate_suppressed);
    assert_eq!(commits.load(Ordering::SeqCst), 1);
    assert_eq!(derivations.load(Ordering::SeqCst), 1);
    assert_eq!(
        event_types(&ledger, "invoice:INV-1:capture"),
        ["prepared", "dispatched", "confirmed"]
    );
}

#[test]
fn a_call_prepared_by_an_executor_with_other_keys_is_refused_before_anything_is_written() {
    let ledger = ledger();
    let keyed = executor(&ledger).with_fingerprint_key(FingerprintKey::from_bytes([7; 32]));
    let plain = executor(&ledger);
    let contract = counted_contract(&Arc::new(AtomicUsize::new(0)));
    let prepared = keyed
        .prepare(&contract, &json!({"invoice_id": "INV-2"}))
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let err = plain
        .execute_prepared(
            &prepared,
            CallOptions::default(),
            move |_args: Value, _ctx| {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, HandlerError>(json!(null))
            },
        )
        .unwrap_err();
    assert!(
        matches!(&err, ExecError::ForeignPreparation { operation_id } if operation_id == "invoice:INV-2:capture"),
        "{err:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(ledger.list(&ListQuery::new(10)).unwrap().is_empty());
    // The executor that prepared it, or a clone of it, runs it.
    let counter = Arc::clone(&calls);
    let result = keyed
        .clone()
        .execute_prepared(
            &prepared,
            CallOptions::default(),
            move |_args: Value, _ctx| {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, HandlerError>(json!(null))
            },
        )
        .unwrap();
    assert_eq!(result.status, EffectStatus::Confirmed);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_panicking_identity_function_is_refused_by_prepare() {
    let ledger = ledger();
    let executor = executor(&ledger);
    // Hand-built: an identity function that panics, which the shared contract's does not.
    let contract = EffectContract::builder("capture_payment", |_args| panic!("identity bug"))
        .build()
        .unwrap();
    let err = executor
        .prepare(&contract, &json!({"invoice_id": "INV-3"}))
        .unwrap_err();
    assert!(matches!(err, ExecError::Contract { .. }), "{err:?}");
    assert!(effect_core::error_chain(&err).contains("identity bug"));
    assert!(ledger.list(&ListQuery::new(10)).unwrap().is_empty());
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread")]
async fn the_async_form_runs_a_prepared_call_under_its_id() {
    let ledger = ledger();
    let executor = executor(&ledger);
    let derivations = Arc::new(AtomicUsize::new(0));
    let contract = counted_contract(&derivations);
    let prepared = executor
        .prepare(&contract, &json!({"invoice_id": "INV-4"}))
        .unwrap();
    let result = executor
        .execute_prepared_async(
            &prepared,
            CallOptions::default(),
            |_args: Value, ctx: HandlerContext| async move {
                Ok::<_, HandlerError>(json!({"captured": ctx.operation_id()}))
            },
        )
        .await
        .unwrap();
    assert_eq!(result.status, EffectStatus::Confirmed);
    assert_eq!(
        result.output,
        Some(json!({"captured": "invoice:INV-4:capture"}))
    );
    assert_eq!(derivations.load(Ordering::SeqCst), 1);
    assert_eq!(
        event_types(&ledger, "invoice:INV-4:capture"),
        ["prepared", "dispatched", "confirmed"]
    );
}
