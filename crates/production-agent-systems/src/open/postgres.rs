//! Opening a PostgreSQL schema: made a ledger only when the options allow it,
//! migrated only when it already is one.

use std::sync::Arc;

use effect_ledger_postgres::{PostgresLedger, SCHEMA_VERSION, SchemaState};

use super::{Ledger, NotALedger, OpenError, OpenOptions, redacted};

/// Connects to `url` as `options` say (see [`OpenOptions::create`]).
pub(super) fn open(url: &str, options: OpenOptions) -> Result<Ledger, OpenError> {
    let (may_create, strict) = options.creation();
    let postgres = options.postgres.clone().create(may_create);
    // Unless told otherwise, a migrating open is the store's own; anything
    // else looks at the schema first, writing nothing.
    let postgres = if !strict && options.migrate {
        postgres
    } else {
        let location = format!("schema {:?} at {}", postgres.schema, redacted(url));
        let not_a_ledger = |reason| OpenError::NotALedger {
            location: location.clone(),
            reason,
            source: None,
        };
        match PostgresLedger::schema_state(url, &postgres).map_err(OpenError::Postgres)? {
            SchemaState::Absent | SchemaState::Empty if may_create => postgres.migrate(true),
            SchemaState::Absent => return Err(not_a_ledger(NotALedger::NoSchema)),
            SchemaState::Empty => return Err(not_a_ledger(NotALedger::NoLedgerTables)),
            SchemaState::Foreign => return Err(not_a_ledger(NotALedger::ForeignTables)),
            SchemaState::Ledger { version } if version < SCHEMA_VERSION && !options.migrate => {
                return Err(OpenError::NeedsMigration {
                    location,
                    found: i64::from(version),
                });
            }
            // A newer version is the store's to refuse.
            _ => postgres,
        }
    };
    PostgresLedger::connect(url, postgres)
        .map(|ledger| Ledger::Postgres(Arc::new(ledger)))
        .map_err(OpenError::Postgres)
}
