//! The fault injector: transparent when idle, exact when scripted.

use effect_core::EffectLedgerExt as _;
use std::sync::Arc;
use std::time::Duration;

use effect_conformance as conformance;
use effect_core::{
    Claim, EffectLedger, EffectStatus, LedgerErrorKind, ListQuery, MemoryLedger, NewOperation,
    RequestFingerprint,
};
use effect_testkit::executor_suite;
use effect_testkit::faults::{CallKind, Fault, FaultyLedger, InjectedFault};

fn op() -> NewOperation {
    NewOperation::new(
        "capture_payment",
        "1",
        RequestFingerprint::of_canonical(r#"{"invoice_id":"INV-1"}"#),
    )
    .with_provider_idempotency_key(Some("capture:INV-1".into()))
}

fn claim(token: &str) -> Claim {
    Claim::new(token, Duration::from_secs(60))
}

#[test]
fn without_faults_it_passes_the_whole_suite() {
    let factory = || -> Arc<dyn EffectLedger> { Arc::new(FaultyLedger::new(MemoryLedger::new())) };
    conformance::run_all(&factory);
    executor_suite::run_all(&factory);
}

#[test]
fn fail_before_writes_nothing_and_only_hits_the_scripted_call()
-> Result<(), Box<dyn std::error::Error>> {
    let ledger =
        FaultyLedger::new(MemoryLedger::new()).fail(CallKind::Transition, 2, Fault::FailBefore);
    ledger.prepare("op", &op())?;
    let err = ledger
        .claim_dispatch("op", &claim("w1"))
        .expect_err("the 2nd transition fails");
    assert_eq!(err.kind(), LedgerErrorKind::Unavailable);
    assert!(
        err.to_string().contains("before reaching the ledger"),
        "{err}"
    );
    let record = ledger.get("op")?.expect("prepared");
    assert_eq!(record.status, EffectStatus::Prepared);
    assert_eq!(ledger.events("op")?.len(), 1);
    assert!(
        ledger.claim_dispatch("op", &claim("w1"))?,
        "the 3rd transition goes through"
    );
    assert_eq!(ledger.calls(CallKind::Transition), 3);
    assert_eq!(
        ledger.injected(),
        vec![InjectedFault {
            kind: CallKind::Transition,
            call: 2,
            method: "claim dispatch",
            fault: Fault::FailBefore,
        }]
    );
    Ok(())
}

#[test]
fn fail_after_commit_writes_but_reports_an_error() -> Result<(), Box<dyn std::error::Error>> {
    let ledger = FaultyLedger::new(MemoryLedger::new());
    ledger.prepare("op", &op())?;
    ledger.fail_next(CallKind::Transition, Fault::FailAfterCommit);
    let err = ledger
        .claim_dispatch("op", &claim("w1"))
        .expect_err("the acknowledgement is lost");
    assert_eq!(err.kind(), LedgerErrorKind::Unavailable);
    let record = ledger.inner().get("op")?.expect("prepared");
    assert_eq!(
        record.status,
        EffectStatus::Dispatched,
        "the claim committed"
    );
    assert_eq!(record.owner_token.as_deref(), Some("w1"));
    assert!(
        !ledger.claim_dispatch("op", &claim("w2"))?,
        "a second claim loses"
    );
    Ok(())
}

#[test]
fn inner_errors_pass_through_a_fail_after_commit() {
    let ledger = FaultyLedger::new(MemoryLedger::new()).fail(
        CallKind::Transition,
        1,
        Fault::FailAfterCommit,
    );
    let err = ledger
        .claim_dispatch("missing", &claim("w"))
        .expect_err("no such operation");
    assert_eq!(err.kind(), LedgerErrorKind::NotFound);
    assert_eq!(ledger.injected().len(), 1);
}

#[test]
fn reads_are_counted_and_failed_separately() -> Result<(), Box<dyn std::error::Error>> {
    let ledger = FaultyLedger::new(MemoryLedger::new()).fail(CallKind::Read, 2, Fault::FailBefore);
    ledger.prepare("op", &op())?;
    assert!(ledger.get("op")?.is_some());
    let err = ledger
        .list(&ListQuery::new(10))
        .expect_err("the 2nd read fails");
    assert_eq!(err.kind(), LedgerErrorKind::Unavailable);
    assert_eq!(ledger.events("op")?.len(), 1);
    assert_eq!(ledger.stats()?.counts.len(), EffectStatus::ALL.len());
    assert_eq!(ledger.events_after(0, 10)?.len(), 1);
    assert_eq!(ledger.calls(CallKind::Read), 5);
    assert_eq!(ledger.calls(CallKind::Transition), 1);
    Ok(())
}

#[test]
fn every_transition_method_is_counted_once() -> Result<(), Box<dyn std::error::Error>> {
    use effect_core::{Confirmation, Evidence, ManualAction, ManualResolution, Transition};
    let ledger = FaultyLedger::new(MemoryLedger::new());
    let evidence = Evidence::new();
    ledger.prepare("a", &op())?;
    ledger.claim_dispatch("a", &claim("w"))?;
    ledger.renew_lease("a", "w", Duration::from_secs(60))?;
    ledger.mark_outcome_unknown("a", Some("w"), "timeout", &evidence)?;
    ledger.quarantine("a", "parked", &evidence)?;
    ledger.reset_for_retry("a", &evidence)?;
    ledger.claim_dispatch("a", &claim("w2"))?;
    ledger.mark_rejected("a", "w2", "declined")?;
    ledger.apply("b", &Transition::PrepareAndClaim(op(), claim("w")))?;
    ledger.mark_confirmed(
        "b",
        Some("w"),
        &Confirmation {
            output: serde_json::json!(1),
            provider_operation_id: None,
            evidence: Evidence::new(),
        },
    )?;
    let resolution = ManualResolution::new(
        ManualAction::Reject,
        effect_core::Audit::new("ops", "r", "e"),
    );
    let err = ledger
        .resolve_manually("b", &resolution)
        .expect_err("confirmed is final");
    assert_eq!(err.kind(), LedgerErrorKind::InvalidTransition);
    assert_eq!(ledger.calls(CallKind::Transition), 11);
    assert_eq!(ledger.calls(CallKind::Read), 0);
    Ok(())
}

#[test]
fn the_suite_sees_injected_faults() {
    let failures = conformance::run_checks(
        &|| -> Arc<dyn EffectLedger> {
            Arc::new(FaultyLedger::new(MemoryLedger::new()).fail(
                CallKind::Transition,
                1,
                Fault::FailBefore,
            ))
        },
        &conformance::CHECKS[..1],
    );
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].contains("Unavailable"), "{failures:?}");
}
