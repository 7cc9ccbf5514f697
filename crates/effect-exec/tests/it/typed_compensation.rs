//! A typed contract names a typed compensation, and `compensate_typed` runs
//! it once: the refund provider counts one request over two calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_exec::{HandlerContext, HandlerError, TypedContract};
use serde::{Deserialize, Serialize};

use crate::{executor, ledger};

#[derive(Debug, Serialize, Deserialize)]
struct Capture {
    invoice_id: String,
    cents: u64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Charge {
    charge_id: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Refund {
    charge_id: String,
    cents: u64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Refunded {
    refund_id: String,
}

#[test]
fn a_typed_compensation_runs_once() {
    let refund = TypedContract::<Refund, Refunded>::builder("refund_charge", |r: &Refund| {
        Ok(format!("charge:{}:refund", r.charge_id))
    })
    .build()
    .unwrap();
    let capture = TypedContract::<Capture, Charge>::builder("capture_payment", |c: &Capture| {
        Ok(format!("invoice:{}:capture", c.invoice_id))
    })
    .store_intent(true)
    .compensation(&refund, |original| {
        let charge: Charge = serde_json::from_value(original.output.clone())
            .map_err(|err| format!("unexpected capture output: {err}"))?;
        let cents = original
            .arguments
            .and_then(|args| args["cents"].as_u64())
            .ok_or("missing cents")?;
        Ok(Refund {
            charge_id: charge.charge_id,
            cents,
        })
    })
    .build()
    .unwrap();
    let ledger = ledger();
    let exec = executor(&ledger);
    let captured = exec
        .execute_typed(
            &capture,
            &Capture {
                invoice_id: "INV-3".into(),
                cents: 300,
            },
            |c, _| {
                Ok(Charge {
                    charge_id: format!("ch_{}", c.invoice_id),
                })
            },
        )
        .unwrap();
    assert!(captured.is_confirmed());
    let refunds = Arc::new(AtomicUsize::new(0));
    let refunder = |refunds: &Arc<AtomicUsize>| {
        let refunds = Arc::clone(refunds);
        move |r: Refund, _: HandlerContext| -> Result<Refunded, HandlerError> {
            refunds.fetch_add(1, Ordering::SeqCst);
            assert_eq!((r.charge_id.as_str(), r.cents), ("ch_INV-3", 300));
            Ok(Refunded {
                refund_id: "re_1".into(),
            })
        }
    };
    let first = exec
        .compensate_typed(&capture, "invoice:INV-3:capture", refunder(&refunds))
        .unwrap();
    assert_eq!(
        first.output,
        Some(Refunded {
            refund_id: "re_1".into()
        })
    );
    let again = exec
        .compensate_typed(&capture, "invoice:INV-3:capture", refunder(&refunds))
        .unwrap();
    assert!(again.duplicate_suppressed);
    assert_eq!(refunds.load(Ordering::SeqCst), 1, "one refund request");
}
