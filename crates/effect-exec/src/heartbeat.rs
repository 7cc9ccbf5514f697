//! Lease heartbeats: one background thread per executor renews the dispatch
//! leases of every handler that is running, so a slow but live handler is
//! never taken over, while a dead process simply stops renewing.
//!
//! Sharing one thread keeps the cost of a dispatch to a map insert and remove,
//! instead of starting and joining a thread per effect.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use effect_core::{EffectLedger, EffectLedgerExt};

/// Renews registered leases until they are released. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeaseKeeper {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    leases: HashMap<u64, Held>,
    next_key: u64,
    /// Whether the renewal thread is alive.
    running: bool,
    /// When the renewal thread wakes next on its own.
    wakes_at: Option<Instant>,
}

#[derive(Debug)]
struct Held {
    renewal: Renewal,
    every: Duration,
    due: Instant,
}

/// What renewing one lease takes.
#[derive(Debug, Clone)]
struct Renewal {
    ledger: Arc<dyn EffectLedger>,
    operation_id: String,
    owner_token: String,
    lease: Duration,
}

/// Keeps one lease renewed until dropped.
#[derive(Debug)]
pub(crate) struct LeaseGuard {
    shared: Arc<Shared>,
    key: u64,
}

impl LeaseKeeper {
    /// Renews `owner_token`'s lease on `operation_id` every `every` until the
    /// returned guard is dropped.
    // The heartbeat keeps real leases alive on a real store: it schedules on
    // the monotonic clock, while the store's own clock judges the lease.
    #[allow(clippy::disallowed_methods)]
    pub(crate) fn hold(
        &self,
        ledger: Arc<dyn EffectLedger>,
        operation_id: String,
        owner_token: String,
        lease: Duration,
        every: Duration,
    ) -> LeaseGuard {
        let every = every.max(Duration::from_millis(1));
        let due = Instant::now() + every;
        let mut state = self.shared.lock();
        let key = state.next_key;
        state.next_key += 1;
        state.leases.insert(
            key,
            Held {
                renewal: Renewal {
                    ledger,
                    operation_id,
                    owner_token,
                    lease,
                },
                every,
                due,
            },
        );
        if !state.running {
            let shared = Arc::clone(&self.shared);
            let started = thread::Builder::new()
                .name("effect-lease-heartbeat".into())
                .spawn(move || renew_until_idle(&shared));
            match started {
                Ok(_) => state.running = true,
                // Without a heartbeat the lease simply expires on schedule; a
                // long handler may then be taken over, which is recorded as uncertain.
                Err(err) => tracing::warn!(error = %err, "could not start the lease heartbeat"),
            }
        }
        // Wake the thread only if it would sleep past this lease's first
        // renewal: a wake-up per dispatch would cost a context switch per effect.
        let wake = state.wakes_at.is_none_or(|at| at > due);
        drop(state);
        if wake {
            self.shared.changed.notify_one();
        }
        LeaseGuard {
            shared: Arc::clone(&self.shared),
            key,
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.shared.lock().leases.remove(&self.key);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent under a panic: every update is one insert or remove.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How long the thread lingers without leases before it ends.
const IDLE: Duration = Duration::from_secs(1);

#[allow(clippy::disallowed_methods)] // Real renewals on the monotonic clock, as in `hold`.
fn renew_until_idle(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        let now = Instant::now();
        let due: Vec<(u64, Renewal)> = state
            .leases
            .iter_mut()
            .filter(|(_, held)| held.due <= now)
            .map(|(key, held)| {
                held.due = now + held.every;
                (*key, held.renewal.clone())
            })
            .collect();
        if !due.is_empty() {
            drop(state);
            let mut lost = Vec::new();
            for (key, renewal) in due {
                let Renewal {
                    ledger,
                    operation_id,
                    owner_token,
                    lease,
                } = renewal;
                match ledger.renew_lease(&operation_id, &owner_token, lease) {
                    Ok(true) => tracing::trace!(operation_id, "dispatch lease renewed"),
                    Ok(false) => {
                        tracing::warn!(
                            operation_id,
                            "dispatch lease lost; another caller took over"
                        );
                        lost.push(key);
                    }
                    // A transient store failure: keep trying until the lease ends.
                    Err(err) => tracing::warn!(operation_id, error = %err, "lease renewal failed"),
                }
            }
            state = shared.lock();
            for key in lost {
                state.leases.remove(&key);
            }
            continue;
        }
        let wait = state
            .leases
            .values()
            .map(|held| held.due.saturating_duration_since(now))
            .min();
        let idle = wait.is_none();
        state.wakes_at = Some(now + wait.unwrap_or(IDLE));
        let (next, timeout) = shared
            .changed
            .wait_timeout(state, wait.unwrap_or(IDLE))
            .unwrap_or_else(PoisonError::into_inner);
        state = next;
        state.wakes_at = None;
        if idle && timeout.timed_out() && state.leases.is_empty() {
            state.running = false;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use effect_core::{Claim, MemoryLedger, NewOperation, RequestFingerprint, Transition};

    use super::*;

    fn lease_until(ledger: &MemoryLedger, id: &str) -> f64 {
        ledger.get(id).unwrap().unwrap().lease_until.unwrap()
    }

    #[test]
    fn renews_until_released_and_stops_for_a_lost_lease() {
        let ledger = Arc::new(MemoryLedger::new());
        for (id, token) in [("a", "owner-a"), ("b", "owner-b")] {
            let op = NewOperation::new("c", "1", RequestFingerprint::of_canonical(id));
            let claim = Claim::new(token, Duration::from_secs(1));
            ledger
                .apply(id, &Transition::PrepareAndClaim(op, claim))
                .unwrap();
        }
        let keeper = LeaseKeeper::default();
        let every = Duration::from_millis(5);
        let lease = Duration::from_secs(1);
        let first_a = lease_until(&ledger, "a");
        let guard_a = keeper.hold(ledger.clone(), "a".into(), "owner-a".into(), lease, every);
        // A stale token: renewals are refused and the keeper lets it go.
        let guard_b = keeper.hold(ledger.clone(), "b".into(), "stale".into(), lease, every);
        let first_b = lease_until(&ledger, "b");
        thread::sleep(Duration::from_millis(60));
        let renewed_a = lease_until(&ledger, "a");
        assert!(renewed_a > first_a, "the live lease was renewed");
        assert_eq!(
            lease_until(&ledger, "b"),
            first_b,
            "a stale owner renews nothing"
        );
        assert!(
            keeper.shared.lock().leases.len() == 1,
            "the lost lease was dropped"
        );
        drop(guard_a);
        drop(guard_b);
        thread::sleep(Duration::from_millis(30));
        let released_a = lease_until(&ledger, "a");
        thread::sleep(Duration::from_millis(30));
        assert_eq!(
            lease_until(&ledger, "a"),
            released_a,
            "no renewal after release"
        );
    }
}
