//! `AsyncAgentRuntime`: the same runs on tokio, with an async planner and
//! async handlers; effect-backed tools go through `execute_async`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runtime::checkpoint::PendingStage;
use agent_runtime::trace::{AuditKind, ToolResultStatus, TraceEventKind};
use agent_runtime::{
    Action, AgentRuntime, AsyncAgentRuntime, AsyncPlanner, DeterministicPlanner, EffectKind,
    PermissionPolicy, PlanContext, PlannerError, ReplaySummary, RetryPolicy, RunError, RunOptions,
    RunStatus, StepFuture, Task, ToolDefinition, ToolError, ToolRegistry,
};
use effect_core::{EffectContract, EffectLedger, EffectStatus, MemoryLedger, OutcomeProbeResult};
use effect_exec::EffectExecutor;
use serde_json::json;

use crate::invoice_schema;

/// A payment provider that commits every capture; the first acknowledgement
/// is lost, and its index lags one probe behind.
#[derive(Debug, Default)]
struct Provider {
    commits: Mutex<Vec<String>>,
    handler_calls: AtomicUsize,
    lagging_probes: AtomicUsize,
}

impl Provider {
    fn committed(&self) -> usize {
        self.commits.lock().unwrap().len()
    }
}

/// Awaits something before each decision, as an LLM-backed planner would.
#[derive(Debug)]
struct SlowScript(DeterministicPlanner);

impl AsyncPlanner for SlowScript {
    fn next_action<'a>(
        &'a self,
        context: &'a PlanContext<'a>,
    ) -> StepFuture<'a, Result<Action, PlannerError>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            agent_runtime::Planner::next_action(&self.0, context)
        })
    }
}

fn capture_tool(provider: &Arc<Provider>) -> ToolDefinition {
    let probing = Arc::clone(provider);
    let contract = EffectContract::builder("capture_payment", |args| {
        Ok(format!(
            "invoice:{}:capture",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        ))
    })
    .provider_idempotency_key(|args| {
        Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
    })
    .outcome_probe(move |_args, key| {
        if probing.lagging_probes.load(Ordering::SeqCst) > 0 {
            probing.lagging_probes.fetch_sub(1, Ordering::SeqCst);
            return Ok(OutcomeProbeResult::pending());
        }
        let commits = probing.commits.lock().unwrap();
        Ok(match commits.iter().position(|k| Some(k.as_str()) == key) {
            Some(i) => {
                OutcomeProbeResult::committed(json!({"payment_id": format!("pay-{}", i + 1)}))
            }
            None => OutcomeProbeResult::not_committed(),
        })
    })
    .build()
    .unwrap();
    let p = Arc::clone(provider);
    ToolDefinition::new_async(
        "capture_payment",
        "Captures an invoice's payment",
        invoice_schema(),
        EffectKind::Mutation,
        move |input| {
            let p = Arc::clone(&p);
            async move {
                let call = p.handler_calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                p.commits
                    .lock()
                    .unwrap()
                    .push(input.provider_key.unwrap_or_default());
                if call == 0 {
                    Err(ToolError::timeout(
                        "timed out waiting for the acknowledgement",
                    ))
                } else {
                    Ok(json!({"payment_id": "pay-unexpected"}))
                }
            }
        },
    )
    .effect_contract(contract)
}

fn lookup_tool(lookups: &Arc<AtomicUsize>) -> ToolDefinition {
    let lookups = Arc::clone(lookups);
    ToolDefinition::new_async(
        "lookup_invoice",
        "Reads an invoice",
        invoice_schema(),
        EffectKind::Read,
        move |input| {
            let lookups = Arc::clone(&lookups);
            async move {
                lookups.fetch_add(1, Ordering::SeqCst);
                Ok(json!({"invoice_id": input.arguments["invoice_id"], "amount_cents": 1200}))
            }
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_acknowledgement_waits_then_an_async_resume_reconciles_one_payment() {
    let provider = Arc::new(Provider {
        lagging_probes: AtomicUsize::new(1),
        ..Provider::default()
    });
    let lookups = Arc::new(AtomicUsize::new(0));
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let mut registry = ToolRegistry::new();
    registry.register(capture_tool(&provider)).unwrap();
    registry.register(lookup_tool(&lookups)).unwrap();
    let rt = AsyncAgentRuntime::builder(
        registry,
        SlowScript(DeterministicPlanner::new([
            Action::call("lookup_invoice", json!({"invoice_id": "INV-9"})),
            Action::call("capture_payment", json!({"invoice_id": "INV-9"})),
            Action::finish(json!("paid")),
        ])),
    )
    .policy(PermissionPolicy::allow([
        "lookup_invoice",
        "capture_payment",
    ]))
    .effect_executor(EffectExecutor::new(Arc::clone(&ledger)))
    .build()
    .unwrap();
    let task = Task::new("run-async-pay", json!("capture INV-9"));

    // The mutation waits for a confirmation, as in the synchronous runtime.
    let first = rt.run(task.clone(), RunOptions::start()).await.unwrap();
    assert_eq!(first.status, RunStatus::Waiting);
    let invocation = first.awaiting_confirmation().unwrap().to_owned();
    assert_eq!(provider.committed(), 0);

    // Confirmed: the provider commits, the acknowledgement is lost and the
    // probe cannot see it yet. The run waits on the uncertain effect.
    let waiting = rt
        .run(task.clone(), RunOptions::resume().confirm(invocation))
        .await
        .unwrap();
    assert_eq!(waiting.status, RunStatus::Waiting, "{waiting:#?}");
    assert!(matches!(
        waiting.pending.as_ref().unwrap().stage,
        PendingStage::EffectUncertain { ref operation_id, status: EffectStatus::OutcomeUnknown, .. }
            if operation_id == "invoice:INV-9:capture"
    ));
    assert_eq!(provider.committed(), 1);

    // The resume reconciles the same operation: the probe finds the commit.
    let done = rt.run(task, RunOptions::resume()).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{done:#?}");
    assert_eq!(done.output, Some(json!("paid")));
    assert_eq!(provider.committed(), 1, "exactly one payment");
    assert_eq!(provider.handler_calls.load(Ordering::SeqCst), 1);
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    let history: Vec<String> = ledger
        .events("invoice:INV-9:capture")
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(
        history.iter().filter(|e| *e == "dispatched").count(),
        1,
        "{history:?}"
    );
    assert_eq!(history.last().map(String::as_str), Some("confirmed"));

    let events = rt.events().events("run-async-pay").unwrap();
    let summary = ReplaySummary::of(&events);
    assert!(summary.sequence_consistent);
    assert_eq!(
        summary
            .tool_calls
            .iter()
            .map(|c| (c.tool.as_str(), c.result))
            .collect::<Vec<_>>(),
        [
            ("lookup_invoice", ToolResultStatus::Succeeded),
            ("capture_payment", ToolResultStatus::Uncertain),
            ("capture_payment", ToolResultStatus::Succeeded),
        ]
    );
    assert!(events.iter().any(|e| matches!(
        &e.kind,
        TraceEventKind::Recovery {
            effect_status: Some(EffectStatus::Confirmed),
            ..
        }
    )));
    let audit: Vec<AuditKind> = rt
        .audit()
        .records("run-async-pay")
        .unwrap()
        .iter()
        .map(|r| r.kind)
        .collect();
    assert_eq!(
        audit,
        [
            AuditKind::ToolRequested,
            AuditKind::ToolSucceeded,
            AuditKind::ConfirmationRequired,
            AuditKind::MutationAuthorized,
            AuditKind::ToolRequested,
            AuditKind::EffectUncertain,
            AuditKind::ToolSucceeded
        ]
    );
    let checkpoint = rt.checkpoints().load("run-async-pay").unwrap().unwrap();
    assert_eq!(checkpoint.working["capture_payment"]["payment_id"], "pay-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_async_handler_times_out_is_retried_then_fails_the_run() {
    let started = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&started);
    let mut registry = ToolRegistry::new();
    registry
        .register(ToolDefinition::new_async(
            "slow_search",
            "Never answers in time",
            invoice_schema(),
            EffectKind::Read,
            move |_| {
                let counter = Arc::clone(&counter);
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    Ok(json!("late"))
                }
            },
        ))
        .unwrap();
    let rt = AsyncAgentRuntime::builder(
        registry,
        DeterministicPlanner::new([Action::call("slow_search", json!({"invoice_id": "INV-1"}))]),
    )
    .policy(PermissionPolicy::allow(["slow_search"]))
    .tool_timeout(Some(Duration::from_millis(20)))
    .retry_policy(
        RetryPolicy::default()
            .max_attempts(2)
            .backoff(Duration::from_millis(1), Duration::from_millis(1)),
    )
    .build()
    .unwrap();
    let report = rt
        .run(Task::new("run-async-slow", json!("t")), RunOptions::start())
        .await
        .unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    assert!(
        report
            .error
            .unwrap()
            .contains("did not answer within 20 ms")
    );
    assert_eq!(started.load(Ordering::SeqCst), 2);
    // Invalid arguments are refused before any handler, as in the sync runtime.
    let invalid = AsyncAgentRuntime::builder(
        ToolRegistry::new(),
        DeterministicPlanner::new([Action::call("missing", json!({}))]),
    )
    .policy(PermissionPolicy::allow(["missing"]))
    .build()
    .unwrap();
    let refused = invalid
        .run(
            Task::new("run-async-missing", json!("t")),
            RunOptions::start(),
        )
        .await
        .unwrap();
    assert_eq!(refused.status, RunStatus::Failed);
}

#[test]
fn the_synchronous_runtime_refuses_an_async_tool() {
    let mut registry = ToolRegistry::new();
    registry
        .register(lookup_tool(&Arc::new(AtomicUsize::new(0))))
        .unwrap();
    let built = AgentRuntime::builder(registry, DeterministicPlanner::new([])).build();
    assert!(matches!(
        built,
        Err(RunError::AsyncToolInSyncRuntime { tool }) if tool == "lookup_invoice"
    ));
}
