//! The scenario builder with a provider of the user's own, and report snapshots.

use std::sync::Mutex;

use effect_core::{BoxError, EffectStatus};
use effect_test_support::snapshots;
use effect_testkit::scenario::{
    ContractVariant, FaultPoint, FaultSchedule, Lookup, LookupFault, PerformFault, Scenario,
    ScenarioProvider, ScenarioReport,
};
use serde_json::{Value, json};

/// A fake ticketing API: tickets are deduplicated by the caller's key.
#[derive(Debug, Default)]
struct FakeTickets {
    opened: Mutex<Vec<(Option<String>, Value)>>,
}

impl FakeTickets {
    fn find(&self, key: Option<&str>) -> Option<usize> {
        let opened = self.opened.lock().unwrap();
        opened
            .iter()
            .position(|(k, _)| k.is_some() && k.as_deref() == key)
    }
}

impl ScenarioProvider for FakeTickets {
    fn perform(&self, args: &Value, key: Option<&str>) -> Result<Value, BoxError> {
        if let Some(i) = self.find(key) {
            return Ok(json!({"ticket": i + 1}));
        }
        let mut opened = self.opened.lock().unwrap();
        opened.push((key.map(str::to_owned), args.clone()));
        Ok(json!({"ticket": opened.len()}))
    }

    fn look_up(&self, _args: &Value, key: Option<&str>) -> Result<Lookup, BoxError> {
        Ok(match self.find(key) {
            Some(i) => Lookup::Committed {
                output: json!({"ticket": i + 1}),
                provider_operation_id: Some(format!("T-{}", i + 1)),
            },
            None => Lookup::NotCommitted,
        })
    }

    fn committed_effects(&self) -> Result<usize, BoxError> {
        Ok(self.opened.lock().unwrap().len())
    }
}

fn tickets(name: &str) -> Scenario {
    Scenario::new(name, FakeTickets::default)
        .contract_name("open_ticket")
        .arguments(json!({"customer": "C-7", "subject": "refund"}))
        .operation_id(|args| {
            Ok(format!(
                "ticket:{}:refund",
                args["customer"].as_str().ok_or("missing customer")?
            ))
        })
        .provider_key(|args| {
            Ok(args["customer"]
                .as_str()
                .map(|c| format!("refund-ticket:{c}")))
        })
}

#[test]
fn a_lost_ack_is_confirmed_by_the_probe_and_the_naive_retry_duplicates() {
    let report = tickets("ticket-ack-lost")
        .contract(ContractVariant::ProbeOnly)
        .faults(FaultSchedule::new().on_perform(1, PerformFault::LoseAck))
        .run()
        .unwrap();
    assert!(report.passed, "{report:#?}");
    assert_eq!(
        (report.handler_calls, report.committed_effect_count),
        (1, 1)
    );
    assert_eq!(report.provider_result, Some(json!({"ticket": 1})));
    let naive = report.naive_baseline.as_ref().unwrap();
    assert_eq!((naive.attempts, naive.committed_effect_count), (2, 2));
    assert!(naive.duplicate_effect_detected && naive.succeeded);
    snapshots::settings().bind(|| {
        insta::assert_json_snapshot!("scenario_ticket_ack_lost", report);
    });
}

#[test]
fn an_unmet_expectation_fails_the_report() {
    // Without probe or key guarantee the lost ack is quarantined: one effect,
    // but not the confirmed status the scenario expects by default.
    let report = tickets("ticket-unprotected")
        .contract(ContractVariant::Neither)
        .faults(FaultSchedule::new().on_perform(1, PerformFault::LoseAck))
        .naive_baseline(None)
        .run()
        .unwrap();
    assert_eq!(report.status, EffectStatus::Quarantined);
    assert!(report.guarantee.held);
    assert!(!report.passed);
    let expecting_it = tickets("ticket-unprotected")
        .contract(ContractVariant::Neither)
        .faults(FaultSchedule::new().on_perform(1, PerformFault::LoseAck))
        .expect_status(EffectStatus::Quarantined)
        .expect_committed(1)
        .naive_baseline(None)
        .run()
        .unwrap();
    assert!(expecting_it.passed);
}

#[test]
fn pending_lookups_are_never_a_reason_to_dispatch_again() {
    // Every lookup answers pending: the operation stays unknown, the handler
    // runs once, and the guarantee holds even though nothing is confirmed.
    let schedule = (1..=10).fold(
        FaultSchedule::new().on_perform(1, PerformFault::LoseAck),
        |s, call| s.on_look_up(call, LookupFault::Pending),
    );
    let report = tickets("ticket-pending")
        .contract(ContractVariant::Both)
        .faults(schedule)
        .resumes(3)
        .naive_baseline(None)
        .run()
        .unwrap();
    assert_eq!(report.status, EffectStatus::OutcomeUnknown);
    assert_eq!(
        (report.handler_calls, report.probe_calls, report.executions),
        (1, 4, 4)
    );
    assert!(report.guarantee.held && !report.passed);
}

#[test]
fn a_crashed_worker_is_reconciled_by_the_next_process_without_rerunning() {
    let report = tickets("ticket-crash")
        .contract(ContractVariant::ProbeOnly)
        .faults(FaultSchedule::new().on_perform(1, PerformFault::Crash))
        .naive_baseline(None)
        .run()
        .unwrap();
    assert!(report.passed, "{report:#?}");
    assert_eq!(report.handler_calls, 1);
    assert_eq!(
        report.event_types,
        ["prepared", "dispatched", "outcome_unknown", "confirmed"]
    );
}

#[test]
fn builtin_payment_scenario_reports_match_their_snapshots() {
    for fault in [
        FaultPoint::None,
        FaultPoint::BeforeCommit,
        FaultPoint::AfterCommitBeforeAck,
    ] {
        let report: ScenarioReport = Scenario::payment(fault, ContractVariant::Both)
            .run()
            .unwrap();
        assert!(report.passed, "{report:#?}");
        snapshots::settings().bind(|| {
            insta::assert_json_snapshot!(format!("payment_{fault}"), report);
        });
    }
}

#[test]
fn concurrent_callers_without_a_held_perform_run_one_after_another() {
    // No `Hold`: the callers are not lined up behind a live dispatch, yet the
    // ledger still lets only one of them reach the provider.
    let report = tickets("ticket-concurrent")
        .faults(FaultSchedule::new().concurrent_callers(4))
        .naive_baseline(Some(1))
        .run()
        .unwrap();
    assert!(report.passed, "{report:#?}");
    assert_eq!(
        (
            report.executions,
            report.handler_calls,
            report.committed_effect_count
        ),
        (4, 1, 1)
    );
    let naive = report.naive_baseline.unwrap();
    // Naive callers send no key, so each of them opens a ticket.
    assert_eq!((naive.callers, naive.committed_effect_count), (4, 4));
}
