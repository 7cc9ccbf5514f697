//! docs/spec.md §7, one test per row (sync).

use std::sync::Arc;
use std::time::Duration;

use effect_core::{EffectContract, EffectStatus};
use effect_exec::{CallOptions, HandlerError};
use serde_json::{Value, json};

use crate::provider::{
    BOTH, FakeProvider, Fault, GUARANTEED_ONLY, NEITHER, PROBE_ONLY, ProbeAnswer, contract,
    handler, invoice,
};
use crate::{event_types, executor, ledger};

#[test]
fn provider_commits_ack_lost_probe_confirms() {
    let provider = FakeProvider::new(false).script(&[Fault::AfterCommit]);
    let ledger = ledger();
    let result = executor(&ledger)
        .execute(
            &contract(&provider, PROBE_ONLY),
            &invoice("INV-1"),
            handler(&provider),
        )
        .unwrap();
    assert_eq!(result.status, EffectStatus::Confirmed);
    assert_eq!(result.output.as_ref().unwrap()["payment_id"], "pay-000001");
    assert_eq!(result.provider_operation_id.as_deref(), Some("pay-000001"));
    assert_eq!(result.evidence["probe_status"], "committed");
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
    assert_eq!(
        event_types(&ledger, "invoice:INV-1:capture"),
        ["prepared", "dispatched", "outcome_unknown", "confirmed"]
    );
}

#[test]
fn failure_before_commit_negative_probe_allows_one_retry() {
    let provider = FakeProvider::new(false).script(&[Fault::BeforeCommit]);
    let ledger = ledger();
    let result = executor(&ledger)
        .execute(
            &contract(&provider, PROBE_ONLY),
            &invoice("INV-2"),
            handler(&provider),
        )
        .unwrap();
    assert!(result.is_confirmed());
    assert_eq!(result.attempts, 2);
    assert_eq!((provider.handler_calls(), provider.committed()), (2, 1));
    assert_eq!(
        event_types(&ledger, "invoice:INV-2:capture"),
        [
            "prepared",
            "dispatched",
            "outcome_unknown",
            "retry_authorized",
            "dispatched",
            "confirmed"
        ]
    );
}

#[test]
fn repeated_failures_before_commit_retry_only_once() {
    let provider = FakeProvider::new(false).script(&[Fault::BeforeCommit, Fault::BeforeCommit]);
    let ledger = ledger();
    let exec = executor(&ledger);
    let c = contract(&provider, PROBE_ONLY);
    let result = exec
        .execute(&c, &invoice("INV-2b"), handler(&provider))
        .unwrap();
    // The second failure is reconciled without another dispatch: the call
    // ends with an uncertain status (never a `prepared` record nobody
    // dispatches), and the next call's probe authorizes the retry.
    assert_eq!(result.status, EffectStatus::OutcomeUnknown);
    assert!(!result.in_progress);
    assert_eq!((provider.handler_calls(), provider.committed()), (2, 0));
    let again = exec
        .execute(&c, &invoice("INV-2b"), handler(&provider))
        .unwrap();
    assert!(again.is_confirmed());
    assert_eq!((provider.handler_calls(), provider.committed()), (3, 1));
}

#[test]
fn timeout_without_probe_or_guarantee_is_quarantined_and_not_rerun() {
    let provider = FakeProvider::new(false).script(&[Fault::AfterCommit]);
    let ledger = ledger();
    let exec = executor(&ledger);
    let c = contract(&provider, NEITHER);
    let result = exec
        .execute(&c, &invoice("INV-3"), handler(&provider))
        .unwrap();
    assert_eq!(result.status, EffectStatus::Quarantined);
    assert_eq!(
        result.error.as_deref(),
        Some("no authoritative outcome probe or provider idempotency guarantee is available")
    );
    let again = exec
        .execute(&c, &invoice("INV-3"), handler(&provider))
        .unwrap();
    assert_eq!(again.status, EffectStatus::Quarantined);
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[test]
fn same_id_with_different_arguments_key_or_version_conflicts_before_dispatch() {
    let provider = FakeProvider::new(false);
    let ledger = ledger();
    let exec = executor(&ledger);
    let c = contract(&provider, PROBE_ONLY);
    exec.execute(&c, &invoice("INV-4"), handler(&provider))
        .unwrap();

    let different_args = json!({"invoice_id": "INV-4", "amount_cents": 9999});
    let err = exec
        .execute(&c, &different_args, handler(&provider))
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");

    let other_key = effect_test_support::contracts::capture_payment_without_key()
        .provider_idempotency_key(|_| Ok(Some("another-key".into())))
        .build()
        .unwrap();
    assert!(
        exec.execute(&other_key, &invoice("INV-4"), handler(&provider))
            .unwrap_err()
            .is_conflict()
    );

    let v2 = effect_test_support::contracts::capture_payment_without_key()
        .version("2")
        .provider_idempotency_key(|args| {
            Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
        })
        .build()
        .unwrap();
    assert!(
        exec.execute(&v2, &invoice("INV-4"), handler(&provider))
            .unwrap_err()
            .is_conflict()
    );
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
    assert_eq!(event_types(&ledger, "invoice:INV-4:capture").len(), 3);
}

#[test]
fn repeat_after_confirmation_replays_the_stored_result() {
    let provider = FakeProvider::new(false);
    let ledger = ledger();
    let c = contract(&provider, PROBE_ONLY);
    let first = executor(&ledger)
        .execute(&c, &invoice("INV-5"), handler(&provider))
        .unwrap();
    // A new executor (as after a restart) over the same ledger.
    let again = executor(&ledger)
        .execute(&c, &invoice("INV-5"), handler(&provider))
        .unwrap();
    assert!(again.duplicate_suppressed);
    assert_eq!(again.output, first.output);
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[test]
fn provider_reports_pending_stays_unknown_and_is_not_retried() {
    let provider = FakeProvider::new(false)
        .script(&[Fault::BeforeCommit])
        .probe_script(&[ProbeAnswer::Pending, ProbeAnswer::Pending]);
    let ledger = ledger();
    let exec = executor(&ledger);
    let c = contract(&provider, BOTH);
    let result = exec
        .execute(&c, &invoice("INV-6"), handler(&provider))
        .unwrap();
    assert_eq!(result.status, EffectStatus::OutcomeUnknown);
    assert_eq!(
        result.error.as_deref(),
        Some("provider reports that the external operation is still pending")
    );
    let again = exec
        .execute(&c, &invoice("INV-6"), handler(&provider))
        .unwrap();
    assert_eq!(again.status, EffectStatus::OutcomeUnknown);
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 0));
    assert_eq!(provider.probe_calls(), 2);
}

#[test]
fn guaranteed_key_without_probe_replays_safely_with_the_same_key() {
    let provider = FakeProvider::new(true).script(&[Fault::AfterCommit]);
    let ledger = ledger();
    let result = executor(&ledger)
        .execute(
            &contract(&provider, GUARANTEED_ONLY),
            &invoice("INV-7"),
            handler(&provider),
        )
        .unwrap();
    assert!(result.is_confirmed());
    assert_eq!(result.output.unwrap()["payment_id"], "pay-000001");
    assert_eq!((provider.handler_calls(), provider.committed()), (2, 1));
    let events = ledger.events("invoice:INV-7:capture").unwrap();
    assert_eq!(events[3].event_type, "retry_authorized");
    assert_eq!(
        events[3].data["evidence"]["retry_basis"],
        "provider_idempotency_guaranteed"
    );
}

#[test]
fn guaranteed_key_lost_twice_leaves_a_pending_resend_not_a_quarantine() {
    // Both dispatches of the first call lose their answer: the call has used
    // its dispatches, but the key still makes a resend safe, so nothing is
    // quarantined and the record says that the next execution resends.
    let provider = FakeProvider::new(true).script(&[Fault::AfterCommit, Fault::AfterCommit]);
    let ledger = ledger();
    let exec = executor(&ledger);
    let c = contract(&provider, GUARANTEED_ONLY);
    let first = exec
        .execute(&c, &invoice("INV-7b"), handler(&provider))
        .unwrap();
    assert_eq!(first.status, EffectStatus::OutcomeUnknown);
    let error = first.error.as_deref().unwrap();
    assert!(
        error.contains("resend under the guaranteed provider idempotency key is pending"),
        "{error}"
    );
    assert!(!error.contains("no authoritative"), "{error}");
    let notice = effect_exec::UncertainOutcome::from_result("capture", &first).unwrap();
    assert!(!notice.message.contains("operator"), "{}", notice.message);
    assert_eq!((provider.handler_calls(), provider.committed()), (2, 1));
    let again = exec
        .execute(&c, &invoice("INV-7b"), handler(&provider))
        .unwrap();
    assert!(again.is_confirmed(), "{again:?}");
    assert_eq!(again.output.unwrap()["payment_id"], "pay-000001");
    assert_eq!((provider.handler_calls(), provider.committed()), (3, 1));
}

#[test]
fn probe_unknown_with_guaranteed_key_retries_with_the_same_key() {
    let provider = FakeProvider::new(true)
        .script(&[Fault::AfterCommit])
        .probe_script(&[ProbeAnswer::Unknown]);
    let ledger = ledger();
    let result = executor(&ledger)
        .execute(
            &contract(&provider, BOTH),
            &invoice("INV-8"),
            handler(&provider),
        )
        .unwrap();
    assert!(result.is_confirmed());
    assert_eq!((provider.handler_calls(), provider.committed()), (2, 1));
}

#[test]
fn probe_failure_with_guaranteed_key_retries_with_the_same_key() {
    let provider = FakeProvider::new(true)
        .script(&[Fault::AfterCommit])
        .probe_script(&[ProbeAnswer::Fail]);
    let ledger = ledger();
    let result = executor(&ledger)
        .execute(
            &contract(&provider, BOTH),
            &invoice("INV-9"),
            handler(&provider),
        )
        .unwrap();
    assert!(result.is_confirmed());
    assert_eq!((provider.handler_calls(), provider.committed()), (2, 1));
}

#[test]
fn probe_failure_without_guarantee_quarantines() {
    let provider = FakeProvider::new(false)
        .script(&[Fault::AfterCommit])
        .probe_script(&[ProbeAnswer::Fail]);
    let ledger = ledger();
    let result = executor(&ledger)
        .execute(
            &contract(&provider, PROBE_ONLY),
            &invoice("INV-9b"),
            handler(&provider),
        )
        .unwrap();
    assert_eq!(result.status, EffectStatus::Quarantined);
    assert_eq!(
        result.evidence["probe_error"],
        "provider lookup API unavailable"
    );
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[test]
fn handler_deadline_with_late_commit_is_quarantined_then_confirmed_by_the_probe() {
    let provider = FakeProvider::new(false).script(&[Fault::Held]);
    let ledger = ledger();
    let exec = executor(&ledger);
    let c = contract(&provider, PROBE_ONLY);
    let result = exec
        .execute_with(
            &c,
            &invoice("INV-10"),
            CallOptions::deadline(Duration::from_millis(30)),
            handler(&provider),
        )
        .unwrap();
    // At the deadline the provider has nothing yet, but the handler may still send.
    assert_eq!(result.status, EffectStatus::Quarantined);
    assert_eq!(result.evidence["handler_may_still_be_running"], true);
    assert_eq!(result.evidence["dispatch_interruption"], "handler_timeout");
    assert_eq!(provider.committed(), 0);

    provider.release();
    provider.wait_for_commits(1);
    let later = exec
        .execute(&c, &invoice("INV-10"), handler(&provider))
        .unwrap();
    assert!(later.is_confirmed());
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[test]
fn deadline_then_negative_probe_does_not_retry_while_the_old_handler_may_send() {
    let provider = FakeProvider::new(false).script(&[Fault::Held]);
    let ledger = ledger();
    let exec = executor(&ledger);
    let c = contract(&provider, PROBE_ONLY);
    let opts = CallOptions::deadline(Duration::from_millis(20));
    let first = exec
        .execute_with(&c, &invoice("INV-11"), opts, handler(&provider))
        .unwrap();
    let second = exec
        .execute_with(&c, &invoice("INV-11"), opts, handler(&provider))
        .unwrap();
    assert_eq!(first.status, EffectStatus::Quarantined);
    assert_eq!(second.status, EffectStatus::Quarantined);
    assert!(
        second
            .error
            .unwrap()
            .contains("previous handler may still dispatch")
    );
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 0));
    provider.release();
    provider.wait_for_commits(1);
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[test]
fn commit_failing_the_postcondition_is_quarantined_and_not_rerun() {
    let provider = FakeProvider::new(false);
    let p = std::sync::Arc::clone(&provider);
    let c = effect_test_support::contracts::capture_payment()
        .outcome_probe(move |_args, key| p.probe(key))
        .postcondition(|_args, output| Ok(output["status"] == "settled"))
        .build()
        .unwrap();
    let ledger = ledger();
    let exec = executor(&ledger);
    let result = exec
        .execute(&c, &invoice("INV-12"), handler(&provider))
        .unwrap();
    assert_eq!(result.status, EffectStatus::Quarantined);
    assert_eq!(result.evidence["postcondition"], "failed");
    let again = exec
        .execute(&c, &invoice("INV-12"), handler(&provider))
        .unwrap();
    assert_eq!(again.status, EffectStatus::Quarantined);
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[test]
fn definitive_rejection_is_recorded_and_never_retried() {
    let provider = FakeProvider::new(false).script(&[Fault::Reject]);
    let ledger = ledger();
    let exec = executor(&ledger);
    let c = contract(&provider, PROBE_ONLY);
    let result = exec
        .execute(&c, &invoice("INV-13"), handler(&provider))
        .unwrap();
    assert_eq!(result.status, EffectStatus::Rejected);
    let again = exec
        .execute(&c, &invoice("INV-13"), handler(&provider))
        .unwrap();
    assert_eq!(again.status, EffectStatus::Rejected);
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 0));
}

#[test]
fn output_that_cannot_be_stored_preserves_uncertainty() {
    let provider = FakeProvider::new(false);
    let p = std::sync::Arc::clone(&provider);
    let ledger = ledger();
    let c = contract(&provider, NEITHER);
    let result = executor(&ledger)
        .execute(&c, &invoice("INV-14"), move |args: Value, key| {
            p.capture(&args, key.provider_key())?;
            Ok(vec![1.0, f64::NAN])
        })
        .unwrap();
    assert_eq!(result.status, EffectStatus::Quarantined);
    assert!(result.output.is_none());
    assert_eq!(
        result.evidence["dispatch_interruption"],
        "unstorable_output"
    );
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[test]
fn callbacks_get_their_own_copy_of_the_arguments() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let probe_seen = std::sync::Arc::clone(&seen);
    let c = EffectContract::builder("c", |args| Ok(format!("op:{}", args["id"])))
        .outcome_probe(move |args, _| {
            probe_seen.lock().unwrap().push(args.clone());
            Ok(effect_core::OutcomeProbeResult::committed(json!("ok")))
        })
        .build()
        .unwrap();
    let ledger = ledger();
    let result = executor(&ledger)
        .execute(
            &c,
            &json!({"id": 1, "note": "original"}),
            |mut args: Value, _| {
                args["note"] = json!("mutated by the handler");
                Err::<Value, _>(HandlerError::unknown("lost"))
            },
        )
        .unwrap();
    assert!(result.is_confirmed());
    assert_eq!(seen.lock().unwrap()[0]["note"], "original");
}

#[test]
fn invalid_arguments_and_failing_identity_callbacks_write_nothing() {
    let ledger = ledger();
    let exec = executor(&ledger);
    let c = EffectContract::builder("c", |args| {
        Ok(args["id"].as_str().ok_or("missing id")?.to_owned())
    })
    .build()
    .unwrap();
    let nan = exec.execute(
        &c,
        &json!({"id": "x"}).as_object().map(|_| vec![f64::NAN]),
        |_, _| Ok(json!(1)),
    );
    assert!(matches!(
        nan,
        Err(effect_exec::ExecError::InvalidArguments { .. })
    ));
    let missing = exec.execute(&c, &json!({}), |_, _| Ok(json!(1)));
    assert!(matches!(
        missing,
        Err(effect_exec::ExecError::Contract { .. })
    ));
    let blank = exec.execute(&c, &json!({"id": "  "}), |_, _| Ok(json!(1)));
    assert!(matches!(
        blank,
        Err(effect_exec::ExecError::Contract { .. })
    ));
    assert!(
        ledger
            .list(&effect_core::ListQuery::new(10))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn panicking_handler_is_an_unknown_outcome_not_a_crash() {
    let provider = FakeProvider::new(false);
    let ledger = ledger();
    let result = executor(&ledger)
        .execute(
            &contract(&provider, NEITHER),
            &invoice("INV-15"),
            |_: Value, _| -> Result<Value, HandlerError> { panic!("bug in the handler") },
        )
        .unwrap();
    assert_eq!(result.status, EffectStatus::Quarantined);
    assert_eq!(provider.committed(), 0);
}

#[test]
fn a_postcondition_failure_is_quarantined_and_never_probed_or_dispatched_again() {
    // The handler returns an output the postcondition refuses. Whatever the
    // probe would say, the operation is quarantined at once (docs/spec.md
    // §6): a later call neither probes it nor dispatches it again.
    let provider = FakeProvider::new(false).probe_script(&[ProbeAnswer::Lookup]);
    let ledger = ledger();
    let exec = executor(&ledger);
    let probe = Arc::clone(&provider);
    let probes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let probed = Arc::clone(&probes);
    let contract = effect_test_support::contracts::capture_payment()
        .outcome_probe(move |_args, _key| {
            probed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            probe.probe(Some("capture:nothing-here"))
        })
        .postcondition(|_args, output| Ok(output["status"] == "captured"))
        .build()
        .unwrap();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for call in 1..=2 {
        let counted = Arc::clone(&calls);
        let result = exec
            .execute(&contract, &invoice("INV-PC"), move |_, _| {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok::<_, HandlerError>(json!({"status": "declined"}))
            })
            .unwrap();
        assert_eq!(
            result.status,
            EffectStatus::Quarantined,
            "call {call}: {result:?}"
        );
        assert!(!result.in_progress);
        assert_eq!(result.evidence["postcondition"], "failed");
    }
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "dispatched once over two calls"
    );
    assert_eq!(
        probes.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "never probed"
    );
}
