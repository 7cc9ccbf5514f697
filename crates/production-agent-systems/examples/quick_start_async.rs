use std::sync::Arc;

use production_agent_systems::{
    CallOptions, EffectContract, EffectExecutor, HandlerError, SqliteLedger, SqliteOptions,
};
use serde_json::{Value, json};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ledger = SqliteLedger::open("effects.sqlite3", SqliteOptions::default())?;
    let executor = EffectExecutor::new(Arc::new(ledger));
    let contract = EffectContract::builder("send_email", |args| {
        let to = args["to"].as_str().ok_or("missing to")?;
        Ok(format!("email:{to}:welcome"))
    })
    .build()?;

    let arguments = json!({"to": "ada@example.com"});
    let options = CallOptions::default();
    let result = executor
        .execute_async(
            &contract,
            &arguments,
            options,
            |args: Value, _ctx| async move {
                // Send the email here, and return what the provider answered.
                Ok::<_, HandlerError>(json!({"message_id": "m-1", "to": args["to"]}))
            },
        )
        .await?;

    assert!(result.is_confirmed());
    if result.duplicate_suppressed {
        // A second run: the stored result, and nothing sent.
        println!("{} is {} (replayed)", result.operation_id, result.status);
    } else {
        println!("{} is {}", result.operation_id, result.status);
    }
    Ok(())
}
