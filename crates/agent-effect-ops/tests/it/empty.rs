//! A ledger with no operations yet, and paths that are not ledgers.

use agent_effect_ops::Exit;
use agent_effect_ops::view::{OperationSummary, Stats};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};

use crate::support::{bin_on, failure, ops};

#[test]
fn an_empty_ledger_reports_nothing_unresolved() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    drop(SqliteLedger::open(&db, SqliteOptions::default()).unwrap());
    let stats: Stats = ops(&db, &["stats"]).json();
    assert_eq!((stats.total, stats.unresolved), (0, 0));
    assert_eq!(stats.oldest_unresolved_updated_at, None);
    assert_eq!(stats.oldest_unresolved_age_seconds, None);
    let list: Vec<OperationSummary> = ops(&db, &["list"]).json();
    assert!(list.is_empty());
    assert_eq!(stats.stale, 0);
    let table = ops(&db, &["list", "--format", "table"]);
    assert_eq!(table.stdout, "no operations\n");
    let stats_table = ops(&db, &["stats", "--format", "table"]);
    assert!(stats_table.stdout.contains("oldest unresolved: none\n"));
    assert!(stats_table.stdout.contains("stale dispatches: 0\n"));
    assert!(stats_table.stdout.ends_with(
        "prepared, waiting for their caller: 0; for a recovery worker: 0; deferred by a budget: 0\n"
    ));
    assert_eq!(
        (stats.waiting_for_caller, stats.waiting_for_recovery_worker),
        (0, 0)
    );
    let export = ops(&db, &["export"]);
    assert_eq!((export.exit, export.stdout.as_str()), (Exit::Success, ""));
}

#[test]
fn a_directory_is_not_a_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let (exit, stderr) = failure(&bin_on(dir.path(), &["list"]));
    assert_eq!(exit, i32::from(Exit::Usage.code()));
    assert!(stderr.contains("it is a directory"), "{stderr}");
}

#[test]
fn an_empty_file_is_not_turned_into_a_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    std::fs::write(&db, b"").unwrap();
    // SQLite reads an empty file as a new database; refused even with --migrate.
    for args in [&["list"][..], &["--migrate", "list"]] {
        let (exit, stderr) = failure(&bin_on(&db, args));
        assert_eq!(exit, i32::from(Exit::Usage.code()), "{stderr}");
        assert!(stderr.contains("is empty, not a ledger"), "{stderr}");
    }
    assert_eq!(std::fs::read(&db).unwrap(), b"");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn a_foreign_database_is_not_a_ledger_and_migrate_never_adds_ledger_tables() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x5a_u8; 4096]).unwrap();
    let (code, stderr) = failure(&bin_on(&garbage, &["list"]));
    assert_eq!(code, 2);
    assert_eq!(
        stderr,
        format!("error: {garbage:?} is not a ledger: not a SQLite database")
    );

    let foreign = dir.path().join("foreign.db");
    let conn = rusqlite::Connection::open(&foreign).unwrap();
    conn.execute_batch("CREATE TABLE customers (id INTEGER)")
        .unwrap();
    drop(conn);
    for args in [
        &["list"][..],
        &["--migrate", "list"],
        &["--migrate", "stats"],
    ] {
        let (code, stderr) = failure(&bin_on(&foreign, args));
        assert_eq!(code, 2, "{args:?}");
        assert!(stderr.contains("is not a ledger"), "{stderr}");
        assert!(
            !stderr.contains("SqliteOptions") && !stderr.contains("Error code"),
            "{stderr}"
        );
    }
    let conn = rusqlite::Connection::open(&foreign).unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(tables, ["customers"], "no ledger table was added");
}

/// A SQLite database with no tables, or `/dev/null`, is "not a ledger"
/// (exit 2), with `--migrate` or not, and stays as it was: calling it an
/// older schema and migrating it would make an empty ledger, a false
/// all-clear. `--create` does not make a ledger of it either.
#[test]
fn a_database_without_tables_or_dev_null_is_not_a_ledger_even_with_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let blank = dir.path().join("blank.sqlite3");
    let conn = rusqlite::Connection::open(&blank).unwrap();
    conn.execute_batch("CREATE TABLE t (x); DROP TABLE t;")
        .unwrap();
    drop(conn);
    let bytes = std::fs::read(&blank).unwrap();
    assert!(!bytes.is_empty());
    for db in [blank.as_path(), std::path::Path::new("/dev/null")] {
        for args in [
            &["list"][..],
            &["--migrate", "list"],
            &["stats", "--migrate"],
            &["--create", "--migrate", "list"],
        ] {
            let (code, stderr) = failure(&bin_on(db, args));
            assert_eq!(code, 2, "{db:?} {args:?}: {stderr}");
            assert_eq!(
                stderr,
                format!(
                    "error: {db:?} is not a ledger: a SQLite database without the ledger's tables (pass --create to make a new ledger of a missing or empty file)"
                )
            );
        }
    }
    assert_eq!(
        std::fs::read(&blank).unwrap(),
        bytes,
        "the file was written"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// Every ledger fixture (the Python package's, legacy layout included) is a
/// ledger: read as it is, or migrated with --migrate.
#[test]
fn every_python_fixture_is_a_ledger() {
    for name in ["python-ledger-v1.sqlite3", "python-ledger-legacy.sqlite3"] {
        let (_dir, db) = crate::support::fixture(name);
        let listed = crate::support::success(&bin_on(&db, &["--migrate", "list"]));
        let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
        assert!(!listed.as_array().unwrap().is_empty(), "{name}");
    }
}

/// `--create` makes a new ledger of a missing file; without it the file is
/// not created.
#[test]
fn create_makes_a_new_ledger_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("new.sqlite3");
    let (code, stderr) = failure(&bin_on(&db, &["--migrate", "list"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--create"), "{stderr}");
    assert!(!db.exists(), "created without --create");
    let listed = crate::support::success(&bin_on(&db, &["list", "--create"]));
    assert_eq!(listed.trim(), "[]");
    assert!(db.exists());
    // Now it is a ledger: plain commands open it.
    crate::support::success(&bin_on(&db, &["stats"]));
}
