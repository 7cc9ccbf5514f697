//! The checker finds each violation it names, and nothing in a clean history.

use std::sync::Arc;

use effect_core::{EffectContract, MemoryLedger, UnknownOutcomePolicy};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
use serde_json::{Value, json};

use super::{Findings, check};
use crate::history::{Event, Kind};
use crate::provider::{Delivery, Outcome, output};

fn contract() -> EffectContract {
    EffectContract::builder("capture_payment", |args| {
        Ok(format!(
            "invoice:{}:capture",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        ))
    })
    .unknown_outcome(UnknownOutcomePolicy::KeepUnknown)
    .build()
    .expect("a valid contract")
}

/// A ledger holding `confirmed` (invoice, payment id) and `unknown` invoices.
fn ledger(confirmed: &[(&str, &str)], unknown: &[&str]) -> Arc<MemoryLedger> {
    let ledger = Arc::new(MemoryLedger::new());
    let executor = EffectExecutor::new(ledger.clone());
    for (invoice, payment) in confirmed {
        let (invoice, payment) = (invoice.to_string(), payment.to_string());
        let result = executor
            .execute(
                &contract(),
                &json!({"invoice_id": invoice.clone()}),
                move |_: Value, _: HandlerContext| {
                    Ok::<_, HandlerError>(output(&payment, &invoice))
                },
            )
            .expect("executes");
        assert!(result.is_confirmed());
    }
    for invoice in unknown {
        let _ = executor.execute(
            &contract(),
            &json!({"invoice_id": invoice}),
            |_: Value, _: HandlerContext| Err::<Value, _>(HandlerError::unknown("lost")),
        );
    }
    ledger
}

fn op(invoice: &str) -> String {
    format!("invoice:{invoice}:capture")
}

fn call(n: u32, invoice: &str, kind: Kind, payment: Option<&str>) -> Event {
    Event {
        call: format!("w1-1-0-{n}"),
        op: op(invoice),
        kind,
        output: payment.map(|p| output(p, invoice)),
        detail: None,
    }
}

fn delivery(invoice: &str, outcome: Outcome, payment: &str) -> Delivery {
    Delivery {
        key: format!("capture:{invoice}"),
        invoice: invoice.to_owned(),
        worker: "w1".to_owned(),
        outcome,
        payment_id: Some(payment.to_owned()),
    }
}

fn checked(events: &[Event], deliveries: &[Delivery], ledger: &MemoryLedger) -> Findings {
    check(events, deliveries, ledger).expect("checks")
}

#[test]
fn a_clean_history_has_no_violation() {
    let ledger = ledger(&[("INV-0000010", "pay_1")], &[]);
    let events = [
        call(0, "INV-0000010", Kind::Invoke, None),
        call(0, "INV-0000010", Kind::Ok, Some("pay_1")),
        call(1, "INV-0000010", Kind::Invoke, None),
    ];
    let deliveries = [delivery("INV-0000010", Outcome::Committed, "pay_1")];
    let findings = checked(&events, &deliveries, &ledger);
    assert_eq!(findings.violations.total(), 0, "{findings:?}");
    assert_eq!(
        (findings.calls, findings.ok, findings.unfinished),
        (2, 1, 1)
    );
    assert_eq!((findings.operations, findings.committed), (1, 1));
}

#[test]
fn a_confirmation_the_ledger_lost_is_found() {
    // The caller was told pay_2; the ledger (a promoted standby) never saw it.
    let ledger = ledger(&[], &[]);
    let events = [
        call(0, "INV-0000011", Kind::Invoke, None),
        call(0, "INV-0000011", Kind::Ok, Some("pay_2")),
    ];
    let deliveries = [delivery("INV-0000011", Outcome::Committed, "pay_2")];
    let findings = checked(&events, &deliveries, &ledger);
    let v = &findings.violations;
    assert_eq!((v.lost_confirmations, v.effects_not_confirmed), (1, 1));
    assert_eq!(findings.lost_confirmation_operations, 1);
    assert_eq!(v.always(), 0, "the library's own properties held");
}

#[test]
fn a_second_commit_a_second_dispatch_and_a_wrong_output_are_found() {
    let ledger = ledger(&[("INV-0000012", "pay_3"), ("INV-0000013", "pay_9")], &[]);
    let events = [
        call(0, "INV-0000013", Kind::Invoke, None),
        call(0, "INV-0000013", Kind::Ok, Some("pay_9")),
    ];
    let deliveries = [
        delivery("INV-0000012", Outcome::Committed, "pay_3"),
        delivery("INV-0000012", Outcome::Committed, "pay_4"),
        delivery("INV-0000012", Outcome::Duplicate, "pay_3"),
        delivery("INV-0000013", Outcome::Committed, "pay_5"),
    ];
    let v = checked(&events, &deliveries, &ledger).violations;
    assert_eq!(
        (v.double_commits, v.second_dispatches, v.wrong_outputs),
        (1, 1, 1)
    );
}

#[test]
fn unsettled_operations_and_effects_without_record_are_found() {
    let ledger = ledger(&[("INV-0000014", "pay_6")], &["INV-0000015"]);
    // INV-0000014 confirmed without any capture at the provider.
    let findings = checked(&[], &[], &ledger);
    assert_eq!(
        findings.violations.confirmed_without_effect, 0,
        "not called"
    );
    let events = [
        call(0, "INV-0000014", Kind::Invoke, None),
        call(1, "INV-0000015", Kind::Invoke, None),
    ];
    let v = checked(&events, &[], &ledger).violations;
    assert_eq!((v.unsettled, v.confirmed_without_effect), (1, 1));
}

#[test]
fn a_customer_charged_past_the_budget_is_found() {
    // Invoices 0 to 4 of every 50 share a customer, whose budget is 3.
    let invoices = ["INV-0000100", "INV-0000101", "INV-0000102", "INV-0000103"];
    let confirmed: Vec<(&str, String)> = invoices
        .iter()
        .enumerate()
        .map(|(i, invoice)| (*invoice, format!("pay_{i}")))
        .collect();
    let pairs: Vec<(&str, &str)> = confirmed.iter().map(|(i, p)| (*i, p.as_str())).collect();
    let ledger = ledger(&pairs, &[]);
    let deliveries: Vec<Delivery> = pairs
        .iter()
        .map(|(invoice, payment)| delivery(invoice, Outcome::Committed, payment))
        .collect();
    let v = checked(&[], &deliveries, &ledger).violations;
    assert_eq!(v.budgets_exceeded, 1);
    let v = checked(&[], &deliveries[..3], &ledger).violations;
    assert_eq!(
        v.budgets_exceeded, 0,
        "three captures are within the budget"
    );
}

#[test]
fn a_quarantined_operation_with_an_effect_is_settled_not_lost() {
    let ledger = Arc::new(MemoryLedger::new());
    let quarantining = EffectContract::builder("capture_payment", |args| {
        Ok(format!(
            "invoice:{}:capture",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        ))
    })
    .build()
    .expect("a valid contract");
    let result = EffectExecutor::new(ledger.clone())
        .execute(
            &quarantining,
            &json!({"invoice_id": "INV-0000016"}),
            |_: Value, _: HandlerContext| Err::<Value, _>(HandlerError::unknown("lost")),
        )
        .expect("executes");
    assert_eq!(result.status, effect_core::EffectStatus::Quarantined);
    let deliveries = [delivery("INV-0000016", Outcome::Committed, "pay_7")];
    let findings = checked(&[], &deliveries, &ledger);
    assert_eq!(findings.quarantined_with_effect, 1);
    assert_eq!(findings.violations.total(), 0, "{findings:?}");
}
