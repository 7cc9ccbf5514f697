//! A reconciliation whose probe answer goes stale while it waits: another
//! caller retries the operation meanwhile. The slow caller must start its
//! round again from the current record, never act on the old answer.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread;

use effect_core::{EffectContract, EffectResult, EffectStatus};
use effect_exec::HandlerContext;
use effect_exec::{EffectExecutor, HandlerError};
use serde_json::Value;

use crate::provider::{FakeProvider, Fault, ProbeAnswer, invoice};
use crate::{event_types, executor, ledger};

/// A one-shot pause: the first caller to reach it says so, then waits to be
/// released. Later callers pass straight through.
#[derive(Default)]
struct Gate {
    armed: Mutex<Option<(Sender<()>, Receiver<()>)>>,
}

impl Gate {
    /// Arms the gate; returns (reached, release).
    fn arm(&self) -> (Receiver<()>, Sender<()>) {
        let (reached_tx, reached_rx) = channel();
        let (release_tx, release_rx) = channel();
        *self.armed.lock().unwrap() = Some((reached_tx, release_rx));
        (reached_rx, release_tx)
    }

    fn pass(&self) {
        let taken = self.armed.lock().unwrap().take();
        if let Some((reached, release)) = taken {
            reached.send(()).unwrap();
            release.recv().unwrap();
        }
    }
}

/// The fault provider's contract, with a probe that pauses at `probe_gate`
/// after it has its answer (a slow reply), and a handler that pauses at
/// `handler_gate` before it acts.
fn gated(provider: &Arc<FakeProvider>, probe_gate: &Arc<Gate>) -> EffectContract {
    let (provider, gate) = (Arc::clone(provider), Arc::clone(probe_gate));
    effect_test_support::contracts::capture_payment()
        .outcome_probe(move |_args, key| {
            let answer = provider.probe(key);
            gate.pass();
            answer
        })
        .build()
        .unwrap()
}

fn gated_handler(
    provider: &Arc<FakeProvider>,
    gate: &Arc<Gate>,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
    let (provider, gate) = (Arc::clone(provider), Arc::clone(gate));
    move |args, key| {
        gate.pass();
        provider.capture(&args, key.provider_key())
    }
}

fn spawn_call(
    exec: &EffectExecutor,
    contract: &EffectContract,
    handler: impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static,
    id: &str,
) -> thread::JoinHandle<EffectResult> {
    let (exec, contract, args) = (exec.clone(), contract.clone(), invoice(id));
    thread::spawn(move || exec.execute(&contract, &args, handler).unwrap())
}

/// An executor, a gated contract, and an operation whose attempt 1 failed
/// before the provider accepted it and was quarantined (the provider's
/// scripts start with that failure and a failing probe).
struct Stage {
    ledger: Arc<dyn effect_core::EffectLedger>,
    exec: EffectExecutor,
    contract: EffectContract,
    probe_gate: Arc<Gate>,
    handler_gate: Arc<Gate>,
}

fn quarantined_after_attempt_1(provider: &Arc<FakeProvider>, id: &str) -> Stage {
    let (probe_gate, handler_gate) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
    let ledger = ledger();
    let exec = executor(&ledger);
    let contract = gated(provider, &probe_gate);
    let first = exec
        .execute(
            &contract,
            &invoice(id),
            gated_handler(provider, &handler_gate),
        )
        .unwrap();
    assert_eq!(first.status, EffectStatus::Quarantined);
    Stage {
        ledger,
        exec,
        contract,
        probe_gate,
        handler_gate,
    }
}

/// The exact interleaving of the duplicate: attempt 1 fails before the
/// provider accepts it and is quarantined. B's probe correctly answers
/// `not_committed` but B is slow to act; A resets, dispatches attempt 2, the
/// provider commits it and the answer is lost (A's probe then says
/// `pending`). B's reset must not apply to that newer record: B probes again,
/// finds attempt 2's capture and confirms it. One effect.
#[test]
fn a_stale_not_committed_answer_never_dispatches_again() {
    let provider = FakeProvider::new(false)
        .script(&[Fault::BeforeCommit, Fault::AfterCommit, Fault::None])
        .probe_script(&[
            ProbeAnswer::Fail,    // attempt 1's own call: quarantined
            ProbeAnswer::Lookup,  // B: not committed (about attempt 1)
            ProbeAnswer::Lookup,  // A: not committed, resets
            ProbeAnswer::Pending, // A, after attempt 2 lost its answer
        ]);
    let Stage {
        ledger,
        exec,
        contract,
        probe_gate,
        handler_gate,
    } = quarantined_after_attempt_1(&provider, "INV-STALE");
    let handler = || gated_handler(&provider, &handler_gate);

    let (b_probed, release_b) = probe_gate.arm();
    let b = spawn_call(&exec, &contract, handler(), "INV-STALE");
    b_probed.recv().unwrap();
    let a = spawn_call(&exec, &contract, handler(), "INV-STALE")
        .join()
        .unwrap();
    assert_eq!(a.status, EffectStatus::OutcomeUnknown, "A: {a:?}");
    assert_eq!(a.attempts, 2);
    release_b.send(()).unwrap();
    let b = b.join().unwrap();

    assert_eq!(provider.committed(), 1, "the customer was charged twice");
    assert_eq!(provider.handler_calls(), 2);
    assert!(b.is_confirmed(), "B: {b:?}");
    assert!(!b.in_progress);
    assert_eq!(b.attempts, 2);
    let id = "invoice:INV-STALE:capture";
    assert_eq!(
        event_types(&ledger, id),
        [
            "prepared",
            "dispatched",
            "outcome_unknown",
            "quarantined",
            "retry_authorized",
            "dispatched",
            "outcome_unknown",
            "outcome_unknown",
            "confirmed",
        ]
    );
}

/// B's probe is slow; meanwhile A resets the operation and is dispatching
/// it. B must not report the `dispatched` record as its outcome: it starts
/// its round again, finds A's live dispatch, and answers `in_progress`.
#[test]
fn a_caller_that_loses_the_reset_race_reports_in_progress() {
    let provider = FakeProvider::new(false)
        .script(&[Fault::BeforeCommit, Fault::None])
        .probe_script(&[ProbeAnswer::Fail, ProbeAnswer::Lookup, ProbeAnswer::Lookup]);
    let Stage {
        exec,
        contract,
        probe_gate,
        handler_gate,
        ..
    } = quarantined_after_attempt_1(&provider, "INV-RACE");
    let handler = || gated_handler(&provider, &handler_gate);

    let (b_probed, release_b) = probe_gate.arm();
    let b = spawn_call(&exec, &contract, handler(), "INV-RACE");
    b_probed.recv().unwrap();
    let (a_dispatching, release_a) = handler_gate.arm();
    let a = spawn_call(&exec, &contract, handler(), "INV-RACE");
    a_dispatching.recv().unwrap();
    release_b.send(()).unwrap();
    let b = b.join().unwrap();
    release_a.send(()).unwrap();
    let a = a.join().unwrap();

    assert_eq!(b.status, EffectStatus::Dispatched, "B: {b:?}");
    assert!(b.in_progress, "B ended with a non-answer: {b:?}");
    assert!(a.is_confirmed(), "A: {a:?}");
    assert_eq!((provider.handler_calls(), provider.committed()), (2, 1));
}
