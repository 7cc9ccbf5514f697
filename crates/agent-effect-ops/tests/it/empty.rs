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
    assert!(stats_table.stdout.ends_with("stale dispatches: 0\n"));
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
    assert_eq!(code, 1);
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
        assert_eq!(code, 1, "{args:?}");
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
