//! Report schemas: every field is known, so a new field is a reviewed change.

use effect_testkit::matrix::Matrix;
use effect_testkit::scenario::{ContractVariant, FaultPoint, Scenario};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Decoding is the test; the fields document the schema.
struct ScenarioReport {
    scenario: String,
    contract: String,
    operation_id: String,
    status: String,
    confirmed: bool,
    in_progress: bool,
    attempts: u32,
    executions: usize,
    in_progress_callers: usize,
    handler_calls: usize,
    probe_calls: usize,
    committed_effect_count: usize,
    expected_committed_effects: Option<usize>,
    expected_status: Option<String>,
    duplicate_effect_detected: bool,
    provider_result: Option<Value>,
    event_types: Vec<String>,
    guarantee: Guarantee,
    naive_baseline: Option<Naive>,
    passed: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Guarantee {
    claimed: bool,
    blind_retry: bool,
    held: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Naive {
    strategy: String,
    callers: usize,
    attempts: usize,
    succeeded: bool,
    committed_effect_count: usize,
    duplicate_effect_detected: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct MatrixReport {
    cells: Vec<ScenarioReport>,
    baselines: Vec<Baseline>,
    guarantee_kept: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Baseline {
    fault: String,
    ledger_max_committed: usize,
    naive: Naive,
}

#[test]
fn scenario_reports_decode_into_the_documented_schema() {
    let report = Scenario::payment(FaultPoint::AfterCommitBeforeAck, ContractVariant::Both)
        .run()
        .unwrap();
    let json = serde_json::to_string(&report).unwrap();
    let decoded: ScenarioReport = serde_json::from_str(&json).unwrap();
    assert_eq!(decoded.status, "confirmed");
    assert_eq!(decoded.contract, "both");
    assert_eq!(decoded.naive_baseline.unwrap().committed_effect_count, 2);
    // And the library's own type reads its output back.
    let back: effect_testkit::scenario::ScenarioReport = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
}

#[test]
fn matrix_reports_decode_into_the_documented_schema() {
    let report = Matrix::new()
        .faults(&[FaultPoint::ConcurrentCallers])
        .run()
        .unwrap();
    let decoded: MatrixReport =
        serde_json::from_value(serde_json::to_value(&report).unwrap()).unwrap();
    assert_eq!(decoded.cells.len(), 4);
    assert_eq!(decoded.baselines[0].fault, "concurrent-callers");
    assert_eq!(decoded.baselines[0].naive.committed_effect_count, 3);
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct CertificationReport {
    contract: String,
    declared: Declared,
    effects_counted: bool,
    cells: Vec<CertifyCell>,
    #[serde(default)]
    not_run: Vec<String>,
    certified: bool,
    failed: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Declared {
    provider_key: bool,
    key_guaranteed: bool,
    probe: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct CertifyCell {
    fault: String,
    operation_id: String,
    fault_fired: bool,
    status: String,
    attempts: u32,
    handler_calls: usize,
    committed_effects: Option<usize>,
    #[serde(default)]
    conflicting_effects: Option<usize>,
    at_most_one_effect: Option<bool>,
    blind_retry: bool,
    probe_after: Option<String>,
    probe_agrees: Option<bool>,
    key_guarantee: String,
    verdict: String,
    findings: Vec<String>,
}

#[test]
fn certification_reports_decode_into_the_documented_schema() {
    use std::sync::Arc;

    use effect_testkit::certify::{Certification, CertifyFault};
    use effect_testkit::provider::FakePaymentProvider;

    let provider = Arc::new(FakePaymentProvider::new());
    let contract = effect_test_support::contracts::capture_payment()
        .provider_idempotency_guaranteed(true)
        .build()
        .unwrap();
    let capture = Arc::clone(&provider);
    let count = Arc::clone(&provider);
    let report = Certification::new(contract, move |args, ctx| {
        let invoice = args["invoice_id"].as_str().unwrap_or_default();
        Ok(serde_json::json!({"id": capture.capture(invoice, 1, ctx.provider_key())?.payment_id}))
    })
    .arguments(|fault| serde_json::json!({"invoice_id": format!("INV-{fault}")}))
    .count_effects(move |args| {
        Ok(count
            .lookup_by_invoice(args["invoice_id"].as_str().unwrap())?
            .len())
    })
    .faults([CertifyFault::LostAck])
    .run()
    .unwrap();
    let json = serde_json::to_string(&report).unwrap();
    let decoded: CertificationReport = serde_json::from_str(&json).unwrap();
    assert_eq!(decoded.cells[0].fault, "lost-ack");
    assert_eq!(decoded.cells[0].committed_effects, Some(1));
    assert_eq!(decoded.cells[0].key_guarantee, "held");
    assert_eq!(provider.committed_count().unwrap(), 1);
    let back: effect_testkit::certify::CertificationReport = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
}
