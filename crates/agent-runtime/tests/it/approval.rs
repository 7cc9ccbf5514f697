//! Human approval in the agent runtime (docs/approval.md): the permission
//! policy's rule by tool and risk, a run that resumes once its approval
//! lands, a denial the model sees as `rejected`, and a resume that refuses a
//! pending effect whose operation id changed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use agent_runtime::store::{EventStore, MemoryCheckpointStore, MemoryEventStore};
use agent_runtime::trace::{ToolResultStatus, TraceEventKind};
use agent_runtime::{
    Action, AgentRuntime, CheckpointStore, DeterministicPlanner, EffectKind, PermissionPolicy,
    Risk, RunError, RunOptions, RunStatus, Task, ToolDefinition, ToolRegistry,
};
use effect_core::{
    Approval, Clock, EffectContract, EffectLedger, EffectStatus, ManualClock, MemoryLedger, Sleeper,
};
use effect_exec::EffectExecutor;
use serde_json::{Value, json};

use crate::{RecordingSleeper, invoice_schema};

const OPERATION: &str = "order:A-1:refund";

/// A refund provider that counts what it commits.
#[derive(Debug, Default)]
struct Provider {
    commits: AtomicUsize,
}

impl Provider {
    fn committed(&self) -> usize {
        self.commits.load(Ordering::SeqCst)
    }
}

fn order_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "cents": {"type": "integer"}},
        "required": ["order_id"]
    })
}

/// The refund contract, which itself requires no approval; `suffix` changes
/// the operation id it derives.
fn refund_contract(suffix: &'static str) -> EffectContract {
    EffectContract::builder("refund", move |args| {
        Ok(format!(
            "order:{}:refund{suffix}",
            args["order_id"].as_str().ok_or("missing order_id")?
        ))
    })
    .provider_idempotency_key(|args| Ok(args["order_id"].as_str().map(|id| format!("re-{id}"))))
    .build()
    .unwrap()
}

fn refund_tool(
    provider: &Arc<Provider>,
    risk: Risk,
    contract: Option<EffectContract>,
) -> ToolDefinition {
    let p = Arc::clone(provider);
    let tool = ToolDefinition::new(
        "refund",
        "Refunds an order",
        order_schema(),
        EffectKind::Mutation,
        move |input| {
            let n = p.commits.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(json!({"refund_id": format!("re-{n}"), "order": input.arguments["order_id"]}))
        },
    )
    .risk(risk);
    match contract {
        Some(contract) => tool.effect_contract(contract),
        None => tool,
    }
}

/// A plain, low-risk read the policy lets through.
fn lookup_tool(calls: &Arc<AtomicUsize>) -> ToolDefinition {
    let c = Arc::clone(calls);
    ToolDefinition::new(
        "lookup_invoice",
        "Reads an invoice",
        invoice_schema(),
        EffectKind::Read,
        move |_| {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"amount_cents": 4200}))
        },
    )
}

struct Setup {
    provider: Arc<Provider>,
    lookups: Arc<AtomicUsize>,
    ledger: Arc<dyn EffectLedger>,
    checkpoints: Arc<MemoryCheckpointStore>,
    trace: Arc<MemoryEventStore>,
    clock: Arc<ManualClock>,
}

impl Setup {
    fn new() -> Self {
        let clock = Arc::new(ManualClock::new(
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        ));
        Setup {
            provider: Arc::new(Provider::default()),
            lookups: Arc::new(AtomicUsize::new(0)),
            ledger: Arc::new(MemoryLedger::with_clock(
                Arc::clone(&clock) as Arc<dyn Clock>
            )),
            checkpoints: Arc::new(MemoryCheckpointStore::new()),
            trace: Arc::new(MemoryEventStore::new()),
            clock,
        }
    }

    /// An executor on the manual clock, waiting through `sleeper`.
    fn executor(&self, sleeper: Arc<dyn Sleeper>) -> EffectExecutor {
        EffectExecutor::with_clock(
            Arc::clone(&self.ledger),
            effect_exec::ExecutorOptions::default(),
            Arc::clone(&self.clock) as Arc<dyn Clock>,
        )
        .with_sleeper(sleeper)
    }

    /// A runtime with `refund` and `lookup_invoice` under `policy`, playing
    /// lookup, refund, finish.
    fn runtime(
        &self,
        refund: ToolDefinition,
        policy: PermissionPolicy,
        sleeper: Arc<dyn Sleeper>,
    ) -> Result<AgentRuntime, RunError> {
        let mut registry = ToolRegistry::new();
        registry.register(lookup_tool(&self.lookups)).unwrap();
        registry.register(refund).unwrap();
        AgentRuntime::builder(
            registry,
            DeterministicPlanner::new([
                Action::call("lookup_invoice", json!({"invoice_id": "INV-1"})),
                Action::call("refund", json!({"order_id": "A-1", "cents": 4200})),
                Action::finish(json!("refunded")),
            ]),
        )
        .policy(policy.without_mutation_confirmation())
        .checkpoint_store(Arc::clone(&self.checkpoints) as Arc<dyn CheckpointStore>)
        .event_store(Arc::clone(&self.trace) as Arc<dyn EventStore>)
        .sleeper(Arc::new(RecordingSleeper::default()))
        .effect_executor(self.executor(sleeper))
        .build()
    }

    fn events(&self) -> Vec<String> {
        self.ledger
            .events(OPERATION)
            .unwrap()
            .into_iter()
            .map(|e| e.event_type)
            .collect()
    }

    fn approval(&self, actor: &str) -> Approval {
        let record = self.ledger.get(OPERATION).unwrap().unwrap();
        Approval {
            request_fingerprint: record.request_fingerprint,
            actor: actor.into(),
            reason: "refund matches ticket T-9".into(),
            expires_at: self.clock.now() + Duration::from_secs(3600),
        }
    }
}

fn allow() -> PermissionPolicy {
    PermissionPolicy::allow(["lookup_invoice", "refund"])
}

fn task() -> Task {
    Task::new("run-refund", json!("refund A-1"))
}

/// Starts the run and checks it waits for the approval of the refund, with
/// nothing dispatched and the ledger's own approval recorded as required.
fn start_waiting(setup: &Setup, runtime: &AgentRuntime) {
    let report = runtime.run(task(), RunOptions::start()).unwrap();
    assert_eq!(report.status, RunStatus::Waiting, "{report:#?}");
    assert_eq!(report.awaiting_approval(), Some(OPERATION));
    assert_eq!(report.steps, 1);
    assert_eq!(setup.lookups.load(Ordering::SeqCst), 1);
    assert_eq!(setup.provider.committed(), 0);
    let record = setup.ledger.get(OPERATION).unwrap().unwrap();
    assert_eq!(record.status, EffectStatus::AwaitingApproval);
    assert!(record.requires_approval());
    assert_eq!(setup.events(), ["prepared"]);
}

#[test]
fn the_policy_requires_approval_by_tool_name_and_the_run_resumes_once_approved() {
    let setup = Setup::new();
    let rt = setup
        .runtime(
            refund_tool(&setup.provider, Risk::Low, Some(refund_contract(""))),
            allow().require_approval_for(["refund"]),
            Arc::new(RecordingSleeper::default()),
        )
        .unwrap();
    start_waiting(&setup, &rt);
    let requested: Vec<String> = rt
        .audit()
        .records("run-refund")
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == agent_runtime::trace::AuditKind::ToolRequested && r.tool == "refund")
        .map(|r| r.detail)
        .collect();
    assert_eq!(
        requested,
        ["effect-backed mutation, each dispatch approved by a person"]
    );
    // A resume before the approval dispatches nothing.
    let still = rt.run(task(), RunOptions::resume()).unwrap();
    assert_eq!(still.awaiting_approval(), Some(OPERATION));
    assert_eq!(setup.provider.committed(), 0);

    let executor = setup.executor(Arc::new(RecordingSleeper::default()));
    executor
        .operator()
        .approve(OPERATION, setup.approval("lead@example.com"))
        .unwrap();
    let done = rt.run(task(), RunOptions::resume()).unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{done:#?}");
    assert_eq!(done.steps, 2);
    assert_eq!(setup.provider.committed(), 1);
    assert_eq!(setup.lookups.load(Ordering::SeqCst), 1);
    assert_eq!(
        setup.events(),
        ["prepared", "approved", "dispatched", "confirmed"]
    );
    // The approval was used up: another one is refused.
    assert!(
        executor
            .operator()
            .approve(OPERATION, setup.approval("lead@example.com"))
            .is_err()
    );
    assert_eq!(setup.provider.committed(), 1);
}

#[test]
fn the_policy_requires_approval_from_a_risk_level_up() {
    // High risk, rule from High: waits.
    let setup = Setup::new();
    let rt = setup
        .runtime(
            refund_tool(&setup.provider, Risk::High, Some(refund_contract(""))),
            allow().require_approval_at_risk(Risk::High),
            Arc::new(RecordingSleeper::default()),
        )
        .unwrap();
    start_waiting(&setup, &rt);

    // Medium risk under the same rule: dispatched at once, no approval recorded.
    let setup = Setup::new();
    let rt = setup
        .runtime(
            refund_tool(&setup.provider, Risk::Medium, Some(refund_contract(""))),
            allow().require_approval_at_risk(Risk::High),
            Arc::new(RecordingSleeper::default()),
        )
        .unwrap();
    let report = rt.run(task(), RunOptions::start()).unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    assert_eq!(setup.provider.committed(), 1);
    assert!(
        !setup
            .ledger
            .get(OPERATION)
            .unwrap()
            .unwrap()
            .requires_approval()
    );
    assert_eq!(setup.events(), ["prepared", "dispatched", "confirmed"]);
}

#[test]
fn a_plain_tool_the_policy_requires_approval_of_is_refused_at_build() {
    let setup = Setup::new();
    let err = setup
        .runtime(
            refund_tool(&setup.provider, Risk::Critical, None),
            allow().require_approval_at_risk(Risk::High),
            Arc::new(RecordingSleeper::default()),
        )
        .unwrap_err();
    assert!(
        matches!(&err, RunError::ApprovalNeedsEffectContract { tool } if tool == "refund"),
        "{err:?}"
    );
    assert_eq!(setup.provider.committed(), 0);
}

/// A sleeper that moves the manual clock and, at its `approve_at`-th sleep,
/// has a person approve the refund (or deny it).
#[derive(Debug)]
struct ApproverAt {
    clock: Arc<ManualClock>,
    ledger: Arc<dyn EffectLedger>,
    sleeps: AtomicUsize,
    approve_at: usize,
    deny: bool,
    decided: Mutex<bool>,
}

impl Sleeper for ApproverAt {
    fn sleep(&self, duration: Duration) {
        self.clock.advance(duration);
        let n = self.sleeps.fetch_add(1, Ordering::SeqCst) + 1;
        if n != self.approve_at {
            return;
        }
        let executor = EffectExecutor::with_clock(
            Arc::clone(&self.ledger),
            effect_exec::ExecutorOptions::default(),
            Arc::clone(&self.clock) as Arc<dyn Clock>,
        );
        if self.deny {
            executor
                .operator()
                .deny(OPERATION, "lead@example.com", "duplicate of order A-0")
                .unwrap();
        } else {
            let record = self.ledger.get(OPERATION).unwrap().unwrap();
            executor
                .operator()
                .approve(
                    OPERATION,
                    Approval {
                        request_fingerprint: record.request_fingerprint,
                        actor: "lead@example.com".into(),
                        reason: "refund matches ticket T-9".into(),
                        expires_at: self.clock.now() + Duration::from_secs(3600),
                    },
                )
                .unwrap();
        }
        *self.decided.lock().unwrap() = true;
    }
}

fn approver(setup: &Setup, approve_at: usize, deny: bool) -> Arc<ApproverAt> {
    Arc::new(ApproverAt {
        clock: Arc::clone(&setup.clock),
        ledger: Arc::clone(&setup.ledger),
        sleeps: AtomicUsize::new(0),
        approve_at,
        deny,
        decided: Mutex::new(false),
    })
}

#[test]
fn resume_when_approved_waits_through_the_executor_sleeper_then_dispatches_once() {
    let setup = Setup::new();
    let sleeper = approver(&setup, 3, false);
    let rt = setup
        .runtime(
            refund_tool(&setup.provider, Risk::High, Some(refund_contract(""))),
            allow().require_approval_at_risk(Risk::High),
            Arc::clone(&sleeper) as Arc<dyn Sleeper>,
        )
        .unwrap();
    start_waiting(&setup, &rt);
    let done = rt
        .resume_when_approved(task(), RunOptions::default(), Duration::from_secs(60))
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{done:#?}");
    assert_eq!(done.output, Some(json!("refunded")));
    // It polled until the approval landed, on the injected sleeper only.
    assert_eq!(sleeper.sleeps.load(Ordering::SeqCst), 3);
    assert!(*sleeper.decided.lock().unwrap());
    assert_eq!(setup.provider.committed(), 1);
    assert_eq!(setup.lookups.load(Ordering::SeqCst), 1);
    assert_eq!(
        setup.events(),
        ["prepared", "approved", "dispatched", "confirmed"]
    );
}

#[test]
fn resume_when_approved_returns_the_waiting_run_at_its_timeout_and_writes_nothing() {
    let setup = Setup::new();
    // Never approves within the timeout.
    let sleeper = approver(&setup, usize::MAX, false);
    let rt = setup
        .runtime(
            refund_tool(&setup.provider, Risk::High, Some(refund_contract(""))),
            allow().require_approval_at_risk(Risk::High),
            Arc::clone(&sleeper) as Arc<dyn Sleeper>,
        )
        .unwrap();
    start_waiting(&setup, &rt);
    let before = setup.checkpoints.load("run-refund").unwrap().unwrap();
    let trace_before = rt.events().events("run-refund").unwrap().len();
    let waiting = rt
        .resume_when_approved(task(), RunOptions::default(), Duration::from_secs(1))
        .unwrap();
    assert_eq!(waiting.status, RunStatus::Waiting);
    assert_eq!(waiting.awaiting_approval(), Some(OPERATION));
    // 1 s at the default 25 ms poll interval: 40 sleeps on the manual clock.
    assert_eq!(sleeper.sleeps.load(Ordering::SeqCst), 40);
    assert_eq!(
        setup.checkpoints.load("run-refund").unwrap().unwrap(),
        before
    );
    assert_eq!(
        rt.events().events("run-refund").unwrap().len(),
        trace_before
    );
    assert_eq!(setup.provider.committed(), 0);
    assert_eq!(setup.events(), ["prepared"]);
}

#[test]
fn a_denial_ends_the_tool_call_rejected_and_fails_the_run() {
    let setup = Setup::new();
    let sleeper = approver(&setup, 2, true);
    let rt = setup
        .runtime(
            refund_tool(&setup.provider, Risk::Low, Some(refund_contract(""))),
            allow().require_approval_for(["refund"]),
            Arc::clone(&sleeper) as Arc<dyn Sleeper>,
        )
        .unwrap();
    start_waiting(&setup, &rt);
    let failed = rt
        .resume_when_approved(task(), RunOptions::default(), Duration::from_secs(60))
        .unwrap();
    assert_eq!(failed.status, RunStatus::Failed, "{failed:#?}");
    assert_eq!(failed.pending, None);
    let error = failed.error.unwrap();
    assert!(
        error.contains("lead@example.com") && error.contains("duplicate of order A-0"),
        "{error}"
    );
    let results: Vec<_> = rt
        .events()
        .events("run-refund")
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            TraceEventKind::ToolResult {
                tool,
                result,
                error_kind,
                ..
            } if tool == "refund" => Some((result, error_kind)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            (ToolResultStatus::Uncertain, None),
            (ToolResultStatus::Failed, Some("rejected".to_owned()))
        ]
    );
    assert_eq!(setup.provider.committed(), 0);
    assert_eq!(setup.events(), ["prepared", "approval_denied"]);
    // A resume of the failed run plans the refund again and gets the same
    // rejection from the ledger: nothing is sent.
    let again = rt.run(task(), RunOptions::resume()).unwrap();
    assert_eq!(again.status, RunStatus::Failed, "{again:#?}");
    assert_eq!(setup.provider.committed(), 0);
    assert_eq!(setup.events(), ["prepared", "approval_denied"]);
}

#[test]
fn a_resume_refuses_a_pending_effect_whose_operation_id_changed() {
    let setup = Setup::new();
    let rt = setup
        .runtime(
            refund_tool(&setup.provider, Risk::Low, Some(refund_contract(""))),
            allow().require_approval_for(["refund"]),
            Arc::new(RecordingSleeper::default()),
        )
        .unwrap();
    start_waiting(&setup, &rt);
    let executor = setup.executor(Arc::new(RecordingSleeper::default()));
    executor
        .operator()
        .approve(OPERATION, setup.approval("lead@example.com"))
        .unwrap();
    let before = setup.checkpoints.load("run-refund").unwrap().unwrap();
    let trace_before = rt.events().events("run-refund").unwrap().len();

    // The contract now derives another id; then the tool lost its contract.
    let changed = [
        (
            Some(refund_contract(":v2")),
            Some("order:A-1:refund:v2".to_owned()),
        ),
        (None, None),
    ];
    for (contract, derived) in changed {
        let allow_plain = contract.is_some();
        let policy = if allow_plain {
            allow().require_approval_for(["refund"])
        } else {
            allow()
        };
        let rt = setup
            .runtime(
                refund_tool(&setup.provider, Risk::Low, contract),
                policy,
                Arc::new(RecordingSleeper::default()),
            )
            .unwrap();
        let err = rt.run(task(), RunOptions::resume()).unwrap_err();
        match &err {
            RunError::OperationIdChanged {
                run_id,
                tool,
                checkpointed,
                derived: found,
            } => {
                assert_eq!(run_id, "run-refund");
                assert_eq!(tool, "refund");
                assert_eq!(checkpointed, OPERATION);
                assert_eq!(found, &derived);
            }
            other => panic!("expected OperationIdChanged, got {other:?}"),
        }
        let message = err.to_string();
        assert!(
            message.contains(OPERATION) && message.contains("changed"),
            "{message}"
        );
        // Nothing was written or dispatched for the refused resume.
        assert_eq!(
            setup.checkpoints.load("run-refund").unwrap().unwrap(),
            before
        );
        assert_eq!(
            rt.events().events("run-refund").unwrap().len(),
            trace_before
        );
        assert_eq!(setup.provider.committed(), 0);
        assert_eq!(setup.events(), ["prepared", "approved"]);
    }
    assert!(setup.ledger.get("order:A-1:refund:v2").unwrap().is_none());

    // The unchanged runtime still resumes it, once.
    let done = rt.run(task(), RunOptions::resume()).unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{done:#?}");
    assert_eq!(setup.provider.committed(), 1);
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_runtime_resumes_when_approved_too() {
    use agent_runtime::AsyncAgentRuntime;

    let setup = Setup::new();
    let sleeper = approver(&setup, 2, false);
    let mut registry = ToolRegistry::new();
    registry.register(lookup_tool(&setup.lookups)).unwrap();
    registry
        .register(refund_tool(
            &setup.provider,
            Risk::High,
            Some(refund_contract("")),
        ))
        .unwrap();
    let rt = AsyncAgentRuntime::builder(
        registry,
        DeterministicPlanner::new([
            Action::call("lookup_invoice", json!({"invoice_id": "INV-1"})),
            Action::call("refund", json!({"order_id": "A-1", "cents": 4200})),
            Action::finish(json!("refunded")),
        ]),
    )
    .policy(
        allow()
            .require_approval_at_risk(Risk::High)
            .without_mutation_confirmation(),
    )
    .sleeper(Arc::new(RecordingSleeper::default()))
    .effect_executor(setup.executor(Arc::clone(&sleeper) as Arc<dyn Sleeper>))
    .build()
    .unwrap();
    let first = rt.run(task(), RunOptions::start()).await.unwrap();
    assert_eq!(first.awaiting_approval(), Some(OPERATION));
    assert_eq!(setup.provider.committed(), 0);
    let done = rt
        .resume_when_approved(task(), RunOptions::default(), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{done:#?}");
    assert_eq!(sleeper.sleeps.load(Ordering::SeqCst), 2);
    assert_eq!(setup.provider.committed(), 1);
    assert_eq!(
        setup.events(),
        ["prepared", "approved", "dispatched", "confirmed"]
    );
}
