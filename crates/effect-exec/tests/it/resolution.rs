//! Manual confirm / reject / authorize retry: audited, only from uncertain statuses.

use effect_core::{EffectStatus, LedgerErrorKind};
use effect_exec::Audit;
use serde_json::json;

use crate::provider::{FakeProvider, Fault, NEITHER, contract, handler, invoice};
use crate::{event_types, executor, ledger};

fn quarantined(
    id: &str,
) -> (
    std::sync::Arc<dyn effect_core::EffectLedger>,
    std::sync::Arc<FakeProvider>,
) {
    let provider = FakeProvider::new(false).script(&[Fault::AfterCommit]);
    let ledger = ledger();
    let result = executor(&ledger)
        .execute(
            &contract(&provider, NEITHER),
            &invoice(id),
            handler(&provider),
        )
        .unwrap();
    assert_eq!(result.status, EffectStatus::Quarantined);
    (ledger, provider)
}

fn audit() -> Audit {
    Audit::new("on-call", "found in provider dashboard", "INC-42")
}

#[test]
fn manual_confirm_is_audited_and_replayed_without_the_handler() {
    let (ledger, provider) = quarantined("INV-30");
    let exec = executor(&ledger);
    let id = "invoice:INV-30:capture";
    let record = exec
        .operator()
        .confirm_manually(
            id,
            json!({"payment_id": "pay-000001"}),
            Some("pay-000001".into()),
            audit(),
        )
        .unwrap();
    assert_eq!(record.status, EffectStatus::Confirmed);
    let events = ledger.events(id).unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.event_type, "manually_confirmed");
    assert_eq!(last.data["evidence"]["actor"], "on-call");
    assert_eq!(last.data["evidence"]["evidence_reference"], "INC-42");
    assert_eq!(last.data["provider_operation_id"], "pay-000001");
    let replay = exec
        .execute(
            &contract(&provider, NEITHER),
            &invoice("INV-30"),
            handler(&provider),
        )
        .unwrap();
    assert!(replay.duplicate_suppressed);
    assert_eq!(replay.output, Some(json!({"payment_id": "pay-000001"})));
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[test]
fn manual_reject_is_terminal() {
    let (ledger, provider) = quarantined("INV-31");
    let exec = executor(&ledger);
    let record = exec
        .operator()
        .reject_manually("invoice:INV-31:capture", audit())
        .unwrap();
    assert_eq!(record.status, EffectStatus::Rejected);
    let again = exec
        .execute(
            &contract(&provider, NEITHER),
            &invoice("INV-31"),
            handler(&provider),
        )
        .unwrap();
    assert_eq!(again.status, EffectStatus::Rejected);
    assert_eq!(provider.handler_calls(), 1);
    assert_eq!(
        event_types(&ledger, "invoice:INV-31:capture")
            .last()
            .unwrap(),
        "manually_rejected"
    );
}

#[test]
fn manual_retry_authorization_lets_the_next_execution_dispatch() {
    let (ledger, provider) = quarantined("INV-32");
    let exec = executor(&ledger);
    let record = exec
        .operator()
        .authorize_retry("invoice:INV-32:capture", audit())
        .unwrap();
    assert_eq!(record.status, EffectStatus::Prepared);
    assert_eq!(record.evidence["handler_may_still_be_running"], false);
    let result = exec
        .execute(
            &contract(&provider, NEITHER),
            &invoice("INV-32"),
            handler(&provider),
        )
        .unwrap();
    assert!(result.is_confirmed());
    // The operator authorized a second send without a key: two effects, by decision.
    assert_eq!((provider.handler_calls(), provider.committed()), (2, 2));
}

/// A retry authorization while the record says a previous handler may still
/// run is refused, writing nothing; the operator's statement that it stopped
/// lets it through, and the event keeps what was known beside the statement.
#[test]
fn manual_retry_while_a_handler_may_still_run_needs_the_operators_statement() {
    use effect_core::EffectLedgerExt as _;
    let (ledger, provider) = quarantined("INV-34");
    let exec = executor(&ledger);
    let id = "invoice:INV-34:capture";
    let mut running = effect_core::Evidence::new();
    running.insert("handler_may_still_be_running".into(), true.into());
    assert!(
        ledger
            .mark_outcome_unknown(id, None, "lease expired", &running)
            .unwrap()
    );
    let before = ledger.events(id).unwrap();
    let err = exec.operator().authorize_retry(id, audit()).unwrap_err();
    assert_eq!(err.ledger_kind(), Some(LedgerErrorKind::InvalidTransition));
    let cause = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        cause
            .as_deref()
            .is_some_and(|c| c.contains("a previous handler may still be running")),
        "{cause:?}"
    );
    assert_eq!(
        ledger.events(id).unwrap(),
        before,
        "a refusal writes nothing"
    );
    let record = exec
        .operator()
        .authorize_retry_handler_stopped(id, audit())
        .unwrap();
    assert_eq!(record.status, EffectStatus::Prepared);
    let events = ledger.events(id).unwrap();
    let evidence = &events.last().unwrap().data["evidence"];
    assert_eq!(evidence["handler_stopped_asserted"], true);
    assert_eq!(
        evidence["evidence_before_resolution"]["handler_may_still_be_running"],
        true
    );
    let result = exec
        .execute(
            &contract(&provider, NEITHER),
            &invoice("INV-34"),
            handler(&provider),
        )
        .unwrap();
    assert!(result.is_confirmed());
    assert_eq!((provider.handler_calls(), provider.committed()), (2, 2));
}

#[test]
fn manual_resolution_needs_actor_reason_evidence_and_an_uncertain_status() {
    let (ledger, _provider) = quarantined("INV-33");
    let exec = executor(&ledger);
    let id = "invoice:INV-33:capture";
    for bad in [
        Audit::new("", "r", "e"),
        Audit::new("a", " ", "e"),
        Audit::new("a", "r", ""),
    ] {
        let err = exec.operator().reject_manually(id, bad).unwrap_err();
        assert_eq!(err.ledger_kind(), Some(LedgerErrorKind::InvalidInput));
    }
    exec.operator().reject_manually(id, audit()).unwrap();
    let err = exec.operator().authorize_retry(id, audit()).unwrap_err();
    assert_eq!(err.ledger_kind(), Some(LedgerErrorKind::InvalidTransition));
    let missing = exec
        .operator()
        .reject_manually("nope", audit())
        .unwrap_err();
    assert_eq!(missing.ledger_kind(), Some(LedgerErrorKind::NotFound));
    // Nothing was written by the refused attempts.
    assert_eq!(
        event_types(&ledger, id).last().unwrap(),
        "manually_rejected"
    );
    assert_eq!(event_types(&ledger, id).len(), 5);
}

#[test]
fn a_manual_confirmation_too_deep_to_store_is_refused() {
    let (ledger, _provider) = quarantined("INV-39");
    let id = "invoice:INV-39:capture";
    let before = ledger.events(id).unwrap().len();
    let mut output = json!("leaf");
    for _ in 0..=effect_core::canonical::MAX_DEPTH {
        output = json!([output]);
    }
    let err = executor(&ledger)
        .operator()
        .confirm_manually(id, output, None, audit())
        .unwrap_err();
    let effect_exec::ExecError::Ledger { source, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(source.kind(), LedgerErrorKind::InvalidInput);
    assert_eq!(
        ledger.get(id).unwrap().unwrap().status,
        EffectStatus::Quarantined
    );
    assert_eq!(ledger.events(id).unwrap().len(), before);
}
