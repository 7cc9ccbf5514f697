//! The table layout and its forward-only migrations.
//!
//! The tables are those of the Python package `production-agent-systems` 1.x
//! (docs/spec.md §8), which never set `PRAGMA user_version`: its files read as version
//! 0. Each migration below moves a file one version up; they run on open, all in
//! one `BEGIN IMMEDIATE` transaction, so two processes opening the same file at
//! once migrate it exactly once and a failed migration leaves it untouched.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use crate::error::SqliteError;

/// The schema version this library writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The columns the ledger reads and writes, in the order of the Python layout.
pub(crate) const OPERATION_COLUMNS: [&str; 15] = [
    "operation_id",
    "contract_name",
    "contract_version",
    "request_fingerprint",
    "provider_idempotency_key",
    "status",
    "result_json",
    "provider_operation_id",
    "error",
    "attempts",
    "evidence_json",
    "owner_token",
    "lease_until",
    "created_at",
    "updated_at",
];

/// The column version 3 adds: the sequence of the operation's latest event,
/// `list`'s tie-break between equal update times.
pub(crate) const LAST_EVENT_COLUMN: &str = "last_event_sequence";

/// One step: the migration from version `i` to `i + 1` is `MIGRATIONS[i]`.
/// Append only; never edit a step that has shipped.
const MIGRATIONS: [Migration; 5] = [
    Migration {
        name: "adopting the python 1.x layout",
        run: adopt_python_layout,
    },
    Migration {
        name: "indexing operations by status and update time",
        run: index_list_queries,
    },
    Migration {
        name: "ordering lists by last event, with fewer pages per write",
        run: order_lists_by_last_event,
    },
    Migration {
        name: "budgets and their charges",
        run: crate::budget::add_budget_tables,
    },
    Migration {
        name: "counting terminal operations in the transactions that change a status",
        run: add_status_counters,
    },
];

/// The table of terminal-status counts version 5 adds (see
/// `migrations/0005_status_counters.sql`).
pub(crate) const STATUS_COUNTS_TABLE: &str = "effect_status_counts";

struct Migration {
    name: &'static str,
    run: fn(&Connection) -> rusqlite::Result<()>,
}

/// Brings the file up to [`SCHEMA_VERSION`].
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), SqliteError> {
    let fail = |step: &'static str| move |e| SqliteError::open(path.to_owned(), step, e);
    // Migrations copy rows as they are; an event whose operation is missing (a
    // file written without foreign keys) must not stop the copy. The setting
    // only changes outside a transaction, and this connection is not reused.
    conn.pragma_update(None, "foreign_keys", false)
        .map_err(fail("configuring the migration"))?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(fail("starting the migration transaction"))?;
    let found = user_version(&tx).map_err(fail("reading the schema version"))?;
    check_not_newer(path, found)?;
    // Refuse someone else's table before touching anything. The first
    // migration adds contract_version, so only that column may be missing yet.
    if table_exists(&tx, "effect_operations").map_err(fail("reading the schema"))? {
        check_columns(&tx, path, &["contract_version"])?;
    } else if has_other_tables(&tx).map_err(fail("reading the schema"))? {
        // Someone else's database: never add ledger tables to it.
        return Err(SqliteError::NotALedger {
            path: path.to_owned(),
        });
    }
    let from = usize::try_from(found).unwrap_or(0);
    for migration in MIGRATIONS.iter().skip(from) {
        (migration.run)(&tx).map_err(fail(migration.name))?;
    }
    check_columns(&tx, path, &[])?;
    if found != SCHEMA_VERSION {
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(fail("recording the schema version"))?;
    }
    tx.commit().map_err(fail("committing the migration"))
}

/// The layout a file opened read-only has, which decides how it is listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Version 3 or later: `last_event_sequence` and the one list index.
    Current,
    /// A file written before version 3 (by the Python package or an earlier
    /// release), read without migrating it: listed by update time and rowid.
    BeforeLastEvent,
}

/// Checks that a file opened read-only can be read without migrating it, and
/// says which layout it has.
pub(crate) fn check_readable(conn: &Connection, path: &Path) -> Result<Layout, SqliteError> {
    let fail = |step: &'static str| move |e| SqliteError::open(path.to_owned(), step, e);
    let found = user_version(conn).map_err(fail("reading the schema version"))?;
    check_not_newer(path, found)?;
    let needs_migration = || SqliteError::NeedsMigration {
        path: path.to_owned(),
        found,
        supported: SCHEMA_VERSION,
    };
    let has_operations =
        table_exists(conn, "effect_operations").map_err(fail("reading the schema"))?;
    let has_events = table_exists(conn, "effect_events").map_err(fail("reading the schema"))?;
    // Only a file with the operations table is a ledger (of any version, the
    // Python package's included). A database without it, with other tables
    // or none at all (an empty file, /dev/null), is not one: calling it an
    // older schema would invite a migration that makes an empty ledger of it.
    if !has_operations {
        return Err(SqliteError::NotALedger {
            path: path.to_owned(),
        });
    }
    if !has_events {
        return Err(needs_migration());
    }
    let present = columns(conn, "effect_operations").map_err(fail("reading the schema"))?;
    if !present.iter().any(|c| c == "contract_version") {
        return Err(needs_migration());
    }
    check_columns(conn, path, &[])?;
    Ok(if present.iter().any(|c| c == LAST_EVENT_COLUMN) {
        Layout::Current
    } else {
        Layout::BeforeLastEvent
    })
}

/// Refuses a file that a read-write open would migrate (a new, empty file is
/// created at the current version, not migrated).
pub(crate) fn check_current(conn: &Connection, path: &Path) -> Result<(), SqliteError> {
    let fail = |step: &'static str| move |e| SqliteError::open(path.to_owned(), step, e);
    let found = user_version(conn).map_err(fail("reading the schema version"))?;
    let has_tables = table_exists(conn, "effect_operations").map_err(fail("reading the schema"))?
        || table_exists(conn, "effect_events").map_err(fail("reading the schema"))?;
    if has_tables && found < SCHEMA_VERSION {
        return Err(SqliteError::NeedsMigration {
            path: path.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

fn check_not_newer(path: &Path, found: i64) -> Result<(), SqliteError> {
    if found > SCHEMA_VERSION {
        return Err(SqliteError::NewerSchema {
            path: path.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Refuses a database whose `effect_operations` table belongs to something
/// else: one that lacks a column other than those in `may_lack`.
fn check_columns(conn: &Connection, path: &Path, may_lack: &[&str]) -> Result<(), SqliteError> {
    let present = columns(conn, "effect_operations")
        .map_err(|e| SqliteError::open(path.to_owned(), "reading the schema", e))?;
    match OPERATION_COLUMNS
        .into_iter()
        .filter(|column| !may_lack.contains(column))
        .find(|column| !present.iter().any(|p| p == column))
    {
        Some(column) => Err(SqliteError::IncompatibleSchema {
            path: path.to_owned(),
            column,
        }),
        None => Ok(()),
    }
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Whether the database has any table of its own (not SQLite's internal ones).
fn has_other_tables(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' \
         AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\')",
        [],
        |row| row.get(0),
    )
}

fn table_exists(conn: &Connection, table: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
        [table],
        |row| row.get(0),
    )
}

fn has_column(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<bool> {
    Ok(columns(conn, table)?.iter().any(|c| c == column))
}

fn columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("SELECT name FROM pragma_table_info(?1)")?;
    let names = stmt.query_map([table], |row| row.get(0))?;
    names.collect()
}

/// Version 0 → 1: creates the Python 1.x tables where they are missing, and adds
/// `contract_version` to ledgers written before contracts had versions.
fn adopt_python_layout(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS effect_operations (
            operation_id TEXT PRIMARY KEY,
            contract_name TEXT NOT NULL,
            contract_version TEXT NOT NULL DEFAULT '1',
            request_fingerprint TEXT NOT NULL,
            provider_idempotency_key TEXT,
            status TEXT NOT NULL,
            result_json TEXT,
            provider_operation_id TEXT,
            error TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            evidence_json TEXT NOT NULL DEFAULT '{}',
            owner_token TEXT,
            lease_until REAL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );",
    )?;
    if !has_column(conn, "effect_operations", "contract_version")? {
        conn.execute_batch(
            "ALTER TABLE effect_operations
             ADD COLUMN contract_version TEXT NOT NULL DEFAULT '1';",
        )?;
    }
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS effect_events (
            sequence INTEGER PRIMARY KEY AUTOINCREMENT,
            operation_id TEXT NOT NULL REFERENCES effect_operations(operation_id),
            event_type TEXT NOT NULL,
            data_json TEXT NOT NULL,
            timestamp TEXT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS idx_effect_events_operation
            ON effect_events(operation_id, sequence);",
    )
}

/// Version 1 → 2: `list` orders by `updated_at DESC, rowid DESC`, optionally
/// filtered by status. Both orders are index walks (every SQLite index ends
/// with the rowid), so a page costs the same on 100k rows as on ten.
fn index_list_queries(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE INDEX IF NOT EXISTS idx_effect_operations_status_updated
            ON effect_operations(status, updated_at);
        CREATE INDEX IF NOT EXISTS idx_effect_operations_updated
            ON effect_operations(updated_at);",
    )
}

/// Version 2 → 3: fewer pages written per transition, the same rows.
///
/// - `last_event_sequence` (the operation's latest event) replaces the rowid
///   as `list`'s tie-break, so a transition updates its row in place instead
///   of moving it to a new rowid (which rewrote the row, its primary-key entry
///   and both list indexes).
/// - One list index, `(status, updated_at, last_event_sequence)`; a list
///   without a status filter merges one walk of it per status.
/// - `effect_events` loses `AUTOINCREMENT`, whose `sqlite_sequence` row was
///   one more page per transition. The ledger assigns sequences itself, one
///   above the largest, and never deletes events, so they still only grow.
fn order_lists_by_last_event(conn: &Connection) -> rusqlite::Result<()> {
    if !has_column(conn, "effect_operations", LAST_EVENT_COLUMN)? {
        conn.execute_batch(
            "ALTER TABLE effect_operations ADD COLUMN last_event_sequence INTEGER;",
        )?;
    }
    let events_sql: String = conn.query_row(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'effect_events'",
        [],
        |row| row.get(0),
    )?;
    if events_sql.to_ascii_uppercase().contains("AUTOINCREMENT") {
        conn.execute_batch(
            "CREATE TABLE effect_events_v3 (
                sequence INTEGER PRIMARY KEY,
                operation_id TEXT NOT NULL REFERENCES effect_operations(operation_id),
                event_type TEXT NOT NULL,
                data_json TEXT NOT NULL,
                timestamp TEXT NOT NULL
            );
            INSERT INTO effect_events_v3 (sequence, operation_id, event_type, data_json, timestamp)
                SELECT sequence, operation_id, event_type, data_json, timestamp
                FROM effect_events ORDER BY sequence;
            DROP TABLE effect_events;
            ALTER TABLE effect_events_v3 RENAME TO effect_events;
            DELETE FROM sqlite_sequence WHERE name IN ('effect_events', 'effect_events_v3');
            CREATE INDEX IF NOT EXISTS idx_effect_events_operation
                ON effect_events(operation_id, sequence);",
        )?;
    }
    conn.execute_batch(
        "UPDATE effect_operations SET last_event_sequence = (
            SELECT MAX(sequence) FROM effect_events
            WHERE effect_events.operation_id = effect_operations.operation_id
        );
        DROP INDEX IF EXISTS idx_effect_operations_status_updated;
        DROP INDEX IF EXISTS idx_effect_operations_updated;
        CREATE INDEX IF NOT EXISTS idx_effect_operations_status_list
            ON effect_operations(status, updated_at, last_event_sequence);",
    )
}

/// Version 4 → 5: counters of terminal statuses, kept by triggers
/// (`migrations/0005_status_counters.sql`).
fn add_status_counters(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(include_str!("../migrations/0005_status_counters.sql"))
}

/// Whether the file keeps terminal-status counters (version 5 or later; a
/// file opened read-only keeps the layout it has).
pub(crate) fn has_status_counts(conn: &Connection) -> rusqlite::Result<bool> {
    table_exists(conn, STATUS_COUNTS_TABLE)
}
