//! Retry policy and circuit breaker of plain tools.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use agent_runtime::resilience::CircuitState;
use agent_runtime::trace::TraceEventKind;
use agent_runtime::{
    Action, CircuitBreakerPolicy, ReplaySummary, RetryPolicy, RunOptions, RunStatus,
};
use effect_core::ManualClock;
use serde_json::json;

use crate::{Calls, RecordingSleeper, check, runtime};

fn search(tool: &str, invoice: &str) -> Action {
    Action::call(tool, json!({"invoice_id": invoice}))
}

#[test]
fn plain_timeout_is_retried_with_backoff_then_fails() {
    let calls = Calls::default();
    let sleeper = RecordingSleeper::default();
    let rt = runtime(
        &calls,
        vec![search("slow_search", "INV-1"), Action::finish(json!("no"))],
    )
    .sleeper(Arc::new(sleeper.clone()))
    .retry_policy(
        RetryPolicy::default()
            .max_attempts(4)
            .backoff(Duration::from_millis(10), Duration::from_millis(25)),
    )
    .build()
    .unwrap();
    let report = check(&rt, "run-timeout", RunOptions::start(), RunStatus::Failed);
    assert!(report.error.unwrap().contains("did not answer"));
    assert_eq!(calls.count("slow_search"), 4);
    assert_eq!(
        sleeper.delays(),
        [10, 20, 25].map(Duration::from_millis).to_vec()
    );
    let events = rt.events().events("run-timeout").unwrap();
    let retries: Vec<(u32, u64)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            TraceEventKind::Retry {
                attempt, delay_ms, ..
            } => Some((*attempt, *delay_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(retries, [(1, 10), (2, 20), (3, 25)]);
    let summary = ReplaySummary::of(&events);
    assert_eq!(summary.retries, 3);
    assert_eq!(summary.tool_calls[0].attempts, 4);
    assert_eq!(summary.terminal_status, Some(RunStatus::Failed));
}

#[test]
fn non_timeout_errors_are_not_retried() {
    let calls = Calls::default();
    let sleeper = RecordingSleeper::default();
    let rt = runtime(&calls, vec![search("broken_search", "INV-2")])
        .sleeper(Arc::new(sleeper.clone()))
        .build()
        .unwrap();
    check(&rt, "run-broken", RunOptions::start(), RunStatus::Failed);
    assert_eq!(calls.count("broken_search"), 1);
    assert!(sleeper.delays().is_empty());
}

#[test]
fn circuit_opens_after_repeated_failures_and_reopens_after_a_failed_trial() {
    let calls = Calls::default();
    let clock = Arc::new(ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_000)));
    let rt = runtime(&calls, vec![search("broken_search", "INV-3")])
        .retry_policy(RetryPolicy::none())
        .circuit_breaker(CircuitBreakerPolicy::new(2, Duration::from_secs(30)))
        .clock(clock.clone())
        .build()
        .unwrap();
    check(&rt, "run-cb-1", RunOptions::start(), RunStatus::Failed);
    check(&rt, "run-cb-2", RunOptions::start(), RunStatus::Failed);
    assert!(matches!(
        rt.tools().circuit_state("search"),
        CircuitState::Open { .. }
    ));
    // Open: the next call is refused without reaching the handler.
    let refused = check(&rt, "run-cb-3", RunOptions::start(), RunStatus::Failed);
    assert!(refused.error.unwrap().contains("circuit"), "refused");
    assert_eq!(calls.count("broken_search"), 2);
    let events = rt.events().events("run-cb-3").unwrap();
    assert!(events.iter().any(|e| matches!(
        &e.kind,
        TraceEventKind::ToolResult { error_kind: Some(kind), .. } if kind == "circuit_open"
    )));
    // The breaker is per dependency: another dependency is unaffected.
    assert_eq!(
        rt.tools().circuit_state("lookup_invoice"),
        CircuitState::Closed {
            consecutive_failures: 0
        }
    );
    // After the open period one trial goes through; it fails and re-opens at once.
    clock.advance(Duration::from_secs(31));
    check(&rt, "run-cb-4", RunOptions::start(), RunStatus::Failed);
    assert_eq!(calls.count("broken_search"), 3);
    check(&rt, "run-cb-5", RunOptions::start(), RunStatus::Failed);
    assert_eq!(calls.count("broken_search"), 3);
}

#[test]
fn invalid_arguments_never_reach_the_handler_nor_open_the_circuit() {
    let calls = Calls::default();
    let rt = runtime(
        &calls,
        vec![Action::call(
            "broken_search",
            json!({"invoice_id": "INV-4", "unexpected": true}),
        )],
    )
    .circuit_breaker(CircuitBreakerPolicy::new(1, Duration::from_secs(30)))
    .build()
    .unwrap();
    for i in 0..5 {
        let report = check(
            &rt,
            &format!("run-invalid-{i}"),
            RunOptions::start(),
            RunStatus::Failed,
        );
        assert!(
            report
                .error
                .unwrap()
                .contains("do not match its input schema")
        );
    }
    assert!(calls.all().is_empty());
    assert_eq!(
        rt.tools().circuit_state("search"),
        CircuitState::Closed {
            consecutive_failures: 0
        }
    );
    // Wrong types are refused the same way: a boolean is not a string.
    let typed = runtime(
        &calls,
        vec![Action::call("lookup_invoice", json!({"invoice_id": true}))],
    )
    .build()
    .unwrap();
    let report = check(&typed, "run-typed", RunOptions::start(), RunStatus::Failed);
    let events = typed.events().events("run-typed").unwrap();
    assert!(events.iter().any(|e| matches!(
        &e.kind,
        TraceEventKind::ToolResult { error_kind: Some(kind), .. } if kind == "invalid_arguments"
    )));
    assert!(report.error.unwrap().contains("/invoice_id"));
    assert!(calls.all().is_empty());
}
