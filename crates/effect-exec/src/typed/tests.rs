use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_core::{EffectContract, EffectStatus, MemoryLedger};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::*;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Capture {
    invoice_id: String,
    amount_cents: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Payment {
    payment_id: String,
    amount_cents: u64,
}

/// A provider that commits every call and counts the commits.
#[derive(Debug, Default, Clone)]
struct Provider {
    commits: Arc<AtomicUsize>,
}

impl Provider {
    fn capture(&self, args: &Capture) -> Payment {
        let n = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
        Payment {
            payment_id: format!("pay-{n}"),
            amount_cents: args.amount_cents,
        }
    }

    fn committed(&self) -> usize {
        self.commits.load(Ordering::SeqCst)
    }
}

fn contract(provider: Option<Provider>) -> TypedContract<Capture, Payment> {
    let builder = TypedContract::<Capture, Payment>::builder("capture_payment", |args| {
        Ok(format!("invoice:{}:capture", args.invoice_id))
    })
    .provider_idempotency_key(|args| Ok(Some(format!("capture:{}", args.invoice_id))));
    match provider {
        // The probe finds the commit that the lost acknowledgement hid.
        Some(provider) => builder
            .outcome_probe(move |args, _key| {
                Ok(match provider.committed() {
                    0 => TypedProbe::not_committed(),
                    n => TypedProbe::committed(Payment {
                        payment_id: format!("pay-{n}"),
                        amount_cents: args.amount_cents,
                    })
                    .provider_operation_id(format!("pay-{n}")),
                })
            })
            .build(),
        None => builder.build(),
    }
    .unwrap()
}

fn inv(id: &str) -> Capture {
    Capture {
        invoice_id: id.to_owned(),
        amount_cents: 1250,
    }
}

fn executor() -> EffectExecutor {
    EffectExecutor::new(Arc::new(MemoryLedger::new()))
}

#[test]
fn a_confirmed_output_is_typed_and_replayed_as_the_same_value() -> Result<(), ExecError> {
    let provider = Provider::default();
    let (contract, executor) = (contract(None), executor());
    let handler = {
        let provider = provider.clone();
        move |args: Capture, ctx: HandlerContext| {
            assert_eq!(ctx.provider_key(), Some("capture:INV-1"));
            Ok(provider.capture(&args))
        }
    };
    let first = executor.execute_typed(&contract, &inv("INV-1"), handler.clone())?;
    let again = executor.execute_typed(&contract, &inv("INV-1"), handler)?;
    let expected = Payment {
        payment_id: "pay-1".into(),
        amount_cents: 1250,
    };
    assert!(first.is_confirmed());
    assert_eq!(first.output.as_ref(), Some(&expected));
    assert_eq!(first.operation_id, "invoice:INV-1:capture");
    assert!(again.duplicate_suppressed);
    assert_eq!(again.output, Some(expected));
    assert_eq!(provider.committed(), 1);
    Ok(())
}

#[test]
fn a_lost_acknowledgement_is_confirmed_by_the_typed_probe() -> Result<(), ExecError> {
    let provider = Provider::default();
    let executor = executor();
    let handler = {
        let provider = provider.clone();
        move |args: Capture, _ctx: HandlerContext| -> Result<Payment, HandlerError> {
            provider.capture(&args);
            Err(HandlerError::unknown("timed out waiting for the response"))
        }
    };
    let contract = contract(Some(provider.clone()));
    let result = executor.execute_typed(&contract, &inv("INV-2"), handler.clone())?;
    assert!(result.is_confirmed(), "{:?}", result.result);
    assert_eq!(result.provider_operation_id.as_deref(), Some("pay-1"));
    assert_eq!(
        result.output.map(|payment| payment.payment_id),
        Some("pay-1".to_owned())
    );
    let again = executor.execute_typed(&contract, &inv("INV-2"), handler)?;
    assert!(again.duplicate_suppressed);
    assert_eq!(provider.committed(), 1, "one committed effect");
    Ok(())
}

#[test]
fn an_uncertain_outcome_has_no_output_and_says_so() -> Result<(), ExecError> {
    let executor = executor();
    let result = executor.execute_typed(&contract(None), &inv("INV-3"), |_args, _key| {
        Err::<Payment, _>(HandlerError::unknown("connection reset"))
    })?;
    assert!(result.is_uncertain(), "{:?}", result.status);
    assert_eq!(result.output, None);
    Ok(())
}

#[test]
fn a_stored_output_that_no_longer_decodes_is_an_error_not_a_dispatch() -> Result<(), ExecError> {
    let executor = executor();
    // Recorded through the `Value` API with an older output shape.
    let untyped = EffectContract::builder("capture_payment", |args| {
        Ok(format!(
            "invoice:{}:capture",
            args["invoice_id"].as_str().unwrap_or_default()
        ))
    })
    .build()
    .unwrap();
    executor.execute(
        &untyped,
        &json!({"invoice_id": "INV-4", "amount_cents": 1250}),
        |_args, _key| Ok(json!({"payment": "pay-1"})),
    )?;
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let typed = TypedContract::<Capture, Payment>::from_contract(untyped);
    let err = executor
        .execute_typed(&typed, &inv("INV-4"), move |args, _key| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(Payment {
                payment_id: "pay-2".into(),
                amount_cents: args.amount_cents,
            })
        })
        .unwrap_err();
    assert!(
        matches!(&err, ExecError::OutputDecode { operation_id, .. } if operation_id == "invoice:INV-4:capture"),
        "{err:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "never dispatched again");
    let record = executor
        .ledger()
        .get("invoice:INV-4:capture")
        .unwrap()
        .unwrap();
    assert_eq!(record.status, EffectStatus::Confirmed);
    assert_eq!(record.output, Some(json!({"payment": "pay-1"})));
    Ok(())
}

#[test]
fn arguments_that_do_not_round_trip_are_refused_before_anything_is_written() {
    #[derive(Serialize, Deserialize)]
    struct Lossy {
        id: String,
        #[serde(skip_serializing)]
        secret: String,
    }
    let contract = TypedContract::<Lossy, u32>::builder("lossy", |args| Ok(args.id.clone()))
        .build()
        .unwrap();
    let executor = executor();
    let args = Lossy {
        id: "a".into(),
        secret: "s".into(),
    };
    let err = executor
        .execute_typed(&contract, &args, |_args, _key| Ok(1))
        .unwrap_err();
    assert!(matches!(err, ExecError::ArgumentsDecode { .. }), "{err:?}");
    assert_eq!(executor.ledger().get("a").unwrap(), None);
    assert!(!args.secret.is_empty());
}

#[test]
fn typed_callbacks_see_the_recorded_arguments() -> Result<(), ExecError> {
    let contract = contract(None);
    assert_eq!(
        contract.operation_id(&inv("INV-5"))?,
        "invoice:INV-5:capture"
    );
    assert_eq!(
        contract.provider_idempotency_key(&inv("INV-5"))?.as_deref(),
        Some("capture:INV-5")
    );
    // A callback given JSON that is not a `Capture` fails, it does not guess.
    assert!(
        contract
            .contract()
            .operation_id(&json!({"invoice_id": "INV-5"}))
            .is_err()
    );
    Ok(())
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_form_confirms_a_lost_acknowledgement_once() -> Result<(), ExecError> {
    let provider = Provider::default();
    let probe_provider = provider.clone();
    let contract = TypedContract::<Capture, Payment>::builder("capture_payment", |args| {
        Ok(format!("invoice:{}:capture", args.invoice_id))
    })
    .outcome_probe_async(move |args, _key| {
        let provider = probe_provider.clone();
        async move {
            Ok(TypedProbe::committed(Payment {
                payment_id: format!("pay-{}", provider.committed()),
                amount_cents: args.amount_cents,
            }))
        }
    })
    .build()
    .unwrap();
    let executor = executor();
    let handler = move |args: Capture, _key| {
        let provider = provider.clone();
        async move {
            provider.capture(&args);
            Err::<Payment, _>(HandlerError::unknown("timed out"))
        }
    };
    let result = executor
        .execute_typed_async(&contract, &inv("INV-6"), CallOptions::default(), handler)
        .await?;
    assert!(result.is_confirmed());
    assert_eq!(
        result.output.map(|payment| payment.payment_id),
        Some("pay-1".to_owned())
    );
    Ok(())
}

#[test]
fn a_panicking_identity_function_is_an_error_not_a_panic() {
    let contract = TypedContract::<Capture, Payment>::builder("capture_payment", |_args| {
        panic!("identity bug")
    })
    .provider_idempotency_key(|_args| panic!("key bug"))
    .build()
    .unwrap();
    let err = contract.operation_id(&inv("INV-7")).unwrap_err();
    assert!(
        matches!(&err, ExecError::Contract { contract, .. } if contract == "capture_payment"),
        "{err:?}"
    );
    assert!(effect_core::error_chain(&err).contains("identity bug"));
    let err = contract
        .provider_idempotency_key(&inv("INV-7"))
        .unwrap_err();
    assert!(
        effect_core::error_chain(&err).contains("key bug"),
        "{err:?}"
    );
    // Execution refuses it the same way, before anything is written.
    let executor = executor();
    let err = executor
        .execute_typed(&contract, &inv("INV-7"), |_args, _ctx| {
            Ok(Payment {
                payment_id: "pay-1".into(),
                amount_cents: 1,
            })
        })
        .unwrap_err();
    assert!(matches!(err, ExecError::Contract { .. }), "{err:?}");
    assert!(
        executor
            .ledger()
            .list(&effect_core::ListQuery::new(10))
            .unwrap()
            .is_empty()
    );
}
