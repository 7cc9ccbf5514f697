//! Behaviour users of the Python package rely on: audit records for every
//! invocation, a circuit breaker consulted before every attempt, configurable
//! retryable errors, a per-call timeout for plain tools, working data that
//! survives checkpoints, and a scripted plan that finishes when exhausted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use agent_runtime::checkpoint::Checkpoint;
use agent_runtime::planner::PLAN_EXHAUSTED;
use agent_runtime::resilience::CircuitState;
use agent_runtime::store::MemoryCheckpointStore;
use agent_runtime::trace::{AuditKind, TraceEventKind};
use agent_runtime::{
    Action, AgentRuntime, CheckpointStore, CircuitBreakerPolicy, DeterministicPlanner, EffectKind,
    PermissionPolicy, PlanContext, Planner, PlannerError, ReplaySummary, RetryPolicy, RunOptions,
    RunStatus, Task, ToolDefinition, ToolErrorKind, ToolRegistry,
};
use serde_json::json;

use crate::{Calls, check, invoice_schema, lookup, runtime};

fn call(tool: &str, invoice: &str) -> Action {
    Action::call(tool, json!({"invoice_id": invoice}))
}

fn audit_kinds(rt: &AgentRuntime, run: &str) -> Vec<(String, AuditKind)> {
    rt.audit()
        .records(run)
        .unwrap()
        .into_iter()
        .map(|r| (r.tool, r.kind))
        .collect()
}

#[test]
fn every_invocation_is_audited_requested_then_succeeded_or_failed_reads_included() {
    let calls = Calls::default();
    let rt = runtime(
        &calls,
        vec![lookup("INV-1"), call("broken_search", "INV-1")],
    )
    .build()
    .unwrap();
    check(&rt, "run-audit-all", RunOptions::start(), RunStatus::Failed);
    assert_eq!(calls.count("lookup_invoice"), 1);
    assert_eq!(calls.count("broken_search"), 1);
    let records = rt.audit().records("run-audit-all").unwrap();
    assert_eq!(
        audit_kinds(&rt, "run-audit-all"),
        [
            ("lookup_invoice".to_owned(), AuditKind::ToolRequested),
            ("lookup_invoice".to_owned(), AuditKind::ToolSucceeded),
            ("broken_search".to_owned(), AuditKind::ToolRequested),
            ("broken_search".to_owned(), AuditKind::ToolFailed),
        ]
    );
    assert!(
        records[3].detail.contains("search returned 503"),
        "{records:?}"
    );
    // Both records of one invocation name it.
    assert_eq!(records[0].invocation_id, records[1].invocation_id);
    assert_ne!(records[1].invocation_id, records[2].invocation_id);

    // Arguments refused by the schema are audited as a failed call; nothing ran.
    let refused = runtime(
        &calls,
        vec![Action::call("lookup_invoice", json!({"invoice_id": 7}))],
    )
    .build()
    .unwrap();
    check(
        &refused,
        "run-refused",
        RunOptions::start(),
        RunStatus::Failed,
    );
    assert_eq!(calls.count("lookup_invoice"), 1);
    assert_eq!(
        audit_kinds(&refused, "run-refused"),
        [("lookup_invoice".to_owned(), AuditKind::ToolFailed)]
    );
}

#[test]
fn a_reused_result_is_audited_as_succeeded_without_a_request() {
    let calls = Calls::default();
    let rt = runtime(
        &calls,
        vec![
            Action::call_once("lookup_invoice", json!({"invoice_id": "INV-2"}), "k"),
            Action::call_once("lookup_invoice", json!({"invoice_id": "INV-2"}), "k"),
            Action::finish(json!("ok")),
        ],
    )
    .build()
    .unwrap();
    check(&rt, "run-reuse", RunOptions::start(), RunStatus::Completed);
    assert_eq!(calls.count("lookup_invoice"), 1);
    let kinds: Vec<AuditKind> = audit_kinds(&rt, "run-reuse")
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    assert_eq!(
        kinds,
        [
            AuditKind::ToolRequested,
            AuditKind::ToolSucceeded,
            AuditKind::ToolSucceeded
        ]
    );
}

#[test]
fn the_circuit_is_consulted_before_every_attempt_including_retries() {
    let calls = Calls::default();
    let rt = runtime(&calls, vec![call("slow_search", "INV-3")])
        .retry_policy(RetryPolicy::default().max_attempts(5))
        .circuit_breaker(CircuitBreakerPolicy::new(2, Duration::from_secs(30)))
        .build()
        .unwrap();
    let first = check(
        &rt,
        "run-cb-retry-1",
        RunOptions::start(),
        RunStatus::Failed,
    );
    // Threshold 2: the second failed attempt opens the circuit, so no third.
    assert_eq!(calls.count("slow_search"), 2);
    assert!(first.error.unwrap().contains("opened"));
    assert!(matches!(
        rt.tools().circuit_state("search"),
        CircuitState::Open { .. }
    ));
    let events = rt.events().events("run-cb-retry-1").unwrap();
    let summary = ReplaySummary::of(&events);
    assert_eq!(summary.retries, 1);
    assert_eq!(summary.tool_calls[0].attempts, 2);
    // The next invocation is refused before any attempt.
    let refused = check(
        &rt,
        "run-cb-retry-2",
        RunOptions::start(),
        RunStatus::Failed,
    );
    assert!(refused.error.unwrap().contains("is open"));
    assert_eq!(calls.count("slow_search"), 2);
}

#[test]
fn the_retryable_error_kinds_are_configurable() {
    // Default: only timeouts are retried.
    let calls = Calls::default();
    let rt = runtime(&calls, vec![call("broken_search", "INV-4")])
        .build()
        .unwrap();
    check(&rt, "run-default", RunOptions::start(), RunStatus::Failed);
    assert_eq!(calls.count("broken_search"), 1);

    // `failed` made retryable: every attempt is used.
    let calls = Calls::default();
    let rt = runtime(&calls, vec![call("broken_search", "INV-4")])
        .retry_policy(
            RetryPolicy::default()
                .max_attempts(3)
                .retryable_errors([ToolErrorKind::Timeout, ToolErrorKind::Failed]),
        )
        .build()
        .unwrap();
    check(
        &rt,
        "run-failed-retried",
        RunOptions::start(),
        RunStatus::Failed,
    );
    assert_eq!(calls.count("broken_search"), 3);

    // No retryable kind: a timeout is not retried either.
    let calls = Calls::default();
    let rt = runtime(&calls, vec![call("slow_search", "INV-4")])
        .retry_policy(RetryPolicy::default().retryable_errors([]))
        .build()
        .unwrap();
    check(&rt, "run-none", RunOptions::start(), RunStatus::Failed);
    assert_eq!(calls.count("slow_search"), 1);
}

/// A registry with one plain read whose handler answers only while nobody
/// holds `gate` for writing: a test that holds it makes the handler slower
/// than any timeout, however loaded the machine.
fn gated_registry(gate: &Arc<RwLock<()>>, started: &Arc<AtomicUsize>) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    let (gate, started) = (Arc::clone(gate), Arc::clone(started));
    registry
        .register(ToolDefinition::new(
            "slow_report",
            "Builds a report slowly",
            invoice_schema(),
            EffectKind::Read,
            move |input| {
                started.fetch_add(1, Ordering::SeqCst);
                let _open = gate.read().unwrap_or_else(PoisonError::into_inner);
                Ok(json!({"report": input.arguments["invoice_id"]}))
            },
        ))
        .unwrap();
    registry
}

#[test]
fn a_slow_plain_handler_times_out_is_retried_and_fails_the_run_after_the_last_attempt() {
    let started = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(RwLock::new(()));
    let sleeper = crate::RecordingSleeper::default();
    let rt = AgentRuntime::builder(
        gated_registry(&gate, &started),
        DeterministicPlanner::new([call("slow_report", "INV-5"), Action::finish(json!("ok"))]),
    )
    .policy(PermissionPolicy::allow(["slow_report"]))
    .tool_timeout(Some(Duration::from_millis(40)))
    .retry_policy(RetryPolicy::default().max_attempts(2))
    .sleeper(Arc::new(sleeper.clone()))
    .build()
    .unwrap();
    // Both attempts stay inside the handler until the run has ended.
    let held = gate.write().unwrap();
    let report = check(&rt, "run-slow", RunOptions::start(), RunStatus::Failed);
    drop(held);
    assert!(
        report
            .error
            .unwrap()
            .contains("did not answer within 40 ms")
    );
    assert_eq!(started.load(Ordering::SeqCst), 2);
    assert_eq!(sleeper.delays().len(), 1);
    let events = rt.events().events("run-slow").unwrap();
    assert!(events.iter().any(|e| matches!(
        &e.kind,
        TraceEventKind::ToolResult { error_kind: Some(kind), attempts: 2, .. } if kind == "timeout"
    )));
    assert_eq!(ReplaySummary::of(&events).retries, 1);

    // Within the timeout the same handler answers and the run completes.
    let started = Arc::new(AtomicUsize::new(0));
    let rt = AgentRuntime::builder(
        gated_registry(&gate, &started),
        DeterministicPlanner::new([call("slow_report", "INV-5"), Action::finish(json!("ok"))]),
    )
    .policy(PermissionPolicy::allow(["slow_report"]))
    .tool_timeout(Some(Duration::from_secs(5)))
    .build()
    .unwrap();
    check(&rt, "run-quick", RunOptions::start(), RunStatus::Completed);
    assert_eq!(started.load(Ordering::SeqCst), 1);
}

/// Finishes with the amount the lookup left in the working data.
#[derive(Debug)]
struct AmountPlanner;

impl Planner for AmountPlanner {
    fn next_action(&self, context: &PlanContext<'_>) -> Result<Action, PlannerError> {
        Ok(match context.step {
            0 => lookup("INV-6"),
            _ => Action::finish(context.working["lookup_invoice"]["amount_cents"].clone()),
        })
    }
}

#[test]
fn working_data_survives_checkpoints_and_a_restart() {
    let calls = Calls::default();
    let checkpoints: Arc<dyn CheckpointStore> = Arc::new(MemoryCheckpointStore::new());
    let build = |planner: AmountPlanner| {
        AgentRuntime::builder(crate::plain_tools(&calls), planner)
            .policy(crate::all_plain_tools())
            .checkpoint_store(Arc::clone(&checkpoints))
            .build()
            .unwrap()
    };
    let first = build(AmountPlanner);
    check(
        &first,
        "run-working",
        RunOptions::start().stop_after_steps(1),
        RunStatus::Paused,
    );
    let saved = checkpoints.load("run-working").unwrap().unwrap();
    assert_eq!(
        saved.working["lookup_invoice"],
        json!({"invoice_id": "INV-6", "amount_cents": 1200})
    );
    // A new runtime (a restarted process) sees it from the checkpoint.
    let second = build(AmountPlanner);
    let done = check(
        &second,
        "run-working",
        RunOptions::resume(),
        RunStatus::Completed,
    );
    assert_eq!(done.output, Some(json!(1200)));
    assert_eq!(calls.count("lookup_invoice"), 1);

    // A checkpoint written before working data existed still loads, empty.
    let mut old = serde_json::to_value(Checkpoint::new(Task::new("run-old", json!("t")))).unwrap();
    old.as_object_mut().unwrap().remove("working");
    let old: Checkpoint = serde_json::from_value(old).unwrap();
    assert!(old.working.is_empty());
}

#[test]
fn an_exhausted_script_finishes_the_run() {
    let calls = Calls::default();
    let rt = runtime(&calls, vec![lookup("INV-7")]).build().unwrap();
    let report = check(
        &rt,
        "run-exhausted",
        RunOptions::start(),
        RunStatus::Completed,
    );
    assert_eq!(report.output, Some(json!(PLAN_EXHAUSTED)));
    assert_eq!(report.steps, 1);
    assert_eq!(calls.count("lookup_invoice"), 1);
    let events = rt.events().events("run-exhausted").unwrap();
    assert_eq!(
        ReplaySummary::of(&events).terminal_status,
        Some(RunStatus::Completed)
    );
}

#[cfg(feature = "effects")]
#[test]
fn effect_backed_tools_keep_the_executor_deadline_not_the_plain_tool_timeout() {
    use effect_core::{EffectContract, MemoryLedger};
    use effect_exec::EffectExecutor;

    let commits = Arc::new(AtomicUsize::new(0));
    let committed = Arc::clone(&commits);
    let contract = EffectContract::builder("send_invoice", |args| {
        Ok(format!(
            "invoice:{}:send",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        ))
    })
    .build()
    .unwrap();
    let mut registry = ToolRegistry::new();
    registry
        .register(
            ToolDefinition::new(
                "send_invoice",
                "Sends an invoice, slowly",
                invoice_schema(),
                EffectKind::Mutation,
                move |_| {
                    std::thread::sleep(Duration::from_millis(150));
                    committed.fetch_add(1, Ordering::SeqCst);
                    Ok(json!({"sent": true}))
                },
            )
            .effect_contract(contract),
        )
        .unwrap();
    let rt = AgentRuntime::builder(
        registry,
        DeterministicPlanner::new([call("send_invoice", "INV-8"), Action::finish(json!("sent"))]),
    )
    .policy(PermissionPolicy::allow(["send_invoice"]).without_mutation_confirmation())
    .tool_timeout(Some(Duration::from_millis(10)))
    .effect_executor(EffectExecutor::new(Arc::new(MemoryLedger::new())))
    .build()
    .unwrap();
    let report = check(
        &rt,
        "run-effect-slow",
        RunOptions::start(),
        RunStatus::Completed,
    );
    assert_eq!(report.output, Some(json!("sent")));
    assert_eq!(commits.load(Ordering::SeqCst), 1);
}

#[cfg(feature = "effects")]
#[test]
fn a_contract_that_cannot_name_its_operation_fails_the_run_audited_before_any_dispatch() {
    use effect_core::{EffectContract, MemoryLedger};
    use effect_exec::EffectExecutor;

    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let contract = EffectContract::builder("send_invoice", |args| {
        Ok(format!(
            "invoice:{}:send",
            args["customer"].as_str().ok_or("missing customer")?
        ))
    })
    .build()
    .unwrap();
    let mut registry = ToolRegistry::new();
    registry
        .register(
            ToolDefinition::new(
                "send_invoice",
                "Sends an invoice",
                invoice_schema(),
                EffectKind::Mutation,
                move |_| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    Ok(json!({"sent": true}))
                },
            )
            .effect_contract(contract),
        )
        .unwrap();
    let rt = AgentRuntime::builder(
        registry,
        DeterministicPlanner::new([call("send_invoice", "INV-9")]),
    )
    .policy(PermissionPolicy::allow(["send_invoice"]).without_mutation_confirmation())
    .effect_executor(EffectExecutor::new(Arc::new(MemoryLedger::new())))
    .build()
    .unwrap();
    let report = check(&rt, "run-no-id", RunOptions::start(), RunStatus::Failed);
    assert!(report.error.unwrap().contains("missing customer"));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        audit_kinds(&rt, "run-no-id"),
        [
            ("send_invoice".to_owned(), AuditKind::MutationAuthorized),
            ("send_invoice".to_owned(), AuditKind::ToolFailed),
        ]
    );
}
