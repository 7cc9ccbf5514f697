//! A bounded cache of confirmed records, so replaying a confirmed operation
//! needs no transaction.
//!
//! `confirmed` is terminal (docs/spec.md §4): no transition changes a confirmed
//! record's status or output, in this process or any other sharing the file.
//! The one change it sees, the compensation link in its evidence
//! (docs/compensation.md), is always planned on the stored record and
//! cached once written; a cache in another process may replay the record
//! without that link, never with another output. Only `prune` deletes one: this process forgets it; a
//! cache in another process may replay it until that process restarts,
//! which replays the output of an effect that did happen. A transition on a cached record is still decided by
//! [`plan`](effect_core::transition::plan), exactly as on the stored one; the
//! cache answers only when the plan writes nothing, and otherwise the
//! transition goes to the database as usual.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use effect_core::{EffectRecord, EffectStatus};

/// Confirmed records by operation id, at most `capacity` of them.
#[derive(Debug)]
pub(crate) struct ConfirmedCache {
    capacity: usize,
    records: Mutex<HashMap<String, EffectRecord>>,
}

impl ConfirmedCache {
    /// A cache of up to `capacity` records; 0 disables it.
    pub(crate) fn new(capacity: usize) -> Self {
        ConfirmedCache {
            capacity,
            records: Mutex::new(HashMap::new()),
        }
    }

    /// The confirmed record of `operation_id`, if cached.
    pub(crate) fn get(&self, operation_id: &str) -> Option<EffectRecord> {
        if self.capacity == 0 {
            return None;
        }
        self.lock().get(operation_id).cloned()
    }

    /// Remembers `record` if it is confirmed (and durable: callers pass only
    /// committed records).
    pub(crate) fn remember(&self, record: &EffectRecord) {
        if self.capacity == 0 || record.status != EffectStatus::Confirmed {
            return;
        }
        let mut records = self.lock();
        if records.len() >= self.capacity && !records.contains_key(&record.operation_id) {
            // Full: start over rather than track recency. A miss only costs
            // a read of the database.
            records.clear();
        }
        records.insert(record.operation_id.clone(), record.clone());
    }

    /// Forgets `operation_id` (its record was pruned).
    pub(crate) fn forget(&self, operation_id: &str) {
        if self.capacity > 0 {
            self.lock().remove(operation_id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, EffectRecord>> {
        // A map of immutable records is consistent at every point.
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
