//! [`TempLedger`]: a [`SqliteLedger`] in a fresh temporary directory, for tests
//! and examples.

use std::ops::Deref;
use std::path::Path;

use effect_core::{
    EffectLedger, EffectRecord, LedgerError, LedgerEvent, LedgerStats, ListQuery, Transition,
    TransitionOutcome,
};
use tempfile::TempDir;

use crate::error::SqliteError;
use crate::ledger::SqliteLedger;
use crate::options::SqliteOptions;

/// A [`SqliteLedger`] whose file lives in a temporary directory that is deleted
/// when the `TempLedger` is dropped (after the ledger's connections close).
///
/// It derefs to the [`SqliteLedger`] and implements [`EffectLedger`] itself, so
/// `Arc::new(TempLedger::new()?)` is an `Arc<dyn EffectLedger>` that keeps its
/// directory alive exactly as long as it is used.
///
/// ```
/// use effect_core::EffectLedger;
/// use effect_ledger_sqlite::TempLedger;
///
/// let ledger = TempLedger::new()?;
/// assert!(ledger.path().exists());
/// assert!(ledger.get("nothing-yet")?.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TempLedger {
    // Declared first so it is dropped, and its connections closed, before the
    // directory is removed.
    ledger: SqliteLedger,
    dir: TempDir,
}

impl TempLedger {
    /// A new ledger with default options in a fresh temporary directory.
    ///
    /// # Errors
    ///
    /// [`SqliteError::CreateDirectory`] when no temporary directory can be
    /// created; otherwise as [`SqliteLedger::open`].
    pub fn new() -> Result<Self, SqliteError> {
        TempLedger::with_options(SqliteOptions::default())
    }

    /// A new ledger with `options` in a fresh temporary directory.
    ///
    /// # Errors
    ///
    /// As [`TempLedger::new`].
    pub fn with_options(options: SqliteOptions) -> Result<Self, SqliteError> {
        let dir = tempfile::Builder::new()
            .prefix("effect-ledger-")
            .tempdir()
            .map_err(|source| SqliteError::CreateDirectory {
                path: std::env::temp_dir(),
                source,
            })?;
        let ledger = SqliteLedger::open(dir.path().join("ledger.sqlite3"), options)?;
        Ok(TempLedger { ledger, dir })
    }

    /// The temporary directory holding the database file.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The ledger.
    pub fn ledger(&self) -> &SqliteLedger {
        &self.ledger
    }
}

impl SqliteLedger {
    /// A new ledger with default options in a fresh temporary directory; the
    /// same as [`TempLedger::new`].
    ///
    /// # Errors
    ///
    /// As [`TempLedger::new`].
    pub fn open_temporary() -> Result<TempLedger, SqliteError> {
        TempLedger::new()
    }

    /// A new ledger with `options` in a fresh temporary directory; the same as
    /// [`TempLedger::with_options`].
    ///
    /// # Errors
    ///
    /// As [`TempLedger::new`].
    pub fn open_temporary_with(options: SqliteOptions) -> Result<TempLedger, SqliteError> {
        TempLedger::with_options(options)
    }
}

impl Deref for TempLedger {
    type Target = SqliteLedger;

    fn deref(&self) -> &SqliteLedger {
        &self.ledger
    }
}

#[deny(clippy::missing_trait_methods)]
impl EffectLedger for TempLedger {
    fn apply_with(
        &self,
        operation_id: &str,
        transition: &Transition,
        durability: effect_core::WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        self.ledger.apply_with(operation_id, transition, durability)
    }

    fn sync(&self) -> Result<(), LedgerError> {
        self.ledger.sync()
    }

    fn get(&self, operation_id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        self.ledger.get(operation_id)
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        self.ledger.list(query)
    }

    fn events(&self, operation_id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.ledger.events(operation_id)
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.ledger.events_after(after, limit)
    }

    fn count_events(
        &self,
        operation_ids: &[&str],
        event_type: &str,
    ) -> Result<Vec<u64>, LedgerError> {
        self.ledger.count_events(operation_ids, event_type)
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        self.ledger.stats()
    }

    fn longest_lock_wait(&self) -> Option<std::time::Duration> {
        self.ledger.longest_lock_wait()
    }
}
