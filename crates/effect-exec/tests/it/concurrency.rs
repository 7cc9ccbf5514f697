//! Concurrent callers, leases, heartbeats and stale owners.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, SystemTime};

use effect_core::{EffectLedger, EffectLedgerExt as _, EffectStatus, ManualClock, MemoryLedger};
use effect_exec::ExecutorOptions;
use serde_json::Value;

use crate::provider::{
    FakeProvider, Fault, GUARANTEED_ONLY, PROBE_ONLY, contract, handler, invoice,
};
use crate::{event_types, executor_with, ledger};

#[test]
fn concurrent_caller_during_a_live_dispatch_gets_in_progress() {
    let provider = FakeProvider::new(false).script(&[Fault::Held]);
    let ledger = ledger();
    let exec = executor_with(&ledger, ExecutorOptions::default());
    let c = contract(&provider, PROBE_ONLY);
    let first = {
        let (exec, c, h) = (exec.clone(), c.clone(), handler(&provider));
        thread::spawn(move || exec.execute(&c, &invoice("INV-20"), h).unwrap())
    };
    provider.wait_until_held();
    let second = exec
        .execute(&c, &invoice("INV-20"), handler(&provider))
        .unwrap();
    provider.release();
    assert!(second.in_progress);
    assert_eq!(second.status, EffectStatus::Dispatched);
    assert!(first.join().unwrap().is_confirmed());
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[test]
fn a_waiting_caller_gets_the_live_owners_result() {
    let provider = FakeProvider::new(false).script(&[Fault::Held]);
    let ledger = ledger();
    let options = ExecutorOptions::default().wait_for_in_progress(Some(Duration::from_secs(60)));
    let exec = executor_with(&ledger, options);
    let c = contract(&provider, PROBE_ONLY);
    let first = {
        let (exec, c, h) = (exec.clone(), c.clone(), handler(&provider));
        thread::spawn(move || exec.execute(&c, &invoice("INV-21"), h).unwrap())
    };
    // The first caller owns the live dispatch; the second waits for it
    // (or, released first, replays it), and never dispatches.
    provider.wait_until_held();
    let releaser = {
        let provider = Arc::clone(&provider);
        thread::spawn(move || provider.release())
    };
    let second = exec
        .execute(&c, &invoice("INV-21"), handler(&provider))
        .unwrap();
    assert!(second.is_confirmed());
    assert!(!second.in_progress);
    assert!(second.duplicate_suppressed);
    assert_eq!(second.output, first.join().unwrap().output);
    releaser.join().unwrap();
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[test]
#[allow(clippy::disallowed_methods)] // Real time is the point: the heartbeat runs on it.
fn heartbeat_keeps_a_slow_live_handler_from_being_taken_over() {
    // The handler runs three times longer than the lease; the heartbeat renews it.
    let lease = Duration::from_millis(300);
    let provider = FakeProvider::new(false).script(&[Fault::Held]);
    let ledger = ledger();
    let options = ExecutorOptions::default()
        .dispatch_lease(lease)
        .lease_heartbeat(Duration::from_millis(30));
    let exec = executor_with(&ledger, options);
    let c = contract(&provider, PROBE_ONLY);
    let first = {
        let (exec, c, h) = (exec.clone(), c.clone(), handler(&provider));
        thread::spawn(move || exec.execute(&c, &invoice("INV-22"), h).unwrap())
    };
    provider.wait_until_held();
    // Real time is the point here: the handler stays inside for three
    // leases, and only the heartbeat keeps its lease alive.
    let start = std::time::Instant::now();
    let mut tries = 0;
    while start.elapsed() < lease * 3 || tries < 5 {
        let second = exec
            .execute(&c, &invoice("INV-22"), handler(&provider))
            .unwrap();
        assert!(
            second.in_progress,
            "second caller must see in_progress, got {second:?}"
        );
        tries += 1;
        thread::sleep(Duration::from_millis(25));
    }
    provider.release();
    assert!(first.join().unwrap().is_confirmed());
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
    assert_eq!(
        event_types(&ledger, "invoice:INV-22:capture"),
        ["prepared", "dispatched", "confirmed"]
    );
}

#[test]
fn stale_worker_after_lease_takeover_cannot_finalize() {
    // No heartbeat renewal within the test: the lease expires while A still runs.
    let options = ExecutorOptions::default()
        .dispatch_lease(Duration::from_millis(50))
        .lease_heartbeat(Duration::from_secs(60));
    let provider = FakeProvider::new(true).script(&[Fault::Held]);
    // Leases are judged on the ledger's clock, which the test moves.
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    ));
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::with_clock(clock.clone()));
    let exec = executor_with(&ledger, options);
    let c = contract(&provider, GUARANTEED_ONLY);
    let a = {
        let (exec, c, h) = (exec.clone(), c.clone(), handler(&provider));
        thread::spawn(move || exec.execute(&c, &invoice("INV-23"), h).unwrap())
    };
    // A is inside its handler when its 50 ms lease ends.
    provider.wait_until_held();
    clock.advance(Duration::from_millis(51));
    // B finds the expired lease, records the interruption and, covered by the
    // guaranteed key, dispatches again with the same key.
    let b = exec
        .execute(&c, &invoice("INV-23"), handler(&provider))
        .unwrap();
    assert!(b.is_confirmed());
    provider.release();
    let a = a.join().unwrap();
    // A's confirmation was refused (stale token); it reports B's stored
    // outcome, and what its handler returned is kept as a late observation.
    assert_eq!(a.status, EffectStatus::Confirmed);
    let events = event_types(&ledger, "invoice:INV-23:capture");
    assert_eq!(
        events,
        [
            "prepared",
            "dispatched",
            "outcome_unknown",
            "retry_authorized",
            "dispatched",
            "confirmed",
            "late_observation"
        ]
    );
    let late = &ledger.events("invoice:INV-23:capture").unwrap()[6];
    assert_eq!(
        (late.data["attempt"].as_u64(), late.data["outcome"].as_str()),
        (Some(1), Some("returned"))
    );
    let unknown = &ledger.events("invoice:INV-23:capture").unwrap()[2];
    assert_eq!(
        unknown.data["evidence"]["dispatch_interruption"],
        "lease_expired"
    );
    assert_eq!(
        unknown.data["evidence"]["handler_may_still_be_running"],
        true
    );
    // Two sends with one key: the provider committed one effect.
    assert_eq!((provider.handler_calls(), provider.committed()), (2, 1));
}

#[test]
fn sixteen_callers_of_one_operation_dispatch_once() {
    let provider = FakeProvider::new(false).script(&[Fault::SlowCommit(Duration::from_millis(50))]);
    let ledger = ledger();
    let options = ExecutorOptions::default().wait_for_in_progress(Some(Duration::from_secs(5)));
    let exec = executor_with(&ledger, options);
    let c = contract(&provider, PROBE_ONLY);
    let barrier = Arc::new(Barrier::new(16));
    let callers: Vec<_> = (0..16)
        .map(|_| {
            let (exec, c, h, barrier) = (
                exec.clone(),
                c.clone(),
                handler(&provider),
                Arc::clone(&barrier),
            );
            thread::spawn(move || {
                barrier.wait();
                exec.execute(&c, &invoice("INV-24"), h).unwrap()
            })
        })
        .collect();
    let results: Vec<_> = callers.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(results.iter().all(|r| r.is_confirmed()));
    let outputs: Vec<&Option<Value>> = results.iter().map(|r| &r.output).collect();
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[test]
fn reconcile_settles_an_expired_dispatch_without_running_the_handler() {
    let options = ExecutorOptions::default()
        .dispatch_lease(Duration::from_secs(60))
        .lease_heartbeat(Duration::from_secs(60));
    let provider = FakeProvider::new(false).script(&[Fault::Held]);
    let ledger = ledger();
    let exec = executor_with(&ledger, options);
    let c = contract(&provider, PROBE_ONLY);
    let worker = {
        let (exec, c, h) = (exec.clone(), c.clone(), handler(&provider));
        thread::spawn(move || exec.execute(&c, &invoice("INV-25"), h).unwrap())
    };
    provider.wait_until_held();
    // Live lease: reconcile leaves the dispatch alone.
    let live = exec.reconcile(&c, &invoice("INV-25")).unwrap();
    assert_eq!(live.status, EffectStatus::Dispatched);
    // Nobody took the lease over, so the live worker still finalizes.
    provider.release();
    assert!(worker.join().unwrap().is_confirmed());
    // A dispatch claimed by a worker that died: its lease has already ended.
    let provider2 = FakeProvider::new(false);
    let c2 = contract(&provider2, PROBE_ONLY);
    ledger
        .apply(
            "invoice:INV-26:capture",
            &effect_core::Transition::PrepareAndClaim(
                effect_core::NewOperation::new(
                    "capture_payment",
                    "1",
                    effect_core::RequestFingerprint::of_value(&invoice("INV-26")),
                )
                .with_provider_idempotency_key(Some("capture:INV-26".into())),
                effect_core::Claim::new("dead-worker", Duration::ZERO),
            ),
        )
        .unwrap();
    let settled = exec.reconcile(&c2, &invoice("INV-26")).unwrap();
    // The probe finds nothing, but the dead worker's handler may still send.
    assert_eq!(settled.status, EffectStatus::Quarantined);
    assert_eq!(settled.evidence["dispatch_interruption"], "lease_expired");
    assert_eq!((provider2.handler_calls(), provider2.committed()), (0, 0));
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[test]
fn the_bounded_wait_for_a_live_owner_runs_on_the_injected_clock() {
    use effect_core::{Claim, Clock, EffectLedgerExt, ManualClock, MemoryLedger};
    use std::time::UNIX_EPOCH;
    let clock = Arc::new(ManualClock::new(
        UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    ));
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::with_clock(clock.clone()));
    let provider = FakeProvider::new(false);
    let c = contract(&provider, PROBE_ONLY);
    // Another caller holds a live dispatch of the operation, for an hour.
    let id = "invoice:INV-WAIT:capture";
    let op = effect_exec::EffectExecutor::new(Arc::clone(&ledger));
    drop(op);
    ledger
        .prepare(
            id,
            &effect_core::NewOperation::new(
                "capture_payment",
                "1",
                effect_core::RequestFingerprint::of_value(&invoice("INV-WAIT")),
            )
            .with_provider_idempotency_key(Some("capture:INV-WAIT".into())),
        )
        .unwrap();
    let held = Claim::new("elsewhere", Duration::from_secs(3600));
    assert!(ledger.claim_dispatch(id, &held).unwrap());
    let options = ExecutorOptions::default().wait_for_in_progress(Some(Duration::from_secs(120)));
    let exec = effect_exec::EffectExecutor::with_clock(Arc::clone(&ledger), options, clock.clone())
        .with_sleeper(clock.clone());
    let started = clock.now();
    let result = exec
        .execute(&c, &invoice("INV-WAIT"), handler(&provider))
        .unwrap();
    assert!(result.in_progress, "{result:?}");
    let waited = clock.now().duration_since(started).unwrap();
    assert!(
        waited >= Duration::from_secs(120) && waited < Duration::from_secs(121),
        "waited {waited:?} on the manual clock"
    );
    assert_eq!(provider.handler_calls(), 0);
}
