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
                Ok::<_, production_agent_systems::HandlerError>(
                    p.capture(&key.into_provider_key().unwrap()),
                )
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

/// Every finite bit pattern a double can have, from a seeded xorshift64*.
fn random_doubles(count: usize) -> Vec<f64> {
    let mut state = 0x853c_49e6_748f_ea9b_u64;
    let mut doubles = Vec::with_capacity(count);
    while doubles.len() < count {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let value = f64::from_bits(state.wrapping_mul(0x2545_f491_4f6c_dd1d));
        if value.is_finite() {
            doubles.push(value);
        }
    }
    doubles
}

fn bits(value: &serde_json::Value) -> Vec<u64> {
    value["doubles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_f64().unwrap().to_bits())
        .collect()
}

#[test]
fn random_doubles_replay_bit_identically_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let provider = FileProvider::new(&dir.path().join("provider.log"));
    let contract = capture_contract(&provider);
    let doubles = random_doubles(3000);
    // 30 operations, 100 doubles each in both the arguments and the output.
    let batches: Vec<&[f64]> = doubles.chunks(100).collect();
    let args = |i: usize| json!({"invoice_id": format!("INV-D{i}"), "doubles": batches[i]});
    let first: Vec<_> = {
        let ledger = SqliteLedger::open(&db, SqliteOptions::default()).unwrap();
        let executor = EffectExecutor::new(Arc::new(ledger));
        (0..batches.len())
            .map(|i| {
                let output = json!({"doubles": batches[i]});
                executor
                    .execute(&contract, &args(i), move |_, _| {
                        Ok::<_, production_agent_systems::HandlerError>(output.clone())
                    })
                    .unwrap()
            })
            .collect()
    };
    let ledger = SqliteLedger::open(&db, SqliteOptions::default()).unwrap();
    let executor = EffectExecutor::new(Arc::new(ledger));
    for (i, first) in first.iter().enumerate() {
        let expected: Vec<u64> = batches[i].iter().map(|d| d.to_bits()).collect();
        assert_eq!(bits(first.output.as_ref().unwrap()), expected);
        // Same arguments after reopening: the same fingerprint, no conflict.
        let again = executor
            .execute(&contract, &args(i), forbidden_handler)
            .unwrap();
        assert!(again.duplicate_suppressed);
        assert_eq!(
            bits(again.output.as_ref().unwrap()),
            expected,
            "operation {i}"
        );
    }
}
