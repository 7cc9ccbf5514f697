//! What a transition's caller already knows of its operation's row, so
//! that the write transaction need not read it first.
//!
//! A prepare reads the row before it is queued (the replay check, see
//! `SqliteLedger::replay`), which may find none; an owner's outcome
//! follows the claim this ledger wrote. Either way the write transaction plans on what is known
//! and writes only if the row is still exactly that: an insert only if no
//! row exists (`ON CONFLICT DO NOTHING`), an update only if every column
//! of the record still holds the known value (the update's `WHERE`). SQLite
//! serializes writers, so a row that passes the check under the write lock
//! is the row a read in that transaction would have returned, and the plan
//! on it is the plan that read would have given. Should the row have
//! changed (another transition, another process, a takeover) the write
//! matches nothing, and the transition is planned again on a fresh read.
//! Knowledge is never trusted without that check, so a stale entry costs
//! one refused write, never a wrong one.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use effect_core::transition::owner_outcome_token;
use effect_core::{EffectRecord, EffectStatus, Transition};

/// What the caller knew of the row when it queued the transition.
#[derive(Debug, Clone, Default)]
#[allow(clippy::large_enum_variant)] // Queued beside a transition as large; boxing would allocate.
pub(crate) enum Known {
    /// Nothing: the write transaction reads the row.
    #[default]
    Nothing,
    /// A read just before found no row.
    Absent,
    /// The row was this record, as this ledger wrote it.
    Row(EffectRecord),
}

impl Known {
    /// Whether a plan on this knowledge is worth trying: it will most
    /// likely write, so its transaction may start with the write lock.
    pub(crate) fn is_known(&self) -> bool {
        !matches!(self, Known::Nothing)
    }
}

/// The most claims [`Claims`] remembers; when full it starts over (a miss
/// costs one read).
const CAPACITY: usize = 4096;

/// The claims this ledger committed, by operation id: the `dispatched`
/// record with its owner, so the owner's outcome needs no read first.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    records: Mutex<HashMap<String, EffectRecord>>,
}

impl Claims {
    /// Forgets `operation_id`'s entry; returns it as the known row if the
    /// transition is its owner's outcome (confirmed, rejected, unknown).
    pub(crate) fn take(&self, operation_id: &str, transition: &Transition) -> Known {
        let mut records = self.lock();
        if records.is_empty() {
            return Known::Nothing;
        }
        let Some(record) = records.remove(operation_id) else {
            return Known::Nothing;
        };
        drop(records);
        let Some(token) = owner_outcome_token(transition) else {
            return Known::Nothing;
        };
        if record.owner_token.as_deref() == Some(token) {
            Known::Row(record)
        } else {
            Known::Nothing
        }
    }

    /// Remembers a committed record if it is dispatched to an owner.
    pub(crate) fn remember(&self, record: &EffectRecord) {
        if record.status != EffectStatus::Dispatched || record.owner_token.is_none() {
            return;
        }
        let mut records = self.lock();
        if records.len() >= CAPACITY && !records.contains_key(&record.operation_id) {
            records.clear();
        }
        records.insert(record.operation_id.clone(), record.clone());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, EffectRecord>> {
        // Every entry is checked before use, so a map left by a panic is safe.
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
