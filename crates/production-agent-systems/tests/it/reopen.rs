//! docs/spec.md §7: repeat after confirmation replays the stored result after the
//! ledger is reopened.

use std::sync::Arc;

use production_agent_systems::{EffectExecutor, SqliteLedger, SqliteOptions};
use serde_json::json;

use crate::provider::{FileProvider, capture_contract, forbidden_handler};

#[test]
fn confirmed_result_is_replayed_after_reopening_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger").join("effects.sqlite3");
    let provider = FileProvider::new(&dir.path().join("provider.log"));
    let contract = capture_contract(&provider);
    let args = json!({"invoice_id": "INV-1042", "amount_cents": 1250});
    let first = {
        let ledger = SqliteLedger::open(&db, SqliteOptions::default()).unwrap();
        let p = provider.clone();
        EffectExecutor::new(Arc::new(ledger))
            .execute(&contract, &args, move |_, key| {
                Ok::<_, production_agent_systems::HandlerError>(p.capture(&key.unwrap()))
            })
            .unwrap()
    };
    assert!(first.is_confirmed());

    let ledger = SqliteLedger::open(&db, SqliteOptions::default()).unwrap();
    let again = EffectExecutor::new(Arc::new(ledger))
        .execute(&contract, &args, forbidden_handler)
        .unwrap();
    assert!(again.duplicate_suppressed);
    assert_eq!(again.output, first.output);
    assert_eq!(provider.commits(), ["capture:INV-1042"]);
}
