//! Bad paths, bad files, bad rows and unusual values: typed errors, no panics,
//! nothing half-written.

use effect_core::EffectLedgerExt as _;
use std::path::Path;

use effect_core::{
    EffectLedger, LedgerError, LedgerErrorKind, ListQuery, ManualAction, ManualResolution,
    Transition,
};
use effect_ledger_sqlite::{SqliteError, SqliteLedger, SqliteOptions, TempLedger};
use serde_json::{Value, json};

use crate::support::{TestResult, claim, confirmation, evidence, op, raw};

/// Opens `path` and returns the error it must fail with.
fn open_error(path: impl AsRef<Path>) -> SqliteError {
    match SqliteLedger::open(path.as_ref(), SqliteOptions::default()) {
        Ok(ledger) => panic!("opening {:?} should fail, got {ledger:?}", path.as_ref()),
        Err(error) => error,
    }
}

#[test]
fn non_file_paths_are_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    for path in [
        "",
        "   ",
        ":memory:",
        "file::memory:",
        "file::memory:?cache=shared",
        "file:ledger.db?mode=memory",
    ] {
        let error = open_error(path);
        assert!(
            matches!(error, SqliteError::InvalidPath { .. }),
            "{path:?}: {error:?}"
        );
        assert_eq!(error.kind(), LedgerErrorKind::InvalidInput);
        assert_eq!(
            LedgerError::from(error).kind(),
            LedgerErrorKind::InvalidInput
        );
    }
    assert!(!Path::new("file:ledger.db?mode=memory").exists());

    let error = open_error(dir.path());
    assert!(
        matches!(error, SqliteError::InvalidPath { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("directory"), "{error}");
    assert_eq!(
        std::fs::read_dir(dir.path())?.count(),
        0,
        "nothing is created in the directory"
    );
    Ok(())
}

#[test]
fn zero_pool_size_is_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("ledger.sqlite3");
    let error = SqliteLedger::open(&path, SqliteOptions::default().pool_size(0))
        .expect_err("a pool needs a connection");
    assert!(
        matches!(
            error,
            SqliteError::InvalidOption {
                option: "pool_size",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(!path.exists());
    Ok(())
}

#[test]
fn parent_directories_are_created() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("a/b/c/ledger.sqlite3");
    let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
    ledger.prepare("op", &op(json!({"n": 1})))?;
    assert!(path.is_file());
    assert_eq!(ledger.path(), path);
    Ok(())
}

#[test]
fn garbage_file_is_not_a_database_and_is_left_alone() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("garbage.sqlite3");
    let garbage: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&path, &garbage)?;
    let error = open_error(&path);
    assert!(
        matches!(error, SqliteError::NotADatabase { .. }),
        "{error:?}"
    );
    assert_eq!(error.kind(), LedgerErrorKind::Corrupt);
    assert!(
        std::error::Error::source(&error).is_some(),
        "sqlite's error is kept as the source"
    );
    assert_eq!(LedgerError::from(error).kind(), LedgerErrorKind::Corrupt);
    assert_eq!(std::fs::read(&path)?, garbage, "the file is not modified");
    Ok(())
}

#[test]
fn text_file_is_not_a_database() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("notes.txt");
    std::fs::write(
        &path,
        "these are not the pages you are looking for\n".repeat(100),
    )?;
    let error = open_error(&path);
    assert!(
        matches!(error, SqliteError::NotADatabase { .. }),
        "{error:?}"
    );
    Ok(())
}

#[test]
fn read_only_ledger_refuses_writes_with_a_typed_error() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("ledger.sqlite3");
    let writer = SqliteLedger::open(&path, SqliteOptions::default())?;
    writer.prepare("op", &op(json!({"n": 1})))?;

    let reader = SqliteLedger::open(&path, SqliteOptions::default().read_only(true))?;
    assert!(reader.get("op")?.is_some());
    let error = reader
        .claim_dispatch("op", &claim("reader"))
        .expect_err("a read-only ledger cannot claim");
    assert_eq!(error.kind(), LedgerErrorKind::Backend, "{error:?}");
    assert!(error.to_string().contains("read-only"), "{error}");
    assert!(std::error::Error::source(&error).is_some());
    let error = reader
        .prepare("new", &op(json!({"n": 2})))
        .expect_err("nor prepare");
    assert_eq!(error.kind(), LedgerErrorKind::Backend);

    // Nothing was written.
    assert_eq!(writer.get("op")?.map(|r| r.attempts), Some(0));
    assert!(writer.get("new")?.is_none());
    assert_eq!(writer.events_after(0, 100)?.len(), 1);

    // A WAL file nobody else has open reads the same.
    drop((writer, reader));
    let reader = SqliteLedger::open(&path, SqliteOptions::default().read_only(true))?;
    assert_eq!(reader.get("op")?.map(|r| r.attempts), Some(0));
    assert_eq!(reader.list(&ListQuery::new(10))?.len(), 1);
    Ok(())
}

/// Plants a row with raw SQL, bypassing the ledger.
fn plant(
    path: &Path,
    operation_id: &str,
    status: &str,
    result_json: Option<&str>,
    attempts: i64,
    evidence_json: &str,
) -> TestResult {
    raw(path)?.execute(
        "INSERT INTO effect_operations (operation_id, contract_name, contract_version, \
            request_fingerprint, status, result_json, attempts, evidence_json, created_at, updated_at) \
         VALUES (?1, 'c', '1', 'fp', ?2, ?3, ?4, ?5, '2026-01-01T00:00:00.000000+00:00', \
            '2099-01-01T00:00:00.000000+00:00')",
        rusqlite::params![operation_id, status, result_json, attempts, evidence_json],
    )?;
    Ok(())
}

fn assert_corrupt(result: Result<impl std::fmt::Debug, LedgerError>, operation_id: &str) {
    match result {
        Err(error) => {
            assert_eq!(error.kind(), LedgerErrorKind::Corrupt, "{error:?}");
            assert!(
                error.to_string().contains(operation_id),
                "the message names the operation: {error}"
            );
        }
        Ok(value) => panic!("expected a corrupt-data error, got {value:?}"),
    }
}

#[test]
fn undecodable_rows_are_corrupt_not_panics() -> TestResult {
    let cases: [(&str, &str, Option<&str>, i64, &str); 5] = [
        ("bad-status", "half_done", None, 0, "{}"),
        ("bad-output", "confirmed", Some("{not json"), 1, "{}"),
        ("bad-attempts", "prepared", None, -1, "{}"),
        ("bad-evidence", "prepared", None, 0, "[1, 2]"),
        ("bad-evidence-json", "prepared", None, 0, "{"),
    ];
    for (operation_id, status, result_json, attempts, evidence_json) in cases {
        let ledger = TempLedger::new()?;
        ledger.prepare("good", &op(json!({"n": 1})))?;
        plant(
            ledger.path(),
            operation_id,
            status,
            result_json,
            attempts,
            evidence_json,
        )?;

        assert_corrupt(ledger.get(operation_id), operation_id);
        if operation_id.starts_with("bad-output") || operation_id.starts_with("bad-evidence") {
            // Unreadable JSON is that row's problem: the listing goes on,
            // with the row flagged instead of its output and evidence.
            let listed = ledger.list(&ListQuery::new(10))?;
            let row = listed
                .iter()
                .find(|r| r.operation_id == operation_id)
                .expect("the unreadable row is listed");
            assert_eq!(row.output, None);
            assert!(
                row.evidence[effect_core::evidence::LEDGER_READ_ERROR]
                    .as_str()
                    .is_some_and(|e| e.contains("_json")),
                "{row:?}"
            );
            assert!(listed.iter().any(|r| r.operation_id == "good"));
        } else {
            assert_corrupt(ledger.list(&ListQuery::new(10)), operation_id);
        }
        let events_before = ledger.events_after(0, 100)?;
        assert_corrupt(
            ledger.claim_dispatch(operation_id, &claim("w")),
            operation_id,
        );
        assert_eq!(
            ledger.events_after(0, 100)?,
            events_before,
            "{operation_id}: nothing written"
        );
        // The healthy row is still readable.
        assert!(ledger.get("good")?.is_some());
    }
    Ok(())
}

#[test]
fn unknown_status_breaks_stats_with_its_operation_named() -> TestResult {
    let ledger = TempLedger::new()?;
    plant(ledger.path(), "weird", "exploded", None, 0, "{}")?;
    assert_corrupt(ledger.stats(), "weird");
    assert_corrupt(
        ledger
            .list(&ListQuery::with_status(
                effect_core::EffectStatus::Prepared,
                10,
            ))
            .and_then(|records| {
                // The filtered list never sees the bad row.
                assert!(records.is_empty());
                ledger.get("weird")
            }),
        "weird",
    );
    Ok(())
}

#[test]
fn failed_transitions_write_nothing() -> TestResult {
    let ledger = TempLedger::new()?;
    let id = "invoice:INV-1:capture";
    ledger.apply(
        id,
        &Transition::PrepareAndClaim(op(json!({"invoice_id": "INV-1"})), claim("w")),
    )?;
    let before = (ledger.get(id)?, ledger.events_after(0, 100)?);

    let conflict = ledger
        .prepare(id, &op(json!({"invoice_id": "INV-2"})))
        .expect_err("conflict");
    assert_eq!(conflict.kind(), LedgerErrorKind::Conflict);
    let manual = |actor: &str| {
        Transition::Resolve(ManualResolution::new(
            ManualAction::Reject,
            effect_core::Audit::new(actor, "r", "e"),
        ))
    };
    let blank = ledger.apply(id, &manual(" ")).expect_err("blank actor");
    assert_eq!(blank.kind(), LedgerErrorKind::InvalidInput);
    let wrong_status = ledger
        .apply(id, &manual("on-call"))
        .expect_err("dispatched is not uncertain");
    assert_eq!(wrong_status.kind(), LedgerErrorKind::InvalidTransition);
    let missing = ledger
        .claim_dispatch("absent", &claim("w"))
        .expect_err("absent");
    assert_eq!(missing.kind(), LedgerErrorKind::NotFound);
    let blank_id = ledger.prepare("  ", &op(json!({}))).expect_err("blank id");
    assert_eq!(blank_id.kind(), LedgerErrorKind::InvalidInput);
    let limit = ledger.list(&ListQuery::new(0)).expect_err("limit 0");
    assert_eq!(limit.kind(), LedgerErrorKind::InvalidInput);
    let limit = ledger.list(&ListQuery::new(1001)).expect_err("limit 1001");
    assert_eq!(limit.kind(), LedgerErrorKind::InvalidInput);

    assert_eq!((ledger.get(id)?, ledger.events_after(0, 100)?), before);
    assert!(ledger.get("absent")?.is_none());
    Ok(())
}

#[test]
fn unusual_operation_ids_round_trip_exactly() -> TestResult {
    let ids = [
        "it's",
        "\"double\"",
        "'; DROP TABLE effect_operations; --",
        "x' OR '1'='1",
        "%_\\ LIKE wildcards",
        "zürich-straße-ñ",
        "日本語の操作",
        "emoji 🚀🔥👩‍👩‍👧",
        "tab\tnew\nline",
        "nul\u{0}inside",
        " leading and trailing ",
    ];
    let ledger = TempLedger::new()?;
    for (i, id) in ids.iter().enumerate() {
        let output = json!({"id": id, "n": i});
        ledger.apply(
            id,
            &Transition::PrepareAndClaim(op(json!({"id": id})), claim("w")),
        )?;
        assert!(ledger.mark_confirmed(id, Some("w"), &confirmation(output.clone()))?);
        let record = ledger
            .get(id)?
            .ok_or_else(|| format!("{id:?} is missing"))?;
        assert_eq!(record.operation_id, *id);
        assert_eq!(record.output, Some(output));
        let events = ledger.events(id)?;
        assert_eq!(events.len(), 3, "{id:?}");
        assert!(events.iter().all(|e| e.operation_id == *id));
    }
    let listed: Vec<String> = ledger
        .list(&ListQuery::new(100))?
        .into_iter()
        .map(|r| r.operation_id)
        .collect();
    assert_eq!(listed.len(), ids.len());
    for id in ids {
        assert!(listed.iter().any(|l| l == id), "{id:?} is listed");
    }
    // The metacharacters did nothing to the schema.
    let tables: i64 = raw(ledger.path())?.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'effect_%'",
        [],
        |r| r.get(0),
    )?;
    // Operations, events, the budgets with their charges, and the
    // terminal-status counters.
    assert_eq!(tables, 5);
    // Ids differing only by case or a prefix are distinct.
    assert!(ledger.get("IT'S")?.is_none());
    assert!(ledger.get("'")?.is_none());
    Ok(())
}

#[test]
fn ten_megabyte_output_round_trips() -> TestResult {
    let ledger = TempLedger::new()?;
    let id = "big";
    let rows: Vec<Value> = (0..100_000)
        .map(|i| json!({"row": i, "text": format!("ü-{i:0>80}"), "ok": i % 2 == 0}))
        .collect();
    let output = json!({"rows": rows, "note": "🚀".repeat(1000)});
    let size = serde_json::to_string(&output)?.len();
    assert!(size >= 10 * 1024 * 1024, "output is {size} bytes");

    ledger.apply(
        id,
        &Transition::PrepareAndClaim(op(json!({"big": true})), claim("w")),
    )?;
    assert!(ledger.mark_confirmed(id, Some("w"), &confirmation(output.clone()))?);
    let record = ledger.get(id)?.ok_or("missing")?;
    assert_eq!(record.output.as_ref(), Some(&output));
    drop(ledger.get(id)?);
    let stored: i64 = raw(ledger.path())?.query_row(
        "SELECT length(CAST(result_json AS BLOB)) FROM effect_operations WHERE operation_id = ?1",
        [id],
        |r| r.get(0),
    )?;
    assert_eq!(
        usize::try_from(stored)?,
        size,
        "stored as compact JSON text"
    );
    Ok(())
}

#[test]
fn evidence_and_event_data_are_compact_json_objects() -> TestResult {
    let ledger = TempLedger::new()?;
    let id = "op";
    ledger.apply(
        id,
        &Transition::PrepareAndClaim(op(json!({"a": 1})), claim("w")),
    )?;
    ledger.mark_outcome_unknown(
        id,
        Some("w"),
        "timeout",
        &evidence(json!({"dispatch_interruption": "handler_timeout", "n": [1, 2]})),
    )?;
    let conn = raw(ledger.path())?;
    let (status, evidence_json, owner, lease): (String, String, Option<String>, Option<f64>) = conn.query_row(
        "SELECT status, evidence_json, owner_token, lease_until FROM effect_operations WHERE operation_id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    assert_eq!(status, "outcome_unknown");
    assert_eq!(
        evidence_json,
        r#"{"dispatch_interruption":"handler_timeout","n":[1,2]}"#
    );
    assert_eq!((owner, lease), (None, None));
    let data: String = conn.query_row(
        "SELECT data_json FROM effect_events WHERE event_type = 'dispatched'",
        [],
        |r| r.get(0),
    )?;
    assert_eq!(data, r#"{"attempt":1}"#);
    Ok(())
}

#[test]
fn a_file_in_the_way_of_the_directory_is_a_typed_error() -> TestResult {
    let dir = tempfile::tempdir()?;
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x")?;
    let error = open_error(blocker.join("ledger.sqlite3"));
    assert!(
        matches!(error, SqliteError::CreateDirectory { .. }),
        "{error:?}"
    );
    assert_eq!(error.kind(), LedgerErrorKind::Backend);

    // Read-only opens create nothing, so a missing file cannot be opened.
    let missing = dir.path().join("missing.sqlite3");
    let error = SqliteLedger::open(&missing, SqliteOptions::default().read_only(true))
        .expect_err("nothing to read");
    assert!(matches!(error, SqliteError::CannotOpen { .. }), "{error:?}");
    assert!(!missing.exists());
    Ok(())
}

#[test]
fn a_newer_schema_is_refused_and_left_alone() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("ledger.sqlite3");
    SqliteLedger::open(&path, SqliteOptions::default())?.prepare("op", &op(json!({})))?;
    raw(&path)?.pragma_update(None, "user_version", 999)?;
    let error = open_error(&path);
    assert!(
        matches!(error, SqliteError::NewerSchema { found: 999, .. }),
        "{error:?}"
    );
    assert_eq!(error.kind(), LedgerErrorKind::Unsupported);
    let version: i64 = raw(&path)?.pragma_query_value(None, "user_version", |r| r.get(0))?;
    assert_eq!(version, 999);
    Ok(())
}

#[test]
fn a_foreign_effect_operations_table_is_refused_without_changes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("other-app.sqlite3");
    raw(&path)?.execute_batch(
        "CREATE TABLE effect_operations (id INTEGER PRIMARY KEY, payload TEXT);
         INSERT INTO effect_operations (payload) VALUES ('theirs');",
    )?;
    let error = open_error(&path);
    assert!(
        matches!(
            error,
            SqliteError::IncompatibleSchema {
                column: "operation_id",
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.kind(), LedgerErrorKind::Corrupt);
    // The migration rolled back as a whole: no table, no index, no version.
    let conn = raw(&path)?;
    let objects: i64 = conn.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE '%effect_events%' OR name LIKE 'idx_%'",
        [],
        |r| r.get(0),
    )?;
    assert_eq!(objects, 0);
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    assert_eq!(version, 0);
    Ok(())
}

/// An output nested deeper than serde_json reads back (written by another
/// program: the ledger itself refuses to store one) is an error about that
/// operation alone: `get` and `events` of it fail naming it, while `list`
/// and `stats` of the ledger go on.
#[test]
fn a_row_too_deep_to_read_fails_alone() -> TestResult {
    let ledger = TempLedger::new()?;
    ledger.prepare("good", &op(json!({"n": 1})))?;
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    plant(ledger.path(), "deep", "confirmed", Some(&deep), 1, "{}")?;
    assert_corrupt(ledger.get("deep"), "deep");
    let listed = ledger.list(&ListQuery::new(10))?;
    assert_eq!(listed.len(), 2);
    let row = listed
        .iter()
        .find(|r| r.operation_id == "deep")
        .expect("listed");
    assert_eq!(row.status, effect_core::EffectStatus::Confirmed);
    assert!(
        row.evidence
            .contains_key(effect_core::evidence::LEDGER_READ_ERROR)
    );
    let stats = ledger.stats()?;
    assert!(
        stats
            .counts
            .contains(&(effect_core::EffectStatus::Confirmed, 1))
    );
    Ok(())
}

#[test]
fn a_database_without_ledger_tables_is_not_a_ledger_and_gains_none() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("app.db");
    raw(&path)?.execute_batch("CREATE TABLE customers (id INTEGER)")?;
    for read_only in [false, true] {
        let err = SqliteLedger::open(&path, SqliteOptions::default().read_only(read_only))
            .err()
            .ok_or("a foreign database opened as a ledger")?;
        assert!(matches!(err, SqliteError::NotALedger { .. }), "{err:?}");
    }
    let tables: i64 = raw(&path)?.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
        [],
        |row| row.get(0),
    )?;
    assert_eq!(tables, 1, "no ledger table was added");
    Ok(())
}
