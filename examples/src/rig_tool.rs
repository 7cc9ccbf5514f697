//! A rig agent captures a payment through an [`EffectTool`]; the provider
//! commits it but the acknowledgement is lost, and the model calls the tool
//! again anyway. Run twice: with an outcome probe (the model gets the
//! payment, both times) and without one (the model is told the outcome is
//! not known and not to retry). Each run commits exactly one payment.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, bail, ensure};
use effect_exec::{EffectExecutor, TypedContract, TypedProbe};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use effect_rig::{EffectCall, EffectTool};
use effect_testkit::provider::{Capture, FakePaymentProvider};
use rig_agent::agent::AgentBuilder;
use rig_agent::test_utils::{MockCompletionModel, MockTurn};
use rig_core::message::{Message, ToolResultContent, UserContent};
use rig_core::tool::{Tool, ToolContext};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The tool's arguments: what the model sends.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureArgs {
    /// The invoice to capture.
    pub invoice_id: String,
    /// The amount, in cents.
    pub amount_cents: u64,
}

/// Why the payment tool failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PaymentError(String);

/// An ordinary rig tool over a payment provider. Its first response is lost
/// after the provider committed.
#[derive(Debug)]
pub struct CapturePayment {
    provider: Arc<FakePaymentProvider>,
    lose_next: AtomicUsize,
    calls: Arc<AtomicUsize>,
}

impl Tool for CapturePayment {
    const NAME: &'static str = "capture_payment";
    type Args = CaptureArgs;
    type Output = Capture;
    type Error = PaymentError;

    fn description(&self) -> String {
        "Capture the payment of an invoice".into()
    }

    fn parameters(&self) -> Value {
        effect_rig::parameters::<CaptureArgs>()
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        args: CaptureArgs,
    ) -> Result<Capture, PaymentError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        // The executor puts the operation id and provider key in the context.
        let call = context
            .require::<EffectCall>()
            .map_err(|err| PaymentError(err.to_string()))?;
        let key = call.provider_idempotency_key.as_deref();
        let capture = self
            .provider
            .capture(&args.invoice_id, args.amount_cents, key)
            .map_err(|err| PaymentError(err.to_string()))?;
        if self.lose_next.swap(0, Ordering::SeqCst) > 0 {
            return Err(PaymentError("timed out waiting for the provider".into()));
        }
        Ok(capture)
    }
}

/// What one run showed.
#[derive(Debug)]
pub struct Run {
    /// Whether the contract had an outcome probe.
    pub with_probe: bool,
    /// The tool results the model received, in order.
    pub answers: Vec<Value>,
    /// Payments the provider committed.
    pub committed_payments: usize,
    /// Times the inner tool ran.
    pub tool_calls: usize,
    /// The agent's final answer.
    pub final_answer: String,
}

impl Run {
    /// Exactly one payment, and answers that never invite a retry.
    ///
    /// # Errors
    ///
    /// What went wrong, in words.
    pub fn verdict(&self) -> anyhow::Result<()> {
        ensure!(
            self.committed_payments == 1,
            "{} payments committed, expected exactly one",
            self.committed_payments
        );
        ensure!(
            self.answers.len() == 2,
            "the model got {} answers",
            self.answers.len()
        );
        for answer in &self.answers {
            if self.with_probe {
                ensure!(
                    answer["payment_id"] == "pay_000001",
                    "not the payment: {answer}"
                );
            } else if answer["outcome"] != "unknown" || answer["retry"] != false {
                bail!("the model was not told the outcome is unknown: {answer}");
            }
        }
        Ok(())
    }
}

/// Runs the agent once, with or without an outcome probe, on a SQLite ledger in `dir`.
///
/// # Errors
///
/// Opening the ledger, or the agent run failing.
pub async fn run(dir: &Path, with_probe: bool) -> anyhow::Result<Run> {
    let path = dir.join(if with_probe {
        "probe.sqlite3"
    } else {
        "no-probe.sqlite3"
    });
    let ledger =
        SqliteLedger::open(&path, SqliteOptions::default()).context("opening the ledger")?;
    let executor = EffectExecutor::new(Arc::new(ledger));
    let provider = Arc::new(FakePaymentProvider::new());
    let calls = Arc::new(AtomicUsize::new(0));

    let contract = TypedContract::<CaptureArgs, Capture>::builder("capture_payment", |args| {
        Ok(format!("invoice:{}:capture", args.invoice_id))
    })
    .provider_idempotency_key(|args| Ok(Some(format!("capture:{}", args.invoice_id))));
    let contract = if with_probe {
        let provider = Arc::clone(&provider);
        contract.outcome_probe(move |_args, key| {
            let key = key.ok_or("no provider key")?;
            Ok(
                match provider.lookup_by_key(key).map_err(|e| e.to_string())? {
                    Some(capture) => TypedProbe::committed(capture),
                    None => TypedProbe::not_committed(),
                },
            )
        })
    } else {
        contract
    }
    .build()?;
    let tool = CapturePayment {
        provider: Arc::clone(&provider),
        lose_next: AtomicUsize::new(1),
        calls: Arc::clone(&calls),
    };

    // A scripted model (no network): it calls the tool, calls it again, answers.
    let args = json!({"invoice_id": "INV-1042", "amount_cents": 1250});
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call_1", "capture_payment", args.clone()),
        MockTurn::tool_call("call_2", "capture_payment", args),
        MockTurn::text("The payment is handled."),
    ]);
    let recorded = model.clone();
    let agent = AgentBuilder::new(model)
        .tool(EffectTool::new(tool, contract, executor))
        .build();
    let response = agent
        .prompt("Capture invoice INV-1042")
        .max_turns(5)
        .await
        .context("running the agent")?;

    Ok(Run {
        with_probe,
        answers: answers(&recorded),
        committed_payments: provider.committed_count()?,
        tool_calls: calls.load(Ordering::SeqCst),
        final_answer: response.output(),
    })
}

/// The tool results in the model's last request, in order.
fn answers(model: &MockCompletionModel) -> Vec<Value> {
    let requests = model.requests();
    let Some(last) = requests.last() else {
        return Vec::new();
    };
    last.chat_history
        .iter()
        .filter_map(|message| match message {
            Message::User { content } => Some(content.iter()),
            _ => None,
        })
        .flatten()
        .filter_map(|item| match item {
            UserContent::ToolResult(result) => match result.content.as_slice() {
                [ToolResultContent::Json { value }] => Some(value.clone()),
                [ToolResultContent::Text(text)] => Some(Value::String(text.text.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}
