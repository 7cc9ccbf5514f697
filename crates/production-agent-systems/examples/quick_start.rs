use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use production_agent_systems::typed::{TypedContract, TypedProbe};
use production_agent_systems::{
    EffectExecutor, HandlerContext, HandlerError, SqliteLedger, SqliteOptions,
};
use serde::{Deserialize, Serialize};

/// The arguments of the effect: your own type.
#[derive(Serialize, Deserialize)]
struct CapturePayment {
    invoice_id: String,
    amount_cents: u64,
}

/// What the provider answers: your own type, stored and replayed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Payment {
    payment_id: String,
}

/// Stands in for the payment provider's client: captures by idempotency key.
#[derive(Default)]
struct Provider {
    captures: Mutex<HashMap<String, Payment>>,
}

impl Provider {
    fn capture(&self, key: &str) -> Payment {
        let mut captures = self.captures.lock().unwrap_or_else(|e| e.into_inner());
        let payment = Payment {
            payment_id: format!("pay-{}", captures.len() + 1),
        };
        captures.entry(key.to_owned()).or_insert(payment).clone()
    }

    fn lookup(&self, key: &str) -> Option<Payment> {
        let captures = self.captures.lock().unwrap_or_else(|e| e.into_inner());
        captures.get(key).cloned()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The durable ledger: every process of the service opens the same file.
    let ledger = SqliteLedger::open("effects.sqlite3", SqliteOptions::default())?;
    let executor = EffectExecutor::new(Arc::new(ledger));
    let provider = Arc::new(Provider::default());

    let lookups = Arc::clone(&provider);
    let contract = TypedContract::<CapturePayment, Payment>::builder("capture_payment", |args| {
        // A stable business identity: the same invoice is the same operation.
        Ok(format!("invoice:{}:capture", args.invoice_id))
    })
    // Forwarded to the provider on every attempt, never regenerated.
    .provider_idempotency_key(|args| Ok(Some(format!("capture:{}", args.invoice_id))))
    // Asked when the outcome is uncertain: look the capture up by its key.
    // `not_committed` only when the provider's lookup is authoritative.
    .outcome_probe(move |_args, key| {
        let key = key.ok_or("the capture has no key")?;
        Ok(match lookups.lookup(key) {
            Some(found) => {
                TypedProbe::committed(found.clone()).provider_operation_id(found.payment_id)
            }
            None => TypedProbe::not_committed(),
        })
    })
    .build()?;

    let capture = CapturePayment {
        invoice_id: "INV-1042".into(),
        amount_cents: 1250,
    };
    let captures = Arc::clone(&provider);
    let result =
        executor.execute_typed(&contract, &capture, move |_args, ctx: HandlerContext| {
            // The handler sends the key the executor hands it...
            captures.capture(ctx.provider_key().unwrap_or_default());
            // ...the provider captured the payment, but the response was lost.
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
    // One capture on the first run; a second run replays the stored result
    // without calling the handler, so this process's provider captured nothing.
    let captured = provider.captures.lock().map(|c| c.len()).unwrap_or(0);
    assert!(captured <= 1);
    if captured == 0 {
        println!("{} is {} (replayed)", result.operation_id, result.status);
    } else {
        println!("{} is {}", result.operation_id, result.status);
    }
    Ok(())
}
