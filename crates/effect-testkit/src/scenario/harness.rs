//! The machinery between a scenario and the user's provider: the fault
//! schedule applied to every call, a gate for concurrent callers, and a
//! ledger that stops answering when its process "dies".

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use effect_core::{
    EffectLedger, EffectRecord, LedgerError, LedgerEvent, LedgerStats, ListQuery, Transition,
    TransitionOutcome,
};
use serde_json::Value;

use super::schedule::{FaultSchedule, LookupFault, PerformFault};
use super::{Lookup, ScenarioProvider};

/// How long the harness waits for a thread it is coordinating with before it
/// gives up; only reached when a scenario is broken (for example a held
/// perform that never runs), so the run ends instead of hanging.
pub(crate) const COORDINATION_TIMEOUT: Duration = Duration::from_secs(10);

/// A provider behind the fault schedule. Counts every call.
#[derive(Debug)]
pub(crate) struct Faulted {
    inner: Arc<dyn ScenarioProvider>,
    schedule: FaultSchedule,
    performs: AtomicUsize,
    look_ups: AtomicUsize,
    in_flight: Mutex<usize>,
    idle: Condvar,
    pub(crate) gate: Gate,
    /// Releases late commits once every caller has returned.
    pub(crate) late: Gate,
    /// Set when a [`PerformFault::Crash`] fired.
    pub(crate) crashed: Arc<AtomicBool>,
}

impl Faulted {
    pub(crate) fn new(inner: Arc<dyn ScenarioProvider>, schedule: FaultSchedule) -> Self {
        Faulted {
            inner,
            schedule,
            performs: AtomicUsize::new(0),
            look_ups: AtomicUsize::new(0),
            in_flight: Mutex::new(0),
            idle: Condvar::new(),
            gate: Gate::default(),
            late: Gate::default(),
            crashed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Opens the gates no one would open in this run: the concurrency gate
    /// with a single caller or no held first perform, the late-commit gate without a deadline (the
    /// caller waits for its handler, so holding it would deadlock).
    pub(crate) fn open_gates_nobody_will_open(&self) {
        if self.schedule.callers() == 1 || self.schedule.perform_fault(1) != PerformFault::Hold {
            self.gate.open();
        }
        if self.schedule.handler_deadline().is_none() {
            self.late.open();
        }
    }

    pub(crate) fn inner(&self) -> &Arc<dyn ScenarioProvider> {
        &self.inner
    }

    pub(crate) fn perform_calls(&self) -> usize {
        self.performs.load(Ordering::SeqCst)
    }

    pub(crate) fn look_up_calls(&self) -> usize {
        self.look_ups.load(Ordering::SeqCst)
    }

    /// One request to the provider, as the schedule says.
    pub(crate) fn perform(&self, arguments: &Value, key: Option<&str>) -> Result<Value, String> {
        let call = self.performs.fetch_add(1, Ordering::SeqCst) + 1;
        let _flight = InFlight::start(self);
        let key = if self.schedule.ignores_idempotency_keys() {
            None
        } else {
            key
        };
        let send = || {
            self.inner
                .perform(arguments, key)
                .map_err(|err| err.to_string())
        };
        match self.schedule.perform_fault(call) {
            PerformFault::Commit => send(),
            PerformFault::FailBeforeCommit => {
                Err("connection reset before the provider received the request".to_owned())
            }
            PerformFault::LoseAck => {
                send()?;
                Err("timed out waiting for the provider's acknowledgement".to_owned())
            }
            PerformFault::LateCommit => {
                self.late.hold();
                send()
            }
            PerformFault::Crash => {
                send()?;
                self.crashed.store(true, Ordering::SeqCst);
                Err("the worker process died after the provider committed".to_owned())
            }
            PerformFault::Hold => {
                self.gate.hold();
                send()
            }
        }
    }

    /// One lookup, as the schedule says.
    pub(crate) fn look_up(&self, arguments: &Value, key: Option<&str>) -> Result<Lookup, String> {
        let call = self.look_ups.fetch_add(1, Ordering::SeqCst) + 1;
        match self.schedule.look_up_fault(call) {
            LookupFault::Answer => self
                .inner
                .look_up(arguments, key)
                .map_err(|err| err.to_string()),
            LookupFault::Unavailable => Err("provider lookup API unavailable (503)".to_owned()),
            LookupFault::Pending => Ok(Lookup::Pending),
            LookupFault::Unknown => Ok(Lookup::Unknown),
            LookupFault::Conflict => Ok(Lookup::Conflict {
                held: serde_json::json!({
                    "invoice_id": arguments["invoice_id"],
                    "amount": "another amount",
                }),
            }),
        }
    }

    /// Waits until no perform is running (late commits have landed); false
    /// when one is still running after the coordination timeout.
    pub(crate) fn wait_idle(&self) -> bool {
        let in_flight = lock(&self.in_flight);
        let (in_flight, _) = self
            .idle
            .wait_timeout_while(in_flight, COORDINATION_TIMEOUT, |n| *n > 0)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *in_flight == 0
    }
}

/// Counts a running perform until dropped.
struct InFlight<'a>(&'a Faulted);

impl<'a> InFlight<'a> {
    fn start(faulted: &'a Faulted) -> Self {
        *lock(&faulted.in_flight) += 1;
        InFlight(faulted)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        *lock(&self.0.in_flight) -= 1;
        self.0.idle.notify_all();
    }
}

/// Holds performs until the harness opens it.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    entered: bool,
    open: bool,
}

impl Gate {
    /// Signals that a held perform arrived and waits until the gate opens.
    pub(crate) fn hold(&self) {
        let mut state = lock(&self.state);
        state.entered = true;
        self.changed.notify_all();
        let _opened = self
            .changed
            .wait_timeout_while(state, COORDINATION_TIMEOUT, |s| !s.open)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
    }

    /// Waits until a held perform arrived (or the gate is open anyway); false
    /// after the coordination timeout.
    pub(crate) fn wait_entered(&self) -> bool {
        let state = lock(&self.state);
        let (state, _) = self
            .changed
            .wait_timeout_while(state, COORDINATION_TIMEOUT, |s| !s.entered && !s.open)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.entered || state.open
    }

    /// Lets the held perform continue.
    pub(crate) fn open(&self) {
        lock(&self.state).open = true;
        self.changed.notify_all();
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded values are plain counters and flags, valid after any panic.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The ledger as one worker process sees it: once the process has died
/// (`crashed`), none of its calls reach the store any more. The store itself,
/// shared with the next process, is untouched.
#[derive(Debug)]
pub(crate) struct ProcessLedger {
    pub(crate) inner: Arc<dyn EffectLedger>,
    pub(crate) crashed: Arc<AtomicBool>,
}

impl ProcessLedger {
    fn alive(&self) -> Result<&dyn EffectLedger, LedgerError> {
        if self.crashed.load(Ordering::SeqCst) {
            Err(LedgerError::unavailable(
                "the worker process died; its ledger connection is gone",
                None,
            ))
        } else {
            Ok(self.inner.as_ref())
        }
    }
}

#[deny(clippy::missing_trait_methods)]
impl EffectLedger for ProcessLedger {
    fn apply_with(
        &self,
        id: &str,
        transition: &Transition,
        durability: effect_core::WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        self.alive()?.apply_with(id, transition, durability)
    }

    fn sync(&self) -> Result<(), LedgerError> {
        self.alive()?.sync()
    }

    fn get(&self, id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        self.alive()?.get(id)
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        self.alive()?.list(query)
    }

    fn events(&self, id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.alive()?.events(id)
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.alive()?.events_after(after, limit)
    }

    fn count_events(
        &self,
        operation_ids: &[&str],
        event_type: &str,
    ) -> Result<Vec<u64>, LedgerError> {
        self.alive()?.count_events(operation_ids, event_type)
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        self.alive()?.stats()
    }

    fn longest_lock_wait(&self) -> Option<std::time::Duration> {
        self.inner.longest_lock_wait()
    }
}

#[cfg(test)]
mod tests;
