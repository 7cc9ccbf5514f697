//! The reconciliation sweep: stuck operations of abandoned runs are settled
//! without the same call coming back, and without running a handler.

use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use effect_core::event;
use effect_core::{
    Claim, EffectContract, EffectLedger, EffectLedgerExt, EffectStatus, NewOperation,
    RequestFingerprint, Sleeper, UnknownOutcomePolicy,
};
use effect_exec::{EffectExecutor, HandlerContext, SweepReport, Sweeper, WaitingFor, waiting};
use serde_json::{Value, json};

use crate::provider::{Fault, PROBE_ONLY, contract, handler, invoice};
use crate::world::{World, memory};

const LEASE: Duration = Duration::from_secs(30);
/// How long a test waits for the spawned sweeper before it fails, rather
/// than hang.
const PATIENCE: Duration = Duration::from_secs(60);

impl World {
    /// A worker claims the dispatch of `args` under `contract` and dies; when
    /// `sent`, its request reached the provider first.
    fn abandoned_by_worker(&self, contract: &EffectContract, args: &Value, sent: bool) -> String {
        let id = contract.operation_id(args).unwrap();
        let key = contract.provider_idempotency_key(args).unwrap();
        let op = NewOperation::new(
            contract.name().to_owned(),
            contract.version().to_owned(),
            RequestFingerprint::of_value(args),
        )
        .with_provider_idempotency_key(key.clone());
        self.ledger.prepare(&id, &op).unwrap();
        let claim = Claim::new(format!("dead-worker-{id}"), LEASE);
        assert!(self.ledger.claim_dispatch(&id, &claim).unwrap());
        if sent {
            let context = HandlerContext::new(&id, contract.name(), contract.version(), 1, key);
            handler(&self.provider)(args.clone(), context).unwrap();
        }
        id
    }

    fn sweeper(&self) -> Sweeper {
        let executor = EffectExecutor::new(Arc::clone(&self.ledger));
        Sweeper::new(executor)
    }
}

fn check(report: &SweepReport, expected: [u64; 6]) {
    let got = [
        report.examined,
        report.confirmed,
        report.retried,
        report.quarantined,
        report.still_unknown,
        report.skipped,
    ];
    assert_eq!(
        got, expected,
        "[examined, confirmed, retried, quarantined, still_unknown, skipped] of {report:?}"
    );
}

#[test]
fn stale_dispatches_are_reconciled_and_live_ones_left_alone() {
    let w = memory();
    let capture = contract(&w.provider, PROBE_ONLY);
    let committed = w.abandoned_by_worker(&capture, &invoice("INV-1"), true);
    let lost = w.abandoned_by_worker(&capture, &invoice("INV-2"), false);
    let sweeper = w.sweeper().register(capture.clone());

    // While the leases are live nothing is stuck.
    check(&sweeper.sweep().unwrap(), [0, 0, 0, 0, 0, 0]);
    w.clock.advance(LEASE + Duration::from_secs(1));
    let live = w.abandoned_by_worker(&capture, &invoice("INV-3"), false);

    let report = sweeper.sweep().unwrap();
    // INV-1 committed: confirmed from the probe. INV-2 did not, but the dead
    // worker's request may still be in flight: quarantined, never resent.
    check(&report, [2, 1, 0, 1, 0, 0]);
    assert_eq!(w.status(&committed), EffectStatus::Confirmed);
    assert_eq!(w.status(&lost), EffectStatus::Quarantined);
    assert_eq!(w.status(&live), EffectStatus::Dispatched);
    assert_eq!(w.provider.committed(), 1, "exactly one effect");
    assert_eq!(w.provider.handler_calls(), 1, "the sweep ran no handler");

    // A second sweep finds nothing left to do.
    check(&sweeper.sweep().unwrap(), [0, 0, 0, 0, 0, 0]);
}

#[test]
fn operations_of_unregistered_contracts_are_reported_and_never_touched() {
    let w = memory();
    let capture = contract(&w.provider, PROBE_ONLY);
    let id = w.abandoned_by_worker(&capture, &invoice("INV-1"), true);
    w.clock.advance(LEASE + Duration::from_secs(1));
    let other_version = effect_test_support::contracts::capture_payment()
        .version("2")
        .build()
        .unwrap();

    let report = w.sweeper().register(other_version).sweep().unwrap();
    check(&report, [1, 0, 0, 0, 0, 1]);
    assert_eq!(report.unregistered, 1);
    assert_eq!(w.status(&id), EffectStatus::Dispatched, "untouched");
    assert_eq!(w.provider.probe_calls(), 0);
}

#[test]
fn outcome_unknown_operations_follow_the_contract_policy() {
    let w = memory();
    let keep = EffectContract::builder("notify", |args| {
        Ok(format!(
            "notify:{}",
            args["to"].as_str().ok_or("missing to")?
        ))
    })
    .unknown_outcome(UnknownOutcomePolicy::KeepUnknown)
    .build()
    .unwrap();
    let id = w.abandoned_by_worker(&keep, &json!({"to": "ada"}), false);
    // The worker recorded the failure, then its run was abandoned.
    let owner = format!("dead-worker-{id}");
    let marked = w
        .ledger
        .mark_outcome_unknown(&id, Some(&owner), "connection reset", &Default::default())
        .unwrap();
    assert!(marked);

    // No probe, no guaranteed key: nothing can settle it, and the policy keeps it.
    let report = w.sweeper().register(keep).sweep().unwrap();
    check(&report, [1, 0, 0, 0, 1, 0]);
    assert_eq!(w.status(&id), EffectStatus::OutcomeUnknown);
}

#[test]
fn looked_up_arguments_must_describe_the_stored_operation() {
    let w = memory();
    let capture = contract(&w.provider, PROBE_ONLY);
    let id = w.abandoned_by_worker(&capture, &invoice("INV-1"), true);
    w.clock.advance(LEASE + Duration::from_secs(1));

    // Arguments with another amount do not match the stored fingerprint.
    let wrong = w.sweeper().register_with_arguments(capture.clone(), |_| {
        Ok(Some(json!({"invoice_id": "INV-1", "amount_cents": 1})))
    });
    check(&wrong.sweep().unwrap(), [1, 0, 0, 0, 0, 1]);
    assert_eq!(w.status(&id), EffectStatus::Dispatched);

    let right = w.sweeper().register_with_arguments(capture, |record| {
        assert_eq!(record.operation_id, "invoice:INV-1:capture");
        Ok(Some(invoice("INV-1")))
    });
    check(&right.sweep().unwrap(), [1, 1, 0, 0, 0, 0]);
    assert_eq!(w.provider.committed(), 1);
}

/// A sleeper the test steps: each pause is announced on a channel and lasts
/// until the test sends a tick (or drops its sender: then pauses are over).
#[derive(Debug)]
struct SteppedSleeper {
    paused: Mutex<mpsc::Sender<Duration>>,
    ticks: Mutex<mpsc::Receiver<()>>,
}

impl SteppedSleeper {
    /// The sleeper, where its pauses are announced, and its ticks.
    fn new() -> (Self, mpsc::Receiver<Duration>, mpsc::Sender<()>) {
        let (paused, pauses) = mpsc::channel();
        let (tick, ticks) = mpsc::channel();
        let sleeper = SteppedSleeper {
            paused: Mutex::new(paused),
            ticks: Mutex::new(ticks),
        };
        (sleeper, pauses, tick)
    }
}

impl Sleeper for SteppedSleeper {
    fn sleep(&self, duration: Duration) {
        // The test may have stopped listening; the pause still happens.
        let _ = self.paused.lock().unwrap().send(duration);
        let _ = self.ticks.lock().unwrap().recv();
    }
}

#[test]
fn a_spawned_sweeper_pauses_through_the_executor_s_sleeper_until_stopped() {
    let w = memory();
    let capture = contract(&w.provider, PROBE_ONLY);
    let first = w.abandoned_by_worker(&capture, &invoice("INV-1"), true);
    w.clock.advance(LEASE + Duration::from_secs(1));
    let (sleeper, pauses, tick) = SteppedSleeper::new();
    let executor = EffectExecutor::new(Arc::clone(&w.ledger)).with_sleeper(Arc::new(sleeper));
    let every = Duration::from_secs(3600);
    let handle = Sweeper::new(executor)
        .register(capture.clone())
        .spawn(every);

    // The first sweep runs at once, then the sweeper pauses for `every`.
    assert_eq!(pauses.recv_timeout(PATIENCE).unwrap(), every);
    assert_eq!(w.status(&first), EffectStatus::Confirmed);
    // What is abandoned during the pause waits for the next tick.
    let second = w.abandoned_by_worker(&capture, &invoice("INV-2"), true);
    w.clock.advance(LEASE + Duration::from_secs(1));
    assert_eq!(w.status(&second), EffectStatus::Dispatched);
    tick.send(()).unwrap();
    assert_eq!(pauses.recv_timeout(PATIENCE).unwrap(), every);
    assert_eq!(w.status(&second), EffectStatus::Confirmed);

    // No more pauses: the sweeper sweeps until it sees the stop.
    drop(tick);
    let reports = handle.stop();
    assert!(reports.len() >= 2, "{reports:?}");
    check(&reports[0], [1, 1, 0, 0, 0, 0]);
    check(&reports[1], [1, 1, 0, 0, 0, 0]);
    for later in &reports[2..] {
        check(later, [0, 0, 0, 0, 0, 0]);
    }
    // The two commits are the dead workers'; the sweeper ran no handler.
    assert_eq!(w.provider.committed(), 2);
}

#[test]
fn stopping_a_spawned_sweeper_ends_its_pause() {
    let w = memory();
    let capture = contract(&w.provider, PROBE_ONLY);
    // The thread sleeper: were the stop to wait the pause out, this test
    // would take an hour.
    let handle = w
        .sweeper()
        .register(capture)
        .spawn(Duration::from_secs(3600));
    let reports = handle.stop();
    assert_eq!(reports.len(), 1, "one sweep, then the stop: {reports:?}");
    check(&reports[0], [0, 0, 0, 0, 0, 0]);
}

#[test]
fn a_sweep_reaches_more_stuck_operations_than_one_list_page() {
    let w = memory();
    let capture = contract(&w.provider, PROBE_ONLY);
    let count = effect_core::MAX_LIST_LIMIT + 5;
    for i in 0..count {
        w.abandoned_by_worker(&capture, &invoice(&format!("INV-{i}")), true);
    }
    w.clock.advance(LEASE + Duration::from_secs(1));
    let report = w.sweeper().register(capture).sweep().unwrap();
    let n = u64::try_from(count).unwrap();
    check(&report, [n, n, 0, 0, 0, 0]);
    assert_eq!(w.provider.committed(), count);
}

/// A sweep reads its listings a page at a time, and reconciles every stuck
/// operation once: a stale dispatch it leaves `outcome_unknown` is not swept
/// again from the second listing in the same sweep.
#[test]
fn a_sweep_over_more_operations_than_a_page_reconciles_each_once() {
    let w = memory();
    let keep = {
        let provider = Arc::clone(&w.provider);
        effect_test_support::contracts::capture_payment_without_key()
            .provider_idempotency_key(|args| {
                Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
            })
            .outcome_probe(move |_args, key| provider.probe(key))
            .unknown_outcome(UnknownOutcomePolicy::KeepUnknown)
            .build()
            .unwrap()
    };
    let mut ids = Vec::new();
    for i in 0..5 {
        let id = w.abandoned_by_worker(&keep, &invoice(&format!("UNKNOWN-{i}")), false);
        let owner = format!("dead-worker-{id}");
        assert!(
            w.ledger
                .mark_outcome_unknown(&id, Some(&owner), "connection reset", &Default::default())
                .unwrap()
        );
        ids.push(id);
    }
    for i in 0..8 {
        ids.push(w.abandoned_by_worker(&keep, &invoice(&format!("STALE-{i}")), false));
    }
    w.clock.advance(LEASE + Duration::from_secs(1));
    w.provider
        .probe_script(&[crate::provider::ProbeAnswer::Unknown; 26]);
    let sweeper = w.sweeper().register(keep).page_size(3);

    let report = sweeper.sweep().unwrap();
    check(&report, [13, 0, 0, 0, 13, 0]);
    assert_eq!(w.provider.probe_calls(), 13, "one probe per operation");
    // Stale: 3 + 3 + 2; outcome_unknown: 3 + 2.
    assert_eq!(report.pages, 5, "{report:?}");
    for id in &ids {
        assert_eq!(w.status(id), EffectStatus::OutcomeUnknown, "{id}");
    }
    assert_eq!(w.provider.handler_calls(), 0);

    // The next sweep finds all 13 in one listing.
    let again = sweeper.sweep().unwrap();
    check(&again, [13, 0, 0, 0, 13, 0]);
    assert_eq!(w.provider.probe_calls(), 26);
}

#[test]
fn an_operation_whose_registered_contract_weakens_its_stored_terms_is_recorded_once_and_left() {
    let w = memory();
    // Claimed under a key the provider does not guarantee, no probe, and a
    // policy that keeps an uncertain outcome for someone to settle.
    let kept = |guaranteed: bool| {
        effect_test_support::contracts::capture_payment_without_key()
            .provider_idempotency_key(|args| {
                Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
            })
            .provider_idempotency_guaranteed(guaranteed)
            .unknown_outcome(UnknownOutcomePolicy::KeepUnknown)
            .build()
            .unwrap()
    };
    let claimed = kept(false);
    w.provider.script(&[Fault::BeforeCommit]);
    let executor = EffectExecutor::new(Arc::clone(&w.ledger));
    let args = invoice("INV-7");
    let result = executor
        .execute(&claimed, &args, handler(&w.provider))
        .unwrap();
    assert_eq!(result.status, EffectStatus::OutcomeUnknown);
    let id = result.operation_id.clone();
    let events_before = w.ledger.events(&id).unwrap().len();

    // The same name and version deployed again claiming the key is
    // guaranteed: under it a retry would look safe. The stored terms say
    // otherwise, so the sweep touches nothing, pass after pass.
    let sweeper = w.sweeper().register(kept(true));
    for pass in 0..3 {
        let report = sweeper.sweep().unwrap();
        check(&report, [1, 0, 0, 0, 0, 1]);
        assert_eq!(report.contract_weakened, 1, "pass {pass}: {report:?}");
        assert_eq!(report.failed, 0, "pass {pass}: {report:?}");
        assert_eq!(report.unregistered, 0, "pass {pass}: {report:?}");
    }
    assert_eq!(w.status(&id), EffectStatus::OutcomeUnknown);
    let events = w.ledger.events(&id).unwrap();
    assert_eq!(events.len(), events_before + 1, "one event in three passes");
    let last = events.last().unwrap();
    assert_eq!(last.event_type, event::RECOVERY_BLOCKED);
    assert_eq!(last.data["reason"], event::BLOCKED_CONTRACT_WEAKENED);
    assert_eq!(
        w.provider.handler_calls(),
        1,
        "only the first call reached the provider"
    );
    assert_eq!(w.provider.committed(), 0, "nothing committed");
    assert_eq!(w.provider.probe_calls(), 0, "nothing probed");

    // `waiting` lists it for an operator, with the weakened term.
    let listed = waiting(w.ledger.as_ref()).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].operation_id, id);
    assert_eq!(listed[0].waiting_for, WaitingFor::ContractWeakened);
    let reason = listed[0].reason.as_deref().unwrap_or_default();
    assert!(reason.contains("stronger terms"), "{reason}");

    // The stored terms deployed again: the sweep reconciles it under them
    // (no probe, no guarantee: the policy keeps it uncertain).
    let report = w.sweeper().register(claimed).sweep().unwrap();
    check(&report, [1, 0, 0, 0, 1, 0]);
    assert_eq!(report.contract_weakened, 0, "{report:?}");
    assert_eq!(w.provider.handler_calls(), 1, "the sweep ran no handler");
}
