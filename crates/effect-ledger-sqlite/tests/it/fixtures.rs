//! Ledgers written by the Python package open, migrate and read the same values
//! (docs/spec.md §8).

use effect_core::EffectLedgerExt as _;
use effect_core::{
    EffectLedger, EffectStatus, LedgerErrorKind, ListQuery, NewOperation, RequestFingerprint,
};
use effect_ledger_sqlite::{SCHEMA_VERSION, SqliteLedger, SqliteOptions};
use serde_json::{Value, json};

use crate::support::{TestResult, copy_fixture, fixtures_dir, raw};

/// Checks one operation against its entry in `python-ledger-v1.expected.json`.
fn check(ledger: &SqliteLedger, operation_id: &str, expected: &Value) -> TestResult {
    let record = ledger
        .get(operation_id)?
        .ok_or_else(|| format!("operation {operation_id:?} is missing"))?;
    let text = |field: &str| expected[field].as_str().map(str::to_owned);
    let context = format!("operation {operation_id:?}");
    assert_eq!(
        Some(record.status.as_str().to_owned()),
        text("status"),
        "{context}: status"
    );
    assert_eq!(
        Some(u64::from(record.attempts)),
        expected["attempts"].as_u64(),
        "{context}: attempts"
    );
    assert_eq!(
        record.output.is_some(),
        expected["has_output"] == json!(true),
        "{context}: has_output"
    );
    assert_eq!(
        record.output.clone().unwrap_or(Value::Null),
        expected["output"],
        "{context}: output"
    );
    assert_eq!(record.error, text("error"), "{context}: error");
    assert_eq!(
        Some(record.request_fingerprint.clone()),
        text("request_fingerprint"),
        "{context}"
    );
    assert_eq!(
        record.provider_idempotency_key,
        text("provider_idempotency_key"),
        "{context}"
    );
    assert_eq!(
        record.provider_operation_id,
        text("provider_operation_id"),
        "{context}"
    );
    assert_eq!(
        Some(record.contract_name.clone()),
        text("contract_name"),
        "{context}"
    );
    assert_eq!(
        Some(record.contract_version.clone()),
        text("contract_version"),
        "{context}"
    );
    let event_types: Vec<String> = ledger
        .events(operation_id)?
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    let expected_types: Vec<String> = serde_json::from_value(expected["event_types"].clone())?;
    assert_eq!(event_types, expected_types, "{context}: event types");
    Ok(())
}

fn expected_v1() -> Result<serde_json::Map<String, Value>, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(fixtures_dir().join("python-ledger-v1.expected.json"))?;
    match serde_json::from_str(&text)? {
        Value::Object(map) => Ok(map),
        _ => Err("expected.json is not an object".into()),
    }
}

#[test]
fn python_v1_ledger_reads_what_python_reads() -> TestResult {
    let (_dir, path) = copy_fixture("python-ledger-v1.sqlite3")?;
    let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
    let expected = expected_v1()?;
    assert_eq!(expected.len(), 7);
    for (operation_id, entry) in &expected {
        check(&ledger, operation_id, entry)?;
    }
    let listed = ledger.list(&ListQuery::new(100))?;
    assert_eq!(listed.len(), expected.len());
    let stats = ledger.stats()?;
    let count = |status| {
        stats
            .counts
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, n)| *n)
    };
    assert_eq!(count(EffectStatus::Confirmed), Some(3));
    assert_eq!(count(EffectStatus::Quarantined), Some(1));
    assert_eq!(count(EffectStatus::OutcomeUnknown), Some(1));
    assert_eq!(count(EffectStatus::Rejected), Some(1));
    assert_eq!(count(EffectStatus::Prepared), Some(1));
    assert_eq!(count(EffectStatus::Dispatched), Some(0));
    // Event data keeps Python's JSON.
    let events = ledger.events("invoice:INV-1:capture")?;
    assert_eq!(events[1].data, json!({"attempt": 1}));
    assert!(events.windows(2).all(|w| w[0].sequence < w[1].sequence));
    Ok(())
}

#[test]
fn python_v1_ledger_survives_reopening_and_keeps_its_layout() -> TestResult {
    let (_dir, path) = copy_fixture("python-ledger-v1.sqlite3")?;
    drop(SqliteLedger::open(&path, SqliteOptions::default())?);
    let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
    for (operation_id, entry) in &expected_v1()? {
        check(&ledger, operation_id, entry)?;
    }
    drop(ledger);
    let conn = raw(&path)?;
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    assert_eq!(version, SCHEMA_VERSION);
    let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0))?;
    assert_eq!(mode, "wal");
    let indexes: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'idx_%' ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    assert_eq!(
        indexes,
        [
            "idx_effect_budget_charges_operation",
            "idx_effect_budget_charges_time",
            "idx_effect_events_operation",
            "idx_effect_operations_status_list",
        ]
    );
    Ok(())
}

#[test]
fn python_sha256_fingerprint_is_not_a_conflict() -> TestResult {
    let (_dir, path) = copy_fixture("python-ledger-v1.sqlite3")?;
    let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
    let same = NewOperation::new(
        "capture_payment",
        "1",
        RequestFingerprint::of_value(&json!({"invoice_id": "INV-1"})),
    )
    .with_provider_idempotency_key(Some("capture:INV-1".into()));
    let record = ledger.prepare("invoice:INV-1:capture", &same)?;
    assert_eq!(record.status, EffectStatus::Confirmed);
    // The stored fingerprint keeps Python's format; no event is added.
    assert_eq!(
        record.request_fingerprint,
        "afd3ae6377d737975ba2f111db265e0b714646564f9cfd1e9820cd92f36703b7"
    );
    assert_eq!(ledger.events("invoice:INV-1:capture")?.len(), 4);

    let mut other_args = same;
    other_args.fingerprint = RequestFingerprint::of_value(&json!({"invoice_id": "INV-9"}));
    let error = ledger
        .prepare("invoice:INV-1:capture", &other_args)
        .expect_err("different arguments must conflict");
    assert_eq!(error.kind(), LedgerErrorKind::Conflict);
    Ok(())
}

#[test]
fn python_v1_operations_continue_here() -> TestResult {
    let (_dir, path) = copy_fixture("python-ledger-v1.sqlite3")?;
    let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
    // ticket:T-9 was authorized for a manual retry by Python: claim it here.
    assert!(ledger.claim_dispatch("ticket:T-9:create", &crate::support::claim("rust-worker"))?);
    let record = ledger.get("ticket:T-9:create")?.ok_or("missing")?;
    assert_eq!(record.status, EffectStatus::Dispatched);
    assert_eq!(record.attempts, 2);
    let events = ledger.events("ticket:T-9:create")?;
    assert_eq!(
        events.last().map(|e| e.event_type.as_str()),
        Some("dispatched")
    );
    // Sequences continue Python's AUTOINCREMENT.
    let max_python = ledger.events_after(0, 1000)?.len() as u64;
    assert_eq!(events.last().map(|e| e.sequence), Some(max_python));
    Ok(())
}

#[test]
fn legacy_ledger_is_migrated_once() -> TestResult {
    let (_dir, path) = copy_fixture("python-ledger-legacy.sqlite3")?;
    let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
    let record = ledger
        .get("legacy-operation")?
        .ok_or("legacy-operation is missing")?;
    assert_eq!(record.contract_version, "1");
    assert_eq!(record.status, EffectStatus::Quarantined);
    assert_eq!(record.contract_name, "legacy-contract");
    assert_eq!(
        record.error.as_deref(),
        Some("no authoritative outcome probe")
    );
    assert!(ledger.events("legacy-operation")?.is_empty());
    drop(ledger);

    let schema = |path: &std::path::Path| -> Result<String, Box<dyn std::error::Error>> {
        let conn = raw(path)?;
        let sql: Vec<String> = conn
            .prepare("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        Ok(format!("{version}\n{}", sql.join("\n")))
    };
    let migrated = schema(&path)?;
    assert!(migrated.starts_with(&format!("{SCHEMA_VERSION}\n")));
    assert!(migrated.contains("effect_events"));

    // Reopening changes nothing, and the migrated ledger works.
    let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
    assert_eq!(schema(&path)?, migrated);
    let record = ledger
        .get("legacy-operation")?
        .ok_or("legacy-operation is missing")?;
    assert_eq!(record.contract_version, "1");
    let resolved = ledger.resolve_manually(
        "legacy-operation",
        &effect_core::ManualResolution::new(
            effect_core::ManualAction::Reject,
            effect_core::Audit::new("on-call", "never reached the provider", "INC-1"),
        ),
    )?;
    assert_eq!(resolved.status, EffectStatus::Rejected);
    let types: Vec<String> = ledger
        .events("legacy-operation")?
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(types, ["manually_rejected"]);
    Ok(())
}

#[test]
fn read_only_open_reads_a_python_ledger_without_migrating_it() -> TestResult {
    let (_dir, path) = copy_fixture("python-ledger-v1.sqlite3")?;
    let ledger = SqliteLedger::open(&path, SqliteOptions::default().read_only(true))?;
    let expected = expected_v1()?;
    for (operation_id, entry) in &expected {
        check(&ledger, operation_id, entry)?;
    }
    drop(ledger);
    let version: i64 = raw(&path)?.pragma_query_value(None, "user_version", |r| r.get(0))?;
    assert_eq!(version, 0, "a read-only open must not migrate");

    // The legacy layout cannot be read without its migration.
    let (_legacy_dir, legacy) = copy_fixture("python-ledger-legacy.sqlite3")?;
    let error = SqliteLedger::open(&legacy, SqliteOptions::default().read_only(true))
        .expect_err("the legacy layout needs a migration");
    assert!(
        matches!(
            error,
            effect_ledger_sqlite::SqliteError::NeedsMigration { found: 0, .. }
        ),
        "{error:?}"
    );
    Ok(())
}

#[test]
fn an_open_without_migration_refuses_older_files_and_leaves_them_untouched() -> TestResult {
    let no_migration = || SqliteOptions::default().migrate(false);
    for fixture in ["python-ledger-v1.sqlite3", "python-ledger-legacy.sqlite3"] {
        let (_dir, path) = copy_fixture(fixture)?;
        let before = std::fs::read(&path)?;
        let error = SqliteLedger::open(&path, no_migration()).expect_err("an older schema");
        assert!(
            matches!(
                error,
                effect_ledger_sqlite::SqliteError::NeedsMigration { found: 0, .. }
            ),
            "{fixture}: {error:?}"
        );
        assert_eq!(std::fs::read(&path)?, before, "{fixture} was written to");
        // Once migrated (allowed by default), the same option opens it.
        drop(SqliteLedger::open(&path, SqliteOptions::default())?);
        drop(SqliteLedger::open(&path, no_migration())?);
    }
    // A new file is created at the current version: there is nothing to migrate.
    let dir = tempfile::tempdir()?;
    drop(SqliteLedger::open(
        dir.path().join("new.sqlite3"),
        no_migration(),
    )?);
    Ok(())
}

/// A column's `(name, type, notnull, default, pk)`.
type Column = (String, String, i64, Option<String>, i64);

/// Every column of `table`.
fn table_info(
    path: &std::path::Path,
    table: &str,
) -> Result<Vec<Column>, Box<dyn std::error::Error>> {
    // Read-only: this also reads the shared fixture itself, which must not change.
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut stmt = conn.prepare(
        "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1) ORDER BY cid",
    )?;
    let rows = stmt.query_map([table], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[test]
fn new_ledgers_have_the_python_table_layout() -> TestResult {
    let ours = effect_ledger_sqlite::TempLedger::new()?;
    let python = fixtures_dir().join("python-ledger-v1.sqlite3");
    for table in ["effect_operations", "effect_events"] {
        let mut expected = table_info(&python, table)?;
        assert!(!expected.is_empty());
        if table == "effect_operations" {
            // Version 3's one addition: list's tie-break, after Python's columns.
            expected.push(("last_event_sequence".into(), "INTEGER".into(), 0, None, 0));
        }
        assert_eq!(table_info(ours.path(), table)?, expected, "{table}");
    }
    Ok(())
}

/// A file as release 2 of the schema left it: the Python layout, with
/// `AUTOINCREMENT` on `effect_events` and the two list indexes of version 2.
fn write_version_2_file(path: &std::path::Path) -> TestResult {
    let conn = raw(path)?;
    conn.execute_batch(
        "CREATE TABLE effect_operations (
            operation_id TEXT PRIMARY KEY, contract_name TEXT NOT NULL,
            contract_version TEXT NOT NULL DEFAULT '1', request_fingerprint TEXT NOT NULL,
            provider_idempotency_key TEXT, status TEXT NOT NULL, result_json TEXT,
            provider_operation_id TEXT, error TEXT, attempts INTEGER NOT NULL DEFAULT 0,
            evidence_json TEXT NOT NULL DEFAULT '{}', owner_token TEXT, lease_until REAL,
            created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
        CREATE TABLE effect_events (
            sequence INTEGER PRIMARY KEY AUTOINCREMENT,
            operation_id TEXT NOT NULL REFERENCES effect_operations(operation_id),
            event_type TEXT NOT NULL, data_json TEXT NOT NULL, timestamp TEXT NOT NULL);
        CREATE INDEX idx_effect_events_operation ON effect_events(operation_id, sequence);
        CREATE INDEX idx_effect_operations_status_updated ON effect_operations(status, updated_at);
        CREATE INDEX idx_effect_operations_updated ON effect_operations(updated_at);
        PRAGMA user_version = 2;",
    )?;
    // Three operations updated at the same instant; `b` transitioned last.
    // Event 4 (a's second) was deleted by hand: sequences have a gap.
    let at = "2026-01-01T00:00:00.000000+00:00";
    for (id, status) in [("a", "confirmed"), ("b", "quarantined"), ("c", "prepared")] {
        conn.execute(
            "INSERT INTO effect_operations (operation_id, contract_name, request_fingerprint, \
                status, created_at, updated_at) VALUES (?1, 'c', 'fp', ?2, ?3, ?3)",
            rusqlite::params![id, status, at],
        )?;
    }
    for (id, event) in [
        ("a", "prepared"),
        ("c", "prepared"),
        ("b", "prepared"),
        ("a", "confirmed"),
        ("b", "quarantined"),
    ] {
        conn.execute(
            "INSERT INTO effect_events (operation_id, event_type, data_json, timestamp) \
             VALUES (?1, ?2, '{}', ?3)",
            rusqlite::params![id, event, at],
        )?;
    }
    conn.execute("DELETE FROM effect_events WHERE sequence = 4", [])?;
    Ok(())
}

#[test]
fn a_version_2_file_migrates_keeping_its_events_and_list_order() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("v2.sqlite3");
    write_version_2_file(&path)?;

    // Read-only, it is read as it is: ties in rowid order, newest first.
    let read_only = SqliteLedger::open(&path, SqliteOptions::default().read_only(true))?;
    let ids = |ledger: &SqliteLedger| -> Result<Vec<String>, effect_core::LedgerError> {
        Ok(ledger
            .list(&ListQuery::new(10))?
            .into_iter()
            .map(|r| r.operation_id)
            .collect())
    };
    assert_eq!(ids(&read_only)?, ["c", "b", "a"]);
    drop(read_only);

    let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
    // Ties now go to the latest event: b (5), c (2), a (1).
    assert_eq!(ids(&ledger)?, ["b", "c", "a"]);
    let sequences: Vec<u64> = ledger.events("b")?.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, [3, 5]);
    // New events continue above the largest sequence.
    ledger.prepare("d", &crate::support::op(json!({"d": 1})))?;
    let after: Vec<u64> = ledger
        .events_after(0, 10)?
        .iter()
        .map(|e| e.sequence)
        .collect();
    assert_eq!(after, [1, 2, 3, 5, 6]);
    drop(ledger);

    let conn = raw(&path)?;
    let events_sql: String = conn.query_row(
        "SELECT sql FROM sqlite_master WHERE name = 'effect_events'",
        [],
        |r| r.get(0),
    )?;
    assert!(!events_sql.contains("AUTOINCREMENT"), "{events_sql}");
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    assert_eq!(version, SCHEMA_VERSION);
    Ok(())
}

/// A database without the ledger's tables (no tables at all, as an empty
/// database or `/dev/null` reads) is not a ledger when opened read-only, not
/// "an older schema": a migration would make an empty ledger of it.
#[test]
fn read_only_open_of_a_database_without_tables_is_not_a_ledger() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("blank.sqlite3");
    // A valid SQLite file with a header and no tables.
    raw(&path)?.pragma_update(None, "user_version", 0)?;
    raw(&path)?.execute_batch("VACUUM")?;
    let before = std::fs::read(&path)?;
    for target in [path.as_path(), std::path::Path::new("/dev/null")] {
        let error = SqliteLedger::open(target, SqliteOptions::default().read_only(true))
            .expect_err("no tables");
        assert!(
            matches!(error, effect_ledger_sqlite::SqliteError::NotALedger { .. }),
            "{target:?}: {error:?}"
        );
    }
    assert_eq!(std::fs::read(&path)?, before, "the file was written to");
    Ok(())
}
