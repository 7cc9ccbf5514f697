//! Statements prepared once per server session: a connection prepares each
//! statement the first time it runs it and executes it by name from then on,
//! so the server does not parse it again.

use std::time::Duration;

use effect_core::{Claim, Confirmation, EffectLedger, EffectLedgerExt as _, Evidence, Transition};
use effect_ledger_postgres::PostgresLedger;
use serde_json::json;

use crate::support::{TestResult, TestSchema, new_operation, server_url};

/// `url` with the connection's `application_name` set to `name`, so the
/// test finds the ledger's session in `pg_stat_activity`.
fn named(url: &str, name: &str) -> String {
    if url.contains("://") {
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}application_name={name}")
    } else {
        format!("{url} application_name={name}")
    }
}

/// A fresh effect (claim and confirmation) and two reads of it.
fn effect(ledger: &PostgresLedger, n: usize) -> TestResult {
    let id = format!("op-{n}");
    let claim = Claim::new(format!("owner-{n}"), Duration::from_secs(60));
    let claimed = ledger.apply(&id, &Transition::PrepareAndClaim(new_operation(n), claim))?;
    assert!(claimed.applied);
    let confirm = Transition::MarkConfirmed {
        owner_token: Some(format!("owner-{n}")),
        confirmation: Confirmation {
            output: json!({"charge": n}),
            provider_operation_id: None,
            evidence: Evidence::new(),
        },
    };
    assert!(ledger.apply(&id, &confirm)?.applied);
    for _ in 0..2 {
        let record = ledger.get(&id)?.ok_or("record missing")?;
        assert_eq!(record.attempts, 1);
    }
    Ok(())
}

/// What the ledger's one session ran last, as `pg_stat_activity` shows it.
fn last_statement(schema: &TestSchema, application: &str) -> Result<String, postgres::Error> {
    schema
        .admin()?
        .query_one(
            "SELECT query FROM pg_stat_activity WHERE application_name = $1",
            &[&application],
        )?
        .try_get(0)
}

#[test]
fn a_connection_prepares_each_statement_once() -> TestResult {
    let Some(url) = server_url("a_connection_prepares_each_statement_once") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "prepared_once")?;
    let application = format!("{}_app", schema.name);
    let ledger =
        PostgresLedger::connect(&named(&url, &application), schema.options().pool_size(1))?;
    assert!(ledger.prepares_statements());
    effect(&ledger, 0)?;
    // The read, the write and the get: one PREPARE each on the one session.
    assert_eq!(ledger.statements_prepared(), 3);
    let last = last_statement(&schema, &application)?;
    assert!(
        last.starts_with("EXECUTE effect_") && last.ends_with("_get('op-0')"),
        "the session runs the get by name: {last}"
    );
    for n in 1..10 {
        effect(&ledger, n)?;
    }
    assert_eq!(ledger.statements_prepared(), 3, "nothing prepared again");
    assert!(
        ledger.prepares_statements(),
        "no fallback on a direct connection"
    );
    Ok(())
}

#[test]
fn without_prepared_statements_every_statement_runs_unnamed() -> TestResult {
    let Some(url) = server_url("without_prepared_statements_every_statement_runs_unnamed") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "prepared_off")?;
    let application = format!("{}_app", schema.name);
    let ledger = PostgresLedger::connect(
        &named(&url, &application),
        schema.options().pool_size(1).prepared_statements(false),
    )?;
    assert!(!ledger.prepares_statements());
    for n in 0..3 {
        effect(&ledger, n)?;
    }
    assert_eq!(ledger.statements_prepared(), 0);
    let last = last_statement(&schema, &application)?;
    assert!(
        last.starts_with("SELECT operation_id, contract_name"),
        "the session runs the get's SQL: {last}"
    );
    Ok(())
}

/// Values written into an `EXECUTE` as literals read back as written:
/// quotes, backslashes, what looks like a placeholder, other scripts.
#[test]
fn values_run_by_name_read_back_as_written() -> TestResult {
    let Some(url) = server_url("values_run_by_name_read_back_as_written") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "prepared_values")?;
    let ledger = PostgresLedger::connect(&url, schema.options().pool_size(1))?;
    let id = r"op-'quoted'\back$1";
    let claim = Claim::new("owner-'\\", Duration::from_millis(60_125));
    let claimed = ledger.apply(id, &Transition::PrepareAndClaim(new_operation(1), claim))?;
    assert_eq!(ledger.get(id)?, Some(claimed.record), "the claim as stored");
    let output = json!({"text": "it's \\ E'x' $1 \n ü 日本 😀", "n": -1.5e-7});
    let confirm = Transition::MarkConfirmed {
        owner_token: Some("owner-'\\".to_owned()),
        confirmation: Confirmation {
            output: output.clone(),
            provider_operation_id: Some("ch_'1'".to_owned()),
            evidence: Evidence::new(),
        },
    };
    let confirmed = ledger.apply(id, &confirm)?;
    assert!(confirmed.applied);
    assert!(ledger.statements_prepared() >= 2, "the write ran by name");
    let record = ledger.get(id)?.ok_or("record missing")?;
    assert_eq!(record, confirmed.record, "the confirmation as stored");
    assert_eq!(record.output, Some(output));
    assert_eq!(record.provider_operation_id.as_deref(), Some("ch_'1'"));
    let events = ledger.events(id)?;
    assert_eq!(events.len(), 3);
    assert!(events.iter().all(|e| e.operation_id == id));
    assert!(ledger.prepares_statements());
    Ok(())
}
