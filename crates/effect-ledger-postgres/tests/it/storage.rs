//! What rows look like, and what happens when they are not what we wrote.

use std::time::Duration;

use effect_core::{Claim, Confirmation, EffectLedger, Evidence, LedgerErrorKind, ListQuery};
use serde_json::json;

use crate::support::{TestResult, TestSchema, new_operation, server_url};

/// Overwrites one column of `op-1` with raw SQL and checks that every read
/// reports corruption instead of panicking or guessing.
fn check_corrupt(test: &str, column: &str, value: &str) -> TestResult {
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, test)?;
    let ledger = schema.ledger()?;
    ledger.prepare("op-1", &new_operation(1))?;
    schema.admin()?.execute(
        &format!("UPDATE {}.effect_operations SET {column} = $1", schema.q()),
        &[&value],
    )?;
    assert_eq!(kind(ledger.get("op-1")), Some(LedgerErrorKind::Corrupt));
    assert_eq!(
        kind(ledger.list(&ListQuery::new(10))),
        Some(LedgerErrorKind::Corrupt)
    );
    let reset = ledger.reset_for_retry("op-1", &Evidence::new());
    assert_eq!(kind(reset), Some(LedgerErrorKind::Corrupt));
    Ok(())
}

/// The error kind of a failed call.
fn kind<T>(result: Result<T, effect_core::LedgerError>) -> Option<LedgerErrorKind> {
    result.err().map(|e| e.kind())
}

#[test]
fn unknown_status_is_corrupt() -> TestResult {
    check_corrupt("unknown_status_is_corrupt", "status", "exploded")?;
    // Stats count per status, so they cannot place it either.
    let Some(url) = server_url("unknown_status_is_corrupt (stats)") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "unknown_status_stats")?;
    let ledger = schema.ledger()?;
    ledger.prepare("op-1", &new_operation(1))?;
    schema.admin()?.execute(
        &format!(
            "UPDATE {}.effect_operations SET status = 'Prepared'",
            schema.q()
        ),
        &[],
    )?;
    assert_eq!(kind(ledger.stats()), Some(LedgerErrorKind::Corrupt));
    Ok(())
}

#[test]
fn invalid_evidence_json_is_corrupt() -> TestResult {
    check_corrupt(
        "invalid_evidence_json_is_corrupt",
        "evidence_json",
        "{not json",
    )
}

#[test]
fn non_object_evidence_is_corrupt() -> TestResult {
    check_corrupt("non_object_evidence_is_corrupt", "evidence_json", "[1,2]")
}

#[test]
fn invalid_result_json_is_corrupt() -> TestResult {
    check_corrupt(
        "invalid_result_json_is_corrupt",
        "result_json",
        "{\"unterminated\": ",
    )
}

#[test]
fn values_use_the_sqlite_formats() -> TestResult {
    let Some(url) = server_url("values_use_the_sqlite_formats") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "sqlite_formats")?;
    let ledger = schema.ledger()?;
    let claim = Claim {
        owner_token: "owner-1".into(),
        lease: Duration::from_secs(30),
    };
    ledger.prepare("op-1", &new_operation(1))?;
    assert!(ledger.claim_dispatch("op-1", &claim)?);
    let mut admin = schema.admin()?;
    let q = schema.q();
    let row = admin.query_one(
        &format!("SELECT status, lease_until, created_at, owner_token FROM {q}.effect_operations"),
        &[],
    )?;
    assert_eq!(row.get::<_, String>(0), "dispatched");
    assert!(row.get::<_, Option<f64>>(1).is_some_and(|l| l > 1.7e9));
    let created_at: String = row.get(2);
    assert_eq!(
        created_at.len(),
        "2026-01-01T00:00:00.123456+00:00".len(),
        "{created_at}"
    );
    assert!(
        created_at.ends_with("+00:00") && created_at.as_bytes()[10] == b'T',
        "{created_at}"
    );
    assert_eq!(row.get::<_, Option<String>>(3).as_deref(), Some("owner-1"));

    let mut evidence = Evidence::new();
    evidence.insert("probe".into(), json!("ü"));
    let confirmation = Confirmation {
        output: json!({"b": 1, "a": [true, null], "text": "café"}),
        provider_operation_id: Some("ch_1".into()),
        evidence,
    };
    assert!(ledger.mark_confirmed("op-1", Some("owner-1"), &confirmation)?);
    let row = admin.query_one(
        &format!(
            "SELECT status, result_json, evidence_json, owner_token, lease_until, attempts \
             FROM {q}.effect_operations"
        ),
        &[],
    )?;
    assert_eq!(row.get::<_, String>(0), "confirmed");
    assert_eq!(
        row.get::<_, Option<String>>(1).as_deref(),
        Some(r#"{"a":[true,null],"b":1,"text":"café"}"#),
        "compact JSON text, UTF-8 kept"
    );
    assert_eq!(row.get::<_, String>(2), r#"{"probe":"ü"}"#);
    assert_eq!(row.get::<_, Option<String>>(3), None);
    assert_eq!(row.get::<_, Option<f64>>(4), None);
    assert_eq!(row.get::<_, i32>(5), 1);
    let events: Vec<(i64, String, String)> = admin
        .query(
            &format!(
                "SELECT sequence, event_type, data_json FROM {q}.effect_events ORDER BY sequence"
            ),
            &[],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(types, ["prepared", "dispatched", "confirmed"]);
    assert_eq!(events[1].2, r#"{"attempt":1}"#);
    assert!(events.windows(2).all(|w| w[0].0 < w[1].0));
    Ok(())
}
