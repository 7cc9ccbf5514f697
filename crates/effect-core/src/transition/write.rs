//! What the planner answers: the outcome to report and what a store must
//! write for it.

use serde_json::Value;

use crate::budget::BudgetWrite;
use crate::record::EffectRecord;

/// What a transition did.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionOutcome {
    /// False when a guard did not hold (wrong status, stale owner token, live lease).
    pub applied: bool,
    /// The record after the transition (the unchanged record when not applied).
    pub record: EffectRecord,
}

/// An event to append, in order, with the write.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingEvent {
    /// The event type of docs/spec.md §4.
    pub event_type: &'static str,
    /// The event's data.
    pub data: Value,
    /// The transition's time.
    pub timestamp: String,
}

/// How a planned write changes the stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// A new record, with its first events.
    Insert,
    /// An existing record moves on, with at least one event.
    Transition,
    /// An existing record changes in place without an event (a lease renewal):
    /// its `updated_at` and event bookkeeping stay as they are.
    InPlace,
}

/// What a store must persist, atomically, for a transition.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    /// How the record changes.
    pub kind: WriteKind,
    /// Events to append after the record is written, in order: empty exactly
    /// when the kind is [`WriteKind::InPlace`].
    pub events: Vec<PendingEvent>,
    /// Budget charges to record or give back, in the same transaction
    /// (docs/approval.md#budgets); empty for most writes.
    pub budgets: Vec<BudgetWrite>,
}

/// The plan for one transition: the outcome to report, and what to write (if anything).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// What the caller is told once the write (if any) is durable.
    pub outcome: TransitionOutcome,
    /// What to persist; `None` when nothing changes.
    pub write: Option<Write>,
}
