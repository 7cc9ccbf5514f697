//! Compensation (docs/compensation.md): a refund of a confirmed capture runs
//! as an effect of its own, by the same recovery rules. Every case counts
//! what both fake providers committed: captures and refunds.

use std::sync::Arc;
use std::time::Duration;

use effect_core::compensation::CompensationLink;
use effect_core::{EffectContract, EffectLedger, EffectStatus, OutcomeProbeResult, compensation};
use effect_exec::{CompensationRefusal, EffectExecutor, ExecError, HandlerError, RecoveryWorker};
use serde_json::{Value, json};

use crate::provider::{
    BOTH, FakeProvider, Fault, GUARANTEED_ONLY, NEITHER, PROBE_ONLY, ProbeAnswer, Variant,
    contract, handler, invoice,
};
use crate::{event_types, executor, ledger};

const CAPTURE: &str = "invoice:INV-1:capture";
const REFUND: &str = "invoice:INV-1:capture:compensation";

/// The refund contract: its id and key derive from the original's id; its
/// probe asks the refund provider.
fn refund_contract(refunds: &Arc<FakeProvider>, variant: Variant) -> EffectContract {
    let mut builder = EffectContract::builder("refund_payment", compensation::operation_id);
    if variant.key {
        builder = builder
            .provider_idempotency_key(|args| {
                Ok(args[compensation::ARGUMENT]
                    .as_str()
                    .map(|original| format!("refund:{original}")))
            })
            .provider_idempotency_guaranteed(variant.guaranteed);
    }
    if variant.probe {
        let refunds = Arc::clone(refunds);
        builder = builder.outcome_probe(move |_args, key| refunds.probe(key));
    }
    builder.build().unwrap()
}

/// The capture contract (probe and key), compensated by the refund.
fn capture_contract(
    captures: &Arc<FakeProvider>,
    refunds: &Arc<FakeProvider>,
    refund: Variant,
) -> EffectContract {
    let mut builder = effect_test_support::contracts::capture_payment()
        .provider_idempotency_guaranteed(true)
        .store_intent(true)
        .compensation(refund_contract(refunds, refund), |original| {
            let arguments = original
                .arguments
                .ok_or("the capture's intent is not stored")?;
            Ok(json!({
                "invoice_id": original.output["invoice_id"],
                "payment_id": original.output["payment_id"],
                "amount_cents": arguments["amount_cents"],
            }))
        });
    let probe = Arc::clone(captures);
    builder = builder.outcome_probe(move |_args, key| probe.probe(key));
    builder.build().unwrap()
}

struct World {
    ledger: Arc<dyn EffectLedger>,
    executor: EffectExecutor,
    captures: Arc<FakeProvider>,
    refunds: Arc<FakeProvider>,
    capture: EffectContract,
}

/// A ledger with INV-1 captured and confirmed once.
fn captured(refund: Variant, refund_faults: &[Fault]) -> World {
    let ledger = ledger();
    let executor = executor(&ledger);
    let captures = FakeProvider::new(true);
    let refunds = FakeProvider::new(refund.guaranteed).script(refund_faults);
    let capture = capture_contract(&captures, &refunds, refund);
    let result = executor
        .execute(&capture, &invoice("INV-1"), handler(&captures))
        .unwrap();
    assert!(result.is_confirmed());
    World {
        ledger,
        executor,
        captures,
        refunds,
        capture,
    }
}

fn link(world: &World) -> Option<CompensationLink> {
    world.ledger.get(CAPTURE).unwrap().unwrap().compensation()
}

/// One row of the compensation's fault matrix: the refund's fault and
/// contract, the status the compensation ends in, the refunds committed.
fn check(refund: Variant, fault: Fault, status: EffectStatus, refunds: usize) {
    let world = captured(refund, &[fault]);
    let result = world
        .executor
        .compensate(&world.capture, CAPTURE, handler(&world.refunds))
        .unwrap();
    let row = format!("{refund:?} {fault:?}");
    assert_eq!(result.status, status, "{row}: {result:?}");
    assert_eq!(result.operation_id, REFUND, "{row}");
    assert_eq!(world.captures.committed(), 1, "{row}: captures");
    assert_eq!(world.refunds.committed(), refunds, "{row}: refunds");
    let state = link(&world).map(|link| link.state);
    let expected_state = match status {
        EffectStatus::Confirmed => "confirmed",
        EffectStatus::Rejected => "rejected",
        _ => "started",
    };
    assert_eq!(state.as_deref(), Some(expected_state), "{row}");
    let refund_record = world.ledger.get(REFUND).unwrap().unwrap();
    assert_eq!(refund_record.compensates(), Some(CAPTURE), "{row}");
    assert!(event_types(&world.ledger, REFUND).contains(&"compensation_of".to_owned()));
    // The original is still confirmed: its capture happened.
    assert_eq!(
        world.ledger.get(CAPTURE).unwrap().unwrap().status,
        EffectStatus::Confirmed
    );
    // A second compensation replays (or reconciles): never a second refund.
    let again = world
        .executor
        .compensate(&world.capture, CAPTURE, handler(&world.refunds))
        .unwrap();
    assert_eq!(
        world.refunds.committed(),
        refunds,
        "{row}: refunds after a repeat"
    );
    assert_eq!(
        world.captures.committed(),
        1,
        "{row}: captures after a repeat"
    );
    if status == EffectStatus::Confirmed {
        assert!(again.duplicate_suppressed, "{row}");
        assert_eq!(again.output, result.output, "{row}");
    }
    assert_eq!(again.operation_id, REFUND);
}

#[test]
fn the_compensations_fault_matrix_commits_one_refund_where_the_contract_makes_it_safe() {
    use EffectStatus::{Confirmed, Quarantined, Rejected};
    for variant in [PROBE_ONLY, GUARANTEED_ONLY, BOTH] {
        check(variant, Fault::None, Confirmed, 1);
        // The refund's acknowledgement is lost: reconciled, not repeated.
        check(variant, Fault::AfterCommit, Confirmed, 1);
        check(variant, Fault::BeforeCommit, Confirmed, 1);
        check(variant, Fault::Reject, Rejected, 0);
    }
    check(NEITHER, Fault::None, Confirmed, 1);
    // Without a probe or a guaranteed key, a lost acknowledgement is
    // quarantined for an operator: never a second refund.
    check(NEITHER, Fault::AfterCommit, Quarantined, 1);
    check(NEITHER, Fault::BeforeCommit, Quarantined, 0);
}

#[test]
fn the_trail_links_both_ways() {
    let world = captured(BOTH, &[]);
    world
        .executor
        .compensate(&world.capture, CAPTURE, handler(&world.refunds))
        .unwrap();
    assert_eq!(
        event_types(&world.ledger, CAPTURE),
        [
            "prepared",
            "dispatched",
            "confirmed",
            "compensation_started",
            "compensated"
        ]
    );
    assert_eq!(
        event_types(&world.ledger, REFUND),
        ["prepared", "compensation_of", "dispatched", "confirmed"]
    );
    let link = link(&world).unwrap();
    assert_eq!(
        (link.contract_name.as_str(), link.contract_version.as_str()),
        ("refund_payment", "1")
    );
    // The refund's handler got the capture's output, its stored intent and
    // the refund's own key.
    let refund = world.ledger.get(REFUND).unwrap().unwrap();
    assert_eq!(
        refund.provider_idempotency_key.as_deref(),
        Some("refund:invoice:INV-1:capture")
    );
    let seen = Arc::new(std::sync::Mutex::new(Value::Null));
    let again = {
        let seen = Arc::clone(&seen);
        world
            .executor
            .compensate(&world.capture, CAPTURE, move |args: Value, _ctx| {
                *seen.lock().unwrap() = args;
                Ok::<_, HandlerError>(json!({}))
            })
    }
    .unwrap();
    assert!(again.duplicate_suppressed);
    assert_eq!(
        *seen.lock().unwrap(),
        Value::Null,
        "a replay runs no handler"
    );
}

#[test]
fn only_a_confirmed_original_is_compensated_and_nothing_is_written_otherwise() {
    let ledger = ledger();
    let executor = executor(&ledger);
    let captures = FakeProvider::new(false).script(&[Fault::AfterCommit, Fault::Reject]);
    let refunds = FakeProvider::new(true);
    let capture = capture_contract(&captures, &refunds, BOTH);
    // Quarantined: the capture's acknowledgement was lost and the probe is down.
    let uncertain_contract = {
        let refund = refund_contract(&refunds, BOTH);
        effect_test_support::contracts::capture_payment_without_key()
            .store_intent(true)
            .compensation(refund, |_| Ok(json!({})))
            .build()
            .unwrap()
    };
    let quarantined = executor
        .execute(&uncertain_contract, &invoice("INV-Q"), handler(&captures))
        .unwrap();
    assert_eq!(quarantined.status, EffectStatus::Quarantined);
    let rejected = executor
        .execute(&capture, &invoice("INV-R"), handler(&captures))
        .unwrap();
    assert_eq!(rejected.status, EffectStatus::Rejected);
    let waiting_contract = EffectContract::builder("approve_me", |_| Ok("approval:1".into()))
        .requires_approval(true)
        .compensation(refund_contract(&refunds, BOTH), |_| Ok(json!({})))
        .build()
        .unwrap();
    let waiting = executor
        .execute(&waiting_contract, &json!({}), handler(&captures))
        .unwrap();
    assert_eq!(waiting.status, EffectStatus::AwaitingApproval);

    let refused = |contract: &EffectContract, id: &str| {
        let before = ledger.events(id).unwrap();
        let err = executor
            .compensate(contract, id, handler(&refunds))
            .unwrap_err();
        assert_eq!(ledger.events(id).unwrap(), before, "{id}: nothing written");
        assert!(
            ledger.get(&format!("{id}:compensation")).unwrap().is_none(),
            "{id}: no compensation recorded"
        );
        match err {
            ExecError::CompensationRefused { refusal, .. } => refusal,
            other => panic!("{id}: {other}"),
        }
    };
    assert_eq!(
        refused(&uncertain_contract, "invoice:INV-Q:capture"),
        CompensationRefusal::Uncertain {
            status: EffectStatus::Quarantined
        }
    );
    assert_eq!(
        refused(&capture, "invoice:INV-R:capture"),
        CompensationRefusal::Rejected
    );
    assert_eq!(
        refused(&waiting_contract, "approval:1"),
        CompensationRefusal::NeverDispatched {
            status: EffectStatus::AwaitingApproval
        }
    );
    // Under another contract than the one recorded, or one without a compensation.
    let other_version = effect_test_support::contracts::capture_payment()
        .version("2")
        .build()
        .unwrap();
    assert!(matches!(
        refused(&other_version, "invoice:INV-R:capture"),
        CompensationRefusal::OtherContract { .. }
    ));
    let confirmed = executor
        .execute(
            &contract(&captures, BOTH),
            &invoice("INV-C"),
            handler(&captures),
        )
        .unwrap();
    assert!(confirmed.is_confirmed());
    assert!(matches!(
        refused(&contract(&captures, BOTH), "invoice:INV-C:capture"),
        CompensationRefusal::NoCompensation { .. }
    ));
    let missing = executor
        .compensate(&capture, "invoice:NOPE:capture", handler(&refunds))
        .unwrap_err();
    assert_eq!(
        missing.ledger_kind(),
        Some(effect_core::LedgerErrorKind::NotFound)
    );
    let message = ExecError::CompensationRefused {
        operation_id: "op".into(),
        refusal: CompensationRefusal::Uncertain {
            status: EffectStatus::OutcomeUnknown,
        },
    }
    .to_string();
    assert!(message.contains("uncertain (outcome_unknown)"), "{message}");
    assert_eq!(refunds.committed(), 0);
}

#[test]
fn a_recovery_worker_runs_a_requested_compensation_once() {
    let world = captured(BOTH, &[]);
    let worker = RecoveryWorker::new(world.executor.clone())
        .register_compensation(world.capture.clone(), handler(&world.refunds))
        .unwrap()
        .min_age(Duration::ZERO);
    assert_eq!(
        worker.run_once().unwrap().compensated,
        0,
        "nothing requested"
    );
    assert!(
        world
            .executor
            .operator()
            .request_compensation(CAPTURE, "", "reason", "T-1")
            .is_err()
    );
    let requested = world
        .executor
        .operator()
        .request_compensation(CAPTURE, "ops@example.com", "customer cancelled", "T-1")
        .unwrap();
    assert_eq!(requested.status, EffectStatus::Confirmed);
    assert!(requested.compensation_request().is_some());
    let report = worker.run_once().unwrap();
    assert_eq!((report.compensated, report.failed), (1, 0), "{report:?}");
    assert_eq!(world.refunds.committed(), 1);
    assert_eq!(link(&world).unwrap().state, "confirmed");
    let original = world.ledger.get(CAPTURE).unwrap().unwrap();
    assert!(original.compensation_request().is_none());
    let again = worker.run_once().unwrap();
    assert_eq!(again.compensated, 0, "{again:?}");
    assert_eq!(world.refunds.committed(), 1);
    assert_eq!(world.captures.committed(), 1);
    assert_eq!(
        event_types(&world.ledger, CAPTURE)[3..],
        [
            "compensation_requested",
            "compensation_started",
            "compensated"
        ]
    );
}

#[test]
fn a_recovery_worker_settles_a_compensation_its_caller_left_uncertain() {
    // The refund commits, its acknowledgement is lost, and the provider's
    // lookup says "pending": the caller is left with an uncertain refund.
    let world = captured(PROBE_ONLY, &[Fault::AfterCommit]);
    world.refunds.probe_script(&[ProbeAnswer::Pending]);
    let first = world
        .executor
        .compensate(&world.capture, CAPTURE, handler(&world.refunds))
        .unwrap();
    assert_eq!(first.status, EffectStatus::OutcomeUnknown);
    assert_eq!(link(&world).unwrap().state, "started");
    let worker = RecoveryWorker::new(world.executor.clone())
        .register_compensation(world.capture.clone(), handler(&world.refunds))
        .unwrap();
    let report = worker.run_once().unwrap();
    assert_eq!(report.compensated, 1, "{report:?}");
    assert_eq!(world.refunds.committed(), 1, "the probe found the refund");
    assert_eq!(world.refunds.handler_calls(), 1);
    assert_eq!(link(&world).unwrap().state, "confirmed");
    assert!(
        RecoveryWorker::new(world.executor.clone())
            .register_compensation(contract(&world.captures, BOTH), handler(&world.refunds))
            .is_err(),
        "a contract without a compensation"
    );
}

#[test]
fn a_compensation_with_a_probe_that_says_committed_needs_no_second_dispatch() {
    // The refund provider's lookup finds a refund made outside (say, from the
    // dashboard) after a lost acknowledgement: confirmed from the probe.
    let world = captured(PROBE_ONLY, &[Fault::BeforeCommit]);
    let probe_answers = Arc::new(std::sync::Mutex::new(vec![OutcomeProbeResult::committed(
        json!({"refund_id": "re-dashboard"}),
    )]));
    let refund = {
        let answers = Arc::clone(&probe_answers);
        EffectContract::builder("refund_payment", compensation::operation_id)
            .outcome_probe(move |_, _| Ok(answers.lock().unwrap().remove(0)))
            .build()
            .unwrap()
    };
    let capture = effect_test_support::contracts::capture_payment()
        .provider_idempotency_guaranteed(true)
        .store_intent(true)
        .compensation(refund, |_| Ok(json!({})))
        .build()
        .unwrap();
    let result = world
        .executor
        .compensate(&capture, CAPTURE, handler(&world.refunds))
        .unwrap();
    assert!(result.is_confirmed());
    assert_eq!(result.output, Some(json!({"refund_id": "re-dashboard"})));
    assert_eq!(world.refunds.committed(), 0);
    assert_eq!(world.refunds.handler_calls(), 1);
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_compensation_reconciles_a_lost_acknowledgement_once() {
    let world = captured(PROBE_ONLY, &[Fault::AfterCommit]);
    let refunds = Arc::clone(&world.refunds);
    let refund = move |args: Value, ctx: effect_exec::HandlerContext| {
        let refunds = Arc::clone(&refunds);
        async move {
            tokio::task::yield_now().await;
            refunds.capture(&args, ctx.provider_key())
        }
    };
    let result = world
        .executor
        .compensate_async(
            &world.capture,
            CAPTURE,
            effect_exec::CallOptions::default(),
            refund.clone(),
        )
        .await
        .unwrap();
    assert!(result.is_confirmed(), "{result:?}");
    let again = world
        .executor
        .compensate_async(
            &world.capture,
            CAPTURE,
            effect_exec::CallOptions::default(),
            refund,
        )
        .await
        .unwrap();
    assert!(again.duplicate_suppressed);
    assert_eq!(world.refunds.committed(), 1);
    assert_eq!(world.refunds.handler_calls(), 1);
    assert_eq!(world.captures.committed(), 1);
    assert_eq!(link(&world).unwrap().state, "confirmed");
}
