//! Opening a PostgreSQL schema: made a ledger only when the options allow it,
//! migrated only when it already is one.

use std::sync::Arc;

use effect_ledger_postgres::{PostgresLedger, SCHEMA_VERSION, SchemaState};

use super::{Ledger, NotALedger, OpenError, OpenOptions, redacted};

/// Connects to `url` as `options` say (see [`OpenOptions::create`]).
pub(super) fn open(url: &str, options: OpenOptions) -> Result<Ledger, OpenError> {
    let (may_create, _strict) = options.creation();
    let postgres = options.postgres.clone().create(may_create);
    // The schema is looked at first, writing nothing: a schema holding
    // someone else's tables is refused whatever the options say (the store
    // alone would add the ledger's tables beside them), and a missing or
    // empty one becomes a ledger only when creating is allowed.
    let location = format!("schema {:?} at {}", postgres.schema, redacted(url));
    let not_a_ledger = |reason| OpenError::NotALedger {
        location: location.clone(),
        reason,
        source: None,
    };
    let postgres =
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
        };
    PostgresLedger::connect(url, postgres)
        .map(|ledger| Ledger::Postgres(Arc::new(ledger)))
        .map_err(OpenError::Postgres)
}
