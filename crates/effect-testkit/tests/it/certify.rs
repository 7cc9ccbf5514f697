//! `effect_testkit::certify` against a payment provider that honours its
//! keys (certified) and against one that ignores them under a contract that
//! claims they are guaranteed (flagged). Every cell's committed count is
//! asserted, counted at the provider, not read from the report alone.

use std::sync::Arc;

use effect_core::{EffectContract, EffectStatus, OutcomeProbeResult};
use effect_test_support::snapshots;
use effect_testkit::certify::{
    Certification, CertificationReport, CertifyError, CertifyFault, KeyGuarantee, ProbeAnswer,
    Verdict,
};
use effect_testkit::provider::FakePaymentProvider;
use serde_json::{Value, json};

/// The contract a user writes: an id and key from the invoice, a guaranteed
/// key and/or a probe that looks the invoice's captures up: one of the
/// requested amount is the operation's, one of another amount a conflict.
fn contract(provider: &Arc<FakePaymentProvider>, guaranteed: bool, probe: bool) -> EffectContract {
    let mut builder = EffectContract::builder("capture_payment", |args| {
        let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
        Ok(format!("invoice:{invoice}:capture"))
    })
    .provider_idempotency_key(|args| {
        Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
    })
    .provider_idempotency_guaranteed(guaranteed);
    if probe {
        let provider = Arc::clone(provider);
        builder = builder.outcome_probe(move |args, _key| {
            let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
            let found = provider
                .lookup_by_invoice(invoice)
                .map_err(|e| e.to_string())?;
            let amount = args["amount_cents"].as_u64();
            Ok(
                match found.iter().find(|c| Some(c.amount_cents) == amount) {
                    Some(capture) => {
                        OutcomeProbeResult::committed(json!({"payment_id": capture.payment_id}))
                    }
                    None => match found.first() {
                        Some(other) => OutcomeProbeResult::conflict()
                            .evidence("payment_id", other.payment_id.clone())
                            .evidence("amount_cents", other.amount_cents.to_string()),
                        None => OutcomeProbeResult::not_committed(),
                    },
                },
            )
        });
    }
    builder.build().unwrap()
}

/// The same invoice captured with another amount, by another client (no key).
fn plant_conflict(
    provider: &Arc<FakePaymentProvider>,
) -> impl Fn(&Value) -> Result<(), effect_core::BoxError> + Send + Sync + 'static {
    let provider = Arc::clone(provider);
    move |args| {
        let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
        provider.capture(invoice, 999, None)?;
        Ok(())
    }
}

fn certification(provider: &Arc<FakePaymentProvider>, contract: EffectContract) -> Certification {
    let capture = Arc::clone(provider);
    let count = Arc::clone(provider);
    Certification::new(contract, move |args, ctx| {
        let invoice = args["invoice_id"].as_str().unwrap_or_default();
        let amount = args["amount_cents"].as_u64().unwrap_or(0);
        let charge = capture.capture(invoice, amount, ctx.provider_key())?;
        Ok(json!({"payment_id": charge.payment_id}))
    })
    .arguments(|fault| json!({"invoice_id": format!("INV-{fault}"), "amount_cents": 1250}))
    .count_effects(move |args| {
        let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
        Ok(count.lookup_by_invoice(invoice)?.len())
    })
}

/// The provider's own count of each fault's captures, beside the report's.
fn provider_counts(
    provider: &FakePaymentProvider,
    faults: impl Iterator<Item = CertifyFault>,
) -> Vec<(String, usize)> {
    faults
        .map(|fault| {
            let invoice = format!("INV-{fault}");
            (
                fault.to_string(),
                provider.lookup_by_invoice(&invoice).unwrap().len(),
            )
        })
        .collect()
}

/// Checks each cell: fault, handler calls, committed effects, key guarantee, verdict.
fn check(
    report: &CertificationReport,
    provider: &FakePaymentProvider,
    expected: &[(CertifyFault, usize, usize, KeyGuarantee, Verdict)],
) {
    let cells: Vec<_> = report
        .cells
        .iter()
        .map(|c| {
            (
                c.fault,
                c.handler_calls,
                c.committed_effects.unwrap(),
                c.key_guarantee,
                c.verdict,
            )
        })
        .collect();
    assert_eq!(cells, expected, "{}", report.to_table());
    let counted: Vec<_> = expected.iter().map(|e| (e.0.to_string(), e.2)).collect();
    assert_eq!(
        provider_counts(provider, expected.iter().map(|e| e.0)),
        counted
    );
    assert!(
        report.cells.iter().all(|c| c.fault_fired),
        "{}",
        report.to_table()
    );
}

#[test]
fn a_keyed_contract_with_a_probe_on_an_honest_provider_is_certified() {
    let provider = Arc::new(FakePaymentProvider::new());
    let report = certification(&provider, contract(&provider, true, true))
        .run()
        .unwrap();
    use CertifyFault::*;
    use KeyGuarantee::Held;
    check(
        &report,
        &provider,
        &[
            (None, 1, 1, Held, Verdict::Pass),
            (FailureBeforeSend, 2, 1, Held, Verdict::Pass),
            // The probe finds the capture whose answer was lost: no resend.
            (LostAck, 1, 1, Held, Verdict::Pass),
            (TimeoutAfterCommit, 1, 1, Held, Verdict::Pass),
            // At the deadline the held request has not landed: the probe
            // finds nothing, the guaranteed key allows a resend, and the
            // provider replays it when the late request lands.
            (LateCommit, 2, 1, Held, Verdict::Pass),
            (CrashAfterCommit, 1, 1, Held, Verdict::Pass),
        ],
    );
    assert!(report.certified && !report.failed, "{}", report.to_table());
    assert!(
        report
            .cells
            .iter()
            .all(|c| c.status == EffectStatus::Confirmed)
    );
    assert!(
        report
            .cells
            .iter()
            .all(|c| c.probe_after == Some(ProbeAnswer::Committed))
    );
    snapshots::settings().bind(|| {
        insta::assert_json_snapshot!("certify_honest_provider", report);
        insta::assert_snapshot!("certify_honest_provider_table", report.to_table());
    });
}

#[test]
fn a_guaranteed_key_without_a_probe_on_an_honest_provider_is_certified() {
    let provider = Arc::new(FakePaymentProvider::new());
    let report = certification(&provider, contract(&provider, true, false))
        .run()
        .unwrap();
    use CertifyFault::*;
    use KeyGuarantee::Held;
    // Without a probe every uncertain dispatch is resent under the key; the
    // provider replays the first capture.
    check(
        &report,
        &provider,
        &[
            (None, 1, 1, Held, Verdict::Pass),
            (FailureBeforeSend, 2, 1, Held, Verdict::Pass),
            (LostAck, 2, 1, Held, Verdict::Pass),
            (TimeoutAfterCommit, 2, 1, Held, Verdict::Pass),
            (LateCommit, 2, 1, Held, Verdict::Pass),
            (CrashAfterCommit, 2, 1, Held, Verdict::Pass),
        ],
    );
    assert!(report.certified, "{}", report.to_table());
}

#[test]
fn a_guaranteed_key_the_provider_ignores_is_flagged() {
    // The planted bug: the contract claims the key is honoured; it is not.
    let provider = Arc::new(FakePaymentProvider::new().honour_idempotency_keys(false));
    let report = certification(&provider, contract(&provider, true, false))
        .run()
        .unwrap();
    use CertifyFault::*;
    use KeyGuarantee::{Broken, Held};
    check(
        &report,
        &provider,
        &[
            (None, 1, 1, Held, Verdict::Pass),
            // Nothing was sent the first time: the resend is the only capture.
            (FailureBeforeSend, 2, 1, Held, Verdict::Pass),
            (LostAck, 2, 2, Broken, Verdict::Fail),
            (TimeoutAfterCommit, 2, 2, Broken, Verdict::Fail),
            (LateCommit, 2, 2, Broken, Verdict::Fail),
            (CrashAfterCommit, 2, 2, Broken, Verdict::Fail),
        ],
    );
    assert!(report.failed && !report.certified);
    let lost_ack = &report.cells[2];
    assert_eq!(lost_ack.at_most_one_effect, Some(false));
    // The library retried on the key's word, not blindly: the claim is at fault.
    assert!(!lost_ack.blind_retry);
    assert!(
        lost_ack
            .findings
            .iter()
            .any(|f| f.contains("did not honour it")),
        "{:?}",
        lost_ack.findings
    );
    let table = report.to_table();
    assert!(
        table.contains("BROKEN") && table.contains("NOT certified: 2 of 6 faults passed, 4 failed"),
        "{table}"
    );
    snapshots::settings().bind(|| {
        insta::assert_json_snapshot!("certify_key_ignored", report);
        insta::assert_snapshot!("certify_key_ignored_table", table);
    });
}

#[test]
fn a_probe_only_contract_on_a_key_ignoring_provider_is_certified() {
    // Without a key claim the probe carries the contract: no resend after a commit.
    let provider = Arc::new(FakePaymentProvider::new().honour_idempotency_keys(false));
    let report = certification(&provider, contract(&provider, false, true))
        .run()
        .unwrap();
    use CertifyFault::*;
    use KeyGuarantee::NotDeclared;
    check(
        &report,
        &provider,
        &[
            (None, 1, 1, NotDeclared, Verdict::Pass),
            (FailureBeforeSend, 2, 1, NotDeclared, Verdict::Pass),
            (LostAck, 1, 1, NotDeclared, Verdict::Pass),
            (TimeoutAfterCommit, 1, 1, NotDeclared, Verdict::Pass),
            (LateCommit, 1, 1, NotDeclared, Verdict::Pass),
            (CrashAfterCommit, 1, 1, NotDeclared, Verdict::Pass),
        ],
    );
    assert!(report.certified, "{}", report.to_table());
}

#[test]
fn a_probe_that_never_finds_a_commit_is_flagged() {
    let provider = Arc::new(FakePaymentProvider::new());
    // A lookup on the wrong index: it always answers "not committed".
    let lying = EffectContract::builder("capture_payment", |args| {
        Ok(format!(
            "invoice:{}:capture",
            args["invoice_id"].as_str().ok_or("missing")?
        ))
    })
    .outcome_probe(|_args, _key| Ok(OutcomeProbeResult::not_committed()))
    .build()
    .unwrap();
    let report = certification(&provider, lying)
        .faults([CertifyFault::None, CertifyFault::LostAck])
        .run()
        .unwrap();
    let cells: Vec<_> = report
        .cells
        .iter()
        .map(|c| {
            (
                c.handler_calls,
                c.committed_effects,
                c.probe_agrees,
                c.verdict,
            )
        })
        .collect();
    assert_eq!(
        cells,
        [
            (1, Some(1), Some(false), Verdict::Fail),
            (2, Some(2), Some(false), Verdict::Fail),
        ],
        "{}",
        report.to_table()
    );
    assert_eq!(provider.committed_count().unwrap(), 3);
    assert!(
        report.cells[1]
            .findings
            .iter()
            .any(|f| f.contains("probe answers not_committed where the provider holds 2"))
    );
}

#[test]
fn without_a_counter_nothing_is_certified_and_nothing_failed() {
    let provider = Arc::new(FakePaymentProvider::new().honour_idempotency_keys(false));
    let capture = Arc::clone(&provider);
    let report = Certification::new(contract(&provider, true, false), move |args, ctx| {
        let invoice = args["invoice_id"].as_str().unwrap_or_default();
        Ok(json!({"payment_id": capture.capture(invoice, 1, ctx.provider_key())?.payment_id}))
    })
    .arguments(|fault| json!({"invoice_id": format!("INV-{fault}")}))
    .faults([CertifyFault::LostAck])
    .run()
    .unwrap();
    let cell = &report.cells[0];
    // The duplicate happened, and certify says it could not see it.
    assert_eq!(provider.committed_count().unwrap(), 2);
    assert_eq!(cell.handler_calls, 2);
    assert_eq!(
        (cell.committed_effects, cell.key_guarantee, cell.verdict),
        (None, KeyGuarantee::Unverified, Verdict::Unverified)
    );
    assert!(!report.certified && !report.failed && !report.effects_counted);
    assert!(report.to_table().contains("effects were not counted"));
}

#[test]
fn faults_sharing_an_operation_are_refused_before_anything_runs() {
    let provider = Arc::new(FakePaymentProvider::new());
    let error = certification(&provider, contract(&provider, true, true))
        .arguments(|_| json!({"invoice_id": "INV-1", "amount_cents": 1}))
        .run()
        .unwrap_err();
    assert!(
        matches!(
            error,
            CertifyError::SharedOperation {
                fault: CertifyFault::FailureBeforeSend,
                other: CertifyFault::None,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(provider.committed_count().unwrap(), 0);
}

#[test]
fn fault_names_round_trip() {
    for fault in CertifyFault::ALL {
        assert_eq!(fault.name().parse::<CertifyFault>().unwrap(), fault);
        assert_eq!(
            serde_json::to_value(fault).unwrap(),
            Value::String(fault.name().to_owned())
        );
    }
    assert!("lost-answer".parse::<CertifyFault>().is_err());
}

#[test]
fn a_rerun_on_the_same_arguments_fails_instead_of_passing_vacuously() {
    let provider = Arc::new(FakePaymentProvider::new());
    let first = certification(&provider, contract(&provider, true, true))
        .run()
        .unwrap();
    assert!(first.certified, "{}", first.to_table());
    let before = provider.committed_count().unwrap();
    assert_eq!(before, 6);
    // The same sandbox, the same arguments: the provider replays every key,
    // so no fault meets a new request. Every cell says so and fails.
    let again = certification(&provider, contract(&provider, true, true))
        .run()
        .unwrap();
    assert!(again.failed && !again.certified, "{}", again.to_table());
    for cell in &again.cells {
        assert_eq!(cell.verdict, Verdict::Fail, "{cell:?}");
        assert!(
            cell.findings
                .iter()
                .any(|f| f.contains("already held 1 effect(s)") && f.contains("fresh arguments")),
            "{cell:?}"
        );
    }
    assert_eq!(provider.committed_count().unwrap(), before);
}

#[test]
fn fresh_arguments_per_run_exercise_the_faults_again() {
    let provider = Arc::new(FakePaymentProvider::new());
    for run in ["r1", "r2"] {
        let report = certification(&provider, contract(&provider, true, true))
            .arguments(move |fault| {
                json!({"invoice_id": format!("INV-{run}-{fault}"), "amount_cents": 1250})
            })
            .run()
            .unwrap();
        assert!(report.certified, "{run}: {}", report.to_table());
        assert_eq!(report.cells.len(), 6);
        assert_eq!(report.not_run, [CertifyFault::ConflictingProvider]);
        for fault in report.cells.iter().map(|c| c.fault) {
            let invoice = format!("INV-{run}-{fault}");
            assert_eq!(provider.lookup_by_invoice(&invoice).unwrap().len(), 1);
        }
    }
    assert_eq!(provider.committed_count().unwrap(), 12);
}

#[test]
fn a_cell_that_dispatched_nothing_fails() {
    // A contract that waits for a person dispatches nothing: no fault met
    // a request, so nothing was certified.
    let provider = Arc::new(FakePaymentProvider::new());
    let waits = contract_builder().requires_approval(true).build().unwrap();
    let report = certification(&provider, waits)
        .faults([CertifyFault::LostAck])
        .run()
        .unwrap();
    let cell = &report.cells[0];
    assert_eq!((cell.handler_calls, cell.verdict), (0, Verdict::Fail));
    assert!(
        cell.findings[0].contains("nothing was dispatched"),
        "{cell:?}"
    );
    assert_eq!(provider.committed_count().unwrap(), 0);
}

fn contract_builder() -> effect_core::EffectContractBuilder {
    EffectContract::builder("capture_payment", |args| {
        let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
        Ok(format!("invoice:{invoice}:capture"))
    })
    .provider_idempotency_key(|args| {
        Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
    })
    .provider_idempotency_guaranteed(true)
}

#[test]
fn a_contract_with_secrets_and_stored_intent_is_certified_with_a_keyring() {
    use effect_exec::secrets::{FingerprintKey, Keyring, SealingKey};
    let secret = |provider: &Arc<FakePaymentProvider>| {
        certification(
            provider,
            contract_builder()
                .store_intent(true)
                .redact(["/card"])
                .build()
                .unwrap(),
        )
        .arguments(|fault| {
            json!({"invoice_id": format!("INV-{fault}"), "amount_cents": 1250, "card": "tok_4242_secret"})
        })
        .faults([CertifyFault::None, CertifyFault::CrashAfterCommit])
    };
    // Without a keyring the executor refuses to store the secret in clear,
    // and the error says so in words.
    let provider = Arc::new(FakePaymentProvider::new());
    let err = secret(&provider).run().unwrap_err();
    assert!(matches!(err, CertifyError::Execution { .. }), "{err:?}");
    let words = err.to_string();
    assert!(
        words.starts_with("certify none: the executor failed: "),
        "{words}"
    );
    assert!(words.contains("seal"), "{words}");
    assert!(
        std::error::Error::source(&err).is_none(),
        "printed once, not twice"
    );
    assert_eq!(provider.committed_count().unwrap(), 0);
    // With the deployment's keys it runs, and is certified.
    let key = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    let provider = Arc::new(FakePaymentProvider::new());
    let report = secret(&provider)
        .keyring(Keyring::new("k1", SealingKey::parse(key).unwrap()).unwrap())
        .fingerprint_key(FingerprintKey::parse(key).unwrap())
        .run()
        .unwrap();
    assert!(report.certified, "{}", report.to_table());
    assert_eq!(provider.committed_count().unwrap(), 2);
}

#[test]
fn a_counter_that_fails_says_why_in_words() {
    let provider = Arc::new(FakePaymentProvider::new());
    let err = certification(&provider, contract(&provider, true, true))
        .count_effects(|_| Err("the sandbox's list endpoint answered 503".into()))
        .faults([CertifyFault::None])
        .run()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "certify none: counting the provider's effects failed: the sandbox's list endpoint answered 503"
    );
    // Nothing was dispatched: the count before the cell failed first.
    assert_eq!(provider.committed_count().unwrap(), 0);
}

/// One conflicting-provider cell of `contract`, beside a capture of the
/// same invoice for 999 cents; the provider's captures of that invoice.
fn beside_a_conflict(
    contract: EffectContract,
    provider: &Arc<FakePaymentProvider>,
) -> (effect_testkit::certify::CertifyCell, Vec<u64>) {
    let report = certification(provider, contract)
        .conflicting(plant_conflict(provider))
        .faults([CertifyFault::ConflictingProvider])
        .run()
        .unwrap();
    assert!(report.not_run.is_empty());
    assert_eq!(report.cells.len(), 1, "{}", report.to_table());
    let amounts = provider
        .lookup_by_invoice("INV-conflicting-provider")
        .unwrap()
        .iter()
        .map(|c| c.amount_cents)
        .collect();
    (report.cells[0].clone(), amounts)
}

#[test]
fn a_probe_that_finds_a_conflicting_effect_quarantines_and_is_certified() {
    let provider = Arc::new(FakePaymentProvider::new());
    let (cell, amounts) = beside_a_conflict(contract(&provider, true, true), &provider);
    // Only the planted capture: nothing was sent beside it, nothing confirmed.
    assert_eq!(amounts, [999]);
    assert_eq!(
        (
            cell.status,
            cell.handler_calls,
            cell.committed_effects,
            cell.conflicting_effects,
        ),
        (EffectStatus::Quarantined, 1, Some(0), Some(1)),
        "{cell:?}"
    );
    assert_eq!(
        (cell.probe_after, cell.probe_agrees, cell.verdict),
        (Some(ProbeAnswer::Conflict), Some(true), Verdict::Pass),
        "{cell:?}"
    );
    assert!(cell.findings.is_empty(), "{cell:?}");
}

#[test]
fn a_probe_that_takes_any_capture_of_the_invoice_for_its_own_is_flagged() {
    let provider = Arc::new(FakePaymentProvider::new());
    let lookup = Arc::clone(&provider);
    let naive = contract_builder()
        .provider_idempotency_guaranteed(false)
        .outcome_probe(move |args, _key| {
            let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
            let found = lookup
                .lookup_by_invoice(invoice)
                .map_err(|e| e.to_string())?;
            Ok(match found.first() {
                Some(c) => OutcomeProbeResult::committed(json!({"payment_id": c.payment_id})),
                None => OutcomeProbeResult::not_committed(),
            })
        })
        .build()
        .unwrap();
    let (cell, amounts) = beside_a_conflict(naive, &provider);
    // Nothing new was sent, but the operation now claims another client's capture.
    assert_eq!(amounts, [999]);
    assert_eq!(
        (cell.status, cell.handler_calls, cell.committed_effects),
        (EffectStatus::Confirmed, 1, Some(0)),
        "{cell:?}"
    );
    assert_eq!(
        (cell.probe_after, cell.probe_agrees, cell.verdict),
        (Some(ProbeAnswer::Committed), Some(false), Verdict::Fail),
        "{cell:?}"
    );
    assert!(
        cell.findings
            .iter()
            .any(|f| f.contains("confirmed by an effect that contradicts")),
        "{cell:?}"
    );
    assert!(
        cell.findings
            .iter()
            .any(|f| f.contains("probe answers committed") && f.contains("expected conflict")),
        "{cell:?}"
    );
}

#[test]
fn a_guaranteed_key_alone_cannot_see_a_conflicting_effect() {
    // The planted capture has no key: the resend under the operation's key
    // is a new capture beside it.
    let provider = Arc::new(FakePaymentProvider::new());
    let (cell, amounts) = beside_a_conflict(contract(&provider, true, false), &provider);
    assert_eq!(amounts, [999, 1250]);
    assert_eq!(
        (
            cell.status,
            cell.handler_calls,
            cell.committed_effects,
            cell.conflicting_effects,
            cell.verdict,
        ),
        (EffectStatus::Confirmed, 2, Some(1), Some(1), Verdict::Fail),
        "{cell:?}"
    );
    assert!(
        cell.findings
            .iter()
            .any(|f| f.contains("sent beside an effect that contradicts it")),
        "{cell:?}"
    );
}

#[test]
fn without_a_conflicting_effect_the_conflict_cell_is_not_run_and_says_so() {
    let provider = Arc::new(FakePaymentProvider::new());
    let report = certification(&provider, contract(&provider, true, true))
        .faults([CertifyFault::None, CertifyFault::ConflictingProvider])
        .run()
        .unwrap();
    assert_eq!(report.cells.len(), 1);
    assert_eq!(report.not_run, [CertifyFault::ConflictingProvider]);
    assert!(report.certified, "{}", report.to_table());
    assert!(
        report
            .to_table()
            .contains("conflicting-provider: not run: no conflicting effect to plant"),
        "{}",
        report.to_table()
    );
    assert_eq!(provider.committed_count().unwrap(), 1);
}

#[test]
fn a_conflicting_effect_that_is_not_made_or_not_counted_stops_the_run() {
    let provider = Arc::new(FakePaymentProvider::new());
    let err = certification(&provider, contract(&provider, true, true))
        .conflicting(|_| Err("the sandbox refused the second capture".into()))
        .faults([CertifyFault::ConflictingProvider])
        .run()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "certify conflicting-provider: making the conflicting effect failed: the sandbox refused the second capture"
    );
    // Planted under another invoice: the counter cannot see it.
    let elsewhere = Arc::clone(&provider);
    let err = certification(&provider, contract(&provider, true, true))
        .conflicting(move |_| {
            elsewhere.capture("INV-somewhere-else", 999, None)?;
            Ok(())
        })
        .faults([CertifyFault::ConflictingProvider])
        .run()
        .unwrap_err();
    assert!(
        matches!(
            err,
            CertifyError::Harness {
                fault: CertifyFault::ConflictingProvider,
                ..
            }
        ) && err
            .to_string()
            .contains("the conflicting effect is not counted"),
        "{err}"
    );
    // Nothing of the operation's was ever sent.
    assert_eq!(provider.committed_count().unwrap(), 1);
    assert!(
        provider
            .lookup_by_invoice("INV-conflicting-provider")
            .unwrap()
            .is_empty()
    );
}
