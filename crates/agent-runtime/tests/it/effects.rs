//! Effect-backed tools: recorded before dispatch by the effect executor; an
//! uncertain outcome makes the run wait, and a resume reconciles the same
//! operation instead of paying twice.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_runtime::checkpoint::{Checkpoint, PendingStage};
use agent_runtime::store::{MemoryCheckpointStore, StoreError};
use agent_runtime::trace::{AuditKind, ToolResultStatus, TraceEventKind};
use agent_runtime::{
    Action, AgentRuntime, CheckpointStore, DeterministicPlanner, EffectKind, PermissionPolicy,
    ReplaySummary, RunOptions, RunStatus, ToolDefinition, ToolError, ToolRegistry,
};
use effect_core::{
    EffectContract, EffectLedger, EffectStatus, ListQuery, MemoryLedger, OutcomeProbeResult,
};
use effect_exec::{Audit, EffectExecutor};
use serde_json::{Value, json};

use crate::{Calls, RecordingSleeper, check, invoice_schema, lookup, plain_tools};

/// What a capture call does.
#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    /// Commits, then the acknowledgement is lost.
    AckLost,
}

/// A payment provider that counts what it commits. Its lookup index lags: the
/// first `lagging_probes` probes cannot see a commit yet (`pending`).
#[derive(Debug, Default)]
struct FakeProvider {
    commits: Mutex<Vec<String>>,
    faults: Mutex<VecDeque<Fault>>,
    handler_calls: AtomicUsize,
    lagging_probes: AtomicUsize,
}

impl FakeProvider {
    fn new(faults: &[Fault], lagging_probes: usize) -> Arc<Self> {
        Arc::new(FakeProvider {
            faults: Mutex::new(faults.iter().copied().collect()),
            lagging_probes: AtomicUsize::new(lagging_probes),
            ..FakeProvider::default()
        })
    }

    fn committed(&self) -> usize {
        self.commits.lock().unwrap().len()
    }

    fn capture(&self, key: Option<String>) -> Result<Value, ToolError> {
        self.handler_calls.fetch_add(1, Ordering::SeqCst);
        let key = key.unwrap();
        let fault = self
            .faults
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Fault::None);
        let mut commits = self.commits.lock().unwrap();
        commits.push(key.clone());
        let payment = json!({"payment_id": format!("pay-{}", commits.len()), "key": key});
        match fault {
            Fault::None => Ok(payment),
            Fault::AckLost => Err(ToolError::timeout(
                "timed out waiting for the acknowledgement",
            )),
        }
    }

    fn probe(&self, key: Option<&str>) -> OutcomeProbeResult {
        let lagging = self.lagging_probes.load(Ordering::SeqCst);
        if lagging > 0 {
            self.lagging_probes.store(lagging - 1, Ordering::SeqCst);
            return OutcomeProbeResult::pending();
        }
        let commits = self.commits.lock().unwrap();
        match commits.iter().position(|k| Some(k.as_str()) == key) {
            Some(i) => OutcomeProbeResult::committed(
                json!({"payment_id": format!("pay-{}", i + 1), "key": key}),
            )
            .provider_operation_id(format!("pay-{}", i + 1)),
            None => OutcomeProbeResult::not_committed(),
        }
    }
}

fn capture_tool(provider: &Arc<FakeProvider>, with_probe: bool) -> ToolDefinition {
    let mut contract = effect_test_support::contracts::capture_payment();
    if with_probe {
        let p = Arc::clone(provider);
        contract = contract.outcome_probe(move |_args, key| Ok(p.probe(key)));
    }
    let p = Arc::clone(provider);
    ToolDefinition::new(
        "capture_payment",
        "Captures an invoice's payment",
        invoice_schema(),
        EffectKind::Mutation,
        move |input| p.capture(input.provider_key),
    )
    .effect_contract(contract.build().unwrap())
}

fn payment_runtime(
    provider: &Arc<FakeProvider>,
    ledger: &Arc<dyn EffectLedger>,
    with_probe: bool,
    sleeper: &RecordingSleeper,
) -> AgentRuntime {
    let calls = Calls::default();
    let mut registry: ToolRegistry = plain_tools(&calls);
    registry
        .register(capture_tool(provider, with_probe))
        .unwrap();
    AgentRuntime::builder(
        registry,
        DeterministicPlanner::new([
            lookup("INV-9"),
            Action::call("capture_payment", json!({"invoice_id": "INV-9"})),
            Action::finish(json!("paid")),
        ]),
    )
    .policy(PermissionPolicy::allow([
        "lookup_invoice",
        "capture_payment",
    ]))
    .sleeper(Arc::new(sleeper.clone()))
    .effect_executor(EffectExecutor::new(Arc::clone(ledger)))
    .build()
    .unwrap()
}

fn ledger_events(ledger: &Arc<dyn EffectLedger>) -> Vec<String> {
    ledger
        .events("invoice:INV-9:capture")
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

#[test]
fn lost_acknowledgement_waits_then_resume_completes_with_one_payment() {
    let provider = FakeProvider::new(&[Fault::AckLost], 1);
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let sleeper = RecordingSleeper::default();
    let rt = payment_runtime(&provider, &ledger, true, &sleeper);

    let confirm = check(&rt, "run-pay", RunOptions::start(), RunStatus::Waiting);
    let invocation = confirm.awaiting_confirmation().unwrap().to_owned();
    assert_eq!(provider.committed(), 0);

    // Confirmed: the provider commits, the acknowledgement is lost and its
    // index does not show the payment yet. The run waits; it does not fail.
    let waiting = check(
        &rt,
        "run-pay",
        RunOptions::resume().confirm(invocation),
        RunStatus::Waiting,
    );
    let pending = waiting.pending.unwrap();
    assert!(matches!(
        pending.stage,
        PendingStage::EffectUncertain { ref operation_id, status: EffectStatus::OutcomeUnknown, .. }
            if operation_id == "invoice:INV-9:capture"
    ));
    assert_eq!(provider.committed(), 1);

    // The resume reconciles the same operation: the probe now finds the commit.
    let done = check(&rt, "run-pay", RunOptions::resume(), RunStatus::Completed);
    assert_eq!(done.output, Some(json!("paid")));
    assert_eq!(provider.committed(), 1, "exactly one payment");
    assert_eq!(provider.handler_calls.load(Ordering::SeqCst), 1);
    // Effect-backed tools bypass the runtime's retry policy.
    assert!(sleeper.delays().is_empty());
    // One dispatch under one operation id, settled by the probe.
    let history = ledger_events(&ledger);
    assert_eq!(
        history.iter().filter(|e| *e == "dispatched").count(),
        1,
        "{history:?}"
    );
    assert_eq!(history.last().map(String::as_str), Some("confirmed"));
    let checkpoint = rt.checkpoints().load("run-pay").unwrap().unwrap();
    assert_eq!(checkpoint.observations[1].output["payment_id"], "pay-1");

    let events = rt.events().events("run-pay").unwrap();
    let summary = ReplaySummary::of(&events);
    assert!(summary.sequence_consistent);
    let results: Vec<_> = summary
        .tool_calls
        .iter()
        .map(|c| (c.tool.as_str(), c.result))
        .collect();
    assert_eq!(
        results,
        [
            ("lookup_invoice", ToolResultStatus::Succeeded),
            ("capture_payment", ToolResultStatus::Uncertain),
            ("capture_payment", ToolResultStatus::Succeeded),
        ]
    );
    assert!(events.iter().any(|e| matches!(
        &e.kind,
        TraceEventKind::Recovery { operation_id: Some(id), effect_status: Some(EffectStatus::Confirmed), .. }
            if id == "invoice:INV-9:capture"
    )));
    let audit: Vec<AuditKind> = rt
        .audit()
        .records("run-pay")
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
}

#[test]
fn quarantined_effect_waits_until_an_operator_resolves_it() {
    let provider = FakeProvider::new(&[Fault::AckLost], 0);
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let sleeper = RecordingSleeper::default();
    // No probe and no guarantee: nothing can settle the outcome automatically.
    let rt = payment_runtime(&provider, &ledger, false, &sleeper);
    let confirm = check(&rt, "run-q", RunOptions::start(), RunStatus::Waiting);
    let invocation = confirm.awaiting_confirmation().unwrap().to_owned();
    let waiting = check(
        &rt,
        "run-q",
        RunOptions::resume().confirm(invocation),
        RunStatus::Waiting,
    );
    assert!(matches!(
        waiting.pending.unwrap().stage,
        PendingStage::EffectUncertain {
            status: EffectStatus::Quarantined,
            ..
        }
    ));
    // Resuming again does not dispatch: it still waits.
    check(&rt, "run-q", RunOptions::resume(), RunStatus::Waiting);
    assert_eq!(provider.handler_calls.load(Ordering::SeqCst), 1);

    // An operator checks the provider dashboard and confirms the payment.
    EffectExecutor::new(Arc::clone(&ledger))
        .operator()
        .confirm_manually(
            "invoice:INV-9:capture",
            json!({"payment_id": "pay-1"}),
            Some("pay-1".into()),
            Audit::new("ops@example.com", "seen on the dashboard", "TICKET-7"),
        )
        .unwrap();
    let done = check(&rt, "run-q", RunOptions::resume(), RunStatus::Completed);
    assert_eq!(done.steps, 2);
    assert_eq!(provider.committed(), 1);
    assert_eq!(provider.handler_calls.load(Ordering::SeqCst), 1);
}

#[test]
fn effect_tools_need_an_effect_executor() {
    let provider = FakeProvider::new(&[], 0);
    let mut registry = ToolRegistry::new();
    registry.register(capture_tool(&provider, true)).unwrap();
    let err = AgentRuntime::builder(registry, DeterministicPlanner::default())
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("capture_payment"), "{err}");
}

/// A checkpoint store that stops saving after `saves_left` saves, like a
/// process that dies right after the provider answered.
#[derive(Debug)]
struct DyingStore {
    inner: Arc<MemoryCheckpointStore>,
    saves_left: AtomicUsize,
}

impl CheckpointStore for DyingStore {
    fn save(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        if self.saves_left.load(Ordering::SeqCst) == 0 {
            return Err(StoreError::backend("save a checkpoint", "the process died"));
        }
        self.saves_left.fetch_sub(1, Ordering::SeqCst);
        self.inner.save(checkpoint)
    }

    fn load(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        self.inner.load(run_id)
    }
}

#[test]
fn crash_after_dispatch_resumes_by_reconciling_not_by_paying_again() {
    let provider = FakeProvider::new(&[Fault::None], 0);
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let checkpoints = Arc::new(MemoryCheckpointStore::new());
    let build = |store: Arc<dyn CheckpointStore>| {
        let mut registry = ToolRegistry::new();
        registry.register(capture_tool(&provider, true)).unwrap();
        AgentRuntime::builder(
            registry,
            DeterministicPlanner::new([
                Action::call("capture_payment", json!({"invoice_id": "INV-9"})),
                Action::finish(json!("paid")),
            ]),
        )
        .policy(PermissionPolicy::allow(["capture_payment"]).without_mutation_confirmation())
        .checkpoint_store(store)
        .effect_executor(EffectExecutor::new(Arc::clone(&ledger)))
        .build()
        .unwrap()
    };
    // The checkpoint taken before dispatch is saved; the one after is not.
    let dying = build(Arc::new(DyingStore {
        inner: Arc::clone(&checkpoints),
        saves_left: AtomicUsize::new(1),
    }));
    let task = agent_runtime::Task::new("run-crash", json!("pay"));
    let err = dying.run(task.clone(), RunOptions::start()).unwrap_err();
    assert!(
        matches!(err, agent_runtime::RunError::Store { .. }),
        "{err}"
    );
    assert_eq!(provider.committed(), 1);
    let saved = checkpoints.load("run-crash").unwrap().unwrap();
    assert!(matches!(
        saved.pending.unwrap().stage,
        PendingStage::EffectDispatching { .. }
    ));

    // A new process resumes from the last checkpoint: the ledger already has
    // the confirmed capture, so its stored result is replayed.
    let restarted = build(checkpoints);
    let done = restarted.run(task, RunOptions::resume()).unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(provider.committed(), 1);
    assert_eq!(provider.handler_calls.load(Ordering::SeqCst), 1);
    let events = restarted.events().events("run-crash").unwrap();
    // The interrupted step is recorded as a failure that was resumed.
    assert_eq!(
        ReplaySummary::of(&events).transitions[..2],
        [
            (RunStatus::Running, RunStatus::Failed),
            (RunStatus::Failed, RunStatus::Running)
        ]
    );
    assert!(events.iter().any(|e| matches!(
        &e.kind,
        TraceEventKind::Recovery {
            effect_status: Some(EffectStatus::Confirmed),
            ..
        }
    )));
}

#[test]
fn missed_deadline_waits_and_a_late_commit_is_found_on_resume() {
    use std::sync::mpsc;
    use std::time::Duration;

    let provider = FakeProvider::new(&[Fault::None], 0);
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let (release, released) = mpsc::channel::<()>();
    let (committed, commit_seen) = mpsc::channel::<()>();
    let released = Mutex::new(released);
    // The handler is stuck until the test releases it, then commits late.
    let p = Arc::clone(&provider);
    let slow = ToolDefinition::new(
        "capture_payment",
        "Captures an invoice's payment",
        invoice_schema(),
        EffectKind::Mutation,
        move |input| {
            released.lock().unwrap().recv().unwrap();
            let out = p.capture(input.provider_key);
            committed.send(()).unwrap();
            out
        },
    )
    .deadline(Duration::from_millis(10));
    let contract = capture_tool(&provider, true).contract().unwrap().clone();
    let mut registry = ToolRegistry::new();
    registry.register(slow.effect_contract(contract)).unwrap();
    let rt = AgentRuntime::builder(
        registry,
        DeterministicPlanner::new([
            Action::call("capture_payment", json!({"invoice_id": "INV-9"})),
            Action::finish(json!("paid")),
        ]),
    )
    .policy(PermissionPolicy::allow(["capture_payment"]).without_mutation_confirmation())
    .effect_executor(EffectExecutor::new(Arc::clone(&ledger)))
    .build()
    .unwrap();

    // The deadline passes; the probe sees nothing yet, but the handler may
    // still send its request, so nothing is retried: the run waits.
    let waiting = check(&rt, "run-late", RunOptions::start(), RunStatus::Waiting);
    assert!(matches!(
        waiting.pending.unwrap().stage,
        PendingStage::EffectUncertain {
            status: EffectStatus::Quarantined,
            ..
        }
    ));
    assert_eq!(provider.committed(), 0);

    release.send(()).unwrap();
    commit_seen.recv().unwrap();
    let done = check(&rt, "run-late", RunOptions::resume(), RunStatus::Completed);
    assert_eq!(done.steps, 1);
    assert_eq!(provider.committed(), 1);
    assert_eq!(provider.handler_calls.load(Ordering::SeqCst), 1);
}

/// A ledger that is unavailable while `down` is set.
#[derive(Debug, Default)]
struct FlakyLedger {
    inner: MemoryLedger,
    down: std::sync::atomic::AtomicBool,
}

impl FlakyLedger {
    fn check(&self) -> Result<(), effect_core::LedgerError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(effect_core::LedgerError::Unavailable {
                message: "the ledger is down".into(),
                source: None,
            });
        }
        Ok(())
    }
}

impl EffectLedger for FlakyLedger {
    fn apply_with(
        &self,
        operation_id: &str,
        transition: &effect_core::Transition,
        durability: effect_core::WriteDurability,
    ) -> Result<effect_core::TransitionOutcome, effect_core::LedgerError> {
        self.check()?;
        self.inner.apply_with(operation_id, transition, durability)
    }

    fn get(&self, id: &str) -> Result<Option<effect_core::EffectRecord>, effect_core::LedgerError> {
        self.check()?;
        self.inner.get(id)
    }

    fn list(
        &self,
        query: &effect_core::ListQuery,
    ) -> Result<Vec<effect_core::EffectRecord>, effect_core::LedgerError> {
        self.check()?;
        self.inner.list(query)
    }

    fn events(&self, id: &str) -> Result<Vec<effect_core::LedgerEvent>, effect_core::LedgerError> {
        self.check()?;
        self.inner.events(id)
    }

    fn events_after(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<effect_core::LedgerEvent>, effect_core::LedgerError> {
        self.check()?;
        self.inner.events_after(after, limit)
    }

    fn stats(&self) -> Result<effect_core::LedgerStats, effect_core::LedgerError> {
        self.check()?;
        self.inner.stats()
    }
}

#[test]
fn unavailable_ledger_fails_the_run_and_a_resume_settles_the_effect() {
    let provider = FakeProvider::new(&[Fault::None], 0);
    let flaky = Arc::new(FlakyLedger::default());
    let ledger: Arc<dyn EffectLedger> = flaky.clone();
    let mut registry = ToolRegistry::new();
    registry.register(capture_tool(&provider, true)).unwrap();
    let rt = AgentRuntime::builder(
        registry,
        DeterministicPlanner::new([
            Action::call("capture_payment", json!({"invoice_id": "INV-9"})),
            Action::finish(json!("paid")),
        ]),
    )
    .policy(PermissionPolicy::allow(["capture_payment"]).without_mutation_confirmation())
    .effect_executor(EffectExecutor::new(ledger))
    .build()
    .unwrap();

    flaky.down.store(true, Ordering::SeqCst);
    let failed = check(&rt, "run-flaky", RunOptions::start(), RunStatus::Failed);
    // Nothing could be recorded, so nothing was dispatched; the step stays
    // pending so the resume settles this operation rather than re-planning.
    assert_eq!(provider.handler_calls.load(Ordering::SeqCst), 0);
    assert!(matches!(
        failed.pending.unwrap().stage,
        PendingStage::EffectDispatching { .. }
    ));

    flaky.down.store(false, Ordering::SeqCst);
    check(&rt, "run-flaky", RunOptions::resume(), RunStatus::Completed);
    assert_eq!(provider.committed(), 1);
    assert_eq!(provider.handler_calls.load(Ordering::SeqCst), 1);
}

/// Per handler call: the operation id its context names, and the one the
/// run checkpointed before the dispatch.
type SeenIds = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A capture tool whose handler records the ids it sees.
fn capture_recording_ids(
    ids: &SeenIds,
    checkpoints: &Arc<MemoryCheckpointStore>,
    operation_id: impl Fn(&Value) -> Result<String, effect_core::CallbackError> + Send + Sync + 'static,
) -> ToolDefinition {
    let (seen, checkpoints) = (Arc::clone(ids), Arc::clone(checkpoints));
    ToolDefinition::new(
        "capture_payment",
        "Captures an invoice's payment",
        invoice_schema(),
        EffectKind::Mutation,
        move |input| {
            let context = input
                .effect
                .expect("an effect-backed handler gets a context");
            let checkpointed = checkpoints
                .load("run-ids")
                .unwrap()
                .and_then(|c| c.pending)
                .and_then(|p| match p.stage {
                    PendingStage::EffectDispatching { operation_id } => Some(operation_id),
                    _ => None,
                });
            seen.lock()
                .unwrap()
                .push((context.operation_id().to_owned(), checkpointed));
            Ok(json!({"payment_id": "pay-1"}))
        },
    )
    .effect_contract(
        EffectContract::builder("capture_payment", operation_id)
            .build()
            .unwrap(),
    )
}

fn capture_runtime(
    tool: ToolDefinition,
    checkpoints: &Arc<MemoryCheckpointStore>,
    ledger: &Arc<dyn EffectLedger>,
) -> AgentRuntime {
    let mut registry = ToolRegistry::new();
    registry.register(tool).unwrap();
    AgentRuntime::builder(
        registry,
        DeterministicPlanner::new([
            Action::call("capture_payment", json!({"invoice_id": "INV-4"})),
            Action::finish(json!("paid")),
        ]),
    )
    .policy(PermissionPolicy::allow(["capture_payment"]).without_mutation_confirmation())
    .checkpoint_store(Arc::clone(checkpoints) as Arc<dyn CheckpointStore>)
    .effect_executor(EffectExecutor::new(Arc::clone(ledger)))
    .build()
    .unwrap()
}

fn recorded(ledger: &Arc<dyn EffectLedger>) -> usize {
    ledger.list(&ListQuery::new(100)).unwrap().len()
}

#[test]
fn the_operation_id_the_executor_derived_is_the_one_checkpointed_traced_and_handed_to_the_handler()
{
    let ids = Arc::new(Mutex::new(Vec::new()));
    let checkpoints = Arc::new(MemoryCheckpointStore::new());
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let derivations = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&derivations);
    let tool = capture_recording_ids(&ids, &checkpoints, move |args| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(format!(
            "invoice:{}:capture",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        ))
    });
    let rt = capture_runtime(tool, &checkpoints, &ledger);

    let report = check(&rt, "run-ids", RunOptions::start(), RunStatus::Completed);
    assert_eq!(report.output, Some(json!("paid")));
    // Derived once for the call, by the effect executor.
    assert_eq!(derivations.load(Ordering::SeqCst), 1);
    let id = "invoice:INV-4:capture".to_owned();
    // The handler's context names the id the run checkpointed before the dispatch.
    assert_eq!(*ids.lock().unwrap(), [(id.clone(), Some(id.clone()))]);
    let traced: Vec<Option<String>> = rt
        .events()
        .events("run-ids")
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            TraceEventKind::ToolResult { operation_id, .. } => Some(operation_id),
            _ => None,
        })
        .collect();
    assert_eq!(traced, [Some(id.clone())]);
    let audited: Vec<Option<String>> = rt
        .audit()
        .records("run-ids")
        .unwrap()
        .into_iter()
        .map(|r| r.operation_id)
        .collect();
    assert_eq!(audited, [None, Some(id.clone()), Some(id.clone())]);
    let record = ledger.get(&id).unwrap().unwrap();
    assert_eq!(record.status, EffectStatus::Confirmed);
    assert_eq!(recorded(&ledger), 1);
}

#[test]
fn a_panicking_operation_id_fails_the_run_before_anything_is_recorded_or_dispatched() {
    let ids = Arc::new(Mutex::new(Vec::new()));
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let checkpoints = Arc::new(MemoryCheckpointStore::new());
    let tool = capture_recording_ids(&ids, &checkpoints, |_| panic!("identity bug"));
    let rt = capture_runtime(tool, &checkpoints, &ledger);
    let report = check(&rt, "run-ids", RunOptions::start(), RunStatus::Failed);
    let error = report.error.unwrap();
    assert!(
        error.contains("could not derive its operation id"),
        "{error}"
    );
    assert!(error.contains("identity bug"), "{error}");
    assert!(ids.lock().unwrap().is_empty(), "no handler call");
    assert_eq!(recorded(&ledger), 0, "nothing recorded");
    let audit: Vec<AuditKind> = rt
        .audit()
        .records("run-ids")
        .unwrap()
        .iter()
        .map(|r| r.kind)
        .collect();
    assert_eq!(
        audit,
        [AuditKind::MutationAuthorized, AuditKind::ToolFailed]
    );

    // A failing identity function is refused the same way.
    let checkpoints = Arc::new(MemoryCheckpointStore::new());
    let tool = capture_recording_ids(&ids, &checkpoints, |_| Err("no invoice here".into()));
    let rt = capture_runtime(tool, &checkpoints, &ledger);
    let report = check(&rt, "run-ids", RunOptions::start(), RunStatus::Failed);
    assert!(report.error.unwrap().contains("no invoice here"));
    assert!(ids.lock().unwrap().is_empty());
    assert_eq!(recorded(&ledger), 0);
}

/// The capture tool of [`capture_tool`], under a contract that requires a
/// human approval of each call (docs/approval.md).
fn approval_runtime(provider: &Arc<FakeProvider>, ledger: &Arc<dyn EffectLedger>) -> AgentRuntime {
    let p = Arc::clone(provider);
    let contract = EffectContract::builder("capture_payment", |args| {
        Ok(format!(
            "invoice:{}:capture",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        ))
    })
    .provider_idempotency_key(|args| {
        Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
    })
    .outcome_probe(move |_args, key| Ok(p.probe(key)))
    .requires_approval(true)
    .build()
    .unwrap();
    let p = Arc::clone(provider);
    let tool = ToolDefinition::new(
        "capture_payment",
        "Captures an invoice's payment",
        invoice_schema(),
        EffectKind::Mutation,
        move |input| p.capture(input.provider_key),
    )
    .effect_contract(contract);
    let calls = Calls::default();
    let mut registry: ToolRegistry = plain_tools(&calls);
    registry.register(tool).unwrap();
    AgentRuntime::builder(
        registry,
        DeterministicPlanner::new([
            lookup("INV-9"),
            Action::call("capture_payment", json!({"invoice_id": "INV-9"})),
            Action::finish(json!("paid")),
        ]),
    )
    .policy(PermissionPolicy::allow([
        "lookup_invoice",
        "capture_payment",
    ]))
    .sleeper(Arc::new(RecordingSleeper::default()))
    .effect_executor(EffectExecutor::new(Arc::clone(ledger)))
    .build()
    .unwrap()
}

#[test]
fn a_call_awaiting_approval_waits_and_resumes_once_approved() {
    let provider = FakeProvider::new(&[], 0);
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let rt = approval_runtime(&provider, &ledger);
    let confirm = check(&rt, "run-a", RunOptions::start(), RunStatus::Waiting);
    let invocation = confirm.awaiting_confirmation().unwrap().to_owned();
    let waiting = check(
        &rt,
        "run-a",
        RunOptions::resume().confirm(invocation),
        RunStatus::Waiting,
    );
    assert!(
        matches!(
            waiting.pending.as_ref().unwrap().stage,
            PendingStage::EffectUncertain {
                status: EffectStatus::AwaitingApproval,
                ..
            }
        ),
        "{:?}",
        waiting.pending
    );
    // Resuming before the approval dispatches nothing: the run still waits.
    check(&rt, "run-a", RunOptions::resume(), RunStatus::Waiting);
    assert_eq!(provider.handler_calls.load(Ordering::SeqCst), 0);
    assert_eq!(ledger_events(&ledger), ["prepared"]);

    let executor = EffectExecutor::new(Arc::clone(&ledger));
    let record = ledger.get("invoice:INV-9:capture").unwrap().unwrap();
    executor
        .operator()
        .approve(
            "invoice:INV-9:capture",
            effect_core::Approval {
                request_fingerprint: record.request_fingerprint,
                actor: "lead@example.com".into(),
                reason: "invoice checked".into(),
                expires_at: effect_core::Clock::now(&effect_core::SystemClock)
                    + std::time::Duration::from_secs(3600),
            },
        )
        .unwrap();
    let done = check(&rt, "run-a", RunOptions::resume(), RunStatus::Completed);
    assert_eq!(done.steps, 2);
    assert_eq!(provider.committed(), 1);
    assert_eq!(provider.handler_calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        ledger_events(&ledger),
        ["prepared", "approved", "dispatched", "confirmed"]
    );
}
