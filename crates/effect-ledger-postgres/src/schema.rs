//! The table layout and its forward-only migrations.
//!
//! The layout is the SQLite store's (and the Python package's): the same table
//! and column names and status strings, with `lease_until` as seconds since the
//! epoch (`DOUBLE PRECISION`), timestamps as ISO-8601 UTC text and JSON as
//! compact text.
//!
//! JSON is stored as `TEXT`, not `jsonb`: the ledger never queries inside it,
//! and text keeps exactly what was written (key order, number spelling), so a
//! record reads back byte for byte like the SQLite store's and rows can be copied
//! between the two stores without a conversion step.
//!
//! The migrations are SQL files under `migrations/`, compiled in (sqlx's
//! layout: one numbered file per version, applied in order, each once). The
//! write function `effect_write` is not in them: `migrations/effect_write.sql`
//! defines it once and is applied again after the numbered files whenever one
//! of them ran, so every migrated schema ends with the same function. The
//! statements that use the tables are in `src/statements.rs`.

use effect_core::LedgerError;
use postgres::types::Type;
use postgres::{Client, GenericClient};

use crate::error::{corrupt, from_pg};

#[cfg(test)]
mod tests;

/// One forward-only migration: a file of `migrations/`. Statements use
/// `{schema}` for the quoted schema name.
struct Migration {
    version: i32,
    description: &'static str,
    sql: &'static str,
}

/// A [`Migration`] from its file under `migrations/`, compiled in.
macro_rules! migration {
    ($version:literal, $file:literal, $description:literal) => {
        Migration {
            version: $version,
            description: $description,
            sql: include_str!(concat!("../migrations/", $file)),
        }
    };
}

/// Every migration, in order. Append only: a released migration never changes
/// (its description is recorded in `effect_schema_version`).
const MIGRATIONS: &[Migration] = &[
    migration!(
        1,
        "0001_operations_and_events.sql",
        "operations and events tables with status and history indexes"
    ),
    migration!(
        2,
        "0002_event_drawers.sql",
        "the writers an event may follow, and the one-statement write function"
    ),
    migration!(
        3,
        "0003_parallel_appends.sql",
        "appends commit in parallel; each event records the writers it may follow"
    ),
    migration!(
        4,
        "0004_write_answers_version.sql",
        "the write function answers the row's version; a lone appender skips pg_locks"
    ),
    migration!(
        5,
        "0005_budgets.sql",
        "budgets and their charges, locked and charged in the claim's transaction"
    ),
    migration!(
        6,
        "0006_announced_writers.sql",
        "writers announce their first sequence; readers look at pg_locks instead"
    ),
    migration!(
        7,
        "0007_status_counters.sql",
        "terminal-status counters kept by triggers in the transaction that changes a status"
    ),
    migration!(
        8,
        "0008_counted_deletes.sql",
        "the counters' delete trigger runs once per statement, not once per deleted row"
    ),
];

/// The write function (`migrations/effect_write.sql`): applied after the
/// numbered migrations whenever one of them ran.
const WRITE_FUNCTION: &str = include_str!("../migrations/effect_write.sql");

/// The schema version this library writes.
pub const SCHEMA_VERSION: i32 = 8;

/// A validated schema name and its quoted form.
#[derive(Debug, Clone)]
pub(crate) struct Schema {
    pub(crate) name: String,
    pub(crate) quoted: String,
}

impl Schema {
    /// Checks a schema name: lowercase ASCII letters, digits and `_`, starting
    /// with a letter or `_`, 1 to 63 bytes, not `pg_`-prefixed. Lowercase only,
    /// so the name means the same quoted or unquoted in hand-written SQL.
    pub(crate) fn new(name: &str) -> Result<Schema, LedgerError> {
        let valid_start = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
        let valid_rest = name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid_start || !valid_rest || name.len() > 63 || name.starts_with("pg_") {
            return Err(LedgerError::invalid_input(format!(
                "schema name {name:?} must be 1 to 63 lowercase ASCII letters, digits or '_', \
                 start with a letter or '_', and not start with 'pg_'"
            )));
        }
        Ok(Schema {
            name: name.to_owned(),
            quoted: format!("\"{name}\""),
        })
    }

    /// The key of the advisory lock that serializes migrations of this schema.
    fn migration_lock_name(&self) -> String {
        format!("effect-ledger-postgres migrate {}", self.name)
    }
}

/// Brings the schema up to [`SCHEMA_VERSION`], creating it when absent.
///
/// Runs in one transaction under a transaction-level advisory lock, so several
/// processes opening the same schema at once apply each migration exactly once
/// and all see the finished result.
///
/// With `create` false a schema that holds no ledger yet is refused
/// ([`LedgerError::InvalidInput`]), checked under the lock, so nothing is
/// created.
///
/// The numbered migrations after the schema's version run in order, then,
/// if any ran, the write function ([`WRITE_FUNCTION`]) is applied again. A
/// schema already at [`SCHEMA_VERSION`] is left as it is.
pub(crate) fn migrate(
    client: &mut Client,
    schema: &Schema,
    create: bool,
) -> Result<(), LedgerError> {
    migrate_to(client, schema, create, SCHEMA_VERSION, Some(WRITE_FUNCTION))
}

/// [`migrate`] up to `target` only, applying `write_function` after the
/// numbered migrations if any ran: the upgrade tests build, with an older
/// version's function (`src/schema/history/`), the schemas older releases
/// left.
fn migrate_to(
    client: &mut Client,
    schema: &Schema,
    create: bool,
    target: i32,
    write_function: Option<&str>,
) -> Result<(), LedgerError> {
    let doing = "migrating the ledger schema";
    let pg = |err| from_pg(doing, err);
    let mut tx = client.transaction().map_err(pg)?;
    tx.query_one(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))::text",
        &[&schema.migration_lock_name()],
    )
    .map_err(pg)?;
    if !create && !matches!(state(&mut tx, schema)?, SchemaState::Ledger { .. }) {
        return Err(LedgerError::invalid_input(format!(
            "no ledger in schema {:?}, and creating one was not allowed",
            schema.name
        )));
    }
    let q = &schema.quoted;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {q};
         CREATE TABLE IF NOT EXISTS {q}.effect_schema_version (
             version INTEGER PRIMARY KEY,
             description TEXT NOT NULL,
             applied_at TEXT NOT NULL
         );"
    ))
    .map_err(pg)?;
    let current: Option<i32> = tx
        .query_one(
            &format!("SELECT max(version) FROM {q}.effect_schema_version"),
            &[],
        )
        .map_err(pg)?
        .try_get(0)
        .map_err(|err| corrupt("schema version is not an integer".to_owned(), err))?;
    let current = current.unwrap_or(0);
    if current > SCHEMA_VERSION {
        return Err(LedgerError::backend(
            format!(
                "schema {:?} is at version {current}, newer than the {SCHEMA_VERSION} \
                 this library knows; upgrade effect-ledger-postgres",
                schema.name
            ),
            None,
        ));
    }
    let mut applied = 0_usize;
    for migration in MIGRATIONS
        .iter()
        .filter(|m| m.version > current && m.version <= target)
    {
        applied += 1;
        tx.batch_execute(&migration.sql.replace("{schema}", q))
            .map_err(pg)?;
        tx.execute(
            &format!(
                "INSERT INTO {q}.effect_schema_version (version, description, applied_at)
                 VALUES ($1, $2, {NOW_ISO})"
            ),
            &[&migration.version, &migration.description],
        )
        .map_err(pg)?;
    }
    if let Some(function) = write_function.filter(|_| applied > 0) {
        tx.batch_execute(&function.replace("{schema}", q))
            .map_err(pg)?;
    }
    tx.commit().map_err(pg)
}

/// What a schema holds, as [`PostgresLedger::schema_state`](crate::PostgresLedger::schema_state)
/// reads it without writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaState {
    /// The schema does not exist.
    Absent,
    /// The schema exists and holds no table, view or sequence.
    Empty,
    /// The schema holds relations, but not a ledger's (no
    /// `effect_schema_version` and `effect_operations` tables): someone else's.
    Foreign,
    /// A ledger, at this schema version (older ones need migrating).
    Ledger {
        /// `max(version)` of its `effect_schema_version` table (0 when empty).
        version: i32,
    },
}

/// Reads what `schema` holds, without writing.
pub(crate) fn state(
    client: &mut impl GenericClient,
    schema: &Schema,
) -> Result<SchemaState, LedgerError> {
    let pg = |err| from_pg("reading the ledger schema", err);
    let relations: Option<i64> = client
        .query_typed_opt(
            "SELECT (SELECT count(*) FROM pg_class c WHERE c.relnamespace = n.oid)
             FROM pg_namespace n WHERE n.nspname = $1",
            &[(&schema.name, Type::TEXT)],
        )
        .and_then(|row| row.map(|row| row.try_get(0)).transpose())
        .map_err(pg)?;
    let Some(relations) = relations else {
        return Ok(SchemaState::Absent);
    };
    if relations == 0 {
        return Ok(SchemaState::Empty);
    }
    let q = &schema.quoted;
    let mut ledger_tables = 0;
    for table in ["effect_schema_version", "effect_operations"] {
        let exists: bool = client
            .query_typed_one(
                "SELECT to_regclass($1) IS NOT NULL",
                &[(&format!("{q}.{table}"), Type::TEXT)],
            )
            .and_then(|row| row.try_get(0))
            .map_err(pg)?;
        ledger_tables += usize::from(exists);
    }
    if ledger_tables < 2 {
        return Ok(SchemaState::Foreign);
    }
    let version: Option<i32> = client
        .query_typed_one(
            &format!("SELECT max(version) FROM {q}.effect_schema_version"),
            &[],
        )
        .map_err(pg)?
        .try_get(0)
        .map_err(|err| corrupt("schema version is not an integer".to_owned(), err))?;
    Ok(SchemaState::Ledger {
        version: version.unwrap_or(0),
    })
}

/// Checks, without writing, that `schema` holds a ledger at [`SCHEMA_VERSION`].
pub(crate) fn check(client: &mut Client, schema: &Schema) -> Result<(), LedgerError> {
    let pg = |err| from_pg("checking the ledger schema", err);
    let q = &schema.quoted;
    let tables: Vec<Option<String>> = [
        "effect_schema_version",
        "effect_operations",
        "effect_events",
    ]
    .iter()
    .map(|table| {
        client
            .query_typed_one(
                "SELECT to_regclass($1)::text",
                &[(&format!("{q}.{table}"), Type::TEXT)],
            )
            .and_then(|row| row.try_get(0))
            .map_err(pg)
    })
    .collect::<Result<_, _>>()?;
    if tables.iter().any(Option::is_none) {
        return Err(LedgerError::invalid_input(format!(
            "no ledger in schema {:?}",
            schema.name
        )));
    }
    let current: Option<i32> = client
        .query_typed_one(
            &format!("SELECT max(version) FROM {q}.effect_schema_version"),
            &[],
        )
        .map_err(pg)?
        .try_get(0)
        .map_err(|err| corrupt("schema version is not an integer".to_owned(), err))?;
    match current.unwrap_or(0) {
        SCHEMA_VERSION => Ok(()),
        found if found > SCHEMA_VERSION => Err(LedgerError::backend(
            format!(
                "schema {:?} is at version {found}, newer than the {SCHEMA_VERSION} \
                 this library knows; upgrade effect-ledger-postgres",
                schema.name
            ),
            None,
        )),
        found => Err(LedgerError::invalid_input(format!(
            "the ledger in schema {:?} is at version {found} and needs migrating to {SCHEMA_VERSION}",
            schema.name
        ))),
    }
}

/// The database clock as docs/spec.md §8 timestamp text.
const NOW_ISO: &str =
    r#"to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')"#;
