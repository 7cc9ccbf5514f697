//! [`MemoryLedger`]: the reference ledger, in memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::budget::{BudgetUsage, BudgetUse, BudgetWrite};
use crate::clock::{Clock, SystemClock, unix_seconds};
use crate::error::LedgerError;
use crate::ledger::{EffectLedger, LedgerStats, ListQuery, WriteDurability};
use crate::record::{EffectRecord, LedgerEvent};
use crate::status::EffectStatus;
use crate::transition::{WriteKind, budget_charges, plan_with_budgets};
use crate::{Transition, TransitionOutcome};

/// A ledger that keeps everything in memory. It follows the same state machine
/// as the durable stores, so it serves doc examples and tests, but nothing
/// survives the process: do not use it to protect real effects.
///
/// ```
/// use effect_core::{EffectLedger, EffectLedgerExt, MemoryLedger, NewOperation, RequestFingerprint};
///
/// let ledger = MemoryLedger::new();
/// let op = NewOperation::new("capture_payment", "1", RequestFingerprint::of_canonical(r#"{"invoice_id":"INV-1"}"#))
///     .with_provider_idempotency_key(Some("capture:INV-1".into()));
/// let record = ledger.prepare("invoice:INV-1:capture", &op)?;
/// assert_eq!(record.status.as_str(), "prepared");
/// assert_eq!(ledger.events("invoice:INV-1:capture")?.len(), 1);
/// # Ok::<(), effect_core::LedgerError>(())
/// ```
#[derive(Debug)]
pub struct MemoryLedger {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    records: HashMap<String, Entry>,
    events: Vec<LedgerEvent>,
    /// Orders records by last write, since timestamps can tie.
    writes: u64,
    /// Budget charges (docs/approval.md#budgets), in charge order.
    charges: Vec<Charge>,
    /// Each budget's window and limits, as its last charge declared them.
    budgets: std::collections::BTreeMap<String, (String, Option<u64>, Option<u64>)>,
}

#[derive(Debug)]
struct Charge {
    budget: String,
    operation_id: String,
    amount: u64,
    at_unix: f64,
}

#[derive(Debug)]
struct Entry {
    record: EffectRecord,
    last_write: u64,
}

impl MemoryLedger {
    /// An empty ledger on the system clock.
    pub fn new() -> Self {
        MemoryLedger::with_clock(Arc::new(SystemClock))
    }

    /// An empty ledger on the given clock.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryLedger {
            clock,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied transition:
        // every write below happens after planning succeeded.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Default for MemoryLedger {
    fn default() -> Self {
        MemoryLedger::new()
    }
}

impl EffectLedger for MemoryLedger {
    /// Every write is durable as far as this store goes (it keeps nothing
    /// beyond the process), so `durability` is ignored.
    fn apply_with(
        &self,
        operation_id: &str,
        transition: &Transition,
        _durability: WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        let mut state = self.state();
        let current = state.records.get(operation_id).map(|e| e.record.clone());
        let now = self.clock.now();
        let usage: Vec<BudgetUsage> = budget_charges(transition)
            .iter()
            .map(|charge| {
                let start = charge.window.start(now);
                let of_budget = || state.charges.iter().filter(|c| c.budget == charge.budget);
                let (count, amount) = of_budget()
                    .filter(|c| c.at_unix >= start)
                    .fold((0u64, 0u64), |(n, sum), c| {
                        (n.saturating_add(1), sum.saturating_add(c.amount))
                    });
                BudgetUsage {
                    budget: charge.budget.clone(),
                    count,
                    amount,
                    charged: of_budget()
                        .find(|c| c.operation_id == operation_id)
                        .map(|c| c.amount),
                }
            })
            .collect();
        let plan = plan_with_budgets(operation_id, current, transition, now, &usage)?;
        if let Some(write) = plan.write {
            for change in write.budgets {
                match change {
                    BudgetWrite::Charge { charge, at_unix } => {
                        state.budgets.insert(
                            charge.budget.clone(),
                            (charge.window.storage(), charge.max_count, charge.max_amount),
                        );
                        state.charges.push(Charge {
                            budget: charge.budget,
                            operation_id: operation_id.to_owned(),
                            amount: charge.amount,
                            at_unix,
                        });
                    }
                    BudgetWrite::Refund => state.charges.retain(|c| c.operation_id != operation_id),
                }
            }
            // Lists order by the last transition; a lease renewal (no event)
            // does not change `updated_at`, so it keeps the record's place.
            let last_write = match state.records.get(operation_id) {
                Some(entry) if write.kind == WriteKind::InPlace => entry.last_write,
                _ => {
                    state.writes += 1;
                    state.writes
                }
            };
            state.records.insert(
                operation_id.to_owned(),
                Entry {
                    record: plan.outcome.record.clone(),
                    last_write,
                },
            );
            for event in write.events {
                let sequence = state.events.len() as u64 + 1;
                state.events.push(LedgerEvent {
                    sequence,
                    operation_id: operation_id.to_owned(),
                    event_type: event.event_type.to_owned(),
                    data: event.data,
                    timestamp: event.timestamp,
                });
            }
        }
        Ok(plan.outcome)
    }

    fn get(&self, operation_id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        Ok(self
            .state()
            .records
            .get(operation_id)
            .map(|e| e.record.clone()))
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        query.validate()?;
        let now = unix_seconds(self.clock.now());
        let state = self.state();
        let before = match &query.after {
            Some(id) => match state.records.get(id) {
                Some(entry) => entry.last_write,
                None => return Err(ListQuery::unknown_cursor(id)),
            },
            None => u64::MAX,
        };
        let mut entries: Vec<&Entry> = state
            .records
            .values()
            .filter(|e| query.status_filter().is_none_or(|s| e.record.status == s))
            .filter(|e| !query.stale || e.record.is_stale_at(now))
            .filter(|e| e.last_write < before)
            .collect();
        entries.sort_unstable_by_key(|e| std::cmp::Reverse(e.last_write));
        Ok(entries
            .into_iter()
            .take(query.limit)
            .map(|e| e.record.clone())
            .collect())
    }

    fn events(&self, operation_id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        Ok(self
            .state()
            .events
            .iter()
            .filter(|e| e.operation_id == operation_id)
            .cloned()
            .collect())
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        Ok(self
            .state()
            .events
            .iter()
            .filter(|e| e.sequence > after)
            .take(limit)
            .cloned()
            .collect())
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        let state = self.state();
        let now = self.clock.now();
        let records = state.records.values().map(|e| &e.record);
        let mut stats = LedgerStats::from_records(records, unix_seconds(now));
        stats.budgets = state
            .budgets
            .iter()
            .map(|(budget, (window, max_count, max_amount))| {
                let charges = state
                    .charges
                    .iter()
                    .filter(|c| c.budget == *budget)
                    .map(|c| (c.amount, c.at_unix));
                BudgetUse::from_charges(budget, window, *max_count, *max_amount, charges, now)
            })
            .collect();
        Ok(stats)
    }
}

impl LedgerStats {
    /// Computes stats from records (for stores that hold them in memory);
    /// `now` (seconds since the Unix epoch) decides which dispatches are stale.
    pub fn from_records<'a>(records: impl IntoIterator<Item = &'a EffectRecord>, now: f64) -> Self {
        let mut counts: Vec<(EffectStatus, u64)> =
            EffectStatus::ALL.into_iter().map(|s| (s, 0)).collect();
        let mut oldest: Option<&str> = None;
        let mut stale_dispatched = 0;
        for record in records {
            if record.is_stale_at(now) {
                stale_dispatched += 1;
            }
            if let Some(count) = counts.iter_mut().find(|(s, _)| *s == record.status) {
                count.1 += 1;
            }
            if record.status.is_uncertain() && oldest.is_none_or(|o| record.updated_at.as_str() < o)
            {
                oldest = Some(&record.updated_at);
            }
        }
        LedgerStats {
            counts,
            oldest_unresolved_updated_at: oldest.map(str::to_owned),
            stale_dispatched,
            budgets: Vec::new(),
        }
    }
}
