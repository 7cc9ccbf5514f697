use std::sync::Arc;

use production_agent_systems::{
    EffectExecutor, HandlerError, SqliteLedger, SqliteOptions, TypedContract, TypedProbe,
};
use serde::{Deserialize, Serialize};

/// The arguments of the effect: your own type.
#[derive(Serialize, Deserialize)]
struct CapturePayment {
    invoice_id: String,
    amount_cents: u64,
}

/// What the provider answers: your own type, stored and replayed.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Payment {
    payment_id: String,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The durable ledger: every process of the service opens the same file.
    let ledger = SqliteLedger::open("effects.sqlite3", SqliteOptions::default())?;
    let executor = EffectExecutor::new(Arc::new(ledger));

    let contract = TypedContract::<CapturePayment, Payment>::builder("capture_payment", |args| {
        // A stable business identity: the same invoice is the same operation.
        Ok(format!("invoice:{}:capture", args.invoice_id))
    })
    // Forwarded to the provider on every attempt, never regenerated.
    .provider_idempotency_key(|args| Ok(Some(format!("capture:{}", args.invoice_id))))
    // Asked when the outcome is uncertain: look the capture up at the provider.
    .outcome_probe(|_args, _key| {
        let found = Payment {
            payment_id: "pay-1".into(),
        };
        Ok(TypedProbe::committed(found).provider_operation_id("pay-1"))
    })
    .build()?;

    let capture = CapturePayment {
        invoice_id: "INV-1042".into(),
        amount_cents: 1250,
    };
    let result = executor.execute_typed(&contract, &capture, |_args, _key| {
        // The provider captured the payment, but the response was lost.
        Err::<Payment, _>(HandlerError::unknown("timed out"))
    })?;

    // The probe found the capture: confirmed, and no second charge. Run it
    // again and the stored result is replayed without calling the handler.
    assert!(result.is_confirmed());
    assert_eq!(
        result.output,
        Some(Payment {
            payment_id: "pay-1".into()
        })
    );
    println!("{} is {}", result.operation_id, result.status);
    Ok(())
}
