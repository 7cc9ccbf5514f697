//! Human approval bound to the exact call (docs/approval.md): nothing is
//! dispatched before an approval, an approval dispatches its request once,
//! and a denial, an expired approval or other arguments dispatch nothing.
//! Every test counts what the fake provider committed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use effect_core::{
    Approval, Clock, EffectContract, EffectLedger, EffectStatus, LedgerErrorKind, Outcome,
};
use effect_exec::{RecoveryWorker, WaitingFor, waiting};
use serde_json::{Value, json};

use crate::event_types;
use crate::provider::{Fault, handler, invoice};
use crate::world::{World, worlds};

const HOUR: Duration = Duration::from_secs(3600);

impl World {
    /// A refund-like capture that requires approval, with a probe.
    fn contract(&self, store_intent: bool) -> EffectContract {
        let provider = Arc::clone(&self.provider);
        effect_test_support::contracts::capture_payment()
            .outcome_probe(move |_args, key| provider.probe(key))
            .store_intent(store_intent)
            .requires_approval(true)
            .build()
            .unwrap()
    }

    fn call(&self, contract: &EffectContract, args: &Value) -> effect_core::EffectResult {
        self.executor()
            .execute(contract, args, handler(&self.provider))
            .unwrap()
    }

    fn approval(&self, id: &str, valid: Duration) -> Approval {
        Approval {
            request_fingerprint: self.ledger.get(id).unwrap().unwrap().request_fingerprint,
            actor: "lead@example.com".into(),
            reason: "matches ticket T-9".into(),
            expires_at: self.clock.now() + valid,
        }
    }
}

#[test]
fn the_first_call_waits_and_an_approval_dispatches_it_once() {
    for w in worlds() {
        let contract = w.contract(false);
        let args = invoice("INV-1");
        let first = w.call(&contract, &args);
        assert_eq!(first.outcome(), Outcome::AwaitingApproval, "{}", w.store);
        assert_eq!(first.attempts, 0, "{}", w.store);
        assert!(!first.in_progress, "{}", w.store);
        assert_eq!(
            w.provider.handler_calls(),
            0,
            "{}: nothing dispatched",
            w.store
        );
        // Asking again before an approval changes nothing.
        let again = w.call(&contract, &args);
        assert_eq!(again.status, EffectStatus::AwaitingApproval, "{}", w.store);
        assert_eq!(
            event_types(&w.ledger, &first.operation_id),
            ["prepared"],
            "{}",
            w.store
        );

        let approval = w.approval(&first.operation_id, HOUR);
        w.executor()
            .operator()
            .approve(&first.operation_id, approval.clone())
            .unwrap();
        let approved = w.call(&contract, &args);
        assert!(approved.is_confirmed(), "{}: {approved:?}", w.store);
        assert_eq!(approved.attempts, 1, "{}", w.store);
        let replay = w.call(&contract, &args);
        assert!(replay.duplicate_suppressed, "{}", w.store);
        assert_eq!(w.provider.committed(), 1, "{}: one effect", w.store);
        assert_eq!(
            event_types(&w.ledger, &first.operation_id),
            ["prepared", "approved", "dispatched", "confirmed"],
            "{}",
            w.store
        );
        // A second use of the same approval is refused, and writes nothing.
        let err = w
            .executor()
            .operator()
            .approve(&first.operation_id, approval)
            .unwrap_err();
        assert_eq!(
            err.ledger_kind(),
            Some(LedgerErrorKind::InvalidTransition),
            "{}: {err}",
            w.store
        );
        assert_eq!(
            event_types(&w.ledger, &first.operation_id).len(),
            4,
            "{}",
            w.store
        );
    }
}

#[test]
fn changed_arguments_conflict_and_an_approval_of_them_is_refused() {
    for w in worlds() {
        let contract = w.contract(false);
        let first = w.call(&contract, &invoice("INV-1"));
        let changed = json!({"invoice_id": "INV-1", "amount_cents": 999_999});
        let err = w
            .executor()
            .execute(&contract, &changed, handler(&w.provider))
            .unwrap_err();
        assert!(err.is_conflict(), "{}: {err}", w.store);
        // An approval naming the changed request's fingerprint does not fit.
        let other = effect_core::RequestFingerprint::of_value(&changed).stored();
        let approval = Approval {
            request_fingerprint: other,
            ..w.approval(&first.operation_id, HOUR)
        };
        let err = w
            .executor()
            .operator()
            .approve(&first.operation_id, approval)
            .unwrap_err();
        assert!(err.is_conflict(), "{}: {err}", w.store);
        assert_eq!(
            event_types(&w.ledger, &first.operation_id),
            ["prepared"],
            "{}",
            w.store
        );
        assert_eq!(w.provider.handler_calls(), 0, "{}", w.store);
    }
}

#[test]
fn an_expired_approval_dispatches_nothing() {
    for w in worlds() {
        let contract = w.contract(false);
        let args = invoice("INV-1");
        let id = w.call(&contract, &args).operation_id;
        let approval = w.approval(&id, Duration::from_secs(60));
        w.executor().operator().approve(&id, approval).unwrap();
        w.clock.advance(Duration::from_secs(61));
        let late = w.call(&contract, &args);
        assert_eq!(late.status, EffectStatus::AwaitingApproval, "{}", w.store);
        assert_eq!(w.provider.handler_calls(), 0, "{}", w.store);
        assert_eq!(
            event_types(&w.ledger, &id),
            ["prepared", "approved", "approval_expired"],
            "{}",
            w.store
        );
        // Approving an already expired approval is refused outright.
        let stale = Approval {
            expires_at: w.clock.now() - Duration::from_secs(1),
            ..w.approval(&id, HOUR)
        };
        let err = w.executor().operator().approve(&id, stale).unwrap_err();
        assert_eq!(
            err.ledger_kind(),
            Some(LedgerErrorKind::InvalidTransition),
            "{}",
            w.store
        );
    }
}

#[test]
fn a_denial_rejects_the_call_terminally() {
    for w in worlds() {
        let contract = w.contract(false);
        let args = invoice("INV-1");
        let id = w.call(&contract, &args).operation_id;
        let denied = w
            .executor()
            .operator()
            .deny(&id, "lead@example.com", "duplicate of INV-0")
            .unwrap();
        assert_eq!(denied.status, EffectStatus::Rejected, "{}", w.store);
        let after = w.call(&contract, &args);
        match after.outcome() {
            Outcome::Rejected { reason } => {
                assert!(reason.contains("lead@example.com"), "{}: {reason}", w.store);
            }
            other => panic!("{}: expected a rejection, got {other:?}", w.store),
        }
        assert_eq!(w.provider.handler_calls(), 0, "{}", w.store);
        assert_eq!(
            event_types(&w.ledger, &id),
            ["prepared", "approval_denied"],
            "{}",
            w.store
        );
    }
}

#[test]
fn a_retry_after_an_uncertain_outcome_waits_for_a_new_approval() {
    for w in worlds() {
        let contract = w.contract(false);
        let args = invoice("INV-1");
        let id = w.call(&contract, &args).operation_id;
        w.executor()
            .operator()
            .approve(&id, w.approval(&id, HOUR))
            .unwrap();
        // The dispatch fails before the provider commits; the probe says
        // not committed, which allows a retry, but the approval is used.
        w.provider.script(&[Fault::BeforeCommit]);
        let result = w.call(&contract, &args);
        assert_eq!(
            result.status,
            EffectStatus::AwaitingApproval,
            "{}: {result:?}",
            w.store
        );
        assert_eq!(result.attempts, 1, "{}", w.store);
        assert_eq!(w.provider.handler_calls(), 1, "{}", w.store);
        assert_eq!(w.provider.committed(), 0, "{}", w.store);
        w.executor()
            .operator()
            .approve(&id, w.approval(&id, HOUR))
            .unwrap();
        let retried = w.call(&contract, &args);
        assert!(retried.is_confirmed(), "{}: {retried:?}", w.store);
        assert_eq!(retried.attempts, 2, "{}", w.store);
        assert_eq!(w.provider.committed(), 1, "{}", w.store);
    }
}

#[test]
fn the_recovery_worker_waits_for_the_approval_then_dispatches_once() {
    for w in worlds() {
        let contract = w.contract(true);
        let args = invoice("INV-1");
        let id = w.call(&contract, &args).operation_id;
        let worker = RecoveryWorker::new(w.executor())
            .register(contract.clone(), handler(&w.provider))
            .unwrap()
            .min_age(Duration::ZERO);
        let before = worker.run_once().unwrap();
        assert_eq!(before.awaiting_approval, 1, "{}: {before:?}", w.store);
        assert_eq!(before.confirmed, 0, "{}", w.store);
        assert_eq!(w.provider.handler_calls(), 0, "{}", w.store);

        w.executor()
            .operator()
            .approve(&id, w.approval(&id, HOUR))
            .unwrap();
        let after = worker.run_once().unwrap();
        assert_eq!(after.confirmed, 1, "{}: {after:?}", w.store);
        let again = worker.run_once().unwrap();
        assert_eq!(again.examined, 0, "{}: {again:?}", w.store);
        assert_eq!(w.provider.committed(), 1, "{}", w.store);
        assert_eq!(
            w.ledger.get(&id).unwrap().unwrap().status,
            EffectStatus::Confirmed
        );
    }
}

#[test]
fn an_approved_operation_refused_for_weakened_terms_is_listed_as_waiting_once_blocked() {
    for w in worlds() {
        let contract = w.contract(true);
        let approved = w.call(&contract, &invoice("INV-1")).operation_id;
        let unapproved = w.call(&contract, &invoice("INV-2")).operation_id;
        w.executor()
            .operator()
            .approve(&approved, w.approval(&approved, HOUR))
            .unwrap();
        // The same name and version deployed claiming the key is guaranteed,
        // which the stored terms deny: the worker dispatches nothing.
        let provider = Arc::clone(&w.provider);
        let weakened = effect_test_support::contracts::capture_payment()
            .provider_idempotency_guaranteed(true)
            .outcome_probe(move |_args, key| provider.probe(key))
            .store_intent(true)
            .requires_approval(true)
            .build()
            .unwrap();
        let worker = RecoveryWorker::new(w.executor())
            .register(weakened, handler(&w.provider))
            .unwrap()
            .min_age(Duration::ZERO);
        for pass in 0..2 {
            let report = worker.run_once().unwrap();
            assert_eq!(
                report.contract_weakened, 1,
                "{} pass {pass}: {report:?}",
                w.store
            );
            assert_eq!(
                report.awaiting_approval, 1,
                "{} pass {pass}: {report:?}",
                w.store
            );
            assert_eq!(report.confirmed, 0, "{} pass {pass}: {report:?}", w.store);
        }
        assert_eq!(w.provider.handler_calls(), 0, "{}: nothing sent", w.store);
        assert_eq!(w.provider.committed(), 0, "{}", w.store);
        assert_eq!(
            event_types(&w.ledger, &approved),
            ["prepared", "approved", "recovery_blocked"],
            "{}: recorded once in two passes",
            w.store
        );

        // `waiting` lists the blocked one, still awaiting_approval; the one
        // waiting for a human is not listed.
        let listed = waiting(w.ledger.as_ref()).unwrap();
        let got: Vec<(&str, WaitingFor, EffectStatus, bool)> = listed
            .iter()
            .map(|l| {
                (
                    l.operation_id.as_str(),
                    l.waiting_for,
                    l.status,
                    l.reason.is_some(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [(
                approved.as_str(),
                WaitingFor::ContractWeakened,
                EffectStatus::AwaitingApproval,
                true
            )],
            "{}",
            w.store
        );
        assert_ne!(unapproved, approved);

        // The stored terms deployed again: the worker dispatches it once,
        // and it leaves the listing.
        let restored = RecoveryWorker::new(w.executor())
            .register(contract.clone(), handler(&w.provider))
            .unwrap()
            .min_age(Duration::ZERO);
        let report = restored.run_once().unwrap();
        assert_eq!(report.confirmed, 1, "{}: {report:?}", w.store);
        assert_eq!(w.provider.committed(), 1, "{}", w.store);
        assert!(
            waiting(w.ledger.as_ref()).unwrap().is_empty(),
            "{}",
            w.store
        );
    }
}

#[test]
fn callers_racing_on_one_approval_dispatch_once() {
    for w in worlds() {
        let contract = w.contract(false);
        let args = invoice("INV-1");
        let id = w.call(&contract, &args).operation_id;
        w.executor()
            .operator()
            .approve(&id, w.approval(&id, HOUR))
            .unwrap();
        // The winner's handler holds until every other caller has answered.
        w.provider.script(&[Fault::Held]);
        const CALLERS: usize = 8;
        let barrier = Barrier::new(CALLERS);
        let (answered, in_progress) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..CALLERS {
                scope.spawn(|| {
                    let executor = w.executor();
                    barrier.wait();
                    let result = executor
                        .execute(&contract, &args, handler(&w.provider))
                        .unwrap();
                    match result.status {
                        EffectStatus::Confirmed => {}
                        EffectStatus::Dispatched if result.in_progress => {
                            in_progress.fetch_add(1, Ordering::SeqCst);
                        }
                        other => panic!("{}: unexpected {other}: {result:?}", w.store),
                    }
                    answered.fetch_add(1, Ordering::SeqCst);
                });
            }
            w.provider.wait_until_held();
            while answered.load(Ordering::SeqCst) < CALLERS - 1 {
                std::thread::yield_now();
            }
            w.provider.release();
        });
        assert_eq!(
            in_progress.load(Ordering::SeqCst),
            CALLERS - 1,
            "{}",
            w.store
        );
        assert_eq!(w.provider.handler_calls(), 1, "{}", w.store);
        assert_eq!(w.provider.committed(), 1, "{}", w.store);
        let record = w.ledger.get(&id).unwrap().unwrap();
        assert_eq!(
            (record.status, record.attempts),
            (EffectStatus::Confirmed, 1)
        );
    }
}
