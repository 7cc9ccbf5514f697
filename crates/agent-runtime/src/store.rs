//! Where runs keep their trace, audit records and checkpoints.
//!
//! Three traits, so each stream can live where it belongs (a log pipeline,
//! an audit database, a durable checkpoint file), and in-memory
//! implementations for tests and examples. A durable checkpoint store is
//! [`SqliteCheckpointStore`](crate::SqliteCheckpointStore) (feature
//! `sqlite-checkpoints`).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard};

use crate::checkpoint::Checkpoint;
use crate::trace::{AuditRecord, TraceEvent};

pub use crate::error::StoreError;

/// Stores trace events, per run, in sequence order.
pub trait EventStore: Send + Sync + fmt::Debug {
    /// Appends one event.
    ///
    /// # Errors
    ///
    /// The store's failure.
    fn append(&self, event: &TraceEvent) -> Result<(), StoreError>;

    /// A run's events in the order appended.
    ///
    /// # Errors
    ///
    /// The store's failure.
    fn events(&self, run_id: &str) -> Result<Vec<TraceEvent>, StoreError>;

    /// The highest sequence stored for the run (0 when none).
    ///
    /// # Errors
    ///
    /// The store's failure.
    fn last_sequence(&self, run_id: &str) -> Result<u64, StoreError> {
        Ok(self
            .events(run_id)?
            .iter()
            .map(|e| e.sequence)
            .max()
            .unwrap_or(0))
    }
}

/// Stores audit records, per run, in sequence order. Kept apart from traces.
pub trait AuditStore: Send + Sync + fmt::Debug {
    /// Appends one record.
    ///
    /// # Errors
    ///
    /// The store's failure.
    fn append(&self, record: &AuditRecord) -> Result<(), StoreError>;

    /// A run's records in the order appended.
    ///
    /// # Errors
    ///
    /// The store's failure.
    fn records(&self, run_id: &str) -> Result<Vec<AuditRecord>, StoreError>;

    /// The highest sequence stored for the run (0 when none).
    ///
    /// # Errors
    ///
    /// The store's failure.
    fn last_sequence(&self, run_id: &str) -> Result<u64, StoreError> {
        Ok(self
            .records(run_id)?
            .iter()
            .map(|r| r.sequence)
            .max()
            .unwrap_or(0))
    }
}

/// Stores the latest checkpoint of each run.
pub trait CheckpointStore: Send + Sync + fmt::Debug {
    /// Replaces the run's checkpoint, durably before returning.
    ///
    /// # Errors
    ///
    /// The store's failure.
    fn save(&self, checkpoint: &Checkpoint) -> Result<(), StoreError>;

    /// The run's latest checkpoint.
    ///
    /// # Errors
    ///
    /// The store's failure, or [`StoreError::Corrupt`].
    fn load(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError>;
}

/// Trace events in memory.
#[derive(Debug, Default)]
pub struct MemoryEventStore {
    runs: Mutex<HashMap<String, Vec<TraceEvent>>>,
}

/// Audit records in memory.
#[derive(Debug, Default)]
pub struct MemoryAuditStore {
    runs: Mutex<HashMap<String, Vec<AuditRecord>>>,
}

/// Checkpoints in memory: nothing survives the process.
#[derive(Debug, Default)]
pub struct MemoryCheckpointStore {
    runs: Mutex<HashMap<String, Checkpoint>>,
}

impl MemoryEventStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryEventStore::default()
    }
}

impl MemoryAuditStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryAuditStore::default()
    }
}

impl MemoryCheckpointStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryCheckpointStore::default()
    }
}

impl EventStore for MemoryEventStore {
    fn append(&self, event: &TraceEvent) -> Result<(), StoreError> {
        locked(&self.runs)
            .entry(event.run_id.clone())
            .or_default()
            .push(event.clone());
        Ok(())
    }

    fn events(&self, run_id: &str) -> Result<Vec<TraceEvent>, StoreError> {
        Ok(locked(&self.runs).get(run_id).cloned().unwrap_or_default())
    }
}

impl AuditStore for MemoryAuditStore {
    fn append(&self, record: &AuditRecord) -> Result<(), StoreError> {
        locked(&self.runs)
            .entry(record.run_id.clone())
            .or_default()
            .push(record.clone());
        Ok(())
    }

    fn records(&self, run_id: &str) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(locked(&self.runs).get(run_id).cloned().unwrap_or_default())
    }
}

impl CheckpointStore for MemoryCheckpointStore {
    fn save(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        locked(&self.runs).insert(checkpoint.run_id.clone(), checkpoint.clone());
        Ok(())
    }

    fn load(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        Ok(locked(&self.runs).get(run_id).cloned())
    }
}

/// Every write replaces or appends whole values, so a poisoned lock still
/// guards consistent data.
fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
