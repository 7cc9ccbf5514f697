//! The effect assurance demo: an agent captures a payment, the provider
//! commits it but the acknowledgement is lost, and the run waits instead of
//! paying twice. After a restart (every store reopened from its file) the
//! run resumes, reconciles the same operation through the provider's outcome
//! probe, and completes with exactly one payment.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use agent_runtime::{
    Action, AgentRuntime, DeterministicPlanner, EffectKind, PermissionPolicy, RunOptions,
    RunReport, RunStatus, SqliteCheckpointStore, Task, ToolDefinition, ToolError, ToolRegistry,
    invocation_id,
};
use anyhow::{Context, bail};
use effect_core::{EffectContract, EffectLedger, OutcomeProbeResult};
use effect_exec::EffectExecutor;
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::{Value, json};

/// The run id of the demo.
pub const RUN_ID: &str = "demo-run-INV-1042";
/// The effect operation id of the capture.
pub const OPERATION_ID: &str = "invoice:INV-1042:capture";

/// A fake payment provider outside the agent's process: it counts the payments
/// it commits, loses the acknowledgement of the first one, and its lookup
/// index lags behind, so the first probe cannot see the payment yet.
#[derive(Debug, Default)]
pub struct FakePaymentProvider {
    payments: Mutex<Vec<String>>,
    capture_calls: AtomicUsize,
    probe_calls: AtomicUsize,
}

impl FakePaymentProvider {
    /// Payments committed (effects, not statuses).
    pub fn committed(&self) -> usize {
        self.payments().len()
    }

    /// Capture requests received.
    pub fn capture_calls(&self) -> usize {
        self.capture_calls.load(Ordering::SeqCst)
    }

    fn payments(&self) -> MutexGuard<'_, Vec<String>> {
        self.payments
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Commits the payment under `key`; the first acknowledgement is lost.
    fn capture(&self, key: Option<String>) -> Result<Value, ToolError> {
        let call = self.capture_calls.fetch_add(1, Ordering::SeqCst) + 1;
        let key = key.ok_or_else(|| ToolError::rejected("an idempotency key is required"))?;
        let mut payments = self.payments();
        payments.push(key.clone());
        let payment = json!({"payment_id": format!("pay-{}", payments.len()), "key": key});
        if call == 1 {
            return Err(ToolError::timeout(
                "connection reset while waiting for the acknowledgement",
            ));
        }
        Ok(payment)
    }

    /// Looks the key up; the first lookup is not yet consistent (`pending`).
    fn probe(&self, key: Option<&str>) -> OutcomeProbeResult {
        if self.probe_calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return OutcomeProbeResult::pending().evidence("index", "not yet consistent");
        }
        let payments = self.payments();
        match payments.iter().position(|k| Some(k.as_str()) == key) {
            Some(i) => OutcomeProbeResult::committed(
                json!({"payment_id": format!("pay-{}", i + 1), "key": key}),
            )
            .provider_operation_id(format!("pay-{}", i + 1)),
            None => OutcomeProbeResult::not_committed(),
        }
    }
}

/// What the demo observed.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// The run after the first process.
    pub before_restart: RunReport,
    /// The run after the resume in the second process.
    pub after_restart: RunReport,
    /// Payments the provider committed.
    pub committed_payments: usize,
    /// Capture requests the provider received.
    pub capture_calls: usize,
    /// The effect ledger's event types for the capture, in order.
    pub ledger_events: Vec<String>,
}

impl DemoReport {
    /// Passes iff the run waited, then completed, and exactly one payment was
    /// committed from exactly one capture request.
    ///
    /// # Errors
    ///
    /// What went wrong.
    pub fn verdict(&self) -> anyhow::Result<()> {
        if self.before_restart.status != RunStatus::Waiting {
            bail!(
                "the run should wait on the uncertain capture, it is {}",
                self.before_restart.status
            );
        }
        if self.after_restart.status != RunStatus::Completed {
            bail!(
                "the resumed run should complete, it is {}",
                self.after_restart.status
            );
        }
        if self.committed_payments != 1 || self.capture_calls != 1 {
            bail!(
                "expected exactly one payment from one capture, got {} payments from {} captures",
                self.committed_payments,
                self.capture_calls
            );
        }
        Ok(())
    }
}

/// Runs the demo with its SQLite files in `dir`.
///
/// # Errors
///
/// A store that cannot be opened, or a runtime error.
pub fn run(dir: &Path) -> anyhow::Result<DemoReport> {
    let provider = Arc::new(FakePaymentProvider::default());
    let task = Task::new(RUN_ID, json!("capture the payment of invoice INV-1042"));
    let capture_args = json!({"invoice_id": "INV-1042", "amount_cents": 1200});
    // The trusted outer layer (a human approval) confirmed this exact invocation.
    let approved = invocation_id(RUN_ID, 1, "capture_payment", &capture_args);

    // First process: the capture commits, the acknowledgement is lost.
    let before_restart = {
        let (runtime, _ledger) = open_runtime(dir, &provider)?;
        runtime
            .run(task.clone(), RunOptions::start().confirm(approved))
            .context("first run")?
    };
    // Everything is dropped here, as if the process ended.

    // Second process: reopen the ledger and the checkpoints from their files.
    let (runtime, ledger) = open_runtime(dir, &provider)?;
    let after_restart = runtime
        .run(task, RunOptions::resume())
        .context("resumed run")?;
    let ledger_events = ledger
        .events(OPERATION_ID)
        .context("reading the ledger history")?
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    Ok(DemoReport {
        before_restart,
        after_restart,
        committed_payments: provider.committed(),
        capture_calls: provider.capture_calls(),
        ledger_events,
    })
}

fn open_runtime(
    dir: &Path,
    provider: &Arc<FakePaymentProvider>,
) -> anyhow::Result<(AgentRuntime, Arc<dyn EffectLedger>)> {
    let ledger_path = dir.join("ledger.sqlite3");
    let ledger: Arc<dyn EffectLedger> = Arc::new(
        SqliteLedger::open(&ledger_path, SqliteOptions::default())
            .with_context(|| format!("opening the effect ledger {}", ledger_path.display()))?,
    );
    let checkpoint_path = dir.join("runs.sqlite3");
    let checkpoints = SqliteCheckpointStore::open(&checkpoint_path)
        .with_context(|| format!("opening the checkpoints {}", checkpoint_path.display()))?;

    let invoice_schema = json!({
        "type": "object",
        "properties": {
            "invoice_id": {"type": "string", "pattern": "^INV-[0-9]+$"},
            "amount_cents": {"type": "integer", "minimum": 1}
        },
        "required": ["invoice_id"]
    });
    let contract = EffectContract::builder("capture_payment", |args| {
        let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
        Ok(format!("invoice:{invoice}:capture"))
    })
    .provider_idempotency_key(|args| {
        Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
    })
    .outcome_probe({
        let provider = Arc::clone(provider);
        move |_args, key| Ok(provider.probe(key))
    })
    .build()
    .context("building the capture contract")?;

    let mut tools = ToolRegistry::new();
    tools
        .register(ToolDefinition::new(
            "lookup_invoice",
            "Reads an invoice",
            invoice_schema.clone(),
            EffectKind::Read,
            |input| Ok(json!({"invoice_id": input.arguments["invoice_id"], "amount_cents": 1200, "status": "open"})),
        ))
        .context("registering lookup_invoice")?;
    let capture_provider = Arc::clone(provider);
    tools
        .register(
            ToolDefinition::new(
                "capture_payment",
                "Captures the payment of an invoice",
                invoice_schema,
                EffectKind::Mutation,
                move |input| capture_provider.capture(input.provider_key),
            )
            .effect_contract(contract),
        )
        .context("registering capture_payment")?;

    let planner = DeterministicPlanner::new([
        Action::call("lookup_invoice", json!({"invoice_id": "INV-1042"})),
        Action::call(
            "capture_payment",
            json!({"invoice_id": "INV-1042", "amount_cents": 1200}),
        ),
        Action::finish(json!("invoice INV-1042 is paid")),
    ]);
    let runtime = AgentRuntime::builder(tools, planner)
        .policy(PermissionPolicy::allow([
            "lookup_invoice",
            "capture_payment",
        ]))
        .checkpoint_store(Arc::new(checkpoints))
        .effect_executor(EffectExecutor::new(Arc::clone(&ledger)))
        .build()
        .context("building the runtime")?;
    Ok((runtime, ledger))
}
