//! `AsyncAgentRuntime`: the same runs on tokio, with an async planner and
//! async handlers; effect-backed tools go through `execute_prepared_async`,
//! and no store, synchronous handler or injected sleeper blocks a worker.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use agent_runtime::checkpoint::{Checkpoint, PendingStage};
use agent_runtime::store::{
    AuditStore, EventStore, MemoryAuditStore, MemoryCheckpointStore, MemoryEventStore, StoreError,
};
use agent_runtime::trace::{AuditKind, AuditRecord, ToolResultStatus, TraceEvent, TraceEventKind};
use agent_runtime::{
    Action, AgentRuntime, AsyncAgentRuntime, AsyncPlanner, CheckpointStore, DeterministicPlanner,
    EffectKind, PermissionPolicy, PlanContext, PlannerError, ReplaySummary, RetryPolicy, RunError,
    RunOptions, RunStatus, StepFuture, Task, ToolDefinition, ToolError, ToolRegistry,
};
use effect_core::{
    EffectLedger, EffectRecord, EffectStatus, LedgerError, LedgerEvent, LedgerStats, ListQuery,
    MemoryLedger, OutcomeProbeResult, Transition, TransitionOutcome, WriteDurability,
};
use effect_exec::EffectExecutor;
use serde_json::json;

use crate::{RecordingSleeper, invoice_schema};

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
    let contract = effect_test_support::contracts::capture_payment()
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

/// The threads a store was called on, and how often.
#[derive(Debug, Default)]
struct Threads(Mutex<Vec<ThreadId>>);

impl Threads {
    fn record(&self) {
        self.0.lock().unwrap().push(std::thread::current().id());
    }

    /// How many calls ran on `thread`, out of how many.
    fn on(&self, thread: ThreadId) -> (usize, usize) {
        let calls = self.0.lock().unwrap();
        (calls.iter().filter(|t| **t == thread).count(), calls.len())
    }
}

/// Trace, audit and checkpoint stores in memory that note the thread of
/// every call.
#[derive(Debug, Default)]
struct ThreadNotingStores {
    threads: Threads,
    events: MemoryEventStore,
    audit: MemoryAuditStore,
    checkpoints: MemoryCheckpointStore,
}

impl EventStore for ThreadNotingStores {
    fn append(&self, event: &TraceEvent) -> Result<(), StoreError> {
        self.threads.record();
        self.events.append(event)
    }

    fn events(&self, run_id: &str) -> Result<Vec<TraceEvent>, StoreError> {
        self.threads.record();
        self.events.events(run_id)
    }
}

impl AuditStore for ThreadNotingStores {
    fn append(&self, record: &AuditRecord) -> Result<(), StoreError> {
        self.threads.record();
        self.audit.append(record)
    }

    fn records(&self, run_id: &str) -> Result<Vec<AuditRecord>, StoreError> {
        self.threads.record();
        self.audit.records(run_id)
    }
}

impl CheckpointStore for ThreadNotingStores {
    fn save(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        self.threads.record();
        self.checkpoints.save(checkpoint)
    }

    fn load(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        self.threads.record();
        self.checkpoints.load(run_id)
    }
}

/// A memory ledger that notes the thread of every call.
#[derive(Debug, Default)]
struct ThreadNotingLedger {
    threads: Threads,
    inner: MemoryLedger,
}

#[deny(clippy::missing_trait_methods)]
impl EffectLedger for ThreadNotingLedger {
    fn apply_with(
        &self,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        self.threads.record();
        self.inner.apply_with(operation_id, transition, durability)
    }

    fn sync(&self) -> Result<(), LedgerError> {
        self.threads.record();
        self.inner.sync()
    }

    fn get(&self, operation_id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        self.threads.record();
        self.inner.get(operation_id)
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        self.threads.record();
        self.inner.list(query)
    }

    fn events(&self, operation_id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.threads.record();
        self.inner.events(operation_id)
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.threads.record();
        self.inner.events_after(after, limit)
    }

    fn count_events(
        &self,
        operation_ids: &[&str],
        event_type: &str,
    ) -> Result<Vec<u64>, LedgerError> {
        self.threads.record();
        self.inner.count_events(operation_ids, event_type)
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        self.threads.record();
        self.inner.stats()
    }

    fn longest_lock_wait(&self) -> Option<Duration> {
        self.inner.longest_lock_wait()
    }
}

// A current-thread runtime: the test's thread is the runtime's only worker,
// so a store called on the task would be called on this thread.
#[tokio::test(flavor = "current_thread")]
async fn stores_and_the_ledger_are_never_called_on_the_runtime_worker() {
    let worker = std::thread::current().id();
    let stores = Arc::new(ThreadNotingStores::default());
    let ledger = Arc::new(ThreadNotingLedger::default());
    let provider = Arc::new(Provider::default());
    let lookups = Arc::new(AtomicUsize::new(0));
    let mut registry = ToolRegistry::new();
    registry.register(lookup_tool(&lookups)).unwrap();
    registry.register(sync_capture_tool(&provider)).unwrap();
    let rt = AsyncAgentRuntime::builder(
        registry,
        DeterministicPlanner::new([
            Action::call("lookup_invoice", json!({"invoice_id": "INV-3"})),
            Action::call("capture_payment", json!({"invoice_id": "INV-3"})),
            Action::finish(json!("paid")),
        ]),
    )
    .policy(
        PermissionPolicy::allow(["lookup_invoice", "capture_payment"])
            .without_mutation_confirmation(),
    )
    .event_store(Arc::clone(&stores) as Arc<dyn EventStore>)
    .audit_store(Arc::clone(&stores) as Arc<dyn AuditStore>)
    .checkpoint_store(Arc::clone(&stores) as Arc<dyn CheckpointStore>)
    .effect_executor(EffectExecutor::new(
        Arc::clone(&ledger) as Arc<dyn EffectLedger>
    ))
    .build()
    .unwrap();

    // `sendable`: a run can be spawned on a multi-threaded runtime.
    let report = sendable(rt.run(Task::new("run-off-worker", json!("t")), RunOptions::start()))
        .await
        .unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    assert_eq!(provider.committed(), 1);
    let (on_worker, calls) = stores.threads.on(worker);
    assert!(calls >= 10, "the run used its stores: {calls} calls");
    assert_eq!(
        on_worker, 0,
        "{on_worker} of {calls} store calls on the worker"
    );
    let (on_worker, calls) = ledger.threads.on(worker);
    assert!(calls >= 2, "the capture used the ledger: {calls} calls");
    assert_eq!(
        on_worker, 0,
        "{on_worker} of {calls} ledger calls on the worker"
    );
}

/// `future`, checked to be `Send` at compile time.
fn sendable<F: std::future::Future + Send>(future: F) -> F {
    future
}

/// A synchronous capture handler, committing every call.
fn sync_capture_tool(provider: &Arc<Provider>) -> ToolDefinition {
    let p = Arc::clone(provider);
    ToolDefinition::new(
        "capture_payment",
        "Captures an invoice's payment",
        invoice_schema(),
        EffectKind::Mutation,
        move |input| {
            p.handler_calls.fetch_add(1, Ordering::SeqCst);
            p.commits
                .lock()
                .unwrap()
                .push(input.provider_key.unwrap_or_default());
            Ok(json!({"payment_id": "pay-1"}))
        },
    )
    .effect_contract(
        effect_test_support::contracts::capture_payment_without_key()
            .build()
            .unwrap(),
    )
}

#[tokio::test(flavor = "current_thread")]
async fn an_injected_sleeper_waits_between_async_retries_instead_of_tokios_timer() {
    let attempts = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&attempts);
    let mut registry = ToolRegistry::new();
    registry
        .register(ToolDefinition::new_async(
            "flaky_search",
            "Times out twice, then answers",
            invoice_schema(),
            EffectKind::Read,
            move |_| {
                let attempt = counter.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    if attempt < 3 {
                        Err(ToolError::timeout("search did not answer"))
                    } else {
                        Ok(json!({"hits": 1}))
                    }
                }
            },
        ))
        .unwrap();
    let sleeper = RecordingSleeper::default();
    // An hour between attempts: a run that waited on tokio's timer would not
    // come back, one that waits through the sleeper returns at once.
    let hour = Duration::from_secs(3600);
    let rt = AsyncAgentRuntime::builder(
        registry,
        DeterministicPlanner::new([
            Action::call("flaky_search", json!({"invoice_id": "INV-1"})),
            Action::finish(json!("found")),
        ]),
    )
    .policy(PermissionPolicy::allow(["flaky_search"]))
    .retry_policy(RetryPolicy::default().max_attempts(3).backoff(hour, hour))
    .sleeper(Arc::new(sleeper.clone()))
    .build()
    .unwrap();

    let run = rt.run(Task::new("run-sleeper", json!("t")), RunOptions::start());
    // A bound on failure only: the run itself never waits.
    let report = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the retries wait through the injected sleeper, not tokio's timer")
        .unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert_eq!(sleeper.delays(), [hour, hour]);
}
