//! Opening a ledger: URLs, schema names, migrations, isolation.

use effect_core::EffectLedgerExt as _;
use std::time::Duration;

use effect_core::{EffectLedger, LedgerErrorKind};
use effect_ledger_postgres::{PostgresLedger, PostgresOptions, SCHEMA_VERSION, SchemaState};

use crate::support::{TestResult, TestSchema, new_operation, server_url};

/// Opening fails with `kind` before anything reaches a server.
fn check_refused(url: &str, options: PostgresOptions, kind: LedgerErrorKind) {
    match PostgresLedger::connect(url, options) {
        Ok(ledger) => panic!("expected {kind:?}, opened {ledger:?}"),
        Err(err) => assert_eq!(err.kind(), kind, "{err:#?}"),
    }
}

#[test]
fn invalid_schema_names_are_refused() {
    let url = "postgres://postgres@127.0.0.1:1/postgres";
    for name in [
        "",
        "Upper",
        "has-dash",
        "1digit",
        "pg_catalog",
        "quote\"d",
        &"x".repeat(64),
    ] {
        check_refused(
            url,
            PostgresOptions::default().schema(name),
            LedgerErrorKind::InvalidInput,
        );
    }
}

#[test]
fn invalid_url_is_refused() {
    check_refused(
        "postgres://[bad",
        PostgresOptions::default(),
        LedgerErrorKind::InvalidInput,
    );
}

#[test]
fn unreachable_server_is_unavailable_with_a_source() {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let options = PostgresOptions::default().connect_timeout(Duration::from_secs(2));
    let err = PostgresLedger::connect("postgres://postgres@127.0.0.1:1/postgres", options)
        .expect_err("nothing listens on port 1");
    assert_eq!(err.kind(), LedgerErrorKind::Unavailable, "{err:#?}");
    assert!(
        std::error::Error::source(&err).is_some(),
        "the native error is kept"
    );
    let message = err.to_string();
    assert_eq!(message, message.to_lowercase(), "messages are lowercase");
}

#[test]
fn open_creates_tables_indexes_and_version() -> TestResult {
    let Some(url) = server_url("open_creates_tables_indexes_and_version") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "open_creates")?;
    let ledger = schema.ledger()?;
    assert_eq!(ledger.schema(), schema.name);
    let mut admin = schema.admin()?;
    let versions: Vec<i32> = admin
        .query(
            &format!(
                "SELECT version FROM {}.effect_schema_version ORDER BY version",
                schema.q()
            ),
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    let mut indexes: Vec<String> = admin
        .query(
            "SELECT indexname FROM pg_indexes WHERE schemaname = $1",
            &[&schema.name],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    indexes.sort();
    for expected in [
        "idx_effect_events_operation",
        "idx_effect_operations_status_updated",
        "idx_effect_operations_updated",
    ] {
        assert!(
            indexes.iter().any(|i| i == expected),
            "{expected} missing from {indexes:?}"
        );
    }
    Ok(())
}

#[test]
fn concurrent_opens_migrate_once() -> TestResult {
    let Some(url) = server_url("concurrent_opens_migrate_once") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "concurrent_opens")?;
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6).map(|_| scope.spawn(|| schema.ledger())).collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    for result in results {
        let ledger = result.map_err(|_| "an opening thread panicked")??;
        assert!(ledger.events_after(0, 10)?.is_empty());
    }
    let count: i64 = schema
        .admin()?
        .query_one(
            &format!("SELECT count(*) FROM {}.effect_schema_version", schema.q()),
            &[],
        )?
        .get(0);
    assert_eq!(
        count,
        i64::from(SCHEMA_VERSION),
        "each migration applied once"
    );
    Ok(())
}

#[test]
fn reopening_keeps_records() -> TestResult {
    let Some(url) = server_url("reopening_keeps_records") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "reopening")?;
    let first = schema.ledger()?.prepare("op-1", &new_operation(1))?;
    let reopened = schema.ledger()?;
    assert_eq!(reopened.get("op-1")?, Some(first));
    assert_eq!(reopened.events("op-1")?.len(), 1);
    Ok(())
}

#[test]
fn newer_schema_version_is_refused() -> TestResult {
    let Some(url) = server_url("newer_schema_version_is_refused") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "newer_version")?;
    drop(schema.ledger()?);
    schema.admin()?.execute(
        &format!(
            "INSERT INTO {}.effect_schema_version (version, description, applied_at) \
             VALUES (999, 'from the future', '2030-01-01T00:00:00.000000+00:00')",
            schema.q()
        ),
        &[],
    )?;
    let err = schema
        .ledger()
        .expect_err("a newer schema must not be opened");
    assert_eq!(err.kind(), LedgerErrorKind::Backend, "{err:#?}");
    assert!(err.to_string().contains("999"), "{err}");
    Ok(())
}

#[test]
fn schemas_share_a_database_without_seeing_each_other() -> TestResult {
    let Some(url) = server_url("schemas_share_a_database_without_seeing_each_other") else {
        return Ok(());
    };
    let billing = TestSchema::new(&url, "isolation_billing")?;
    let email = TestSchema::new(&url, "isolation_email")?;
    let (billing_ledger, email_ledger) = (billing.ledger()?, email.ledger()?);
    billing_ledger.prepare("shared-id", &new_operation(1))?;
    assert_eq!(email_ledger.get("shared-id")?, None);
    // The same id with another identity is no conflict in another schema.
    email_ledger.prepare("shared-id", &new_operation(2))?;
    assert_eq!(billing_ledger.events_after(0, 100)?.len(), 1);
    assert_eq!(email_ledger.events_after(0, 100)?.len(), 1);
    Ok(())
}

#[test]
fn legacy_table_without_contract_version_is_migrated() -> TestResult {
    let Some(url) = server_url("legacy_table_without_contract_version_is_migrated") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "legacy_layout")?;
    let q = schema.q();
    schema.admin()?.batch_execute(&format!(
        "CREATE SCHEMA {q};
         CREATE TABLE {q}.effect_operations (
             operation_id TEXT PRIMARY KEY, contract_name TEXT NOT NULL,
             request_fingerprint TEXT NOT NULL, provider_idempotency_key TEXT,
             status TEXT NOT NULL, result_json TEXT, provider_operation_id TEXT, error TEXT,
             attempts INTEGER NOT NULL DEFAULT 0, evidence_json TEXT NOT NULL DEFAULT '{{}}',
             owner_token TEXT, lease_until DOUBLE PRECISION,
             created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
         INSERT INTO {q}.effect_operations (operation_id, contract_name, request_fingerprint,
             status, error, attempts, evidence_json, created_at, updated_at)
         VALUES ('legacy-operation', 'capture_payment',
             'afd3ae6377d737975ba2f111db265e0b714646564f9cfd1e9820cd92f36703b7', 'quarantined',
             'timeout', 1, '{{\"reason\":\"timeout\"}}',
             '2025-01-01T00:00:00.000000+00:00', '2025-01-01T00:00:01.000000+00:00');"
    ))?;
    let ledger = schema.ledger()?;
    let record = ledger
        .get("legacy-operation")?
        .ok_or("legacy operation missing")?;
    assert_eq!(record.contract_version, "1");
    assert_eq!(record.status.as_str(), "quarantined");
    assert_eq!(record.evidence["reason"], "timeout");
    Ok(())
}

#[test]
fn refused_login_is_a_backend_error_with_a_source() -> TestResult {
    let Some(url) = server_url("refused_login_is_a_backend_error_with_a_source") else {
        return Ok(());
    };
    // The server answers, but will not let us in: retrying will not help.
    let separator = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{separator}dbname=effect_no_such_database");
    let err = PostgresLedger::connect(&url, PostgresOptions::default())
        .expect_err("the database does not exist");
    assert_eq!(err.kind(), LedgerErrorKind::Backend, "{err:#?}");
    let source = std::error::Error::source(&err).ok_or("the driver's error is kept")?;
    assert!(
        format!("{source:?}").contains("effect_no_such_database"),
        "{source:?}"
    );
    Ok(())
}

/// Whether `schema` exists, and how many relations it holds.
fn relations(schema: &TestSchema) -> Result<Option<i64>, Box<dyn std::error::Error>> {
    let row = schema.admin()?.query_opt(
        "SELECT (SELECT count(*) FROM pg_class c WHERE c.relnamespace = n.oid)
         FROM pg_namespace n WHERE n.nspname = $1",
        &[&schema.name],
    )?;
    Ok(row.map(|row| row.get(0)))
}

#[test]
fn schema_state_reads_without_writing_and_create_false_never_creates() -> TestResult {
    let Some(url) = server_url("schema_state_reads_without_writing") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "schema_state")?;
    let state = || PostgresLedger::schema_state(&url, &schema.options());
    assert_eq!(state()?, SchemaState::Absent);
    assert_eq!(relations(&schema)?, None, "looking created the schema");

    // A migrating open that may not create refuses a missing schema and an
    // empty one, and writes nothing.
    let no_create = schema.options().create(false);
    let err = PostgresLedger::connect(&url, no_create.clone()).expect_err("nothing to migrate");
    assert_eq!(err.kind(), LedgerErrorKind::InvalidInput, "{err:#}");
    assert_eq!(
        relations(&schema)?,
        None,
        "a refused open created the schema"
    );
    schema
        .admin()?
        .batch_execute(&format!("CREATE SCHEMA {}", schema.q()))?;
    assert_eq!(state()?, SchemaState::Empty);
    let err = PostgresLedger::connect(&url, no_create.clone()).expect_err("still nothing");
    assert_eq!(err.kind(), LedgerErrorKind::InvalidInput, "{err:#}");
    assert_eq!(
        relations(&schema)?,
        Some(0),
        "a refused open created tables"
    );

    // Someone else's table: not a ledger.
    schema
        .admin()?
        .batch_execute(&format!("CREATE TABLE {}.invoices (id int)", schema.q()))?;
    assert_eq!(state()?, SchemaState::Foreign);
    assert!(PostgresLedger::connect(&url, no_create.clone()).is_err());
    assert_eq!(relations(&schema)?, Some(1));

    // A ledger is seen with its version, and `create(false)` opens it.
    schema
        .admin()?
        .batch_execute(&format!("DROP TABLE {}.invoices", schema.q()))?;
    drop(schema.ledger()?);
    assert_eq!(
        state()?,
        SchemaState::Ledger {
            version: SCHEMA_VERSION
        }
    );
    let ledger = PostgresLedger::connect(&url, no_create)?;
    assert!(ledger.get("invoice:INV-1:capture")?.is_none());
    Ok(())
}
