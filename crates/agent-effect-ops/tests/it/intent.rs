//! Operations with stored intent: what an operator sees of them.

use agent_effect_ops::view::{EventView, Stats};
use effect_core::{EffectLedgerExt as _, NewOperation, RequestFingerprint};
use effect_exec::secrets::{Keyring, SealingKey};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::json;

use crate::support::ops;

#[test]
fn sealed_intent_shows_as_sealed_and_prepared_work_counts_as_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let ledger = SqliteLedger::open(&db, SqliteOptions::default()).unwrap();
    let keyring = Keyring::new("k1", SealingKey::from_bytes([3; 32])).unwrap();
    let args = json!({"invoice_id": "INV-1", "card_token": "tok_visa_4242"});
    let operation = |intent| {
        NewOperation::new("capture_payment", "1", RequestFingerprint::of_value(&args))
            .with_intent(intent)
    };
    let sealed = keyring.seal(&args, "op-sealed").unwrap();
    ledger
        .prepare("op-sealed", &operation(Some(sealed)))
        .unwrap();
    ledger.prepare("op-caller", &operation(None)).unwrap();
    drop(ledger);

    let stats: Stats = ops(&db, &["stats"]).json();
    assert_eq!(
        (stats.waiting_for_caller, stats.waiting_for_recovery_worker),
        (1, 1)
    );
    assert!(stats.oldest_waiting_since.is_some());

    let events = ops(&db, &["events", "op-sealed"]);
    let parsed: Vec<EventView> = events.json();
    assert_eq!(parsed.len(), 1);
    assert_eq!(parsed[0].data["intent"], json!("sealed (key k1)"));
    assert!(!events.stdout.contains("ciphertext"), "{}", events.stdout);
    assert!(!events.stdout.contains("tok_visa"), "{}", events.stdout);
}
