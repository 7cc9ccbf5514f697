//! The naive baseline: plain retry-on-error, no ledger, no stable key.

use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde_json::Value;

use super::ScenarioProvider;
use super::harness::{COORDINATION_TIMEOUT, Faulted};
use super::report::NaiveReport;
use super::schedule::FaultSchedule;

/// Runs every caller with up to `attempts` tries each and counts the effects.
pub(crate) fn run(
    provider: Arc<dyn ScenarioProvider>,
    schedule: FaultSchedule,
    arguments: &Value,
    attempts: usize,
) -> Result<NaiveReport, String> {
    let callers = schedule.callers();
    let deadline = schedule.handler_deadline();
    let faulted = Arc::new(Faulted::new(provider, schedule));
    faulted.open_gates_nobody_will_open();
    let caller = {
        let faulted = Arc::clone(&faulted);
        let arguments = arguments.clone();
        move || retry_on_error(&faulted, &arguments, attempts, deadline)
    };
    let mut outcomes = Vec::with_capacity(callers);
    if callers > 1 {
        // The first caller's request is held until the others have run, as in
        // the ledger run: without a ledger, nobody sees it in flight.
        let first = thread::spawn(caller.clone());
        faulted.gate.wait_entered();
        let others: Vec<_> = (1..callers)
            .map(|_| thread::spawn(caller.clone()))
            .collect();
        for other in others {
            outcomes.push(other.join().unwrap_or(false));
        }
        faulted.gate.open();
        outcomes.push(first.join().unwrap_or(false));
    } else {
        outcomes.push(caller());
    }
    faulted.late.open();
    if !faulted.wait_idle() {
        return Err("a request of the naive baseline never finished".to_owned());
    }
    let committed = faulted
        .inner()
        .committed_effects()
        .map_err(|err| format!("could not count the naive baseline's effects: {err}"))?;
    Ok(NaiveReport {
        strategy: format!("retry on any error, up to {attempts} attempts, no idempotency key"),
        callers,
        attempts: faulted.perform_calls(),
        succeeded: outcomes.iter().all(|ok| *ok),
        committed_effect_count: committed,
        duplicate_effect_detected: committed > 1,
    })
}

/// One naive caller: send, and on any error (a timeout included) send again.
/// A naive client has no stable identity for the request, so it sends no key.
fn retry_on_error(
    faulted: &Arc<Faulted>,
    arguments: &Value,
    attempts: usize,
    deadline: Option<Duration>,
) -> bool {
    for _ in 0..attempts {
        let sent = match deadline {
            None => faulted.perform(arguments, None).is_ok(),
            Some(deadline) => send_with_deadline(faulted, arguments, deadline),
        };
        if sent {
            return true;
        }
    }
    false
}

/// Sends on a thread and stops waiting at the deadline; the request itself
/// goes on, as a real one would.
fn send_with_deadline(faulted: &Arc<Faulted>, arguments: &Value, deadline: Duration) -> bool {
    let (tx, rx) = mpsc::sync_channel(1);
    let faulted = Arc::clone(faulted);
    let arguments = arguments.clone();
    let spawned = thread::Builder::new()
        .name("naive-request".into())
        .spawn(move || {
            let _ = tx.send(faulted.perform(&arguments, None).is_ok());
        });
    if spawned.is_err() {
        return false;
    }
    rx.recv_timeout(deadline.min(COORDINATION_TIMEOUT))
        .unwrap_or(false)
}
