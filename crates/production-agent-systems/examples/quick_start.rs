use std::sync::Arc;

use production_agent_systems::{
    EffectContract, EffectExecutor, HandlerError, OutcomeProbeResult, SqliteLedger, SqliteOptions,
};
use serde_json::{Value, json};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The durable ledger: every process of the service opens the same file.
    let ledger = SqliteLedger::open("effects.sqlite3", SqliteOptions::default())?;
    let executor = EffectExecutor::new(Arc::new(ledger));

    let contract = EffectContract::builder("capture_payment", |args| {
        // A stable business identity: the same invoice is the same operation.
        let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
        Ok(format!("invoice:{invoice}:capture"))
    })
    // Forwarded to the provider on every attempt, never regenerated.
    .provider_idempotency_key(|args| {
        Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
    })
    // Asked when the outcome is uncertain: look the capture up at the provider.
    .outcome_probe(|_args, _key| {
        let found = json!({"payment_id": "pay-1"});
        Ok(OutcomeProbeResult::committed(found).provider_operation_id("pay-1"))
    })
    .build()?;

    let arguments = json!({"invoice_id": "INV-1042"});
    let result = executor.execute(&contract, &arguments, |_args: Value, _key| {
        // The provider captured the payment, but the response was lost.
        Err::<Value, _>(HandlerError::failed("timed out"))
    })?;

    // The probe found the capture: confirmed, and no second charge. Run it
    // again and the stored result is replayed without calling the handler.
    assert!(result.is_confirmed());
    println!("{} is {}", result.operation_id, result.status);
    Ok(())
}
