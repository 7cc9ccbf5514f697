//! The code of `docs/testkit.md`, run as tests. `guide_shows_only_tested_code`
//! keeps the guide's Rust blocks identical to code in this file.

use std::sync::Mutex;

use std::sync::Arc;

use effect_core::{BoxError, EffectContract, EffectStatus, OutcomeProbeResult};
use effect_test_support::snapshots;
use effect_testkit::certify::{Certification, CertifyFault, KeyGuarantee, Verdict};
use effect_testkit::matrix::Matrix;
use effect_testkit::provider::FakePaymentProvider;
use effect_testkit::scenario::{
    ContractVariant, FaultSchedule, Lookup, LookupFault, PerformFault, Scenario, ScenarioProvider,
};
use serde_json::{Value, json};

/// A fake of the email API: a send is deduplicated by the caller's key.
#[derive(Debug, Default)]
struct FakeMailer {
    sent: Mutex<Vec<(Option<String>, Value)>>,
}

impl FakeMailer {
    fn sent_with(&self, key: Option<&str>) -> Option<usize> {
        let sent = self.sent.lock().unwrap();
        sent.iter()
            .position(|(k, _)| k.is_some() && k.as_deref() == key)
    }
}

impl ScenarioProvider for FakeMailer {
    fn perform(&self, args: &Value, key: Option<&str>) -> Result<Value, BoxError> {
        if let Some(i) = self.sent_with(key) {
            return Ok(json!({"message_id": format!("msg-{}", i + 1)}));
        }
        let mut sent = self.sent.lock().unwrap();
        sent.push((key.map(str::to_owned), args.clone()));
        Ok(json!({"message_id": format!("msg-{}", sent.len())}))
    }

    fn look_up(&self, _args: &Value, key: Option<&str>) -> Result<Lookup, BoxError> {
        Ok(match self.sent_with(key) {
            Some(i) => Lookup::Committed {
                output: json!({"message_id": format!("msg-{}", i + 1)}),
                provider_operation_id: Some(format!("msg-{}", i + 1)),
            },
            None => Lookup::NotCommitted,
        })
    }

    fn committed_effects(&self) -> Result<usize, BoxError> {
        Ok(self.sent.lock().unwrap().len())
    }
}

fn welcome_email(name: &str) -> Scenario {
    Scenario::new(name, FakeMailer::default)
        .contract_name("send_welcome_email")
        .arguments(json!({"to": "ada@example.com", "template": "welcome"}))
        .operation_id(|args| {
            let to = args["to"].as_str().ok_or("missing to")?;
            Ok(format!("email:{to}:welcome"))
        })
        .provider_key(|args| Ok(args["to"].as_str().map(|to| format!("welcome:{to}"))))
        .contract(ContractVariant::ProbeOnly)
}

#[test]
fn a_lost_acknowledgement_sends_one_email() {
    let report = welcome_email("welcome-email-ack-lost")
        .faults(FaultSchedule::new().on_perform(1, PerformFault::LoseAck))
        .expect_committed(1)
        .run()
        .unwrap();
    assert!(report.passed, "{report:#?}");
    assert_eq!(report.handler_calls, 1);
    // Plain retry-on-error sends it twice.
    let naive = report.naive_baseline.as_ref().unwrap();
    assert_eq!(naive.committed_effect_count, 2);
    snapshots::settings().bind(|| {
        insta::assert_json_snapshot!("welcome_email_ack_lost", report);
    });
}

#[test]
fn a_pending_read_side_is_never_a_reason_to_send_again() {
    let faults = FaultSchedule::new()
        .on_perform(1, PerformFault::LoseAck)
        .on_look_up(1, LookupFault::Pending)
        .on_look_up(2, LookupFault::Pending)
        .on_look_up(3, LookupFault::Pending);
    let report = welcome_email("welcome-email-pending")
        .faults(faults)
        .expect_status(EffectStatus::OutcomeUnknown)
        .expect_committed(1)
        .run()
        .unwrap();
    assert!(report.passed, "{report:#?}");
    assert_eq!((report.handler_calls, report.probe_calls), (1, 3));
}

#[test]
fn the_fault_matrix_keeps_the_guarantee() {
    let report = Matrix::new().run().unwrap();
    assert!(report.guarantee_kept, "{}", report.to_table());
    for baseline in &report.baselines {
        assert!(baseline.ledger_max_committed <= 1);
        println!(
            "{}: with the ledger {}, naive retry {}",
            baseline.fault, baseline.ledger_max_committed, baseline.naive.committed_effect_count
        );
    }
}

/// The quick start's contract: a key, a probe that looks the capture up by
/// it, and (with `guaranteed`) the claim that the provider honours the key.
fn quick_start_contract(provider: &Arc<FakePaymentProvider>, guaranteed: bool) -> EffectContract {
    let lookups = Arc::clone(provider);
    EffectContract::builder("capture_payment", |args| {
        let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
        Ok(format!("invoice:{invoice}:capture"))
    })
    .provider_idempotency_key(|args| {
        Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
    })
    .provider_idempotency_guaranteed(guaranteed)
    .outcome_probe(move |_args, key| {
        let key = key.ok_or("the capture has no key")?;
        Ok(
            match lookups.lookup_by_key(key).map_err(|e| e.to_string())? {
                Some(found) => {
                    OutcomeProbeResult::committed(json!({"payment_id": found.payment_id}))
                }
                None => OutcomeProbeResult::not_committed(),
            },
        )
    })
    .build()
    .unwrap()
}

/// Your handler and your count of the provider's effects, by invoice.
fn certify(provider: &Arc<FakePaymentProvider>, contract: EffectContract) -> Certification {
    let capture = Arc::clone(provider);
    let count = Arc::clone(provider);
    Certification::new(contract, move |args, ctx| {
        let invoice = args["invoice_id"].as_str().unwrap_or_default();
        let payment = capture.capture(invoice, 1250, ctx.provider_key())?;
        Ok(json!({"payment_id": payment.payment_id}))
    })
    // One invoice per fault, so the cells never meet at the provider.
    .arguments(|fault| json!({"invoice_id": format!("INV-{fault}"), "amount_cents": 1250}))
    .count_effects(move |args| {
        let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
        Ok(count.lookup_by_invoice(invoice)?.len())
    })
}

#[test]
fn the_quick_start_contract_is_certified() {
    let provider = Arc::new(FakePaymentProvider::new());
    let report = certify(&provider, quick_start_contract(&provider, false))
        .run()
        .unwrap();
    println!("{}", report.to_table());
    assert!(report.certified, "{}", report.to_table());
    for cell in &report.cells {
        assert_eq!(cell.committed_effects, Some(1), "{}", cell.fault);
    }
    assert_eq!(provider.committed_count().unwrap(), report.cells.len());
}

#[test]
fn a_guaranteed_key_the_provider_ignores_is_caught() {
    // The planted bug: the contract says the key is honoured; the provider ignores it.
    let provider = Arc::new(FakePaymentProvider::new().honour_idempotency_keys(false));
    let report = certify(&provider, quick_start_contract(&provider, true))
        .run()
        .unwrap();
    assert!(report.failed, "{}", report.to_table());
    let broken: Vec<_> = report
        .cells
        .iter()
        .filter(|cell| cell.key_guarantee == KeyGuarantee::Broken)
        .map(|cell| (cell.fault.name(), cell.committed_effects, cell.verdict))
        .collect();
    assert_eq!(broken, [("late-commit", Some(2), Verdict::Fail)]);
}

#[test]
fn a_probe_by_key_cannot_see_a_conflicting_capture() {
    let provider = Arc::new(FakePaymentProvider::new());
    let other_client = Arc::clone(&provider);
    let report = certify(&provider, quick_start_contract(&provider, false))
        // Another client captured the invoice for another amount, without our key.
        .conflicting(move |args| {
            let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
            other_client.capture(invoice, 999, None)?;
            Ok(())
        })
        .faults([CertifyFault::ConflictingProvider])
        .run()
        .unwrap();
    let cell = &report.cells[0];
    // The probe by key found nothing, so the capture went out beside the other one.
    assert_eq!(
        (
            cell.conflicting_effects,
            cell.committed_effects,
            cell.verdict
        ),
        (Some(1), Some(1), Verdict::Fail)
    );
    let invoice = provider
        .lookup_by_invoice("INV-conflicting-provider")
        .unwrap();
    assert_eq!(invoice.len(), 2);
}

#[test]
fn guide_shows_only_tested_code() {
    let guide = include_str!("../../../../docs/testkit.md");
    let source = include_str!("guide.rs");
    let blocks: Vec<&str> = guide
        .split("```rust\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap())
        .collect();
    assert!(blocks.len() >= 3, "the guide lost its examples");
    for block in blocks {
        assert!(
            source.contains(block),
            "docs/testkit.md shows code that tests/it/guide.rs does not run:\n{block}"
        );
    }
}

#[test]
fn the_guide_shows_the_table_certify_prints() {
    let guide = include_str!("../../../../docs/testkit.md");
    let provider = Arc::new(FakePaymentProvider::new().honour_idempotency_keys(false));
    let report = certify(&provider, quick_start_contract(&provider, true))
        .run()
        .unwrap();
    let table = report.to_table();
    assert!(
        guide.contains(&format!("```text\n{table}```")),
        "docs/testkit.md does not show this table:\n{table}"
    );
    // 1 capture for each of 5 faults, 2 for late-commit.
    assert_eq!(provider.committed_count().unwrap(), 7);
}
