//! [`FaultyLedger`]: a ledger decorator that fails scripted calls.
//!
//! A store that is down, and a store that committed a write but lost the
//! reply, look the same to the caller: an error. The second is the dangerous
//! one (the caller must not assume nothing happened), so both are scriptable:
//!
//! - [`Fault::FailBefore`]: the call fails with [`LedgerError::Unavailable`]
//!   without reaching the inner ledger; nothing is written.
//! - [`Fault::FailAfterCommit`]: the call reaches the inner ledger, which
//!   commits, and then fails with [`LedgerError::Unavailable`].
//!
//! - [`Fault::LoseWrite`]: a transition applied as
//!   [`WriteDurability::Deferrable`] is answered as if the inner ledger had
//!   applied it, but nothing is written: what a power loss does to a write
//!   the store answered before it was durable. A durable write is not lost.
//!
//! Faults are scripted by call count, never by wall-clock time: "the 3rd
//! transition fails after commit". Calls are counted per [`CallKind`]; every
//! transition is one [`apply_with`](EffectLedger::apply_with) call, whether made
//! directly or through a named convenience of
//! [`EffectLedgerExt`](effect_core::EffectLedgerExt) such as `claim_dispatch`.
//!
//! ```
//! use effect_core::{EffectLedger, EffectLedgerExt, LedgerErrorKind, MemoryLedger, NewOperation, RequestFingerprint};
//! use effect_testkit::faults::{CallKind, Fault, FaultyLedger};
//!
//! let ledger = FaultyLedger::new(MemoryLedger::new()).fail(CallKind::Transition, 1, Fault::FailAfterCommit);
//! let op = NewOperation::new("capture_payment", "1", RequestFingerprint::of_canonical(r#"{"invoice_id":"INV-1"}"#));
//! let err = ledger.prepare("invoice:INV-1:capture", &op).unwrap_err();
//! assert_eq!(err.kind(), LedgerErrorKind::Unavailable);
//! // The write happened anyway: the caller must not treat the error as "nothing written".
//! assert!(ledger.get("invoice:INV-1:capture")?.is_some());
//! # Ok::<(), effect_core::LedgerError>(())
//! ```

use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use effect_core::{
    Clock, EffectLedger, EffectRecord, LedgerError, LedgerEvent, LedgerStats, ListQuery,
    SystemClock, Transition, TransitionOutcome, WriteDurability,
};

/// What an injected fault does to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// Fail with [`LedgerError::Unavailable`] before reaching the inner ledger:
    /// nothing is written.
    FailBefore,
    /// Let the inner ledger run (and commit), then fail with
    /// [`LedgerError::Unavailable`]: the acknowledgement is lost. An error from
    /// the inner ledger itself is returned unchanged.
    FailAfterCommit,
    /// Answer a transition applied as [`WriteDurability::Deferrable`] as the
    /// inner ledger would have (planned on its current record, at the system
    /// clock's time), without writing it: the caller is told "applied", the
    /// ledger keeps the record as it was. This is what a power loss costs a
    /// write answered before it was durable. A durable transition, and a
    /// read, are forwarded unchanged: their loss is not a fault the store
    /// may have.
    LoseWrite,
}

/// Which calls a fault counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CallKind {
    /// `apply` and every transition convenience (`prepare`, `claim_dispatch`,
    /// `mark_*`, `quarantine`, `reset_for_retry`, `renew_lease`,
    /// `resolve_manually`).
    Transition,
    /// `get`, `list`, `events`, `events_after` and `stats`.
    Read,
}

impl fmt::Display for CallKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CallKind::Transition => "transition",
            CallKind::Read => "read",
        })
    }
}

/// A fault that fired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFault {
    /// The kind of call that failed.
    pub kind: CallKind,
    /// Its number among calls of that kind, from 1.
    pub call: u64,
    /// What was called: the read method (`get`, `list`, ...), or the
    /// transition's [name](effect_core::Transition::name).
    pub method: &'static str,
    /// What was injected.
    pub fault: Fault,
}

/// An [`EffectLedger`] that forwards every call to `inner`, failing the calls
/// its script names. With no faults scheduled it behaves exactly like `inner`.
#[derive(Debug)]
pub struct FaultyLedger<L> {
    inner: L,
    script: Mutex<Script>,
}

#[derive(Debug, Default)]
struct Script {
    transitions: u64,
    reads: u64,
    scheduled: Vec<(CallKind, u64, Fault)>,
    injected: Vec<InjectedFault>,
}

impl<L: EffectLedger> FaultyLedger<L> {
    /// Wraps `inner` with no faults scheduled.
    pub fn new(inner: L) -> Self {
        FaultyLedger {
            inner,
            script: Mutex::new(Script::default()),
        }
    }

    /// Schedules `fault` for the `nth` call (from 1) of `kind`; builder form of
    /// [`schedule`](Self::schedule).
    #[must_use]
    pub fn fail(self, kind: CallKind, nth: u64, fault: Fault) -> Self {
        self.schedule(kind, nth, fault);
        self
    }

    /// Schedules `fault` for the `nth` call (from 1, counted since the ledger
    /// was wrapped) of `kind`. Scheduling a call that already happened has no effect.
    pub fn schedule(&self, kind: CallKind, nth: u64, fault: Fault) {
        self.script().scheduled.push((kind, nth, fault));
    }

    /// Schedules `fault` for the next call of `kind`.
    pub fn fail_next(&self, kind: CallKind, fault: Fault) {
        let mut script = self.script();
        let next = script.count(kind) + 1;
        script.scheduled.push((kind, next, fault));
    }

    /// How many calls of `kind` were made so far (failed ones included).
    pub fn calls(&self, kind: CallKind) -> u64 {
        self.script().count(kind)
    }

    /// The faults that fired so far, in order.
    pub fn injected(&self) -> Vec<InjectedFault> {
        self.script().injected.clone()
    }

    /// The wrapped ledger.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// Unwraps the ledger.
    pub fn into_inner(self) -> L {
        self.inner
    }

    fn script(&self) -> MutexGuard<'_, Script> {
        // The script is only counters and lists; a panic elsewhere cannot leave
        // it half-updated in a way that matters.
        self.script
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts the call and runs it, unless the script says otherwise.
    fn call<T>(
        &self,
        kind: CallKind,
        method: &'static str,
        forward: impl FnOnce(&L) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        let fault = self.next_fault(kind, method);
        self.inject(kind, method, fault, forward)
    }

    /// A transition: forwarded, failed, or answered without being written.
    fn transition(
        &self,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
        forward: impl FnOnce(&L) -> Result<TransitionOutcome, LedgerError>,
    ) -> Result<TransitionOutcome, LedgerError> {
        let method = transition.name();
        let fault = self.next_fault(CallKind::Transition, method);
        if let Some((_, Fault::LoseWrite)) = fault {
            if durability != WriteDurability::Deferrable {
                // A durable write cannot be lost: no fault fired.
                self.script().injected.pop();
                return forward(&self.inner);
            }
            let current = self.inner.get(operation_id)?;
            let plan = effect_core::transition::plan(
                operation_id,
                current,
                transition,
                SystemClock.now(),
            )?;
            return Ok(plan.outcome);
        }
        self.inject(CallKind::Transition, method, fault, forward)
    }

    /// Counts a call of `kind` and returns the fault scheduled for it.
    fn next_fault(&self, kind: CallKind, method: &'static str) -> Option<(u64, Fault)> {
        let mut script = self.script();
        let call = match kind {
            CallKind::Transition => {
                script.transitions += 1;
                script.transitions
            }
            CallKind::Read => {
                script.reads += 1;
                script.reads
            }
        };
        let fault = script
            .scheduled
            .iter()
            .find(|(k, n, _)| *k == kind && *n == call)
            .map(|(_, _, fault)| *fault);
        if let Some(fault) = fault {
            script.injected.push(InjectedFault {
                kind,
                call,
                method,
                fault,
            });
        }
        fault.map(|fault| (call, fault))
    }

    fn inject<T>(
        &self,
        kind: CallKind,
        method: &'static str,
        fault: Option<(u64, Fault)>,
        forward: impl FnOnce(&L) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        match fault {
            None => forward(&self.inner),
            Some((call, Fault::FailBefore)) => Err(LedgerError::unavailable(
                format!(
                    "injected fault: {kind} call {call} ({method}) failed before reaching the ledger"
                ),
                None,
            )),
            // Only a deferrable transition is lost (see `transition`).
            Some((_, Fault::LoseWrite)) => forward(&self.inner),
            Some((call, Fault::FailAfterCommit)) => {
                forward(&self.inner)?;
                Err(LedgerError::unavailable(
                    format!(
                        "injected fault: {kind} call {call} ({method}) reached the ledger, \
                         but its acknowledgement was lost"
                    ),
                    None,
                ))
            }
        }
    }
}

impl Script {
    fn count(&self, kind: CallKind) -> u64 {
        match kind {
            CallKind::Transition => self.transitions,
            CallKind::Read => self.reads,
        }
    }
}

#[deny(clippy::missing_trait_methods)]
impl<L: EffectLedger> EffectLedger for FaultyLedger<L> {
    fn apply_with(
        &self,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        self.transition(operation_id, transition, durability, |l| {
            l.apply_with(operation_id, transition, durability)
        })
    }

    fn sync(&self) -> Result<(), LedgerError> {
        self.inner.sync()
    }

    fn get(&self, operation_id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        self.call(CallKind::Read, "get", |l| l.get(operation_id))
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        self.call(CallKind::Read, "list", |l| l.list(query))
    }

    fn events(&self, operation_id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.call(CallKind::Read, "events", |l| l.events(operation_id))
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.call(CallKind::Read, "events_after", |l| {
            l.events_after(after, limit)
        })
    }

    fn count_events(
        &self,
        operation_ids: &[&str],
        event_type: &str,
    ) -> Result<Vec<u64>, LedgerError> {
        self.call(CallKind::Read, "count_events", |l| {
            l.count_events(operation_ids, event_type)
        })
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        self.call(CallKind::Read, "stats", |l| l.stats())
    }

    fn longest_lock_wait(&self) -> Option<Duration> {
        self.inner.longest_lock_wait()
    }
}
